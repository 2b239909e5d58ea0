// The IFU pipeline's gradient (Pipeline::value_and_grad) and losses: the
// gradient w.r.t. every particle field and global parameter against central
// finite differences of the forward pipeline, on a 200-particle galaxy;
// bitwise the same on 1..8 devices and every chunk size; the losses against
// plain loops; bad observations.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "ifu/config.hpp"
#include "ifu/errors.hpp"
#include "ifu/fit.hpp"
#include "ifu/fits.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/ssp.hpp"
#include "ifu/generate.hpp"
#include "ifu/loss.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/temp_dir.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace ifu = tessera::ifu;
using ts::testing::expect_error;

namespace {

ifu::Config config() { return ifu::parse_config(ifu::default_config_yaml(), "test config"); }

ts::Mesh mesh_of(int k) {
  auto d = ts::devices();
  return ts::Mesh(std::vector<ts::Device>(d.begin(), d.begin() + k), {k}, {"data"});
}

ifu::GalaxyData galaxy(std::int64_t n, std::uint64_t seed) {
  ifu::DiskOptions d;
  d.particles = n;
  d.seed = seed;
  d.age_min = 0.5;
  d.age_max = 8.0;
  ifu::GalaxyData g = ifu::generate_disk(d);
  ifu::nudge_off_edges(g, config(), 1e-2);
  return g;
}

// The galaxy with ages and metallicities moved: the "true" galaxy whose
// cube is observed.
ifu::GalaxyData perturbed(ifu::GalaxyData g, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.8f, 1.25f);
  for (float& a : g.age) a *= u(rng);
  for (float& z : g.metallicity) z *= u(rng);
  return g;
}

ifu::PipelineOptions in(ts::DType dtype, std::int64_t chunk = 32768) {
  ifu::PipelineOptions o;
  o.dtype = dtype;
  o.chunk = chunk;
  return o;
}

struct Problem {
  ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  ifu::GalaxyData g = galaxy(200, 5);
  ifu::Observation obs;
  explicit Problem(int devices = 2, ts::DType dtype = ts::DType::f32) {
    ifu::Pipeline pipe(config(), ssp, mesh_of(devices), in(dtype));
    obs.cube = pipe.model(pipe.put(perturbed(g, 9)));
    // S/N 20 with a floor (a sky background): elements far fainter than the
    // peak would otherwise weigh in with variances near zero.
    const double peak = ts::max(ts::abs(obs.cube)).item<double>();
    const ts::Array sigma = ts::divide(ts::abs(obs.cube), 20.0);
    obs.variance = ts::add(ts::multiply(sigma, sigma), (1e-3 * peak) * (1e-3 * peak));
  }
};

double loss_of(const ifu::Pipeline& pipe, const ifu::GalaxyData& g, const ifu::Observation& obs, ifu::LossKind kind,
               const ifu::GlobalParams& p = {}) {
  return ifu::loss_value_and_grad(kind, pipe.model(pipe.put(g), p), obs).value;
}

// The loss's change along a random direction of one field against the
// gradient's prediction, relative to the larger. The fields are float32, so
// the step taken is the rounded one: the prediction uses it.
void expect_directional(const ifu::Pipeline& pipe, const Problem& s, ifu::LossKind kind, const char* field,
                        std::vector<float> ifu::GalaxyData::*member, const ts::Array& grad, double step,
                        double tol) {
  std::mt19937_64 rng(17);
  std::normal_distribution<double> n01;
  const std::vector<float>& x = s.g.*member;
  const auto gv = grad.to_vector<double>();
  ASSERT_EQ(gv.size(), x.size()) << field;
  ifu::GalaxyData plus = s.g, minus = s.g;
  double predicted = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = n01(rng);
    (plus.*member)[i] = static_cast<float>(x[i] + step * u);
    (minus.*member)[i] = static_cast<float>(x[i] - step * u);
    predicted += gv[i] * (static_cast<double>((plus.*member)[i]) - (minus.*member)[i]);
  }
  const double change = loss_of(pipe, plus, s.obs, kind) - loss_of(pipe, minus, s.obs, kind);
  EXPECT_NE(predicted, 0.0) << field;
  EXPECT_NEAR(predicted, change, tol * std::max(std::abs(predicted), std::abs(change)))
      << field << ": predicted " << predicted << ", finite difference " << change;
}

}  // namespace

