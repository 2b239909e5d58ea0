// Tests of the IFU application's inputs and outputs: the Rubix config, the
// telescope table, galaxy files (HDF5, .npz), .npy/.npz, SSP grids and FITS
// cubes. No Python and no BC03 file needed.
#include <gtest/gtest.h>
#include <zlib.h>

#if __has_include(<hdf5.h>)
#include <hdf5.h>
#else
#include <hdf5/serial/hdf5.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ifu/config.hpp"
#include "ifu/errors.hpp"
#include "ifu/fits.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/npy.hpp"
#include "ifu/ssp.hpp"
#include "ifu/telescope.hpp"
#include "ifu/temp_dir.hpp"
#include "test_util.hpp"

namespace ifu = tessera::ifu;
using ifu::InputError;
using tessera::testing::expect_error;

namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
struct TempDir : tessera::testing::TempDir {
  TempDir() : tessera::testing::TempDir("tessera_ifu_io_") {}
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// ---------------------------------------------------------------- config

// The reference user config (MUSE, z = 0.1, BC03, Euler rotation, PSF, LSF, no noise).
const char* kReferenceConfig =
    R"(# Rubix 0.0.5 user config: MUSE, z=0.1, BC03 templates, Euler rotation, PSF, LSF, noise off.
# output_path is the folder holding rubix_galaxy.h5 (when it exists, Rubix skips
# its download/conversion step).
pipeline:
  name: calc_ifu            # default pipeline in rubix/config/pipeline_config.yml

logger:
  log_level: WARNING
  log_file_path: null
  format: "%(asctime)s - %(name)s - %(levelname)s - %(message)s"

data:
  name: IllustrisAPI        # unused: conversion is skipped (file exists)
  args:
    particle_type: ["stars"]
    simulation: TNG50-1
    snapshot: 99
    save_data_path: data
  load_galaxy_args:
    id: 0
    reuse: true
  subset:
    use_subset: false
    subset_size: 1000

simulation:
  # "NIHAO": rotate_galaxy applies only the Euler rotation below.
  # ("IllustrisTNG" would first align with the stellar inertia tensor, which in
  #  run_sharded is computed per shard from that shard's particles only.)
  name: NIHAO
  args:
    path: unused

output_path: galaxy           # folder holding rubix_galaxy.h5

telescope:
  name: MUSE                  # rubix/telescope/telescopes.yaml
  psf:
    name: gaussian
    size: 5
    sigma: 0.6                # spaxels
  lsf:
    sigma: 0.5                # Angstrom
  noise:
    signal_to_noise: .inf     # => noise cube is exactly 0 (stage still runs)
    noise_distribution: normal

cosmology:
  name: PLANCK15

galaxy:
  dist_z: 0.1
  rotation:
    alpha: 60.0
    beta: 20.0
    gamma: 30.0

ssp:
  template:
    name: BruzualCharlot2003  # BC03lr.h5 shipped in the wheel
  method: cubic
  dust:
    extinction_model: Cardelli89
    dust_to_gas_ratio: 0.01
    dust_to_metals_ratio: 0.4
    dust_grain_density: 3.5
    Rv: 3.1
)";

// The smallest valid config; tests append or substitute sections.
const std::string kMinimal =
    "telescope:\n  name: MUSE\ngalaxy:\n  dist_z: 0.1\nssp:\n  template:\n    name: BruzualCharlot2003\n";

// The reference text with the first occurrence of `from` replaced by `to`.
std::string reference_with(const std::string& from, const std::string& to) {
  std::string s = kReferenceConfig;
  const auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

void expect_config_error(const std::string& text, std::vector<std::string> words) {
  expect_error<InputError>([&] { ifu::parse_config(text, "rubix_config.yml"); },
                           "[ifu config] rubix_config.yml: ", words);
}

}  // namespace

TEST(IfuConfig, ReferenceConfigParses) {
  const ifu::Config c = ifu::parse_config(kReferenceConfig, "/data/run1/rubix_config.yml");
  EXPECT_EQ(c.source, "/data/run1/rubix_config.yml");
  EXPECT_EQ(c.pipeline, "calc_ifu");
  EXPECT_EQ(c.simulation, "NIHAO");
  EXPECT_EQ(c.output_path, "/data/run1/galaxy");
  EXPECT_EQ(c.telescope, "MUSE");
  EXPECT_TRUE(c.psf);
  EXPECT_EQ(c.psf_name, "gaussian");
  EXPECT_EQ(c.psf_size, 5);
  EXPECT_DOUBLE_EQ(c.psf_sigma, 0.6);
  EXPECT_TRUE(c.lsf);
  EXPECT_DOUBLE_EQ(c.lsf_sigma, 0.5);
  EXPECT_TRUE(c.noise);
  EXPECT_TRUE(std::isinf(c.signal_to_noise) && c.signal_to_noise > 0);
  EXPECT_EQ(c.noise_distribution, "normal");
  EXPECT_EQ(c.cosmology, "PLANCK15");
  EXPECT_DOUBLE_EQ(c.dist_z, 0.1);
  EXPECT_EQ(c.rotation.type, "euler");
  EXPECT_DOUBLE_EQ(c.rotation.alpha, 60.0);
  EXPECT_DOUBLE_EQ(c.rotation.beta, 20.0);
  EXPECT_DOUBLE_EQ(c.rotation.gamma, 30.0);
  EXPECT_EQ(c.ssp_template, "BruzualCharlot2003");
  EXPECT_EQ(c.ssp_method, "cubic");
  EXPECT_EQ(c.log_level, "WARNING");
}

TEST(IfuConfig, LoadConfigResolvesOutputPathAgainstTheFilesFolder) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "cfg");
  write_bytes(tmp / "cfg/rubix_config.yml", kReferenceConfig);
  const ifu::Config c = ifu::load_config(tmp / "cfg/rubix_config.yml");
  EXPECT_EQ(c.source, tmp / "cfg/rubix_config.yml");
  EXPECT_EQ(fs::path(c.output_path), tmp.path() / "cfg" / "galaxy");
  EXPECT_DOUBLE_EQ(c.rotation.alpha, 60.0);
  // An absolute output_path stays as it is; without a folder in the name, the text's path stays relative.
  EXPECT_EQ(ifu::parse_config(reference_with("output_path: galaxy", "output_path: /abs/g"), "x/c.yml").output_path,
            "/abs/g");
  EXPECT_EQ(ifu::parse_config(kReferenceConfig, "c.yml").output_path, "galaxy");
  expect_error<InputError>([&] { ifu::load_config(tmp / "nope.yml"); }, "[ifu config] cannot read",
                           {"nope.yml", "no such file"});
  expect_error<InputError>([&] { ifu::load_config(tmp / "cfg"); }, "[ifu config] cannot read", {"not a regular file"});
}

TEST(IfuConfig, MinimalConfigGetsDefaults) {
  const ifu::Config c = ifu::parse_config(kMinimal, "min.yml");
  EXPECT_EQ(c.pipeline, "calc_ifu");
  EXPECT_EQ(c.simulation, "NIHAO");
  EXPECT_EQ(c.output_path, "");
  EXPECT_FALSE(c.psf);
  EXPECT_FALSE(c.lsf);
  EXPECT_FALSE(c.noise);
  EXPECT_EQ(c.cosmology, "PLANCK15");
  EXPECT_EQ(c.rotation.type, "euler");
  EXPECT_EQ(c.rotation.alpha, 0.0);
  EXPECT_EQ(c.ssp_method, "cubic");
  EXPECT_EQ(c.log_level, "WARNING");
}

