// The dusty pipeline (calc_dusty_ifu: apps/ifu/dust.* hooked into
// Pipeline): the cube against the double-precision model of
// ifu_reference.hpp with A_V computed here by plain loops (its own frame,
// bins, dust-to-gas fit, column and interpolation); bitwise the same cube
// and gradient on 1..8 devices and every chunk size; the dusty gradient
// against finite differences in float64; the extinguished resampling's
// derivatives (jvp and vjp) against finite differences; a galaxy without gas.
//
// Rubix 0.0.5 multiplies the dust column by the proton mass (docs/ifu.md
// "Dust"), so physical gas masses give A_V ~ 1e-17 and transmissions of
// exactly 1.0f. The galaxies here carry gas masses 1e24 times too large on
// purpose, so that A_V is of order 1 and a slip in the dust shows in the cube.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "ifu/config.hpp"
#include "ifu/dust.hpp"
#include "ifu/errors.hpp"
#include "ifu/fits.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/generate.hpp"
#include "ifu/ifu_reference.hpp"
#include "ifu/loss.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/ssp.hpp"
#include "ifu/temp_dir.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace ifu = tessera::ifu;
using ts::testing::expect_error;

namespace {

// Gas masses that make Rubix's A_V (proton-mass factor included) of order 1.
constexpr double kGasPerCell = 1e29;  // Msun

std::string dusty_yaml() {
  std::string text = ifu::default_config_yaml();
  text.replace(text.find("calc_ifu"), 8, "calc_dusty_ifu");
  return text + "  dust:\n    extinction_model: Cardelli89\n    Rv: 3.1\n    dust_grain_density: 3.5\n";
}

ifu::Config dusty_config() { return ifu::parse_config(dusty_yaml(), "dusty test config"); }

ts::Mesh mesh_of(int k) {
  auto d = ts::devices();
  return ts::Mesh(std::vector<ts::Device>(d.begin(), d.begin() + k), {k}, {"data"});
}

ifu::PipelineOptions opts(std::int64_t chunk = 32768, ts::DType dtype = ts::DType::f32) {
  ifu::PipelineOptions o;
  o.chunk = chunk;
  o.dtype = dtype;
  return o;
}

// A disk with gas, stars and gas moved off the spaxel edges (and the 10 kpc
// sphere) so that float32 and double bin them alike.
ifu::GalaxyData dusty_galaxy(std::int64_t stars, std::int64_t cells, std::uint64_t seed, double age_min = 0.05,
                             double age_max = 10.0) {
  ifu::DiskOptions d;
  d.particles = stars;
  d.seed = seed;
  d.age_min = age_min;
  d.age_max = age_max;
  ifu::GalaxyData g = ifu::generate_disk(d);
  g.gas = ifu::generate_gas(d, cells, kGasPerCell * static_cast<double>(cells), seed + 100);
  const ifu::Config cfg = dusty_config();
  const ifu_ref::Geometry geo = ifu_ref::geometry(cfg);
  ifu_ref::nudge(g, geo, geo.rotation, 1e-3, {10.0});
  ifu::GalaxyData as_stars;  // the gas cells, nudged as stars are
  as_stars.n = g.gas.n;
  as_stars.center = g.center;
  as_stars.coords = g.gas.coords;
  ifu_ref::nudge(as_stars, geo, geo.rotation, 1e-3, {});
  g.gas.coords = as_stars.coords;
  return g;
}

// ------------------------------------------------- A_V in double, by loops

// Remy-Ruyer et al. (2014) Table 1, broken power law, X_CO(Z): D/G.
double dtg_broken_z(double x) {
  if (x > 8.10) return std::pow(10.0, -(2.21 + 1.00 * (8.69 - x)));
  return std::pow(10.0, -(0.96 + 3.10 * (8.69 - x)));
}

// CCM89's infrared branch a + b / Rv at Rubix's argument (lambda in micron,
// all of MUSE's range lies in [0.3, 1.1)).
double ccm89_ir(double micron, double rv) {
  EXPECT_TRUE(micron >= 0.3 && micron < 1.1) << micron;
  const double p = std::pow(micron, 1.61);
  return 0.574 * p - 0.527 * p / rv;
}

// Per star: the gas of its spaxel in the rotated frame (cells outside the
// field of view weigh nothing but stay nodes of the interpolation), sorted
// by z, cumulative extinction from each cell's own z on, interpolated at the
// star's z, held at the ends, 0 in a spaxel without gas.
std::vector<double> av_reference(const ifu::Config& cfg, const ifu::GalaxyData& g) {
  const ifu_ref::Geometry geo = ifu_ref::geometry(cfg);
  const ifu_ref::Mat3& R = geo.rotation;
  const std::int64_t nb = geo.spaxels;
  auto rotated = [&](const std::vector<float>& c, std::int64_t i) {
    std::array<double, 3> p{0, 0, 0};
    for (int a = 0; a < 3; ++a)
      for (int k = 0; k < 3; ++k) p[a] += (c[3 * i + k] - g.center[k]) * R[k * 3 + a];
    return p;
  };
  auto bin = [&](double v) {
    std::int64_t k = 0;
    while (k + 1 < nb && v >= geo.edges[k + 1]) ++k;
    return k;
  };
  struct Cell {
    double z, e;
  };
  std::vector<std::vector<Cell>> per(static_cast<std::size_t>(nb * nb));
  const double k_ext = 3 * M_PI * 1.67262e-24 * 1.989e33 / (3.08568e21 * 3.08568e21) /
                       (0.4 * std::log(10.0) * 5448e-8 * cfg.dust.dust_grain_density) / (geo.bin * geo.bin);
  for (std::int64_t i = 0; i < g.gas.n; ++i) {
    const auto p = rotated(g.gas.coords, i);
    const double lo = geo.edges.front(), hi = geo.edges.back();
    const bool in = p[0] >= lo && p[0] <= hi && p[1] >= lo && p[1] <= hi;
    const float* m = &g.gas.metals[static_cast<std::size_t>(i * g.gas.metals_per_cell)];
    const double log_oh = 12 + std::log10(static_cast<double>(m[4]) / (16.0 * m[0]));
    const double e = in ? g.gas.mass[i] * dtg_broken_z(log_oh) * k_ext : 0.0;
    per[bin(p[0]) + nb * bin(p[1])].push_back({p[2], e});
  }
  for (auto& cells : per)
    std::stable_sort(cells.begin(), cells.end(), [](const Cell& a, const Cell& b) { return a.z < b.z; });
  std::vector<double> av;
  for (std::int64_t s = 0; s < g.n; ++s) {
    const auto p = rotated(g.coords, s);
    const auto& cells = per[bin(p[0]) + nb * bin(p[1])];
    if (cells.empty()) {
      av.push_back(0);
      continue;
    }
    std::vector<double> cum;
    double c = 0;
    for (const Cell& cell : cells) cum.push_back(c += cell.e);
    std::size_t k = 0;
    while (k < cells.size() && cells[k].z <= p[2]) ++k;
    if (k == 0)
      av.push_back(cum.front());
    else if (k == cells.size())
      av.push_back(cum.back());
    else
      av.push_back(cum[k - 1] + (p[2] - cells[k - 1].z) / (cells[k].z - cells[k - 1].z) * (cum[k] - cum[k - 1]));
  }
  return av;
}

ifu_ref::Result dusty_reference(const ifu::Config& cfg, const ifu::SspGrid& ssp, const ifu::GalaxyData& g,
                                std::vector<double>* av_out = nullptr) {
  ifu_ref::Options o;
  o.av = av_reference(cfg, g);
  for (double w : ifu_ref::geometry(cfg).wave) o.curve.push_back(ccm89_ir(static_cast<float>(w) / 1e4f, cfg.dust.Rv));
  if (av_out) *av_out = o.av;
  return ifu_ref::run(cfg, ssp, g, o);
}

double worst_relative(const std::vector<float>& got, const std::vector<double>& want, std::size_t* at = nullptr) {
  double peak = 0, worst = 0;
  for (double v : want) peak = std::max(peak, std::abs(v));
  for (std::size_t e = 0; e < want.size(); ++e) {
    const double rel = std::abs(got[e] - want[e]) / std::max(std::abs(want[e]), 1e-9 * peak);
    if (rel > worst) {
      worst = rel;
      if (at) *at = e;
    }
  }
  return worst;
}

}  // namespace