// In float64 (PipelineOptions::dtype), so that the differences measure the
// derivative and not float32 rounding. The steps are small enough that no
// particle changes spaxel and no velocity changes rank in the systemic
// velocity's median, large enough that float32 rounding of the perturbed
// fields does not dominate (the step taken is measured after it).
TEST(IfuGradient, EveryFieldAgainstFiniteDifferences) {
  const Problem s(2, ts::DType::f64);
  ifu::Pipeline pipe(config(), s.ssp, mesh_of(2), in(ts::DType::f64));
  for (ifu::LossKind kind : {ifu::LossKind::mse, ifu::LossKind::nll, ifu::LossKind::cosine}) {
    SCOPED_TRACE(ifu::loss_name(kind));
    const ifu::Gradient gr = pipe.value_and_grad(pipe.put(s.g), s.obs, kind);
    EXPECT_DOUBLE_EQ(gr.loss, loss_of(pipe, s.g, s.obs, kind));
    expect_directional(pipe, s, kind, "age", &ifu::GalaxyData::age, gr.age, 1e-4, 1e-4);
    expect_directional(pipe, s, kind, "metallicity", &ifu::GalaxyData::metallicity, gr.metallicity, 1e-6, 1e-4);
    expect_directional(pipe, s, kind, "mass", &ifu::GalaxyData::mass, gr.mass, 1e3, 1e-4);
    expect_directional(pipe, s, kind, "velocity", &ifu::GalaxyData::velocity, gr.velocity, 1e-4, 1e-4);
    // Positions: spaxels and the aperture are piecewise constant.
    EXPECT_EQ(ts::max(ts::abs(gr.coords)).item<double>(), 0.0);
    // The global parameters.
    const double hv = 1e-3;
    const double fv = (loss_of(pipe, s.g, s.obs, kind, {.velocity_offset = hv}) -
                       loss_of(pipe, s.g, s.obs, kind, {.velocity_offset = -hv})) / (2 * hv);
    EXPECT_NEAR(gr.velocity_offset, fv, 1e-4 * std::abs(fv)) << "velocity offset";
    const double hs = 1e-6;
    const double fs = (loss_of(pipe, s.g, s.obs, kind, {.mass_scale = 1 + hs}) -
                       loss_of(pipe, s.g, s.obs, kind, {.mass_scale = 1 - hs})) / (2 * hs);
    if (kind == ifu::LossKind::cosine) {
      // The cosine does not see a scale: both are zero but for rounding.
      EXPECT_LT(std::abs(gr.mass_scale), 1e-9);
      EXPECT_LT(std::abs(fs), 1e-6);
    } else {
      EXPECT_NEAR(gr.mass_scale, fs, 1e-4 * std::abs(fs)) << "mass scale";
    }
  }
}

