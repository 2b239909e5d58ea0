// The IFU pipeline against a plain double-precision reference written from
// the stage formulas (docs/ifu.md), on a generated galaxy and SSP grid (no
// BC03 file, no Python); cubes bitwise identical on 1..8 devices and for any
// chunk size, noise included (100,003 particles: a prime split); the
// geometry; the inertia-tensor alignment; errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ifu/config.hpp"
#include "ifu/cosmology.hpp"
#include "ifu/errors.hpp"
#include "ifu/generate.hpp"
#include "ifu/pipeline.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace ifu = tessera::ifu;
using ts::testing::expect_error;

namespace {

// Rubix's reference setup (PSF, LSF, noise off).
const std::string kConfig = ifu::default_config_yaml();

ifu::Config config(const std::string& extra_noise = ".inf") {
  std::string text = kConfig;
  text.replace(text.find(".inf"), 4, extra_noise);
  return ifu::parse_config(text, "test config");
}

ts::Mesh mesh_of(int k) {
  auto d = ts::devices();
  return ts::Mesh(std::vector<ts::Device>(d.begin(), d.begin() + k), {k}, {"data"});
}

std::vector<float> run(const ifu::Config& cfg, const ifu::SspGrid& ssp, const ifu::GalaxyData& g, int devices,
                       std::int64_t chunk = 32768, ifu::Cube* keep = nullptr) {
  ifu::PipelineOptions o;
  o.chunk = chunk;
  ifu::Pipeline pipe(cfg, ssp, mesh_of(devices), o);
  ifu::Cube c = pipe.run(pipe.put(g));
  if (keep) *keep = c;
  return c.data.to_vector<float>();
}

// ------------------------------------------------------------ the reference

// interpax's "cubic" knot slopes along one axis: one-sided at the ends, the
// plain mean of the neighbouring secants inside.
std::vector<double> slopes(const std::vector<double>& f, const std::vector<double>& x, std::size_t stride,
                           std::size_t n, std::size_t count, std::size_t inner) {
  std::vector<double> d(f.size());
  for (std::size_t o = 0; o < count; ++o)
    for (std::size_t r = 0; r < inner; ++r) {
      auto at = [&](std::size_t k) { return f[o * n * stride + k * stride + r]; };
      for (std::size_t k = 0; k < n; ++k) {
        auto sec = [&](std::size_t a) { return (at(a + 1) - at(a)) / (x[a + 1] - x[a]); };
        const double v = k == 0 ? sec(0) : k == n - 1 ? sec(n - 2) : (sec(k - 1) + sec(k)) / 2;
        d[o * n * stride + k * stride + r] = v;
      }
    }
  return d;
}

struct Reference {
  const ifu::SspGrid& s;
  std::size_t nz, na, nw;
  std::vector<double> f, fx, fy, fxy;
  explicit Reference(const ifu::SspGrid& grid) : s(grid), nz(grid.metallicity.size()), na(grid.age.size()), nw(grid.wavelength.size()) {
    for (double v : s.flux) f.push_back(static_cast<float>(v));  // the pipeline's float32 templates
    std::vector<double> zg, ag;
    for (double v : s.metallicity) zg.push_back(static_cast<float>(v));
    for (double v : s.age) ag.push_back(static_cast<float>(v));
    fx = slopes(f, zg, na * nw, nz, 1, na * nw);
    fy = slopes(f, ag, nw, na, nz, nw);
    fxy = slopes(fx, ag, nw, na, nz, nw);
    zgrid = zg, agrid = ag;
  }
  std::vector<double> zgrid, agrid;
  // Bicubic Hermite patch; 0 outside the grid.
  std::vector<double> spectrum(double z, double a) const {
    std::vector<double> out(nw, 0.0);
    if (!(z >= zgrid.front() && z <= zgrid.back() && a >= agrid.front() && a <= agrid.back())) return out;
    auto cell = [](const std::vector<double>& g, double v) {
      std::size_t i = std::upper_bound(g.begin(), g.end(), v) - g.begin();
      return std::clamp<std::size_t>(i, 1, g.size() - 1);
    };
    const std::size_t i = cell(zgrid, z), j = cell(agrid, a);
    const double dx = zgrid[i] - zgrid[i - 1], dy = agrid[j] - agrid[j - 1];
    const double tx = (z - zgrid[i - 1]) / dx, ty = (a - agrid[j - 1]) / dy;
    auto H = [](int c, double t) { return c == 0 ? 1 - 3 * t * t + 2 * t * t * t : 3 * t * t - 2 * t * t * t; };
    auto G = [](int c, double t) { return c == 0 ? t - 2 * t * t + t * t * t : t * t * t - t * t; };
    for (int p = 0; p < 2; ++p)
      for (int q = 0; q < 2; ++q) {
        const std::size_t base = ((i - 1 + p) * na + (j - 1 + q)) * nw;
        for (std::size_t k = 0; k < nw; ++k)
          out[k] += f[base + k] * H(p, tx) * H(q, ty) + dx * fx[base + k] * G(p, tx) * H(q, ty) +
                    dy * fy[base + k] * H(p, tx) * G(q, ty) + dx * dy * fxy[base + k] * G(p, tx) * G(q, ty);
      }
    return out;
  }
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Every stage of docs/ifu.md in double, particle by particle.
std::vector<double> reference_cube(const ifu::Config& cfg, const ifu::SspGrid& ssp, const ifu::GalaxyData& g) {
  const ifu::Geometry geo = ifu::geometry(cfg);
  const std::size_t nb = geo.spaxels, T = geo.wave.size();
  const Reference ref(ssp);
  // Centering and the systemic velocity.
  std::vector<double> sel[3];
  for (std::int64_t i = 0; i < g.n; ++i) {
    double r2 = 0;
    for (int k = 0; k < 3; ++k) r2 += std::pow(g.coords[3 * i + k] - g.center[k], 2);
    if (std::sqrt(r2) < 10)
      for (int k = 0; k < 3; ++k) sel[k].push_back(g.velocity[3 * i + k]);
  }
  double vsys[3];
  for (int k = 0; k < 3; ++k) vsys[k] = median_of(sel[k]);
  const auto& R = geo.rotation;
  std::vector<double> target(geo.wave.begin(), geo.wave.end());
  std::vector<double> cube(nb * nb * T, 0.0);
  for (std::int64_t i = 0; i < g.n; ++i) {
    double pos[3] = {0, 0, 0}, vel[3] = {0, 0, 0};
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 3; ++k) {
        pos[c] += (g.coords[3 * i + k] - g.center[k]) * R[k * 3 + c];
        vel[c] += (g.velocity[3 * i + k] - vsys[k]) * R[k * 3 + c];
      }
    const double lo = geo.edges.front(), hi = geo.edges.back();
    if (!(pos[0] >= lo && pos[0] <= hi && pos[1] >= lo && pos[1] <= hi)) continue;
    auto bin = [&](double v) {
      const std::size_t k = std::upper_bound(geo.edges.begin(), geo.edges.end(), v) - geo.edges.begin();
      return std::clamp<std::int64_t>(static_cast<std::int64_t>(k) - 1, 0, static_cast<std::int64_t>(nb) - 1);
    };
    const std::size_t pix = bin(pos[0]) + nb * bin(pos[1]);
    const std::vector<double> s = ref.spectrum(g.metallicity[i], std::log10(g.age[i] * 1e9));
    std::vector<double> w(s.size());
    for (std::size_t k = 0; k < s.size(); ++k)
      w[k] = static_cast<float>((1 + cfg.dist_z) * ssp.wavelength[k]) * std::exp(vel[2] / 299792.458);
    double lin = 0;
    for (std::size_t k = 1; k < w.size(); ++k)
      if (w[k] >= target.front() && w[k] <= target.back()) lin += s[k] * (w[k] - w[k - 1]);
    std::vector<double> p(T);
    for (std::size_t j = 0; j < T; ++j) {
      const double t = target[j];
      if (t < w.front()) p[j] = s.front();
      else if (t > w.back()) p[j] = s.back();
      else {
        std::size_t c = std::clamp<std::size_t>(std::upper_bound(w.begin(), w.end(), t) - w.begin(), 1, w.size() - 1);
        p[j] = s[c - 1] + (t - w[c - 1]) / (w[c] - w[c - 1]) * (s[c] - s[c - 1]);
      }
    }
    double lout = 0;
    for (std::size_t j = 1; j < T; ++j) lout += p[j] * (target[j] - target[j - 1]);
    const double f = lout == 0 ? 0 : g.mass[i] * lin / lout;
    for (std::size_t j = 0; j < T; ++j) cube[pix * T + j] += p[j] * f;
  }
  // PSF: a normalised 5x5 Gaussian, zero boundary, per plane.
  std::vector<double> k2(25);
  double tot = 0;
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 5; ++b) tot += k2[a * 5 + b] = std::exp(-((a - 2) * (a - 2) + (b - 2) * (b - 2)) / (2 * 0.36));
  std::vector<double> psf(cube.size(), 0.0);
  for (std::size_t y = 0; y < nb; ++y)
    for (std::size_t x = 0; x < nb; ++x)
      for (int a = 0; a < 5; ++a)
        for (int b = 0; b < 5; ++b) {
          const std::int64_t yy = static_cast<std::int64_t>(y) + 2 - a, xx = static_cast<std::int64_t>(x) + 2 - b;
          if (yy < 0 || xx < 0 || yy >= static_cast<std::int64_t>(nb) || xx >= static_cast<std::int64_t>(nb)) continue;
          for (std::size_t l = 0; l < T; ++l) psf[(y * nb + x) * T + l] += cube[(yy * nb + xx) * T + l] * k2[a * 5 + b] / tot;
        }
  // LSF: 25 taps 1.25 A apart, sigma 0.5 A, zero boundary.
  std::vector<double> k1;
  double t1 = 0;
  for (int t = -12; t <= 12; ++t) k1.push_back(std::exp(-0.5 * std::pow(t * 1.25 / 0.5, 2))), t1 += k1.back();
  std::vector<double> out(cube.size(), 0.0);
  for (std::size_t s = 0; s < nb * nb; ++s)
    for (std::size_t l = 0; l < T; ++l)
      for (int t = 0; t < 25; ++t) {
        const std::int64_t src = static_cast<std::int64_t>(l) + 12 - t;
        if (src >= 0 && src < static_cast<std::int64_t>(T)) out[s * T + l] += psf[s * T + src] * k1[t] / t1;
      }
  return out;
}

