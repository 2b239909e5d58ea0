// The IFU pipeline's gradient (Pipeline::value_and_grad) and losses: the
// gradient w.r.t. every particle field and global parameter against central
// finite differences of the forward pipeline, on a 200-particle galaxy;
// bitwise the same on 1..8 devices and every chunk size; the losses against
// plain loops; bad observations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "ifu/config.hpp"
#include "ifu/errors.hpp"
#include "ifu/generate.hpp"
#include "ifu/loss.hpp"
#include "ifu/pipeline.hpp"
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