TEST(IfuConfig, OtherAcceptedForms) {
  // face-on / edge-on rotations (angles given with a type are ignored, as in Rubix).
  auto c = ifu::parse_config(reference_with("    alpha: 60.0\n", "    type: edge-on\n    alpha: 60.0\n"), "x.yml");
  EXPECT_EQ(c.rotation.type, "edge-on");
  EXPECT_EQ(c.rotation.alpha, 90.0);
  EXPECT_EQ(c.rotation.beta, 0.0);
  EXPECT_EQ(c.rotation.gamma, 0.0);
  c = ifu::parse_config(reference_with("  rotation:\n    alpha: 60.0\n    beta: 20.0\n    gamma: 30.0\n",
                                       "  rotation:\n    type: face-on\n"),
                        "x.yml");
  EXPECT_EQ(c.rotation.type, "face-on");
  EXPECT_EQ(c.rotation.alpha, 0.0);
  // Lower-case cosmology and log level as Rubix upper-cases them; WARN is WARNING.
  c = ifu::parse_config(reference_with("name: PLANCK15", "name: planck15"), "x.yml");
  EXPECT_EQ(c.cosmology, "PLANCK15");
  c = ifu::parse_config(reference_with("log_level: WARNING", "log_level: debug"), "x.yml");
  EXPECT_EQ(c.log_level, "DEBUG");
  c = ifu::parse_config(reference_with("log_level: WARNING", "log_level: warn"), "x.yml");
  EXPECT_EQ(c.log_level, "WARNING");
  // A finite S/N, the linear SSP method, IllustrisTNG, YAML 1.1 booleans, integers for floats.
  c = ifu::parse_config(reference_with("signal_to_noise: .inf", "signal_to_noise: 100"), "x.yml");
  EXPECT_EQ(c.signal_to_noise, 100.0);
  c = ifu::parse_config(reference_with("method: cubic", "method: linear"), "x.yml");
  EXPECT_EQ(c.ssp_method, "linear");
  c = ifu::parse_config(reference_with("name: NIHAO", "name: IllustrisTNG"), "x.yml");
  EXPECT_EQ(c.simulation, "IllustrisTNG");
  EXPECT_NO_THROW(ifu::parse_config(reference_with("reuse: true", "reuse: yes"), "x.yml"));
  EXPECT_NO_THROW(ifu::parse_config(reference_with("use_subset: false", "use_subset: off"), "x.yml"));
  c = ifu::parse_config(reference_with("dist_z: 0.1", "dist_z: 1"), "x.yml");
  EXPECT_EQ(c.dist_z, 1.0);
  c = ifu::parse_config(reference_with("size: 5", "size: 7.0"), "x.yml");
  EXPECT_EQ(c.psf_size, 7);
  // Only some telescope stages.
  c = ifu::parse_config(
      "telescope:\n  name: MUSE_WFM\n  lsf:\n    sigma: 1.5\ngalaxy:\n  dist_z: 0.05\nssp:\n  template:\n    name: "
      "BruzualCharlot2003\n",
      "x.yml");
  EXPECT_EQ(c.telescope, "MUSE_WFM");
  EXPECT_FALSE(c.psf);
  EXPECT_TRUE(c.lsf);
  EXPECT_EQ(c.lsf_sigma, 1.5);
  EXPECT_FALSE(c.noise);
  // The keys of Rubix's other sections: CUSTOM-cosmology args with PLANCK15, pynbody args, gas particles, dust models.
  c = ifu::parse_config(
      kMinimal +
          "cosmology:\n  name: PLANCK15\n  args: {Om0: 0.3, w0: -1, wa: 0, h: 0.7}\n"
          "simulation:\n  name: NIHAO\n  args: {path: a, halo_path: b, rotation_path: c, halo_id: 1}\n"
          "data:\n  name: NihaoHandler\n  args: {particle_type: [stars, gas], api_key: null}\n"
          "  load_galaxy_args: {id: 3, overwrite: false, reuse: true}\n"
          "logger: {log_level: INFO, log_file_path: out/log.txt}\n"
          "pipeline: {name: calc_ifu}\n",
      "x.yml");
  EXPECT_EQ(c.log_level, "INFO");
  c = ifu::parse_config(
      reference_with("    Rv: 3.1\n", "    Rv: 3.1\n    dust_to_gas_model: broken power law fit\n    Xco: Z\n"),
      "x.yml");
  EXPECT_EQ(c.ssp_template, "BruzualCharlot2003");
}

TEST(IfuConfig, UnknownKeysAreNamedWithTheKnownOnes) {
  expect_error<InputError>(
      [&] { ifu::parse_config(reference_with("    sigma: 0.6", "    sgima: 0.6"), "rubix_config.yml"); },
      "[ifu config] rubix_config.yml: unknown key 'telescope.psf.sgima' (known: name, size, sigma)");
  expect_config_error(reference_with("telescope:", "telescop:"),
                      {"unknown key 'telescop'", "known: pipeline, logger, data, simulation, output_path, telescope"});
  expect_config_error(reference_with("    gamma: 30.0", "    gamma: 30.0\n    delta: 1"),
                      {"unknown key 'galaxy.rotation.delta'", "known: type, alpha, beta, gamma"});
  expect_config_error(reference_with("    Rv: 3.1", "    Rv: 3.1\n    grain: 1"),
                      {"'ssp.dust.grain'", "extinction_model"});
  expect_config_error(reference_with("    snapshot: 99", "    snapshot: 99\n    snap: 1"),
                      {"'data.args.snap'", "api_key, particle_type"});
  expect_config_error(reference_with("  log_level: WARNING", "  level: WARNING"), {"'logger.level'", "log_level"});
  expect_config_error(reference_with("    path: unused", "    path: unused\n    foo: 1"), {"'simulation.args.foo'"});
  expect_config_error(reference_with("    name: BruzualCharlot2003", "    name: BruzualCharlot2003\n    file: x.h5"),
                      {"'ssp.template.file'", "(known: name)"});
  expect_config_error(reference_with("  noise:\n", "  noise:\n    sn: 3\n"), {"'telescope.noise.sn'"});
  expect_config_error(kMinimal + "galaxy2: {}\n", {"'galaxy2'"});
  expect_config_error(kMinimal + "telescope:\n  name: MUSE\n", {"duplicate key 'telescope'", "line 8"});
}

TEST(IfuConfig, TypeErrorsNameTheKeyAndTheExpectedType) {
  expect_config_error(reference_with("dist_z: 0.1", "dist_z: \"0.1\""),
                      {"'galaxy.dist_z' must be a number", "quoted string '0.1'", "line"});
  expect_config_error(reference_with("dist_z: 0.1", "dist_z: far"), {"'galaxy.dist_z' must be a number", "'far'"});
  expect_config_error(reference_with("size: 5", "size: 2.5"), {"'telescope.psf.size' must be an integer", "'2.5'"});
  expect_config_error(reference_with("size: 5", "size: 0"), {"'telescope.psf.size'", "from 1"});
  expect_config_error(reference_with("    sigma: 0.6", "    sigma: -1"),
                      {"'telescope.psf.sigma' must be a number > 0"});
  expect_config_error(
      reference_with("  psf:\n    name: gaussian\n    size: 5\n    sigma: 0.6                # spaxels\n",
                     "  psf: 5\n"),
      {"'telescope.psf' must be a mapping", "'5'"});
  expect_config_error(reference_with("use_subset: false", "use_subset: maybe"),
                      {"'data.subset.use_subset' must be true or false"});
  expect_config_error(reference_with("particle_type: [\"stars\"]", "particle_type: stars"),
                      {"'data.args.particle_type' must be a list of strings"});
  expect_config_error(reference_with("particle_type: [\"stars\"]", "particle_type: [gas]"), {"must include stars"});
  expect_config_error(reference_with("    alpha: 60.0", "    alpha: [60]"),
                      {"'galaxy.rotation.alpha' must be a number", "a list"});
  expect_config_error(reference_with("    alpha: 60.0", "    alpha: .nan"),
                      {"'galaxy.rotation.alpha' must be a finite number"});
  expect_config_error(reference_with("signal_to_noise: .inf", "signal_to_noise: 0"),
                      {"'telescope.noise.signal_to_noise' must be a number > 0"});
  expect_config_error(reference_with("signal_to_noise: .inf", "signal_to_noise: null"),
                      {"'telescope.noise.signal_to_noise' must be a number", "null"});
  expect_config_error(reference_with("  name: MUSE ", "  name: [MUSE]"), {"'telescope.name' must be a string"});
  expect_config_error(reference_with("    sigma: 0.5", "    sigma: \"wide\""),
                      {"'telescope.lsf.sigma' must be a number"});
  expect_config_error(kMinimal + "logger: 3\n", {"'logger' must be a mapping"});
  expect_config_error("telescope: [MUSE]\ngalaxy: {dist_z: 0.1}\nssp: {template: {name: BruzualCharlot2003}}\n",
                      {"'telescope' must be a mapping", "a list"});
  expect_config_error("- a\n- b\n", {"must be a mapping of sections", "a list"});
  expect_config_error("", {"an empty document"});
  expect_config_error("telescope: {name: MUSE\n", {"invalid YAML at line"});
}