// IllustrisTNG aligns with the inertia tensor of the particles within the
// half-mass radius: positions and masses move the frame, and so every
// line-of-sight velocity. A squeezed, tilted disk has three clearly
// different moments (the derivative of the frame needs distinct ones).
TEST(IfuGradient, ThroughTheInertiaTensorAlignment) {
  std::string text = ifu::default_config_yaml();
  text.replace(text.find("NIHAO"), 5, "IllustrisTNG");
  const ifu::Config cfg = ifu::parse_config(text, "test config");
  Problem s(2, ts::DType::f64);
  ifu::GalaxyData& g = s.g;
  const double ca = std::cos(0.5), sa = std::sin(0.5);
  for (std::int64_t i = 0; i < g.n; ++i) {
    double p[3], v[3];
    for (int k = 0; k < 3; ++k) p[k] = g.coords[3 * i + k] - g.center[k], v[k] = g.velocity[3 * i + k];
    p[1] *= 0.6;
    // Turned by 0.5 rad about x: the disk's plane is tilted.
    const double y = ca * p[1] - sa * p[2], z = sa * p[1] + ca * p[2];
    const double vy = ca * v[1] - sa * v[2], vz = sa * v[1] + ca * v[2];
    p[1] = y, p[2] = z, v[1] = vy, v[2] = vz;
    for (int k = 0; k < 3; ++k)
      g.coords[3 * i + k] = static_cast<float>(g.center[k] + p[k]), g.velocity[3 * i + k] = static_cast<float>(v[k]);
  }
  ASSERT_GT(g.halfmassrad_stars, 0);
  ifu::Pipeline pipe(cfg, s.ssp, mesh_of(2), in(ts::DType::f64));
  s.obs.cube = pipe.model(pipe.put(perturbed(g, 9)));
  s.obs.variance = ts::Array();
  for (ifu::LossKind kind : {ifu::LossKind::mse, ifu::LossKind::cosine}) {
    SCOPED_TRACE(ifu::loss_name(kind));
    const ifu::Gradient gr = pipe.value_and_grad(pipe.put(g), s.obs, kind);
    EXPECT_GT(ts::max(ts::abs(gr.coords)).item<double>(), 0.0);
    expect_directional(pipe, s, kind, "coords", &ifu::GalaxyData::coords, gr.coords, 1e-5, 1e-4);
    expect_directional(pipe, s, kind, "mass", &ifu::GalaxyData::mass, gr.mass, 1e3, 1e-4);
    expect_directional(pipe, s, kind, "velocity", &ifu::GalaxyData::velocity, gr.velocity, 1e-4, 1e-4);
  }
  // Bitwise on every device count and chunk, as without the alignment.
  auto on = [&](int devices, std::int64_t chunk) {
    ifu::Pipeline p32(cfg, s.ssp, mesh_of(devices), in(ts::DType::f32, chunk));
    ifu::Observation o;
    o.cube = p32.model(p32.put(perturbed(g, 9)));
    const ifu::Gradient gr = p32.value_and_grad(p32.put(g), o, ifu::LossKind::mse);
    return std::pair{gr.coords.to_vector<float>(), gr.mass.to_vector<float>()};
  };
  const auto one = on(1, 32768), five = on(5, 9);
  EXPECT_EQ(std::memcmp(one.first.data(), five.first.data(), one.first.size() * 4), 0);
  EXPECT_EQ(std::memcmp(one.second.data(), five.second.data(), one.second.size() * 4), 0);
}

TEST(IfuGradient, BitwiseOnEveryDeviceCountAndChunk) {
  const Problem s;
  auto grad_on = [&](int devices, std::int64_t chunk) {
    ifu::PipelineOptions o;
    o.chunk = chunk;
    ifu::Pipeline pipe(config(), s.ssp, mesh_of(devices), o);
    return pipe.value_and_grad(pipe.put(s.g), s.obs, ifu::LossKind::nll, {.velocity_offset = 3, .mass_scale = 1.5});
  };
  const ifu::Gradient one = grad_on(1, 32768);
  auto bits = [](const ts::Array& a) { return a.to_vector<float>(); };
  for (int k = 2; k <= 8; ++k) {
    const ifu::Gradient g = grad_on(k, k == 3 ? 7 : (k == 5 ? 1 : 32768));
    EXPECT_EQ(std::memcmp(&g.loss, &one.loss, sizeof(double)), 0) << k;
    for (auto [a, b, name] : {std::tuple{g.age, one.age, "age"}, {g.metallicity, one.metallicity, "metallicity"},
                              {g.mass, one.mass, "mass"}, {g.velocity, one.velocity, "velocity"}}) {
      const auto x = bits(a), y = bits(b);
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << name << " on " << k << " devices";
    }
    EXPECT_EQ(std::memcmp(&g.velocity_offset, &one.velocity_offset, sizeof(double)), 0) << k;
    EXPECT_EQ(std::memcmp(&g.mass_scale, &one.mass_scale, sizeof(double)), 0) << k;
  }
}