// ------------------------------------------------------------------- tests

TEST(IfuGeometry, MuseAtRedshiftPointOne) {
  const ifu::Geometry g = ifu::geometry(config());
  EXPECT_NEAR(g.kpc_per_arcsec, 1.9047599, 2e-6);  // Rubix's value (float32) at z = 0.1, PLANCK15
  EXPECT_EQ(g.spaxels, 25);
  ASSERT_EQ(g.edges.size(), 26u);
  EXPECT_NEAR(g.edges.front(), -4.7619, 1e-4);
  ASSERT_EQ(g.wave.size(), 3721u);
  EXPECT_FLOAT_EQ(g.wave.front(), 4700.15f);
  EXPECT_NEAR(g.wave.back(), 9350.1504, 1e-3);
  // Rz(30) Ry(20) Rx(60) is a rotation.
  const auto& R = g.rotation;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double dot = 0;
      for (int k = 0; k < 3; ++k) dot += R[k * 3 + a] * R[k * 3 + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-12);
    }
}

TEST(IfuPipeline, MatchesTheDoubleReference) {
  const ifu::Config cfg = config();
  const ifu::SspGrid ssp = ifu::generate_ssp_grid();
  ifu::DiskOptions d;
  d.particles = 3001;
  d.seed = 7;
  ifu::GalaxyData g = ifu::generate_disk(d);
  ifu::nudge_off_edges(g, cfg, 1e-3);
  const std::vector<double> want = reference_cube(cfg, ssp, g);
  ifu::Cube cube;
  const std::vector<float> got = run(cfg, ssp, g, 3, 1000, &cube);
  ASSERT_EQ(got.size(), want.size());
  double peak = 0;
  for (double v : want) peak = std::max(peak, std::abs(v));
  double worst = 0;
  std::size_t where = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    // Relative per element; elements below 1e-9 of the peak (the far edges of
    // the LSF's Gaussian) are compared against that floor.
    const double rel = std::abs(got[e] - want[e]) / std::max(std::abs(want[e]), 1e-9 * peak);
    if (rel > worst) worst = rel, where = e;
  }
  EXPECT_LT(worst, 1e-5) << "element " << where << ": " << got[where] << " vs " << want[where];
  EXPECT_GT(cube.in_aperture, 2000);
  EXPECT_LT(cube.in_aperture, 3001);
}