TEST(IfuConfig, UnsupportedAndInvalidValuesSaySo) {
  // calc_dusty_ifu is supported (its ssp.dust checks: test_ifu_dust.cpp).
  EXPECT_EQ(ifu::parse_config(reference_with("name: calc_ifu", "name: calc_dusty_ifu"), "x.yml").pipeline,
            "calc_dusty_ifu");
  expect_config_error(reference_with("name: calc_ifu", "name: calc_gradient"),
                      {"unknown pipeline.name 'calc_gradient'", "supported: calc_ifu"});
  expect_config_error(reference_with("name: PLANCK15", "name: CUSTOM"),
                      {"cosmology.name 'CUSTOM' is not supported", "not supported yet"});
  expect_config_error(reference_with("name: PLANCK15", "name: WMAP9"), {"unknown cosmology.name 'WMAP9'", "PLANCK15"});
  expect_config_error(reference_with("use_subset: false", "use_subset: true"),
                      {"data.subset.use_subset 'true' is not supported", "not supported yet"});
  expect_config_error(reference_with("noise_distribution: normal", "noise_distribution: uniform"),
                      {"telescope.noise.noise_distribution 'uniform' is not supported", "normal"});
  expect_config_error(reference_with("noise_distribution: normal", "noise_distribution: poisson"),
                      {"unknown telescope.noise.noise_distribution 'poisson'"});
  expect_config_error(reference_with("    name: gaussian", "    name: moffat"),
                      {"unknown telescope.psf.name 'moffat'", "supported: gaussian"});
  expect_config_error(reference_with("method: cubic", "method: akima"),
                      {"ssp.method 'akima' is not supported", "cubic, linear"});
  expect_config_error(reference_with("method: cubic", "method: spline"), {"unknown ssp.method 'spline'"});
  expect_config_error(reference_with("name: BruzualCharlot2003", "name: FSPS"),
                      {"ssp.template.name 'FSPS' is not supported", "BruzualCharlot2003"});
  expect_config_error(reference_with("name: BruzualCharlot2003", "name: BC03"), {"unknown ssp.template.name 'BC03'"});
  expect_config_error(reference_with("dist_z: 0.1", "dist_z: 0"), {"'galaxy.dist_z' must be a redshift > 0"});
  expect_config_error(reference_with("dist_z: 0.1", "dist_z: -0.5"), {"'galaxy.dist_z' must be a redshift > 0"});
  expect_config_error(reference_with("dist_z: 0.1", "dist_z: .inf"), {"'galaxy.dist_z' must be a finite number"});
  expect_config_error(reference_with("name: NIHAO", "name: EAGLE"),
                      {"unknown simulation.name 'EAGLE'", "NIHAO, IllustrisTNG"});
  expect_config_error(reference_with("name: MUSE ", "name: HUBBLE "),
                      {"telescope.name: unknown telescope 'HUBBLE'", "MUSE, MUSE_WFM", "NIRSpec_G395H_F290LP"});
  expect_config_error(reference_with("name: MUSE ", "name: SAMI "), {"telescope.name", "SAMI has a circular aperture"});
  expect_config_error(reference_with("    alpha: 60.0", "    type: matrix"),
                      {"galaxy.rotation.type 'matrix' is not supported"});
  expect_config_error(reference_with("    alpha: 60.0", "    type: sideways"),
                      {"unknown galaxy.rotation.type 'sideways'"});
  expect_config_error(reference_with("    gamma: 30.0\n", ""), {"missing required key 'galaxy.rotation.gamma'"});
  expect_config_error(reference_with("log_level: WARNING", "log_level: LOUD"), {"unknown logger.log_level 'LOUD'"});
  // Missing required parts.
  expect_config_error("galaxy: {dist_z: 0.1}\nssp: {template: {name: BruzualCharlot2003}}\n",
                      {"missing required key 'telescope'"});
  expect_config_error("telescope: {name: MUSE}\nssp: {template: {name: BruzualCharlot2003}}\n",
                      {"missing required key 'galaxy'"});
  expect_config_error("telescope: {name: MUSE}\ngalaxy: {dist_z: 0.1}\n", {"missing required key 'ssp'"});
  expect_config_error(reference_with("  dist_z: 0.1\n", ""), {"missing required key 'galaxy.dist_z'"});
  expect_config_error(reference_with("  name: MUSE ", "  psfx: 1"), {"unknown key 'telescope.psfx'"});
  expect_config_error(
      "telescope: {psf: {name: gaussian, size: 5, sigma: 1}}\ngalaxy: {dist_z: 0.1}\n"
      "ssp: {template: {name: BruzualCharlot2003}}\n",
      {"missing required key 'telescope.name'"});
  expect_config_error(reference_with("    size: 5\n", ""), {"missing required key 'telescope.psf.size'"});
  expect_config_error(reference_with("    noise_distribution: normal\n", ""),
                      {"missing required key 'telescope.noise.noise_distribution'"});
  expect_config_error(kMinimal + "ssp2: 1\n", {"unknown key 'ssp2'"});
  expect_config_error("telescope: {name: MUSE}\ngalaxy: {dist_z: 0.1}\nssp: {method: cubic}\n",
                      {"missing required key 'ssp.template'"});
}

// ---------------------------------------------------------------- telescope

TEST(IfuTelescope, TableAndDerivedGrid) {
  const ifu::Telescope muse = ifu::telescope("MUSE");
  EXPECT_EQ(muse.name, "MUSE");
  EXPECT_EQ(muse.fov_arcsec, 5.0);
  EXPECT_EQ(muse.spatial_res_arcsec, 0.2);
  EXPECT_EQ(muse.wave_lo, 4700.15);
  EXPECT_EQ(muse.wave_hi, 9351.4);
  EXPECT_EQ(muse.wave_res, 1.25);
  EXPECT_EQ(muse.lsf_fwhm, 2.51);
  EXPECT_EQ(muse.aperture_type, "square");
  EXPECT_EQ(muse.pixel_type, "square");
  // The grid the pipeline derives: 25 spaxels a side, float32 arange of 3721 values.
  EXPECT_EQ(static_cast<int>(std::floor(muse.fov_arcsec / muse.spatial_res_arcsec)), 25);
  // numpy's arange length: ceil((stop - start) / step) in double.
  EXPECT_EQ(static_cast<long>(std::ceil((muse.wave_hi - muse.wave_lo) / muse.wave_res)), 3721);
  const ifu::Telescope nirspec = ifu::telescope("NIRSpec_G140H_F070LP");
  EXPECT_EQ(nirspec.fov_arcsec, 3.0);
  EXPECT_EQ(nirspec.wave_res, 2.41);
  EXPECT_EQ(ifu::telescope("MUSE_ultraWFM").fov_arcsec, 180.0);
  const auto names = ifu::telescope_names();
  EXPECT_EQ(names.size(), 18u);
  EXPECT_EQ(names.front(), "MUSE");
  for (const auto& n : {"MUSE_WFM", "NIRSpec_PRISM_CLEAR", "NIRSpec_G395M_F290LP", "MaNGA_12", "CALIFA", "SAMI"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  expect_error<InputError>([] { ifu::telescope("muse"); }, "[ifu telescope] unknown telescope 'muse'",
                           {"known: MUSE, MUSE_WFM, MUSE_ultraWFM, NIRSpec_PRISM_CLEAR"});
  expect_error<InputError>([] { ifu::telescope("MaNGA_12"); }, "[ifu telescope] MaNGA_12 has a hexagonal aperture",
                           {"only square apertures", "supported: MUSE"});
}

// ---------------------------------------------------------------- HDF5 helpers

namespace {

// One dataset for a hand-written HDF5 file: values given as double, stored as
// `filetype` (HDF5 converts), with an optional `unit` attribute stored as a
// variable-length UTF-8 string (h5py's str) or a fixed-length ASCII one
// (h5py's numpy bytes).
struct Ds {
  Ds(std::string n, std::vector<hsize_t> d, std::vector<double> v, hid_t type = H5T_IEEE_F64LE,
     std::optional<std::string> u = std::nullopt)
      : name(std::move(n)), dims(std::move(d)), values(std::move(v)), filetype(type), unit(std::move(u)) {}
  std::string name;
  std::vector<hsize_t> dims;
  std::vector<double> values;
  hid_t filetype;
  std::optional<std::string> unit;
  bool fixed_unit = false;
};

void write_h5(const std::string& path, const std::vector<Ds>& sets) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  for (const Ds& d : sets) {
    const hid_t space = d.dims.empty() ? H5Screate(H5S_SCALAR)
                                       : H5Screate_simple(static_cast<int>(d.dims.size()), d.dims.data(), nullptr);
    const hid_t ds = H5Dcreate2(f, d.name.c_str(), d.filetype, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(ds, 0) << d.name;
    if (!d.values.empty()) H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.values.data());
    if (d.unit) {
      const hid_t t = H5Tcopy(H5T_C_S1);
      const hid_t s = H5Screate(H5S_SCALAR);
      if (d.fixed_unit) {
        H5Tset_size(t, std::max<std::size_t>(d.unit->size(), 1));
        H5Tset_strpad(t, H5T_STR_NULLPAD);
        const hid_t a = H5Acreate2(ds, "unit", t, s, H5P_DEFAULT, H5P_DEFAULT);
        std::string buf = *d.unit;
        buf.resize(std::max<std::size_t>(d.unit->size(), 1), '\0');
        H5Awrite(a, t, buf.data());
        H5Aclose(a);
      } else {
        H5Tset_size(t, H5T_VARIABLE);
        H5Tset_cset(t, H5T_CSET_UTF8);
        const hid_t a = H5Acreate2(ds, "unit", t, s, H5P_DEFAULT, H5P_DEFAULT);
        const char* c = d.unit->c_str();
        H5Awrite(a, t, &c);
        H5Aclose(a);
      }
      H5Sclose(s);
      H5Tclose(t);
    }
    H5Dclose(ds);
    H5Sclose(space);
  }
  H5Pclose(lcpl);
  H5Fclose(f);
}

std::vector<double> iota_values(std::size_t n, double start, double step) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<double>(i);
  return v;
}

// A canonical galaxy file's datasets (n particles), for tests to alter.
std::vector<Ds> galaxy_sets(hsize_t n) {
  return {
      {"galaxy/center", {3}, {1.0, 2.0, 3.0}, H5T_IEEE_F64LE, "kpc"},
      {"galaxy/halfmassrad_stars", {}, {4.5}, H5T_IEEE_F64LE, "kpc"},
      {"galaxy/redshift", {}, {0.25}, H5T_IEEE_F64LE, ""},
      {"particles/stars/coords", {n, 3}, iota_values(3 * n, -1.0, 0.25), H5T_IEEE_F32LE, "kpc"},
      {"particles/stars/velocity", {n, 3}, iota_values(3 * n, -100.0, 10.0), H5T_IEEE_F32LE, "km/s"},
      {"particles/stars/mass", {n}, iota_values(n, 1e4, 1e3), H5T_IEEE_F32LE, "Msun"},
      {"particles/stars/age", {n}, iota_values(n, 0.5, 0.5), H5T_IEEE_F32LE, "Gyr"},
      {"particles/stars/metallicity", {n}, iota_values(n, 0.001, 0.002), H5T_IEEE_F32LE, ""},
  };
}

Ds& find(std::vector<Ds>& sets, const std::string& name) {
  for (auto& d : sets)
    if (d.name == name) return d;
  throw std::runtime_error("no dataset " + name);
}

std::string read_unit_attribute(const std::string& path, const std::string& dataset, bool* is_vlen_utf8) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const hid_t a = H5Aopen(d, "unit", H5P_DEFAULT);
  const hid_t t = H5Aget_type(a);
  *is_vlen_utf8 = H5Tis_variable_str(t) > 0 && H5Tget_cset(t) == H5T_CSET_UTF8;
  std::string out;
  if (*is_vlen_utf8) {
    char* s = nullptr;
    H5Aread(a, t, &s);
    out = s ? s : "";
    H5free_memory(s);
  }
  H5Tclose(t);
  H5Aclose(a);
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

ifu::GalaxyData random_galaxy(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  ifu::GalaxyData g;
  g.n = n;
  g.center = {0.125, -2.5, 7.0};
  g.halfmassrad_stars = 3.25;
  g.redshift = 0.1;
  for (std::int64_t i = 0; i < 3 * n; ++i) {
    g.coords.push_back(nd(rng));
    g.velocity.push_back(100.f * nd(rng));
  }
  for (std::int64_t i = 0; i < n; ++i) {
    g.mass.push_back(1e4f + 1e5f * u(rng));
    g.age.push_back(0.05f + 10.f * u(rng));
    g.metallicity.push_back(1e-4f + 0.04f * u(rng));
  }
  return g;
}

void expect_same_galaxy(const ifu::GalaxyData& a, const ifu::GalaxyData& b) {
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.center, b.center);
  EXPECT_EQ(a.halfmassrad_stars, b.halfmassrad_stars);
  EXPECT_EQ(a.redshift, b.redshift);
  EXPECT_EQ(a.coords, b.coords);
  EXPECT_EQ(a.velocity, b.velocity);
  EXPECT_EQ(a.mass, b.mass);
  EXPECT_EQ(a.age, b.age);
  EXPECT_EQ(a.metallicity, b.metallicity);
}