TEST(IfuLoss, AgainstPlainLoops) {
  const ts::Mesh mesh = mesh_of(3);
  const ts::NamedSharding layout(mesh, ts::P(ts::none, ts::none, "data"));
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  const ts::Shape shape{3, 4, 7};
  std::vector<float> m(84), o(84), var(84);
  std::vector<bool> mask(84);
  for (std::size_t i = 0; i < 84; ++i) m[i] = u(rng), o[i] = u(rng), var[i] = u(rng), mask[i] = i % 5 != 0;
  ifu::Observation obs;
  obs.cube = ts::device_put(o, shape, layout);
  obs.variance = ts::device_put(var, shape, layout);
  obs.mask = ts::device_put(mask, shape, layout);
  const ts::Array model = ts::device_put(m, shape, layout);
  double nll = 0, mse = 0, cnt = 0, mo = 0, mm = 0, oo = 0;
  for (std::size_t i = 0; i < 84; ++i) {
    if (!mask[i]) continue;
    const double d = static_cast<double>(m[i]) - o[i];
    nll += 0.5 * (d * d / var[i] + std::log(2 * M_PI * var[i]));
    mse += d * d, cnt += 1;
    mo += static_cast<double>(m[i]) * o[i], mm += static_cast<double>(m[i]) * m[i], oo += static_cast<double>(o[i]) * o[i];
  }
  EXPECT_NEAR(ifu::loss_value_and_grad(ifu::LossKind::nll, model, obs).value, nll, 1e-12 * std::abs(nll));
  EXPECT_NEAR(ifu::loss_value_and_grad(ifu::LossKind::mse, model, obs).value, mse / cnt, 1e-12 * mse / cnt);
  const ifu::LossResult c = ifu::loss_value_and_grad(ifu::LossKind::cosine, model, obs);
  EXPECT_NEAR(c.value, 1 - mo / std::sqrt(mm * oo), 1e-12);
  // Variances from a signal-to-noise ratio: sigma = |observed| / snr.
  ifu::Observation by_snr = obs;
  by_snr.variance = ts::Array();
  by_snr.snr = 4;
  double nll_snr = 0;
  for (std::size_t i = 0; i < 84; ++i) {
    if (!mask[i]) continue;
    const double d = static_cast<double>(m[i]) - o[i], v = static_cast<double>(o[i]) * o[i] / 16;
    nll_snr += 0.5 * (d * d / v + std::log(2 * M_PI * v));
  }
  EXPECT_NEAR(ifu::loss_value_and_grad(ifu::LossKind::nll, model, by_snr).value, nll_snr, 1e-12 * std::abs(nll_snr));
  // The gradient: masked elements get none; the rest as the formula.
  const auto g = ifu::loss_value_and_grad(ifu::LossKind::nll, model, obs).grad.to_vector<float>();
  for (std::size_t i = 0; i < 84; ++i)
    EXPECT_FLOAT_EQ(g[i], mask[i] ? static_cast<float>((static_cast<double>(m[i]) - o[i]) / var[i]) : 0.0f) << i;
}

TEST(IfuLoss, BadObservationsAreNamed) {
  const Problem s(1);
  ifu::Pipeline pipe(config(), s.ssp, mesh_of(1));
  const ifu::Particles p = pipe.put(s.g);
  ifu::Observation wrong = s.obs;
  wrong.source = "obs.fits";
  wrong.cube = ts::zeros({4, 4, 4}, ts::DType::f32, ts::NamedSharding(mesh_of(1), ts::P()));
  expect_error<ifu::InputError>([&] { pipe.value_and_grad(p, wrong, ifu::LossKind::mse); }, "[ifu]",
                                {"obs.fits", "shape (4, 4, 4)", "telescope's cube"});
  ifu::Observation nan = s.obs;
  nan.source = "nan.fits";
  nan.cube = ts::where(ts::greater(s.obs.cube, 0.0f), std::nanf(""), s.obs.cube);
  expect_error<ifu::InputError>([&] { pipe.value_and_grad(p, nan, ifu::LossKind::mse); }, "[ifu]",
                                {"nan.fits", "not finite"});
  ifu::Observation none = s.obs;
  none.mask = ts::zeros(s.obs.cube.shape(), ts::DType::bool_, s.obs.cube.sharding());
  expect_error<ifu::InputError>([&] { pipe.value_and_grad(p, none, ifu::LossKind::mse); }, "[ifu]", {"mask", "no element"});
  ifu::Observation nosnr = s.obs;
  nosnr.variance = ts::Array();
  nosnr.snr = 0;
  expect_error<ifu::InputError>([&] { pipe.value_and_grad(p, nosnr, ifu::LossKind::nll); }, "[ifu]",
                                {"variance", "signal-to-noise"});
  expect_error<ifu::InputError>([] { ifu::parse_loss("l2"); }, "[ifu]", {"'l2'", "nll, cosine or mse"});
}

// ------------------------------------------------------------------ fitting