TEST(IfuPipeline, BitwiseOnEveryDeviceCountAndChunkNoiseIncluded) {
  const ifu::Config cfg = config("50.0");  // finite S/N: the noise stage draws
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  ifu::DiskOptions d;
  d.particles = 100003;  // prime: every split is uneven
  d.seed = 11;
  const ifu::GalaxyData g = ifu::generate_disk(d);
  ifu::Cube first;
  const std::vector<float> one = run(cfg, ssp, g, 1, 32768, &first);
  const auto vmap = first.velocity_map.to_vector<float>();
  for (int k = 2; k <= 8; ++k) {
    ifu::Cube c;
    const std::vector<float> cube = run(cfg, ssp, g, k, k == 5 ? 4097 : 32768, &c);
    EXPECT_TRUE(cube == one) << k << " devices";
    const auto v = c.velocity_map.to_vector<float>();
    EXPECT_EQ(std::memcmp(v.data(), vmap.data(), v.size() * sizeof(float)), 0) << k << " devices";
    EXPECT_EQ(c.in_aperture, first.in_aperture);
  }
  // The noise is there: the noisy cube differs from the noiseless one.
  const std::vector<float> quiet = run(config(), ssp, g, 2);
  EXPECT_FALSE(quiet == one);
}

TEST(IfuPipeline, VelocityMapShowsTheRotation) {
  const ifu::Config cfg = config();
  ifu::DiskOptions d;
  d.particles = 20000;
  ifu::Cube c;
  run(cfg, ifu::generate_ssp_grid(3, 8, 40), ifu::generate_disk(d), 2, 32768, &c);
  const auto v = c.velocity_map.to_vector<float>();
  // An inclined rotating disk: opposite sides move in opposite directions.
  float lo = 0, hi = 0;
  for (float x : v)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_LT(lo, -100.0f);
  EXPECT_GT(hi, 100.0f);
}