// The whole dusty cube (PSF and LSF on) against the double model, and the
// dust visibly there: the same galaxy without dust is brighter.
TEST(IfuDusty, CubeMatchesTheDoubleReference) {
  const ifu::Config cfg = dusty_config();
  const ifu::SspGrid ssp = ifu::generate_ssp_grid();
  const ifu::GalaxyData g = dusty_galaxy(3001, 4000, 7);
  std::vector<double> av;
  const ifu_ref::Result want = dusty_reference(cfg, ssp, g, &av);
  ifu::Pipeline pipe(cfg, ssp, mesh_of(3), opts(1000));
  const ifu::Particles parts = pipe.put(g);
  const std::vector<float> got = pipe.run(parts).data.to_vector<float>();
  ASSERT_EQ(got.size(), want.cube.size());
  std::size_t at = 0;
  const double w = worst_relative(got, want.cube, &at);
  EXPECT_LT(w, 1e-5) << "element " << at << ": " << got[at] << " vs " << want.cube[at];

  // A_V is of order 1 here (and the reference's A_V is the module's).
  const double av_max = *std::max_element(av.begin(), av.end());
  EXPECT_GT(av_max, 1.0);
  EXPECT_LT(av_max, 50.0);
  const ifu::Pipeline plain(ifu::parse_config(ifu::default_config_yaml(), "plain"), ssp, mesh_of(3), opts(1000));
  const std::vector<float> clear = plain.run(plain.put(g)).data.to_vector<float>();
  double dim = 0, bright = 0;
  for (std::size_t e = 0; e < got.size(); ++e) dim += got[e], bright += clear[e];
  EXPECT_LT(dim, 0.95 * bright) << "the dust dims the cube";
  EXPECT_GT(dim, 0.2 * bright);

  // With the physical gas masses (1e24 times smaller) Rubix's factor leaves
  // every transmission at 1.0f: the dusty cube is the dust-free one.
  ifu::GalaxyData physical = g;
  for (float& m : physical.gas.mass) m = static_cast<float>(m * 1e-24);
  const std::vector<float> same = pipe.run(pipe.put(physical)).data.to_vector<float>();
  EXPECT_EQ(0, std::memcmp(same.data(), clear.data(), same.size() * sizeof(float)));
}