namespace {

double median_relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  std::vector<double> e;
  for (std::size_t i = 0; i < got.size(); ++i) e.push_back(std::abs(got[i] - want[i]) / std::abs(want[i]));
  std::nth_element(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(e.size() / 2), e.end());
  return e[e.size() / 2];
}

}  // namespace

// The cube of a known galaxy is observed; the fit starts from ages and
// metallicities moved by up to 25% and recovers them (float64, noiseless,
// MSE, L-BFGS). Per particle the problem is only partly determined:
// particles sharing a spaxel can trade light, and metallicity shows only in
// one absorption line of the templates (generate_ssp_grid), so a joint fit
// moves the ages first and the metallicities barely (a fortieth of the
// loss). Hence: jointly, the loss falls 500-fold in 40 steps and the
// median particle's age error shrinks fourfold; with the ages known, the metallicities alone
// are recovered to a tenth of their starting error.
TEST(IfuFit, RecoversAgesAndMetallicities) {
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(6, 14, 200);
  const ifu::GalaxyData truth = galaxy(60, 21);
  const ifu::GalaxyData start = perturbed(truth, 4);
  ifu::Pipeline pipe(config(), ssp, mesh_of(2), in(ts::DType::f64));
  ifu::Observation obs;
  obs.cube = pipe.model(pipe.put(truth));
  ifu::FitOptions fo;
  fo.loss = ifu::LossKind::mse;
  fo.optimizer = "lbfgs";
  fo.steps = 40;
  fo.lr = 0.1;
  const ifu::FitResult r = ifu::fit(pipe, pipe.put(start), obs, fo);
  ASSERT_EQ(r.losses.size(), 41u);
  EXPECT_LT(r.losses.back(), 2e-3 * r.losses.front()) << r.losses.front() << " -> " << r.losses.back();
  const ifu::GalaxyData got = ifu::to_galaxy(r.particles, start);
  const double age0 = median_relative_error(start.age, truth.age), age1 = median_relative_error(got.age, truth.age);
  EXPECT_LT(age1, age0 / 4) << age0 << " -> " << age1;
  // Unfitted fields stay as they were; fitted ones stay in their boxes.
  EXPECT_EQ(got.mass, start.mass);
  for (float a : got.age) EXPECT_TRUE(a > 0 && a < 20) << a;
  for (float z : got.metallicity) EXPECT_TRUE(z > 0 && z < 0.05) << z;

  ifu::GalaxyData zonly = truth;
  zonly.metallicity = start.metallicity;
  fo.params = ifu::parse_fit_params("metallicity");
  fo.steps = 20;
  const ifu::FitResult rz = ifu::fit(pipe, pipe.put(zonly), obs, fo);
  const double z0 = median_relative_error(start.metallicity, truth.metallicity);
  const double z1 = median_relative_error(ifu::to_galaxy(rz.particles, start).metallicity, truth.metallicity);
  EXPECT_LT(z1, z0 / 10) << z0 << " -> " << z1;
}

TEST(IfuFit, AdamFollowsTheSamePathOnEveryDeviceCount) {
  const ifu::SspGrid ssp = ifu::generate_ssp_grid(3, 8, 40);
  const ifu::GalaxyData truth = galaxy(90, 22);
  const ifu::GalaxyData start = perturbed(truth, 5);
  auto run = [&](int devices, std::int64_t chunk) {
    ifu::Pipeline pipe(config(), ssp, mesh_of(devices), in(ts::DType::f32, chunk));
    ifu::Observation obs;
    obs.cube = pipe.model(pipe.put(truth));
    ifu::FitOptions fo;
    fo.loss = ifu::LossKind::cosine;
    fo.params = ifu::parse_fit_params("age,metallicity,mass,velocity_offset,mass_scale");
    fo.steps = 4;
    return ifu::fit(pipe, pipe.put(start), obs, fo);
  };
  const ifu::FitResult one = run(1, 32768), many = run(5, 7);
  ASSERT_EQ(one.losses.size(), many.losses.size());
  for (std::size_t i = 0; i < one.losses.size(); ++i) EXPECT_EQ(std::memcmp(&one.losses[i], &many.losses[i], 8), 0) << i;
  EXPECT_LT(one.losses.back(), one.losses.front());
  const ifu::GalaxyData a = ifu::to_galaxy(one.particles, start), b = ifu::to_galaxy(many.particles, start);
  EXPECT_EQ(std::memcmp(a.age.data(), b.age.data(), a.age.size() * 4), 0);
  EXPECT_EQ(std::memcmp(a.metallicity.data(), b.metallicity.data(), a.metallicity.size() * 4), 0);
  EXPECT_EQ(std::memcmp(a.mass.data(), b.mass.data(), a.mass.size() * 4), 0);
  EXPECT_EQ(one.globals.mass_scale, many.globals.mass_scale);
  EXPECT_EQ(one.globals.velocity_offset, many.globals.velocity_offset);
}

