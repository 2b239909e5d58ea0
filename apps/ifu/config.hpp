// The Rubix 0.0.5 user config (YAML) as read by `tessera ifu`.
//
// Every key a Rubix 0.0.5 user config may hold is accepted; an unknown key
// anywhere is an InputError naming the full dotted key and the known keys at
// its level. Keys that only matter to Rubix's download/conversion step are
// accepted, type-checked where cheap, and ignored:
//   data.*                 (name, args.*, load_galaxy_args.*): the galaxy is
//                          always read from <output_path>/rubix_galaxy.h5 or a
//                          file given on the command line; nothing is downloaded.
//                          data.args.particle_type must include "stars" when given;
//                          gas never enters the calc_ifu cube, and calc_dusty_ifu
//                          reads the galaxy's gas whatever particle_type says
//                          (Rubix loads, rotates and filters gas only when it
//                          is listed, and its dusty pipeline fails without it).
//   data.subset.use_subset must be false ("not supported yet").
//   simulation.args.*      (paths of the raw simulation snapshot).
//   logger.log_file_path, logger.format (Rubix ignores the format too).
//   cosmology.args.*       (only used by Rubix's CUSTOM cosmology, not supported yet).
//   ssp.dust.*             read into Config::dust and validated (model names,
//                          Rv > 0, grain density > 0), but calc_ifu never
//                          applies dust, exactly as in Rubix (only
//                          calc_dusty_ifu does); unlike Rubix 0.0.5, which builds
//                          the extinction stage even for calc_ifu,
//                          ssp.dust.extinction_model is not required then.
//                          dust_to_gas_ratio and dust_to_metals_ratio are
//                          accepted and unused (Rubix reads neither).
// Where Rubix requires a section the pipeline can do without, it is optional
// here: pipeline (calc_ifu; calc_dusty_ifu applies ssp.dust), logger, data, simulation (NIHAO), cosmology
// (PLANCK15), galaxy.rotation (no rotation), telescope.psf / lsf / noise (the
// stage is skipped when its section is absent). output_path is optional too
// (empty when absent). Required: telescope.name, galaxy.dist_z, ssp.template.name.
#pragma once

#include <limits>
#include <string>

namespace tessera::ifu {

/// galaxy.rotation. With `type: face-on` the angles are (0, 0, 0) and with
/// `type: edge-on` (90, 0, 0), as in Rubix; the angles then hold those values.
struct RotationConfig {
  std::string type = "euler";  // "euler" (alpha, beta, gamma in degrees), "face-on", "edge-on"
  double alpha = 0, beta = 0, gamma = 0;
};

/// ssp.dust: Rubix 0.0.5's dust model (calc_dusty_ifu; apps/ifu/dust.hpp).
/// The defaults are the values of Rubix's packaged rubix_config.yml.
struct DustConfig {
  bool present = false;                        // an ssp.dust section was given
  std::string extinction_model = "Cardelli89";  // "Cardelli89" | "Gordon23"
  double Rv = 3.1;                             // A(V)/E(B-V), > 0
  /// Remy-Ruyer et al. (2014) Table 1 fit: "broken power law fit" or
  /// "power law slope free" ("power law slope fixed" is refused: Rubix does
  /// not implement it).
  std::string dust_to_gas_model = "broken power law fit";
  std::string Xco = "Z";             // "Z" or "MW"
  double dust_grain_density = 3.5;   // g/cm^3, > 0
  /// Which keys the config gave: Rubix's calc_dusty_ifu requires
  /// extinction_model, Rv and dust_grain_density (check_dusty_config).
  bool has_extinction_model = false, has_Rv = false, has_dust_grain_density = false;
};

struct Config {
  std::string source;                 // file path or name (for messages)
  std::string pipeline = "calc_ifu";  // "calc_ifu" | "calc_dusty_ifu" (dust.hpp, with the galaxy's gas)
  std::string simulation = "NIHAO";   // "NIHAO" | "IllustrisTNG" (the latter aligns with the inertia tensor first)
  std::string output_path;  // folder holding rubix_galaxy.h5, relative paths resolved against the config's folder
  std::string telescope = "MUSE";  // a name of telescope_names() with a square aperture
  bool psf = false;                // telescope.psf present
  std::string psf_name = "gaussian";
  int psf_size = 5;                                                  // kernel side, spaxels
  double psf_sigma = 0.6;                                            // spaxels
  bool lsf = false;                                                  // telescope.lsf present
  double lsf_sigma = 0.5;                                            // Angstrom
  bool noise = false;                                                // telescope.noise present
  double signal_to_noise = std::numeric_limits<double>::infinity();  // > 0; .inf gives a zero noise term
  std::string noise_distribution = "normal";
  std::string cosmology = "PLANCK15";  // upper-cased, as Rubix compares it
  double dist_z = 0.1;                 // > 0
  RotationConfig rotation;
  std::string ssp_template = "BruzualCharlot2003";
  std::string ssp_method = "cubic";   // "cubic" or "linear"
  std::string log_level = "WARNING";  // upper-cased Python logging level name
  DustConfig dust;                    // ssp.dust (only calc_dusty_ifu applies it)
};

/// The config `tessera ifu` runs without one: Rubix's reference setup (MUSE
/// at z = 0.1, PLANCK15, Euler rotation (60, 20, 30), Gaussian PSF 5x5 with
/// sigma 0.6 spaxel, LSF sigma 0.5 Angstrom, noise off (S/N = inf), BC03
/// templates, cubic lookup), as YAML text.
const char* default_config_yaml();

/// Reads and validates the config file at `path`; relative output_path is
/// resolved against the file's folder.
Config load_config(const std::string& path);

/// The same from YAML text. `source` names the text in messages; when it has a
/// folder part, a relative output_path is resolved against that folder.
Config parse_config(const std::string& yaml_text, const std::string& source);

/// What calc_dusty_ifu needs beyond calc_ifu: an ssp.dust section with
/// extinction_model, Rv and dust_grain_density (Rubix 0.0.5 fails without
/// them). InputError naming the missing key otherwise. parse_config calls it
/// for `pipeline: calc_dusty_ifu`.
void check_dusty_config(const Config& c);

}  // namespace tessera::ifu