TEST(IfuDusty, BitwiseOnEveryDeviceCountAndChunk) {
  const ifu::Config cfg = dusty_config();
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  const ifu::GalaxyData g = dusty_galaxy(2003, 1201, 3);
  std::vector<float> first;
  for (auto [devices, chunk] : std::vector<std::pair<int, std::int64_t>>{{1, 32768}, {2, 7}, {3, 100}, {5, 64},
                                                                        {8, 1000}, {8, 13}}) {
    ifu::Pipeline pipe(cfg, ssp, mesh_of(devices), opts(chunk));
    const std::vector<float> cube = pipe.run(pipe.put(g)).data.to_vector<float>();
    if (first.empty())
      first = cube;
    else
      EXPECT_EQ(0, std::memcmp(first.data(), cube.data(), cube.size() * sizeof(float)))
          << devices << " devices, chunk " << chunk;
  }
}

TEST(IfuDusty, GalaxyWithoutGasSaysWhatIsExpected) {
  ifu::Pipeline pipe(dusty_config(), ifu::generate_ssp_grid(3, 8, 40), mesh_of(2));
  ifu::DiskOptions d;
  d.particles = 100;
  const ifu::GalaxyData g = ifu::generate_disk(d);
  expect_error<ifu::InputError>([&] { pipe.put(g); }, "[ifu] ",
                                {"calc_dusty_ifu needs the galaxy's gas cells", "has none"});
  // Particles put by a dust-free pipeline carry no gas.
  const ifu::Pipeline plain(ifu::parse_config(ifu::default_config_yaml(), "plain"), ifu::generate_ssp_grid(3, 8, 40),
                            mesh_of(2));
  const ifu::Particles p = plain.put(g);
  expect_error<ifu::InputError>([&] { pipe.run(p); }, "[ifu] ", {"calc_dusty_ifu needs the galaxy's gas cells"});
  // The config needs the dust keys Rubix needs.
  std::string text = ifu::default_config_yaml();
  text.replace(text.find("calc_ifu"), 8, "calc_dusty_ifu");
  expect_error<ifu::InputError>([&] { ifu::parse_config(text, "d.yml"); }, "[ifu config] d.yml: ",
                                {"missing required key 'ssp.dust'", "calc_dusty_ifu"});
}