// ---- .npy and zip builders ----

std::string le_bytes(std::uint64_t v, int n) {
  std::string s;
  for (int k = 0; k < n; ++k) s += static_cast<char>((v >> (8 * k)) & 0xff);
  return s;
}

// A .npy image with the given header fields and raw data, in format `major`.0.
std::string npy_bytes(const std::string& descr, const std::string& shape, const std::string& data, int major = 1,
                      const std::string& fortran = "False") {
  std::string dict = "{'descr': ";
  dict += descr[0] == '[' ? descr : "'" + descr + "'";
  dict += ", 'fortran_order': ";
  dict += fortran;
  dict += ", 'shape': ";
  dict += shape;
  dict += ", }";
  const std::size_t pre = major == 1 ? 10 : 12;
  while ((pre + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  out += le_bytes(dict.size(), major == 1 ? 2 : 4);
  out += dict;
  out += data;
  return out;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string raw_deflate(const std::string& in) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A zip archive of the members, stored (method 0) or deflated (8), with the
// structure np.savez writes (local headers, central directory, end record).
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& members, int method = 0) {
  std::string body, cd;
  for (const auto& [name, data] : members) {
    const std::string packed = method == 8 ? raw_deflate(data) : data;
    const auto crc = crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size()));
    const std::size_t offset = body.size();
    std::string common = le_bytes(20, 2) + le_bytes(0, 2) + le_bytes(method, 2) + le_bytes(0, 2) + le_bytes(0x21, 2) +
                         le_bytes(crc, 4) + le_bytes(packed.size(), 4) + le_bytes(data.size(), 4) +
                         le_bytes(name.size(), 2) + le_bytes(0, 2);
    body += le_bytes(0x04034b50, 4) + common + name + packed;
    cd += le_bytes(0x02014b50, 4) + le_bytes(20, 2) + common + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(0, 2) +
          le_bytes(0, 4) + le_bytes(offset, 4) + name;
  }
  std::string end = le_bytes(0x06054b50, 4) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(members.size(), 2) +
                    le_bytes(members.size(), 2) + le_bytes(cd.size(), 4) + le_bytes(body.size(), 4) + le_bytes(0, 2);
  return body + cd + end;
}

// np.savez(buf, a=np.arange(6, dtype='<f4').reshape(2, 3) * 0.5, b=np.array([1, -2, 3], dtype='<i8'))
// and the same with np.savez_compressed, written by NumPy 2.4 (zip64 local headers).
const unsigned char kNumpyStored[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x0b, 0xc0, 0xb0, 0x76, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x61, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10,
    0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x4e,
    0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27,
    0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65,
    0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a,
    0x20, 0x28, 0x32, 0x2c, 0x20, 0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x20, 0x40, 0x50, 0x4b,
    0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x74, 0xa8, 0xf3, 0x30, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x62, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x98,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x4e, 0x55, 0x4d,
    0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69,
    0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27,
    0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28,
    0x33, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfe,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x4b, 0x01, 0x02,
    0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x0b, 0xc0, 0xb0, 0x76, 0x98, 0x00, 0x00,
    0x00, 0x98, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01,
    0x00, 0x00, 0x00, 0x00, 0x61, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x74, 0xa8, 0xf3, 0x30, 0x98, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x05,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0xcf, 0x00, 0x00, 0x00, 0x62, 0x2e,
    0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x66, 0x00, 0x00, 0x00,
    0x9e, 0x01, 0x00, 0x00, 0x00, 0x00,
};
const unsigned char kNumpyDeflated[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x0b, 0xc0, 0xb0, 0x76, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x61, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10,
    0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x57, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec,
    0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50, 0xc6, 0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0,
    0x6e, 0x93, 0x66, 0xa2, 0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92,
    0x0a, 0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a, 0x46, 0x3a,
    0x0a, 0xc6, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x64, 0x03, 0x2e, 0x06, 0x08, 0xb0, 0x67, 0x60, 0x68, 0x00, 0xe2, 0x03,
    0x40, 0xcc, 0xe0, 0xc0, 0xc0, 0xa0, 0xe0, 0x00, 0x00, 0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00,
    0x00, 0x00, 0x21, 0x00, 0x74, 0xa8, 0xf3, 0x30, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14,
    0x00, 0x62, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4e,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50, 0xc6, 0x50, 0xad,
    0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x6e, 0x93, 0x69, 0xa1, 0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f,
    0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a, 0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17,
    0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a, 0xc6, 0x3a, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x14, 0x00, 0x2e, 0x46, 0x06,
    0x08, 0xf8, 0xf7, 0x1f, 0x02, 0x98, 0xa1, 0x7c, 0x00, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x0b, 0xc0, 0xb0, 0x76, 0x57, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x05,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x61, 0x2e,
    0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00,
    0x74, 0xa8, 0xf3, 0x30, 0x4e, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x8e, 0x00, 0x00, 0x00, 0x62, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05,
    0x06, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x66, 0x00, 0x00, 0x00, 0x13, 0x01, 0x00, 0x00, 0x00, 0x00,
};