TEST(IfuFit, BadRequestsSayWhat) {
  expect_error<ifu::InputError>([] { ifu::parse_fit_params("age,coords"); }, "[ifu-fit]",
                                {"'coords'", "not a fittable field", "derivative is zero"});
  expect_error<ifu::InputError>([] { ifu::parse_fit_params("age,age"); }, "[ifu-fit]", {"'age'", "twice"});
  expect_error<ifu::InputError>([] { ifu::parse_fit_params(""); }, "[ifu-fit]", {"no field"});
  const Problem s(1);
  ifu::Pipeline pipe(config(), s.ssp, mesh_of(1));
  ifu::FitOptions fo;
  fo.optimizer = "sgd";
  expect_error<ifu::InputError>([&] { ifu::fit(pipe, pipe.put(s.g), s.obs, fo); }, "[ifu-fit]", {"'sgd'", "adam or lbfgs"});
}

// ------------------------------------------------- files and the command line

namespace {

const std::string kData = TESSERA_IFU_TEST_DATA;  // the golden test's config, galaxy and cut BC03 grid

// Runs a command line, returning its exit status and what it printed.
std::pair<int, std::string> shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int status = p ? pclose(p) : -1;
  return {status, out};
}

}  // namespace

TEST(IfuFit, ObservedCubesAreCheckedAgainstTheTelescope) {
  ts::testing::TempDir tmp("ifu_fit");
  const ifu::Config cfg = ifu::load_config(kData + "/config.yml");
  ifu::Pipeline pipe(cfg, ifu::read_ssp_h5(kData + "/ssp_bc03_cut.h5"), mesh_of(2));
  const std::int64_t nb = pipe.geometry().spaxels, nw = static_cast<std::int64_t>(pipe.geometry().wave.size());
  ifu::CubeWcs wcs;
  wcs.spaxel_arcsec = 0.2;
  wcs.wave0 = pipe.wave0();
  wcs.dwave = pipe.dwave();
  std::vector<float> cube(static_cast<std::size_t>(nb * nb * nw), 1.0f);
  ifu::write_cube_fits(tmp / "small.fits", cube.data(), nb - 1, nb, nw, wcs);
  expect_error<ifu::InputError>([&] { ifu::read_observation(pipe, tmp / "small.fits"); }, "[ifu]",
                                {"small.fits", std::to_string(nb - 1) + " x " + std::to_string(nb), "makes"});
  ifu::CubeWcs shifted = wcs;
  shifted.wave0 += 10;
  ifu::write_cube_fits(tmp / "shifted.fits", cube.data(), nb, nb, nw, shifted);
  expect_error<ifu::InputError>([&] { ifu::read_observation(pipe, tmp / "shifted.fits"); }, "[ifu]",
                                {"shifted.fits", "CRVAL3"});
  cube[5] = std::nanf("");
  ifu::write_cube_fits(tmp / "nan.fits", cube.data(), nb, nb, nw, wcs);
  expect_error<ifu::InputError>([&] { ifu::read_observation(pipe, tmp / "nan.fits"); }, "[ifu]",
                                {"nan.fits", "1 elements", "not finite"});
  cube[5] = 1;
  ifu::write_cube_fits(tmp / "good.fits", cube.data(), nb, nb, nw, wcs);
  const ifu::Observation o = ifu::read_observation(pipe, tmp / "good.fits", tmp / "good.fits");
  EXPECT_EQ(o.cube.shape(), (ts::Shape{nb, nb, nw}));
  EXPECT_TRUE(o.variance.valid());
}