// The gas in Rubix's galaxy file (/particles/gas), written and read back,
// and `tessera ifu` on a dusty config: the cube the library makes.
TEST(IfuDusty, GasInRubixsFileAndTheCommandLine) {
  tessera::testing::TempDir tmp("tessera_ifu_dusty_");
  const ifu::GalaxyData g = dusty_galaxy(500, 300, 11);
  ifu::write_galaxy_h5(tmp / "galaxy.h5", g);
  const ifu::GalaxyData back = ifu::read_galaxy(tmp / "galaxy.h5");
  ASSERT_EQ(back.gas.n, g.gas.n);
  EXPECT_EQ(back.gas.coords, g.gas.coords);
  EXPECT_EQ(back.gas.mass, g.gas.mass);
  EXPECT_EQ(back.gas.metals, g.gas.metals);
  EXPECT_EQ(back.gas.metals_per_cell, 10);
  EXPECT_EQ(back.gas.velocity, g.gas.velocity);
  EXPECT_EQ(back.gas.metallicity, g.gas.metallicity);
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  ifu::Pipeline pipe(dusty_config(), ssp, mesh_of(2));
  const std::vector<float> want = pipe.run(pipe.put(back)).data.to_vector<float>();
#ifndef TESSERA_CLI
  GTEST_SKIP() << "the tessera program is not built (TESSERA_BUILD_TOOLS off)";
#else
  ifu::write_ssp_h5(tmp / "ssp.h5", ssp);
  std::ofstream(tmp / "dusty.yml") << dusty_yaml();
  const std::string cmd = std::string("TESSERA_NUM_CPU_DEVICES=3 '") + TESSERA_CLI + "' ifu --config '" +
                          (tmp / "dusty.yml") + "' --input '" + (tmp / "galaxy.h5") + "' --ssp '" + (tmp / "ssp.h5") +
                          "' --output '" + (tmp / "cube.fits") + "' --devices 3 --no-plots --quiet";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const ifu::FitsCube got = ifu::read_cube_fits(tmp / "cube.fits");
  ASSERT_EQ(got.data.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data.data(), want.data(), want.size() * sizeof(float)));
  // A galaxy file without gas: the command says what is missing.
  ifu::GalaxyData bare = g;
  bare.gas = {};
  ifu::write_galaxy_h5(tmp / "bare.h5", bare);
  const std::string bad = std::string("TESSERA_NUM_CPU_DEVICES=2 '") + TESSERA_CLI + "' ifu --config '" +
                          (tmp / "dusty.yml") + "' --input '" + (tmp / "bare.h5") + "' --ssp '" + (tmp / "ssp.h5") +
                          "' --output '" + (tmp / "bare.fits") + "' --no-plots --quiet 2> '" + (tmp / "err.txt") + "'";
  EXPECT_NE(std::system(bad.c_str()), 0);
  std::ifstream err(tmp / "err.txt");
  const std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("calc_dusty_ifu needs the galaxy's gas cells"), std::string::npos) << text;
#endif
}

// ----------------------------------------------------------------- gradient

namespace {

struct DustyProblem {
  ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  ifu::GalaxyData g = dusty_galaxy(200, 300, 5, 0.5, 8.0);
  ifu::Observation obs;
  explicit DustyProblem(ts::DType dtype) {
    ifu::Pipeline pipe(dusty_config(), ssp, mesh_of(2), opts(32768, dtype));
    ifu::GalaxyData truth = g;
    std::mt19937_64 rng(9);
    std::uniform_real_distribution<float> u(0.8f, 1.25f);
    for (float& a : truth.age) a *= u(rng);
    for (float& z : truth.metallicity) z *= u(rng);
    obs.cube = pipe.model(pipe.put(truth));
    const double peak = ts::max(ts::abs(obs.cube)).item<double>();
    const ts::Array sigma = ts::divide(ts::abs(obs.cube), 20.0);
    obs.variance = ts::add(ts::multiply(sigma, sigma), (1e-3 * peak) * (1e-3 * peak));
  }
};

double loss_of(const ifu::Pipeline& pipe, const ifu::GalaxyData& g, const ifu::Observation& obs, ifu::LossKind kind) {
  return ifu::loss_value_and_grad(kind, pipe.model(pipe.put(g)), obs).value;
}

}  // namespace