void expect_numpy_fixture(const std::map<std::string, ifu::NpyArray>& m) {
  ASSERT_EQ(m.size(), 2u);
  const auto& a = m.at("a");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, "<f4");
  EXPECT_EQ(a.to_f32(), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  const auto& b = m.at("b");
  EXPECT_EQ(b.shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(b.dtype, "<i8");
  EXPECT_EQ(b.to_f64(), (std::vector<double>{1, -2, 3}));
}

}  // namespace

// ---------------------------------------------------------------- galaxy files

TEST(IfuGalaxy, H5RoundTrip) {
  TempDir tmp;
  const auto g = random_galaxy(1000, 7);
  ifu::write_galaxy_h5(tmp / "rubix_galaxy.h5", g);
  expect_same_galaxy(ifu::read_galaxy(tmp / "rubix_galaxy.h5"), g);
  // The unit attributes are what h5py writes for str values.
  bool vlen = false;
  EXPECT_EQ(read_unit_attribute(tmp / "rubix_galaxy.h5", "particles/stars/velocity", &vlen), "km/s");
  EXPECT_TRUE(vlen);
  EXPECT_EQ(read_unit_attribute(tmp / "rubix_galaxy.h5", "galaxy/center", &vlen), "kpc");
  EXPECT_EQ(read_unit_attribute(tmp / "rubix_galaxy.h5", "particles/stars/metallicity", &vlen), "");
  EXPECT_TRUE(vlen);
  // Overwriting works.
  const auto g2 = random_galaxy(10, 8);
  ifu::write_galaxy_h5(tmp / "rubix_galaxy.h5", g2);
  expect_same_galaxy(ifu::read_galaxy(tmp / "rubix_galaxy.h5"), g2);
  auto bad = g2;
  bad.mass.pop_back();
  expect_error<InputError>([&] { ifu::write_galaxy_h5(tmp / "bad.h5", bad); }, "[ifu galaxy] ",
                           {"mass holds 9 values, expected 10"});
}

TEST(IfuGalaxy, UnitsAreConvertedToCanonicalOnes) {
  TempDir tmp;
  auto sets = galaxy_sets(4);
  find(sets, "galaxy/center") = {"galaxy/center", {3}, {1.0, -2.0, 0.5}, H5T_IEEE_F64LE, "Mpc"};
  find(sets, "galaxy/halfmassrad_stars") = {
      "galaxy/halfmassrad_stars", {}, {3.0856775814913673e21}, H5T_IEEE_F64LE, "cm"};
  find(sets, "galaxy/redshift").unit.reset();  // no attribute: canonical
  find(sets, "particles/stars/coords").unit = "pc";
  find(sets, "particles/stars/coords").filetype = H5T_IEEE_F64LE;
  find(sets, "particles/stars/velocity").unit = "m / s";
  find(sets, "particles/stars/mass") = {"particles/stars/mass", {4}, {1, 2, 3, 4}, H5T_STD_I64LE, "1e10 Msun"};
  find(sets, "particles/stars/age").unit = "Myr";
  find(sets, "particles/stars/age").fixed_unit = true;  // numpy-bytes style attribute
  find(sets, "particles/stars/metallicity").unit = "dimensionless";
  write_h5(tmp / "g.h5", sets);
  const auto g = ifu::read_galaxy(tmp / "g.h5");
  EXPECT_EQ(g.n, 4);
  EXPECT_DOUBLE_EQ(g.center[0], 1000.0);
  EXPECT_DOUBLE_EQ(g.center[1], -2000.0);
  EXPECT_DOUBLE_EQ(g.halfmassrad_stars, 1.0);
  EXPECT_DOUBLE_EQ(g.redshift, 0.25);
  const auto coords = iota_values(12, -1.0, 0.25), vel = iota_values(12, -100.0, 10.0);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_FLOAT_EQ(g.coords[i], static_cast<float>(coords[i] / 1000)) << i;
    EXPECT_FLOAT_EQ(g.velocity[i], static_cast<float>(vel[i] / 1000)) << i;
  }
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(g.mass[i], static_cast<float>((i + 1) * 1e10)) << i;
    EXPECT_FLOAT_EQ(g.age[i], static_cast<float>((0.5 + 0.5 * i) / 1000)) << i;
  }
  // kg, g, km, yr, kyr, cm/s and the other mass spellings.
  sets = galaxy_sets(2);
  find(sets, "particles/stars/mass") = {
      "particles/stars/mass", {2}, {1.988409870698051e30, 1.988409870698051e33}, H5T_IEEE_F64LE, "kg"};
  find(sets, "particles/stars/age") = {"particles/stars/age", {2}, {1e9, 2e9}, H5T_IEEE_F64LE, "yr"};
  find(sets, "particles/stars/velocity").unit = "cm/s";
  find(sets, "particles/stars/coords").unit = "km";
  write_h5(tmp / "g2.h5", sets);
  auto g2 = ifu::read_galaxy(tmp / "g2.h5");
  EXPECT_FLOAT_EQ(g2.mass[0], 1.f);
  EXPECT_FLOAT_EQ(g2.mass[1], 1000.f);
  EXPECT_FLOAT_EQ(g2.age[1], 2.f);
  EXPECT_FLOAT_EQ(g2.velocity[1], static_cast<float>(-90.0 * 1e-5));
  EXPECT_FLOAT_EQ(g2.coords[4], static_cast<float>(0.0 / 3.0856775814913673e16));
  EXPECT_FLOAT_EQ(g2.coords[5], static_cast<float>(0.25 / 3.0856775814913673e16));
  for (const char* spelling : {"Msol", "solMass", "M_sun"}) {
    find(sets, "particles/stars/mass") = {"particles/stars/mass", {2}, {5, 6}, H5T_IEEE_F32LE, spelling};
    write_h5(tmp / "g3.h5", sets);
    EXPECT_EQ(ifu::read_galaxy(tmp / "g3.h5").mass, (std::vector<float>{5, 6})) << spelling;
  }
}

TEST(IfuGalaxy, BadFilesNameTheProblem) {
  TempDir tmp;
  const std::string p = tmp / "g.h5";
  auto with = [&](auto change) {
    auto sets = galaxy_sets(5);
    change(sets);
    write_h5(p, sets);
  };
  auto expect_bad = [&](std::vector<std::string> words) {
    expect_error<InputError>([&] { ifu::read_galaxy(p); }, "[ifu galaxy] " + p + ": ", words);
  };
  with([](std::vector<Ds>& s) { s.erase(s.begin() + 6); });  // no age
  expect_bad({"missing dataset '/particles/stars/age'"});
  with([](std::vector<Ds>& s) { s.erase(s.begin()); });  // no center
  expect_bad({"missing dataset '/galaxy/center'"});
  with([](std::vector<Ds>& s) {
    find(s, "particles/stars/mass") = {"particles/stars/mass", {4}, {1, 2, 3, 4}, H5T_IEEE_F32LE, "Msun"};
  });
  expect_bad({"'/particles/stars/mass' must have shape (5,)", "it has (4,)"});
  with([](std::vector<Ds>& s) {
    find(s, "particles/stars/coords") = {
        "particles/stars/coords", {5, 2}, iota_values(10, 0, 1), H5T_IEEE_F32LE, "kpc"};
  });
  expect_bad({"'/particles/stars/coords' must have shape (n, 3)", "(5, 2)"});
  with([](std::vector<Ds>& s) {
    find(s, "particles/stars/velocity") = {
        "particles/stars/velocity", {15}, iota_values(15, 0, 1), H5T_IEEE_F32LE, "km/s"};
  });
  expect_bad({"'/particles/stars/velocity' must have shape (5, 3)", "(15,)"});
  with([](std::vector<Ds>& s) { find(s, "particles/stars/coords").unit = "furlong"; });
  expect_bad({"unit 'furlong' of '/particles/stars/coords' is not known", "kpc"});
  with([](std::vector<Ds>& s) { find(s, "particles/stars/coords").unit = "ckpc/h"; });
  expect_bad({"unit 'ckpc/h'", "Hubble parameter"});
  with([](std::vector<Ds>& s) { find(s, "particles/stars/velocity").unit = "kpc"; });
  expect_bad({"unit 'kpc' of '/particles/stars/velocity'", "expected kind", "km/s"});
  with([](std::vector<Ds>& s) { find(s, "particles/stars/metallicity").unit = "Zsun"; });
  expect_bad({"unit 'Zsun'", "mass fraction"});
  with([](std::vector<Ds>& s) {
    find(s, "galaxy/redshift") = {"galaxy/redshift", {2}, {0.1, 0.2}, H5T_IEEE_F64LE, ""};
  });
  expect_bad({"'/galaxy/redshift' must be a scalar", "(2,)"});
  with([](std::vector<Ds>& s) {
    for (auto& d : s)
      if (d.name.rfind("particles", 0) == 0) {
        d.dims[0] = 0;
        d.values.clear();
      }
  });
  expect_bad({"holds no particles"});
  // A string dataset where numbers belong.
  {
    auto sets = galaxy_sets(5);
    sets.erase(sets.begin() + 5);  // mass, written below as strings
    write_h5(p, sets);
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 4);
    const hsize_t dims[1] = {5};
    const hid_t sp = H5Screate_simple(1, dims, nullptr);
    const hid_t d = H5Dcreate2(f, "particles/stars/mass", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, "aaaabbbbccccddddeeee");
    H5Dclose(d);
    H5Sclose(sp);
    H5Tclose(t);
    H5Fclose(f);
  }
  expect_bad({"'/particles/stars/mass' must hold numbers, it holds strings"});
  // Not HDF5 at all, not there, a folder.
  write_bytes(tmp / "g.txt", "hello, not a galaxy\n");
  expect_error<InputError>([&] { ifu::read_galaxy(tmp / "g.txt"); }, "[ifu galaxy] ", {"neither an HDF5 file", ".npz"});
  write_bytes(tmp / "fake.h5", "hello, not a galaxy\n");
  expect_error<InputError>([&] { ifu::read_galaxy(tmp / "fake.h5"); }, "[ifu galaxy] ",
                           {"cannot open as HDF5", "signature"});
  expect_error<InputError>([&] { ifu::read_galaxy(tmp / "missing.h5"); }, "[ifu galaxy] ",
                           {"missing.h5", "no such file"});
  expect_error<InputError>([&] { ifu::read_galaxy(tmp.path().string()); }, "[ifu galaxy] ", {"not a regular file"});
}