TEST(IfuPipeline, InertiaTensorAlignmentIsBitwiseAcrossDevices) {
  std::string text = kConfig;
  text.replace(text.find("NIHAO"), 5, "IllustrisTNG");
  const ifu::Config cfg = ifu::parse_config(text, "tng config");
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  ifu::DiskOptions d;
  d.particles = 5003;
  const ifu::GalaxyData g = ifu::generate_disk(d);
  const auto one = run(cfg, ssp, g, 1);
  EXPECT_TRUE(run(cfg, ssp, g, 7) == one);
  // A disk in the x-y plane: its smallest-moment axes lie in the plane, the
  // largest along z, so the alignment differs from plain NIHAO.
  EXPECT_FALSE(run(config(), ssp, g, 1) == one);
}

TEST(IfuPipeline, DegenerateGalaxiesGiveCubes) {
  // Every velocity zero (the velocity map's bound is 0), and every mass zero
  // with noise on (no light: the exact sums' bounds are 0): zeros, no error.
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  ifu::DiskOptions d;
  d.particles = 500;
  ifu::GalaxyData still = ifu::generate_disk(d);
  std::fill(still.velocity.begin(), still.velocity.end(), 0.0f);
  ifu::Cube c;
  run(config(), ssp, still, 2, 32768, &c);
  EXPECT_EQ(c.velocity_map.to_vector<float>()[12 * 25 + 12], 0.0f);
  ifu::GalaxyData dark = ifu::generate_disk(d);
  std::fill(dark.mass.begin(), dark.mass.end(), 0.0f);
  const auto cube = run(config("50.0"), ssp, dark, 2, 32768, &c);
  EXPECT_GT(c.in_aperture, 0);
  EXPECT_TRUE(std::all_of(cube.begin(), cube.end(), [](float v) { return v == 0.0f; }));
}