// In float64, as test_ifu_grad.cpp: the loss's change along a random
// direction of the ages (and masses) against the gradient's prediction.
TEST(IfuDusty, GradientAgainstFiniteDifferences) {
  const DustyProblem s(ts::DType::f64);
  ifu::Pipeline pipe(dusty_config(), s.ssp, mesh_of(2), opts(64, ts::DType::f64));
  for (ifu::LossKind kind : {ifu::LossKind::nll, ifu::LossKind::mse}) {
    SCOPED_TRACE(ifu::loss_name(kind));
    const ifu::Gradient gr = pipe.value_and_grad(pipe.put(s.g), s.obs, kind);
    EXPECT_DOUBLE_EQ(gr.loss, loss_of(pipe, s.g, s.obs, kind));
    const std::pair<std::vector<float> ifu::GalaxyData::*, const ts::Array*> fields[] = {
        {&ifu::GalaxyData::age, &gr.age}, {&ifu::GalaxyData::mass, &gr.mass}};
    for (const auto& [member, grad] : fields) {
      const double step = member == &ifu::GalaxyData::age ? 1e-4 : 1e-2 * s.g.mass[0];
      std::mt19937_64 rng(17);
      std::normal_distribution<double> n01;
      const auto gv = grad->to_vector<double>();
      ifu::GalaxyData plus = s.g, minus = s.g;
      double predicted = 0;
      for (std::size_t i = 0; i < gv.size(); ++i) {
        const double u = n01(rng), x = (s.g.*member)[i];
        (plus.*member)[i] = static_cast<float>(x + step * u);
        (minus.*member)[i] = static_cast<float>(x - step * u);
        predicted += gv[i] * (static_cast<double>((plus.*member)[i]) - (minus.*member)[i]);
      }
      const double change = loss_of(pipe, plus, s.obs, kind) - loss_of(pipe, minus, s.obs, kind);
      EXPECT_NE(predicted, 0.0);
      EXPECT_NEAR(predicted, change, 1e-4 * std::max(std::abs(predicted), std::abs(change)))
          << (member == &ifu::GalaxyData::age ? "age" : "mass") << ": predicted " << predicted
          << ", finite difference " << change;
    }
  }
}

TEST(IfuDusty, GradientIsBitwiseOnEveryDeviceCountAndChunk) {
  const DustyProblem s(ts::DType::f32);
  std::vector<float> first_age, first_mass;
  for (auto [devices, chunk] : std::vector<std::pair<int, std::int64_t>>{{1, 32768}, {3, 17}, {8, 5}}) {
    ifu::Pipeline pipe(dusty_config(), s.ssp, mesh_of(devices), opts(chunk));
    const ifu::Gradient gr = pipe.value_and_grad(pipe.put(s.g), s.obs, ifu::LossKind::nll);
    const auto age = gr.age.to_vector<float>(), mass = gr.mass.to_vector<float>();
    if (first_age.empty()) {
      first_age = age, first_mass = mass;
      continue;
    }
    EXPECT_EQ(0, std::memcmp(first_age.data(), age.data(), age.size() * sizeof(float))) << devices << " devices";
    EXPECT_EQ(0, std::memcmp(first_mass.data(), mass.data(), mass.size() * sizeof(float))) << devices << " devices";
  }
}