TEST(IfuGalaxy, NpzGalaxy) {
  TempDir tmp;
  const auto g = random_galaxy(50, 3);
  auto member = [&](const std::string& name, const std::vector<std::int64_t>& shape, const std::vector<float>& v) {
    ifu::write_npy(tmp / "m.npy", shape, v.data());
    return std::make_pair(name + ".npy", read_bytes(tmp / "m.npy"));
  };
  std::vector<std::pair<std::string, std::string>> members = {
      member("coords", {50, 3}, g.coords),
      member("velocity", {50, 3}, g.velocity),
      member("mass", {50}, g.mass),
      member("age", {50}, g.age),
      member("metallicity", {50}, g.metallicity),
      member("ids", {50}, g.mass),  // extra arrays are ignored
  };
  for (int method : {0, 8}) {
    write_bytes(tmp / "g.npz", make_zip(members, method));
    const auto r = ifu::read_galaxy(tmp / "g.npz");
    auto want = g;
    want.center = {0, 0, 0};  // no center array: the origin
    want.halfmassrad_stars = 0;
    want.redshift = 0;
    expect_same_galaxy(r, want);
  }
  // With a float64 center and the galaxy scalars.
  auto with_center = members;
  with_center.emplace_back("center.npy", npy_bytes("<f8", "(3,)", raw(std::vector<double>{1.5, -2, 3})));
  with_center.emplace_back("halfmassrad_stars.npy", npy_bytes("<f8", "()", raw(std::vector<double>{2.5})));
  write_bytes(tmp / "g.npz", make_zip(with_center, 8));
  const auto r = ifu::read_galaxy(tmp / "g.npz");
  EXPECT_EQ(r.center, (std::array<double, 3>{1.5, -2, 3}));
  EXPECT_EQ(r.halfmassrad_stars, 2.5);
  // Missing and mis-shaped arrays.
  auto no_age = members;
  no_age.erase(no_age.begin() + 3);
  write_bytes(tmp / "g.npz", make_zip(no_age));
  expect_error<InputError>([&] { ifu::read_galaxy(tmp / "g.npz"); }, "[ifu galaxy] ",
                           {"missing array 'age'", "coords", "metallicity"});
  auto short_mass = members;
  short_mass[2] = member("mass", {49}, g.mass);
  write_bytes(tmp / "g.npz", make_zip(short_mass));
  expect_error<InputError>([&] { ifu::read_galaxy(tmp / "g.npz"); }, "[ifu galaxy] ",
                           {"array 'mass' must have shape (50,)", "(49,)"});
}

// ---------------------------------------------------------------- .npy / .npz

TEST(IfuNpy, WriteReadRoundTrip) {
  TempDir tmp;
  const std::vector<float> v = {1.5f, -2.f, 3.25f, 0.f, 1e-20f, 7.f, 8.f, 9.f, 10.f, 11.f, 12.f, -13.f};
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{12}, {3, 4}, {2, 3, 2}, {}, {0}}) {
    ifu::write_npy(tmp / "a.npy", shape, v.data());
    const auto a = ifu::read_npy(tmp / "a.npy");
    EXPECT_EQ(a.shape, shape);
    EXPECT_EQ(a.dtype, "<f4");
    const auto n = a.size();
    EXPECT_EQ(a.to_f32(), std::vector<float>(v.begin(), v.begin() + n));
    const std::string bytes = read_bytes(tmp / "a.npy");
    EXPECT_EQ((bytes.size() - 4 * static_cast<std::size_t>(n)) % 64, 0u);  // data aligned to 64 bytes
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  }
  ifu::write_npy(tmp / "a.npy", {1}, v.data());
  EXPECT_NE(read_bytes(tmp / "a.npy").find("'shape': (1,)"), std::string::npos);
  ifu::write_npy(tmp / "a.npy", {2, 3}, v.data());
  EXPECT_NE(read_bytes(tmp / "a.npy").find("'shape': (2, 3)"), std::string::npos);
  expect_error<InputError>([&] { ifu::write_npy(tmp / "no/such/dir/a.npy", {1}, v.data()); }, "[ifu npy] ",
                           {"cannot create"});
}

TEST(IfuNpy, HeaderVersionsAndDtypes) {
  TempDir tmp;
  const std::string p = tmp / "a.npy";
  for (int major : {1, 2, 3}) {
    write_bytes(p, npy_bytes("<f8", "(2, 2)", raw(std::vector<double>{1.5, -2.5, 1e300, 4}), major));
    const auto a = ifu::read_npy(p);
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 2}));
    EXPECT_EQ(a.to_f64(), (std::vector<double>{1.5, -2.5, 1e300, 4})) << major;
    EXPECT_EQ(a.to_f32()[0], 1.5f);
  }
  write_bytes(p, npy_bytes("<i4", "(3,)", raw(std::vector<std::int32_t>{-7, 0, 2000000000})));
  EXPECT_EQ(ifu::read_npy(p).to_f64(), (std::vector<double>{-7, 0, 2000000000}));
  write_bytes(p, npy_bytes("<i2", "(2,)", raw(std::vector<std::int16_t>{-300, 300})));
  EXPECT_EQ(ifu::read_npy(p).to_f32(), (std::vector<float>{-300, 300}));
  write_bytes(p, npy_bytes("|u1", "(3,)", raw(std::vector<std::uint8_t>{0, 200, 255})));
  EXPECT_EQ(ifu::read_npy(p).to_f32(), (std::vector<float>{0, 200, 255}));
  write_bytes(p, npy_bytes("|b1", "(2,)", raw(std::vector<std::uint8_t>{1, 0})));
  EXPECT_EQ(ifu::read_npy(p).to_f32(), (std::vector<float>{1, 0}));
  write_bytes(p, npy_bytes("<u8", "(1,)", raw(std::vector<std::uint64_t>{1ull << 40})));
  EXPECT_EQ(ifu::read_npy(p).to_f64(), (std::vector<double>{1099511627776.0}));
  write_bytes(p, npy_bytes("<f2", "(4,)", raw(std::vector<std::uint16_t>{0x3E00, 0xC000, 0x0001, 0x7C00})));
  const auto h = ifu::read_npy(p).to_f32();
  EXPECT_EQ(h[0], 1.5f);
  EXPECT_EQ(h[1], -2.f);
  EXPECT_EQ(h[2], std::ldexp(1.f, -24));
  EXPECT_TRUE(std::isinf(h[3]));
  // Arrays built by hand are checked the same way.
  ifu::NpyArray hand{{2}, ">f4", std::vector<char>(8)};
  expect_error<InputError>([&] { hand.to_f32(); }, "[ifu npy] array: dtype '>f4'", {"big-endian"});
  hand.dtype = "<f8";
  expect_error<InputError>([&] { hand.to_f64(); }, "[ifu npy] the array holds 8 bytes");
}

