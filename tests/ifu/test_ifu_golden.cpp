// The IFU pipeline against Rubix 0.0.5's own cube: tests/data/ifu holds a
// 3000-particle galaxy, a Rubix user config (NIRSpec PRISM, a 30 x 30 x 411
// cube, rotation, PSF, LSF), cut BC03 templates and the cube Rubix's
// run_sharded made from them (make_golden.py there; README.md says how and
// with which versions). No Python, no network, no BC03 download here.
//
// The bound is per element and relative to that element itself: every
// element must satisfy |tessera - rubix| <= 1e-5 |rubix|, and where Rubix's
// element is exactly 0 (light no particle reached, even through the PSF and
// LSF) Tessera's must be exactly 0 too. That is stricter than a bound
// relative to the cube's maximum or an absolute one, which would let the
// faint elements (the LSF's far taps, the PSF's corners, spaxels lit by one
// particle) be anything below the bound. It holds because Tessera sums
// exactly and rounds once, and Rubix's float32 sums of at most a few hundred
// particles per spaxel stay within a few ulp: measured, the worst element
// differs by 2.3e-6 of itself (6.5e-7 of the cube's maximum) and the total
// flux by 3.9e-7.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include "ifu/config.hpp"
#include "ifu/fits.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/npy.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/ssp.hpp"

namespace ts = tessera;
namespace ifu = tessera::ifu;
namespace fs = std::filesystem;

namespace {

const std::string kData = TESSERA_IFU_TEST_DATA;  // tests/data/ifu
constexpr double kTol = 1e-5;

struct Agreement {
  double worst = 0;  // max over elements of |got - want| / |want| (infinite where want is 0 and got is not)
  std::size_t at = 0;
  double total_rel = 0;  // relative difference of the summed flux
};

Agreement compare(const std::vector<float>& got, const std::vector<float>& want) {
  Agreement a;
  double sg = 0, sw = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    const double diff = std::abs(static_cast<double>(got[e]) - want[e]);
    const double rel = want[e] != 0 ? diff / std::abs(static_cast<double>(want[e]))
                                    : (diff == 0 ? 0.0 : std::numeric_limits<double>::infinity());
    if (!(rel <= a.worst)) a.worst = rel, a.at = e;  // NaN lands here too
    sg += got[e], sw += want[e];
  }
  a.total_rel = std::abs(sg - sw) / std::abs(sw);
  return a;
}

std::string where(std::size_t e, const std::vector<std::int64_t>& shape) {
  const std::int64_t nw = shape[2], nx = shape[1];
  const auto i = static_cast<std::int64_t>(e);
  return "[iy " + std::to_string(i / (nw * nx)) + ", ix " + std::to_string(i / nw % nx) + ", wave " +
         std::to_string(i % nw) + "]";
}

struct Golden {
  ifu::Config cfg;
  ifu::GalaxyData galaxy;
  ifu::SspGrid ssp;
  ifu::NpyArray cube;
  std::vector<float> want;
};

const Golden& golden() {
  static const Golden g = [] {
    Golden x;
    x.cfg = ifu::load_config(kData + "/config.yml");
    x.galaxy = ifu::read_galaxy(kData + "/galaxy.h5");
    x.ssp = ifu::read_ssp_h5(kData + "/ssp_bc03_cut.h5");
    x.cube = ifu::read_npy(kData + "/rubix_cube.npy");
    x.want = x.cube.to_f32();
    return x;
  }();
  return g;
}

TEST(IfuGolden, InputsAreTheStoredOnes) {
  // What make_golden.py wrote: a change to a file shows here first, not as
  // a puzzling cube difference.
  const Golden& g = golden();
  EXPECT_EQ(g.cfg.telescope, "NIRSpec_PRISM_CLEAR");
  EXPECT_EQ(g.galaxy.n, 3000);
  EXPECT_EQ(g.ssp.metallicity.size(), 6u);
  EXPECT_EQ(g.ssp.age.size(), 22u);
  EXPECT_EQ(g.ssp.wavelength.size(), 435u);
  EXPECT_EQ(g.cube.dtype, "<f4");
  EXPECT_EQ(g.cube.shape, (std::vector<std::int64_t>{30, 30, 411}));
}

TEST(IfuGolden, PipelineMatchesRubix) {
  const Golden& g = golden();
  // Three devices: Rubix ran on one; the exact sums make the device count
  // irrelevant here (test_ifu_pipeline checks that bitwise).
  auto d = ts::devices();
  ASSERT_GE(d.size(), 3u);
  const ts::Mesh mesh(std::vector<ts::Device>(d.begin(), d.begin() + 3), {3}, {"data"});
  const ifu::Pipeline pipe(g.cfg, g.ssp, mesh);
  const ifu::Cube cube = pipe.run(pipe.put(g.galaxy));
  ASSERT_EQ(cube.data.shape(), g.cube.shape);
  const std::vector<float> got = cube.data.to_vector<float>();
  const Agreement a = compare(got, g.want);
  EXPECT_LE(a.worst, kTol) << "element " << where(a.at, g.cube.shape) << ": tessera " << got[a.at] << ", rubix "
                           << g.want[a.at];
  // Context for the bound: the summed flux agrees far better still.
  EXPECT_LE(a.total_rel, 1e-6);
  // Not a vacuous comparison: most particles are seen and most spaxels lit.
  EXPECT_GT(cube.in_aperture, 1500);
  std::size_t lit = 0;
  for (std::size_t s = 0; s < 900; ++s) lit += g.want[s * 411 + 200] > 0;
  EXPECT_GT(lit, 800u);
}

TEST(IfuGolden, CommandLineMatchesRubix) {
  // `tessera ifu` itself: its config, galaxy and template reading, the mesh
  // it builds and the FITS cube it writes.
#ifndef TESSERA_CLI
  GTEST_SKIP() << "the tessera program is not built (TESSERA_BUILD_TOOLS off)";
#else
  const Golden& g = golden();
  // The process id keeps runs of several builds (asan, tsan) apart.
  const fs::path out = fs::path(::testing::TempDir()) / ("ifu_golden_cube_" + std::to_string(getpid()) + ".fits");
  fs::remove(out);
  const std::string cmd = std::string("TESSERA_NUM_CPU_DEVICES=2 '") + TESSERA_CLI + "' ifu --config '" + kData +
                          "/config.yml' --input '" + kData + "/galaxy.h5' --ssp '" + kData +
                          "/ssp_bc03_cut.h5' --output '" + out.string() + "' --no-plots --quiet";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const ifu::FitsCube fits = ifu::read_cube_fits(out.string());
  ASSERT_EQ((std::vector<std::int64_t>{fits.ny, fits.nx, fits.nwave}), g.cube.shape);
  const Agreement a = compare(fits.data, g.want);
  EXPECT_LE(a.worst, kTol) << "element " << where(a.at, g.cube.shape) << ": tessera " << fits.data[a.at]
                           << ", rubix " << g.want[a.at];
  // The wavelength axis is Rubix's: 6000 A in 114.36 A steps.
  EXPECT_NEAR(fits.number("CRVAL3"), 6000.0, 1e-3);
  EXPECT_NEAR(fits.number("CDELT3"), 114.36, 1e-6);
  fs::remove(out);
#endif
}

}  // namespace