TEST(IfuFit, CommandLineGradientAndFit) {
#ifndef TESSERA_CLI
  GTEST_SKIP() << "the tessera program is not built (TESSERA_BUILD_TOOLS off)";
#else
  ts::testing::TempDir tmp("ifu_fit");
  const std::string common = std::string("TESSERA_NUM_CPU_DEVICES=2 '") + TESSERA_CLI + "' %s --config '" + kData +
                             "/config.yml' --ssp '" + kData + "/ssp_bc03_cut.h5' ";
  auto cmd = [&](const char* sub, const std::string& rest) {
    char buf[4096];
    std::snprintf(buf, sizeof buf, common.c_str(), sub);
    return std::string(buf) + rest;
  };
  // The observed cube is the golden galaxy's; the fitted galaxy is it with
  // other ages and metallicities.
  const ifu::GalaxyData truth = ifu::read_galaxy(kData + "/galaxy.h5");
  ifu::write_galaxy_h5(tmp / "start.h5", perturbed(truth, 3));
  auto [s0, o0] = shell(cmd("ifu", "--input '" + kData + "/galaxy.h5' --output '" + tmp / "obs.fits" + "' --no-plots --quiet"));
  ASSERT_EQ(s0, 0) << o0;

  auto [s1, o1] = shell(cmd("ifu-grad", "--input '" + tmp / "start.h5" + "' --observed '" + tmp / "obs.fits" +
                                            "' --loss mse --output '" + tmp / "grad.h5" + "' --quiet"));
  ASSERT_EQ(s1, 0) << o1;
  // The file holds what the library computes.
  const ifu::Config cfg = ifu::load_config(kData + "/config.yml");
  ifu::Pipeline pipe(cfg, ifu::read_ssp_h5(kData + "/ssp_bc03_cut.h5"), mesh_of(3));
  const ifu::Gradient want = pipe.value_and_grad(pipe.put(ifu::read_galaxy(tmp / "start.h5")),
                                                 ifu::read_observation(pipe, tmp / "obs.fits"), ifu::LossKind::mse);
  const auto got = ifu::detail::read_h5_numbers(
      tmp / "grad.h5", {"gradient/loss", "particles/stars/age", "particles/stars/metallicity", "particles/stars/mass"},
      "test");
  EXPECT_EQ(got[0].values[0], want.loss);
  const auto age = want.age.to_vector<float>();
  ASSERT_EQ(got[1].values.size(), age.size());
  for (std::size_t i = 0; i < age.size(); ++i) ASSERT_EQ(static_cast<float>(got[1].values[i]), age[i]) << i;
  EXPECT_GT(ts::max(ts::abs(want.age)).item<double>(), 0.0);

  auto [s2, o2] = shell(cmd("ifu-fit", "--input '" + tmp / "start.h5" + "' --observed '" + tmp / "obs.fits" +
                                           "' --loss mse --steps 3 --output '" + tmp / "fitted.h5" + "' --json '" +
                                           tmp / "fit.json" + "' --quiet"));
  ASSERT_EQ(s2, 0) << o2;
  const ifu::GalaxyData fitted = ifu::read_galaxy(tmp / "fitted.h5");
  EXPECT_EQ(fitted.n, truth.n);
  EXPECT_NE(fitted.age, ifu::read_galaxy(tmp / "start.h5").age);
  EXPECT_TRUE(std::filesystem::exists(tmp / "fitted_loss.png"));
  EXPECT_TRUE(std::filesystem::exists(tmp / "fitted_residual.png"));
  std::ifstream js(tmp / "fit.json");
  const std::string text((std::istreambuf_iterator<char>(js)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"steps\": 3"), std::string::npos) << text;

  // Bad input names the file.
  auto [s3, o3] = shell(cmd("ifu-fit", "--input '" + tmp / "start.h5" + "' --observed '" + tmp / "missing.fits" + "' --quiet"));
  EXPECT_NE(s3, 0);
  EXPECT_NE(o3.find("missing.fits"), std::string::npos) << o3;
  auto [s4, o4] = shell(cmd("ifu-fit", "--input '" + tmp / "start.h5" + "' --observed '" + tmp / "obs.fits" +
                                           "' --params age,coords --quiet"));
  EXPECT_NE(s4, 0);
  EXPECT_NE(o4.find("'coords' is not a fittable field"), std::string::npos) << o4;
#endif
}