TEST(IfuNpy, UnsupportedNpyFilesSaySo) {
  TempDir tmp;
  const std::string p = tmp / "a.npy";
  auto expect_bad = [&](const std::string& bytes, std::vector<std::string> words) {
    write_bytes(p, bytes);
    expect_error<InputError>([&] { ifu::read_npy(p); }, "[ifu npy] " + p + ": ", words);
  };
  const std::string four = raw(std::vector<float>{1, 2, 3, 4});
  expect_bad(npy_bytes(">f4", "(4,)", four), {"dtype '>f4'", "big-endian"});
  expect_bad(npy_bytes("<f4", "(2, 2)", four, 1, "True"), {"Fortran-order"});
  expect_bad(npy_bytes("|O", "(4,)", four), {"dtype '|O'", "object arrays"});
  expect_bad(npy_bytes("[('a', '<f4')]", "(4,)", four), {"structured dtypes"});
  expect_bad(npy_bytes("<c8", "(2,)", four), {"complex"});
  expect_bad(npy_bytes("<U1", "(4,)", four), {"strings"});
  expect_bad(npy_bytes("<f4", "(5,)", four), {"truncated data", "20 bytes", "16"});
  expect_bad("PK\x03\x04 not npy", {"bad magic"});
  std::string v4 = npy_bytes("<f4", "(4,)", four);
  v4[6] = 4;
  expect_bad(v4, {"format version 4.0", "1.0, 2.0, 3.0"});
  expect_bad(npy_bytes("<f4", "(4,)", four).replace(10, 9, "{'desc': "), {"malformed .npy header"});
  expect_error<InputError>([&] { ifu::read_npy(tmp / "none.npy"); }, "[ifu npy] ", {"none.npy", "no such file"});
}

TEST(IfuNpz, NumpyWrittenArchives) {
  TempDir tmp;
  write_bytes(tmp / "s.npz", std::string(reinterpret_cast<const char*>(kNumpyStored), sizeof kNumpyStored));
  expect_numpy_fixture(ifu::read_npz(tmp / "s.npz"));
  write_bytes(tmp / "d.npz", std::string(reinterpret_cast<const char*>(kNumpyDeflated), sizeof kNumpyDeflated));
  expect_numpy_fixture(ifu::read_npz(tmp / "d.npz"));
}

TEST(IfuNpz, StoredAndDeflatedArchivesAndTheirErrors) {
  TempDir tmp;
  std::vector<float> big(100000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 97) * 0.5f;
  const std::vector<std::pair<std::string, std::string>> members = {
      {"x.npy", npy_bytes("<f4", "(100000,)", raw(big))},
      {"y.npy", npy_bytes("<i8", "(2,)", raw(std::vector<std::int64_t>{5, -6}))}};
  for (int method : {0, 8}) {
    const std::string zip = make_zip(members, method);
    if (method == 8) {
      EXPECT_LT(zip.size(), 200000u);  // really compressed
    }
    write_bytes(tmp / "a.npz", zip);
    const auto m = ifu::read_npz(tmp / "a.npz");
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m.at("x").to_f32(), big);
    EXPECT_EQ(m.at("y").to_f64(), (std::vector<double>{5, -6}));
  }
  const std::string p = tmp / "bad.npz";
  auto expect_bad = [&](const std::string& bytes, std::vector<std::string> words) {
    write_bytes(p, bytes);
    expect_error<InputError>([&] { ifu::read_npz(p); }, "[ifu npz] ", words);
  };
  std::string corrupt = make_zip(members, 0);
  corrupt[200] ^= 0x5a;  // inside x's data
  expect_bad(corrupt, {"member 'x.npy'", "CRC"});
  std::string deflated = make_zip(members, 8);
  expect_bad(deflated.substr(0, deflated.size() / 2), {"no end-of-central-directory record"});
  std::string garbled = make_zip(members, 8);
  for (std::size_t k = 60; k < 90; ++k) garbled[k] = static_cast<char>(0xff);
  expect_bad(garbled, {"member 'x.npy'"});
  expect_bad("just text, not a zip archive at all", {"not a zip archive"});
  expect_bad(make_zip({{"notes.txt", "hello"}}), {"member 'notes.txt' is not a .npy array"});
  expect_bad(make_zip({{"x.npy", npy_bytes(">f8", "(1,)", std::string(8, '\0'))}}), {"x.npy", "big-endian"});
  std::string bzip = make_zip({{"x.npy", members[1].second}});
  bzip[8] = 12;                             // method in the local header
  bzip[bzip.find("PK\x01\x02") + 10] = 12;  // and in the central directory
  expect_bad(bzip, {"compression method 12"});
}

// ---------------------------------------------------------------- SSP grids

namespace {

ifu::SspGrid small_grid() {
  ifu::SspGrid g;
  g.age = {0.0, 5.1, 6.0, 9.5};
  g.metallicity = {1e-4, 0.004, 0.02};
  g.wavelength = {91, 100, 150, 1000, 5000};
  for (std::size_t z = 0; z < 3; ++z)
    for (std::size_t a = 0; a < 4; ++a)
      for (std::size_t w = 0; w < 5; ++w) g.flux.push_back(static_cast<double>(z * 100 + a * 10 + w) * 1e-3);
  return g;
}

}  // namespace

TEST(IfuSsp, RoundTrip) {
  TempDir tmp;
  const auto g = small_grid();
  ifu::write_ssp_h5(tmp / "ssp.h5", g);
  const auto r = ifu::read_ssp_h5(tmp / "ssp.h5");
  EXPECT_EQ(r.source, tmp / "ssp.h5");
  EXPECT_EQ(r.age, g.age);
  EXPECT_EQ(r.metallicity, g.metallicity);
  EXPECT_EQ(r.wavelength, g.wavelength);
  EXPECT_EQ(r.flux, g.flux);
  // The BC03lr.h5 storage types: int64 wavelengths, float64 elsewhere.
  write_h5(tmp / "bc.h5", {{"age", {4}, g.age},
                           {"metallicity", {3}, g.metallicity},
                           {"wavelength", {5}, g.wavelength, H5T_STD_I64LE},
                           {"flux", {3, 4, 5}, g.flux}});
  EXPECT_EQ(ifu::read_ssp_h5(tmp / "bc.h5").wavelength, g.wavelength);
}

TEST(IfuSsp, ValidationErrors) {
  TempDir tmp;
  const std::string p = tmp / "ssp.h5";
  auto expect_bad = [&](const std::vector<Ds>& sets, std::vector<std::string> words) {
    write_h5(p, sets);
    expect_error<InputError>([&] { ifu::read_ssp_h5(p); }, "[ifu ssp] " + p + ": ", words);
  };
  const auto g = small_grid();
  const Ds age{"age", {4}, g.age}, z{"metallicity", {3}, g.metallicity}, w{"wavelength", {5}, g.wavelength},
      flux{"flux", {3, 4, 5}, g.flux};
  expect_bad({age, z, w}, {"missing dataset '/flux'"});
  expect_bad({age, {"metallicity", {3}, {0.02, 0.004, 0.05}}, w, flux},
             {"'metallicity' must be strictly increasing", "value 1"});
  expect_bad({{"age", {4}, {0, 5.1, 5.1, 9}}, z, w, flux}, {"'age' must be strictly increasing"});
  expect_bad({age, z, w, {"flux", {4, 3, 5}, g.flux}},
             {"'flux' must have shape (metallicity, age, wavelength) = (3, 4, 5)", "(4, 3, 5)"});
  expect_bad({{"age", {2, 2}, g.age}, z, w, flux}, {"'age' must be 1-d", "(2, 2)"});
  auto nan_flux = g.flux;
  nan_flux[7] = std::numeric_limits<double>::quiet_NaN();
  expect_bad({age, z, w, {"flux", {3, 4, 5}, nan_flux}}, {"'flux' holds a non-finite value at flat index 7"});
  expect_bad({age, {"metallicity", {1}, {0.02}}, w, {"flux", {1, 4, 5}, std::vector<double>(20, 1.0)}},
             {"'metallicity' must hold at least 2 values"});
  // The writer checks too.
  auto bad = g;
  bad.wavelength[2] = 50;
  expect_error<InputError>([&] { ifu::write_ssp_h5(p, bad); }, "[ifu ssp] ",
                           {"'wavelength' must be strictly increasing"});
  bad = g;
  bad.flux.pop_back();
  expect_error<InputError>([&] { ifu::write_ssp_h5(p, bad); }, "[ifu ssp] ", {"'flux' holds 59 values", "(3, 4, 5)"});
  expect_error<InputError>([&] { ifu::read_ssp_h5(tmp / "none.h5"); }, "[ifu ssp] ", {"no such file"});
}

// ---------------------------------------------------------------- FITS cubes