// resample_accumulate_extinguished in float64: jvp and vjp in weights, flux,
// wave_scale and init against central finite differences of the exact
// total.
TEST(IfuDusty, ExtinguishedResamplingDifferentiates) {
  const ts::Mesh one = mesh_of(1);
  const ts::NamedSharding rep(one, ts::P());
  const std::int64_t n = 9, k = 30, t = 20, segs = 3;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uf(0.5, 2.0), ut(0.2, 1.0), us(0.999, 1.001), un(-1.0, 1.0);
  std::vector<double> flux, trans, scale, weights, wave, target, init, ct;
  std::vector<std::int32_t> seg;
  for (std::int64_t i = 0; i < n * k; ++i) flux.push_back(uf(rng));
  for (std::int64_t i = 0; i < n * t; ++i) trans.push_back(ut(rng));
  for (std::int64_t i = 0; i < n; ++i)
    scale.push_back(us(rng)), weights.push_back(uf(rng)), seg.push_back(static_cast<std::int32_t>(i % segs));
  for (std::int64_t i = 0; i < k; ++i) wave.push_back(4000.0 + 25.0 * static_cast<double>(i));
  for (std::int64_t i = 0; i < t; ++i) target.push_back(4100.0 + 30.0 * static_cast<double>(i));
  for (std::int64_t i = 0; i < segs * t; ++i) init.push_back(uf(rng)), ct.push_back(un(rng));
  const double max_abs = 1e4;
  auto put = [&](const auto& v, const ts::Shape& s) { return ts::device_put(v, s, rep); };
  const ts::Array w = put(wave, {k}), tg = put(target, {t}), sid = put(seg, {n});
  const ts::Array tr = ts::astype(put(trans, {n, t}), ts::DType::f32);
  const ts::Array cta = put(ct, {segs, t});
  // The exact accumulator of `init`'s values (a valid accumulator as a
  // starting point, as the pipeline passes one).
  const ts::Array init_acc = ts::exact_limbs(put(init, {segs, t}), max_abs);
  auto total = [&](const ts::Array& wt, const ts::Array& fl, const ts::Array& sc, const ts::Array& in) {
    const ts::ResampleOptions o{.weights = wt, .wave_scale = sc, .init = in};
    const ts::Array acc = ifu::resample_accumulate_extinguished(fl, w, tg, sid, segs, max_abs, o, tr, 4);
    return ts::sum(ts::multiply(ts::exact_total(acc, ts::DType::f64), cta));
  };
  const std::vector<ts::Array> x = {put(weights, {n}), put(flux, {n, k}), put(scale, {n}), init_acc};
  auto [value, pull] = ts::vjp(total, x[0], x[1], x[2], x[3]);
  const auto grads = pull(ts::ones({}, ts::DType::f64, rep));
  const ts::Array g[4] = {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads), std::get<3>(grads)};
  const char* names[4] = {"weights", "flux", "wave_scale", "init"};
  const double steps[4] = {1e-5, 1e-5, 1e-8, 1e-5};
  for (int a = 0; a < 4; ++a) {
    SCOPED_TRACE(names[a]);
    // A random direction; for init, one on the value limb (limb 0).
    std::vector<double> dir(static_cast<std::size_t>(x[a].size()), 0.0);
    const std::size_t live = a == 3 ? static_cast<std::size_t>(segs * t) : dir.size();
    for (std::size_t i = 0; i < live; ++i) dir[i] = un(rng);
    const ts::Array d = put(dir, x[a].shape());
    std::vector<ts::Array> plus = x, minus = x;
    plus[a] = ts::add(x[a], ts::multiply(d, steps[a]));
    minus[a] = ts::subtract(x[a], ts::multiply(d, steps[a]));
    const double fd = (total(plus[0], plus[1], plus[2], plus[3]).item<double>() -
                       total(minus[0], minus[1], minus[2], minus[3]).item<double>()) /
                      (2 * steps[a]);
    const double by_vjp = ts::sum(ts::multiply(g[a], d)).item<double>();
    std::vector<ts::Array> tangents(4);
    for (int b = 0; b < 4; ++b) tangents[b] = ts::zeros(x[b].shape(), ts::DType::f64, rep);
    tangents[a] = d;
    auto [v2, by_jvp] = ts::jvp(total, x, tangents);
    EXPECT_EQ(v2.item<double>(), value.item<double>());
    EXPECT_NEAR(by_vjp, fd, 1e-6 * std::abs(fd)) << "vjp " << by_vjp << ", finite difference " << fd;
    EXPECT_NEAR(by_jvp.item<double>(), fd, 1e-6 * std::abs(fd)) << "jvp " << by_jvp.item<double>();
  }
}