TEST(IfuPipeline, Eigenvectors) {
  // diag(3, 1, 2) rotated: the columns come back sorted by eigenvalue.
  const std::array<double, 9> m{3, 0, 0, 0, 1, 0, 0, 0, 2};
  const auto v = ifu::eigenvectors_sorted(m);
  EXPECT_EQ(v, (std::array<double, 9>{0, 0, 1, 1, 0, 0, 0, 1, 0}));
  const std::array<double, 9> s{2, 1, 0, 1, 2, 0, 0, 0, 5};  // eigenvalues 1, 3, 5
  const auto e = ifu::eigenvectors_sorted(s);
  EXPECT_NEAR(e[0], std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(e[3], -std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(e[8], 1.0, 1e-12);
}

TEST(IfuPipeline, Errors) {
  const ifu::Config cfg = config();
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  ifu::DiskOptions d;
  d.particles = 100;
  ifu::GalaxyData g = ifu::generate_disk(d);
  ifu::GalaxyData far = g;
  far.center = {1e4, 0, 0};
  expect_error<ifu::InputError>([&] { run(cfg, ssp, far, 2); }, "[ifu]", {"outside the particles' bounding box"});
  ifu::GalaxyData sparse = g;
  for (std::int64_t i = 0; i < sparse.n; ++i) sparse.coords[3 * i] = static_cast<float>(sparse.center[0] + (i % 2 ? 20 : -20));
  expect_error<ifu::InputError>([&] { run(cfg, ssp, sparse, 2); }, "[ifu]", {"within 10 kpc"});
  std::string text = kConfig;
  text.replace(text.find("NIHAO"), 5, "IllustrisTNG");
  ifu::GalaxyData nohalf = g;
  nohalf.halfmassrad_stars = 0;
  expect_error<ifu::InputError>([&] { run(ifu::parse_config(text, "tng"), ssp, nohalf, 1); }, "[ifu]",
                                {"halfmassrad_stars"});
  expect_error<ifu::InputError>([&] { ifu::Pipeline(cfg, ssp, ts::Mesh({ts::devices()[0], ts::devices()[1]}, {2}, {"x"})); }, "[ifu]", {"\"data\""});
  ifu::PipelineOptions bad;
  bad.chunk = 0;
  expect_error<ifu::InputError>([&] { ifu::Pipeline(cfg, ssp, mesh_of(1), bad); }, "[ifu]", {"chunk"});
  ifu::GalaxyData broken = g;
  broken.coords[4] = NAN;
  expect_error<ifu::InputError>([&] { run(cfg, ssp, broken, 2); }, "[ifu]", {"coords of particle 1 is not finite"});
  broken = g;
  broken.mass.pop_back();
  expect_error<ifu::InputError>([&] { run(cfg, ssp, broken, 2); }, "[ifu]", {"100 particles but 99 values of mass"});
  ifu::GalaxyData none = g;
  none.n = 0;
  none.coords.clear(), none.velocity.clear(), none.mass.clear(), none.age.clear(), none.metallicity.clear();
  expect_error<ifu::InputError>([&] { run(cfg, ssp, none, 1); }, "[ifu]", {"no star particles"});
}

}  // namespace