namespace {

std::vector<float> numbered_cube(std::int64_t ny, std::int64_t nx, std::int64_t nw) {
  std::vector<float> c(static_cast<std::size_t>(ny * nx * nw));
  for (std::int64_t y = 0; y < ny; ++y)
    for (std::int64_t x = 0; x < nx; ++x)
      for (std::int64_t w = 0; w < nw; ++w)
        c[static_cast<std::size_t>((y * nx + x) * nw + w)] = static_cast<float>(y * 10000 + x * 100 + w) + 0.5f;
  return c;
}

// The k-th value of the primary data array as stored (big-endian float32 after the header blocks).
float stored_value(const std::string& bytes, std::size_t k) {
  const std::size_t end = bytes.find("END     ");
  const std::size_t data = (end / 2880 + 1) * 2880;
  std::uint32_t u = 0;
  for (int b = 0; b < 4; ++b) u = (u << 8) | static_cast<unsigned char>(bytes[data + 4 * k + b]);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(IfuFits, WriteReadRoundTripAndLayout) {
  TempDir tmp;
  const std::int64_t ny = 3, nx = 4, nw = 5;
  const auto cube = numbered_cube(ny, nx, nw);
  ifu::CubeWcs wcs;
  wcs.spaxel_arcsec = 0.2;
  wcs.wave0 = 4700.15;
  wcs.dwave = 1.25;
  wcs.bunit = "solLum/Angstrom";
  const std::string long_text(100, 'v');
  wcs.cards = {{"NPART", "100000", "star particles"},
               {"DIST_Z", "0.1", "observed redshift"},
               {"config", "rubix_config.yml", "the config file"},
               {"SOFTWARE", long_text, "a long string"},
               {"S_TO_N", "inf", "no noise"}};
  const std::string p = tmp / "cube[1].fits";  // no extended-file-name parsing
  ifu::write_cube_fits(p, cube.data(), ny, nx, nw, wcs);
  // Storage order: x fastest, then y, then wavelength.
  const std::string bytes = read_bytes(p);
  EXPECT_EQ(stored_value(bytes, 0), cube[0]);
  EXPECT_EQ(stored_value(bytes, 1), cube[1 * nw]);             // (y 0, x 1, w 0)
  EXPECT_EQ(stored_value(bytes, 4), cube[(1 * nx + 0) * nw]);  // (y 1, x 0, w 0)
  EXPECT_EQ(stored_value(bytes, 12), cube[1]);                 // (y 0, x 0, w 1)
  EXPECT_EQ(stored_value(bytes, 59), cube[(2 * nx + 3) * nw + 4]);

  const ifu::FitsCube r = ifu::read_cube_fits(p);
  EXPECT_EQ(r.nx, nx);
  EXPECT_EQ(r.ny, ny);
  EXPECT_EQ(r.nwave, nw);
  EXPECT_EQ(r.data, cube);
  EXPECT_EQ(r.number("NAXIS"), 3);
  EXPECT_EQ(r.number("NAXIS1"), 4);
  EXPECT_EQ(r.number("NAXIS2"), 3);
  EXPECT_EQ(r.number("NAXIS3"), 5);
  EXPECT_EQ(r.number("BITPIX"), -32);
  EXPECT_EQ(r.number("WCSAXES"), 3);
  EXPECT_EQ(r.text("CTYPE1"), "XOFFSET");
  EXPECT_EQ(r.text("CTYPE2"), "YOFFSET");
  EXPECT_EQ(r.text("CTYPE3"), "WAVE");
  EXPECT_EQ(r.text("CUNIT1"), "arcsec");
  EXPECT_EQ(r.text("CUNIT2"), "arcsec");
  EXPECT_EQ(r.text("CUNIT3"), "Angstrom");
  EXPECT_EQ(r.number("CRPIX1"), 2.5);
  EXPECT_EQ(r.number("CRPIX2"), 2.0);
  EXPECT_EQ(r.number("CRPIX3"), 1.0);
  EXPECT_EQ(r.number("CRVAL1"), 0.0);
  EXPECT_EQ(r.number("CRVAL2"), 0.0);
  EXPECT_DOUBLE_EQ(r.number("CRVAL3"), 4700.15);
  EXPECT_DOUBLE_EQ(r.number("CDELT1"), 0.2);
  EXPECT_DOUBLE_EQ(r.number("CDELT2"), 0.2);
  EXPECT_DOUBLE_EQ(r.number("CDELT3"), 1.25);
  EXPECT_EQ(r.text("BUNIT"), "solLum/Angstrom");
  EXPECT_EQ(r.number("NPART"), 100000);
  EXPECT_DOUBLE_EQ(r.number("DIST_Z"), 0.1);
  EXPECT_EQ(r.text("CONFIG"), "rubix_config.yml");
  EXPECT_EQ(r.text("SOFTWARE"), long_text);
  EXPECT_EQ(r.text("S_TO_N"), "inf");
  expect_error<InputError>([&] { r.number("CTYPE1"); }, "[ifu fits] header key 'CTYPE1' is not a number", {"XOFFSET"});
  expect_error<InputError>([&] { r.text("NOPE"); }, "[ifu fits] the header has no key 'NOPE'");

  // Overwrites.
  const auto cube2 = numbered_cube(2, 2, 3);
  ifu::write_cube_fits(p, cube2.data(), 2, 2, 3, wcs);
  EXPECT_EQ(ifu::read_cube_fits(p).data, cube2);
}

TEST(IfuFits, CubeLargerThanOneTransposeBlock) {
  TempDir tmp;
  // 128 x 128 spaxels: 1024 planes per 64 MiB block, so 1100 planes take two blocks.
  const std::int64_t ny = 128, nx = 128, nw = 1100;
  std::vector<float> cube(static_cast<std::size_t>(ny * nx * nw));
  for (std::size_t i = 0; i < cube.size(); ++i) cube[i] = static_cast<float>(i % 1000003);
  ifu::CubeWcs wcs{0.2, 4700.15, 1.25, "solLum/Angstrom", {}};
  ifu::write_cube_fits(tmp / "big.fits", cube.data(), ny, nx, nw, wcs);
  const auto r = ifu::read_cube_fits(tmp / "big.fits");
  EXPECT_EQ(r.nwave, nw);
  EXPECT_TRUE(r.data == cube);
}

TEST(IfuFits, Errors) {
  TempDir tmp;
  const auto cube = numbered_cube(2, 2, 2);
  ifu::CubeWcs wcs{0.2, 4700.15, 1.25, "solLum/Angstrom", {}};
  const std::string p = tmp / "c.fits";
  auto with_card = [&](const std::string& key) {
    auto w = wcs;
    w.cards = {{key, "1", ""}};
    return w;
  };
  expect_error<InputError>([&] { ifu::write_cube_fits(p, cube.data(), 2, 2, 2, with_card("CRVAL3")); },
                           "[ifu fits] " + p + ": ", {"'CRVAL3' is set by the cube writer"});
  expect_error<InputError>([&] { ifu::write_cube_fits(p, cube.data(), 2, 2, 2, with_card("PARTICLES")); },
                           "[ifu fits] " + p + ": ", {"'PARTICLES' must be 1 to 8 characters"});
  expect_error<InputError>([&] { ifu::write_cube_fits(p, cube.data(), 2, 2, 2, with_card("A B")); },
                           "[ifu fits] " + p + ": ", {"'A B'"});
  auto twice = wcs;
  twice.cards = {{"X", "1", ""}, {"x", "2", ""}};
  expect_error<InputError>([&] { ifu::write_cube_fits(p, cube.data(), 2, 2, 2, twice); }, "[ifu fits] ",
                           {"'X' given twice"});
  expect_error<InputError>([&] { ifu::write_cube_fits(p, cube.data(), 0, 2, 2, wcs); }, "[ifu fits] ",
                           {"positive sizes", "ny=0"});
  auto bad_wcs = wcs;
  bad_wcs.dwave = 0;
  expect_error<InputError>([&] { ifu::write_cube_fits(p, cube.data(), 2, 2, 2, bad_wcs); }, "[ifu fits] ",
                           {"dwave > 0"});
  const std::string nodir = tmp / "no/such/dir/c.fits";
  expect_error<InputError>([&] { ifu::write_cube_fits(nodir, cube.data(), 2, 2, 2, wcs); },
                           "[ifu fits] " + nodir + ": ", {"cannot create the file", "cfitsio error"});
  write_bytes(p, std::string(5760, 'x'));
  expect_error<InputError>([&] { ifu::read_cube_fits(p); }, "[ifu fits] " + p + ": ", {"cannot open", "cfitsio error"});
  expect_error<InputError>([&] { ifu::read_cube_fits(tmp / "none.fits"); }, "[ifu fits] ", {"no such file"});
}
