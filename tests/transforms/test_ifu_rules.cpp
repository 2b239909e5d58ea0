// Derivatives of the IFU ops: interp2d (in the queries and the table),
// resample_accumulate (in the weights, the fluxes and the wave scales),
// exact_limbs / exact_total, searchsorted, median, convolve, convolve2d.
//
// Every rule is checked in f64 against central finite differences with step
// h = 1e-6: the JVP elementwise, the gradient (transpose) componentwise
// through the scalar <u, f(x)> for a fixed u, both to within
// 1e-6 * (1 + |finite difference|) (the differences' own error is about
// h^2 |f'''| + eps |f| / h, near 1e-9 here). Each on one device and with
// the differentiated rows sharded over 1-d meshes of 2, 3 and 8 devices
// (sizes that do not divide evenly). The gradient of a sum over particles
// through exact_total(resample_accumulate(...)) is bitwise the same on 1..8
// devices, and so is the JVP's exact tangent accumulator. Refused cases
// raise errors that name the op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;

namespace {

using Fn = std::function<ts::Array(const ts::Array&)>;

constexpr double kStep = 1e-6;
constexpr double kTol = 1e-6;

ts::Mesh line(int n) { return ts::Mesh(ts::testing::first_devices(n), {n}, {"x"}); }

std::vector<double> wave_values(std::int64_t n, int salt, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = lo + (hi - lo) * (0.5 + 0.5 * std::sin(1.3 * static_cast<double>(i) * (salt + 1) + 0.7 * salt));
  return v;
}

// x + s * v, in x's layout.
ts::Array shifted(const ts::Array& x, const std::vector<double>& v, double s) {
  auto h = x.to_vector<double>();
  for (size_t i = 0; i < h.size(); ++i) h[i] += s * v[i];
  return ts::device_put(h, x.shape(), x.sharding());
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], kTol * (1 + std::abs(want[i]))) << what << " at " << i;
}

// f's JVP along a direction against the central difference, and the
// gradient of <u, f(x)> componentwise against central differences. Returns
// the gradient (for layout checks; empty when `reverse` is false: forward
// mode only).
ts::Array check_derivatives(const Fn& f, const ts::Array& x, const std::string& what, bool reverse = true) {
  const std::int64_t n = x.size();
  const auto v = wave_values(n, 3, -1.0, 1.0);
  const ts::Array dir = ts::device_put(v, x.shape(), x.sharding());
  auto [y, ty] = ts::jvp(f, {x}, {dir});
  const auto yp = f(shifted(x, v, kStep)).to_vector<double>();
  const auto ym = f(shifted(x, v, -kStep)).to_vector<double>();
  std::vector<double> fd(yp.size());
  for (size_t k = 0; k < fd.size(); ++k) fd[k] = (yp[k] - ym[k]) / (2 * kStep);
  expect_close(ty.to_vector<double>(), fd, what + ": jvp");
  if (!reverse) return ts::Array();

  const auto uh = wave_values(y.size(), 5, -1.0, 1.0);
  const ts::Array u = ts::device_put(uh, y.shape(), ts::NamedSharding(y.sharding().mesh(), ts::P()));
  auto loss = [&](const ts::Array& a) { return ts::sum(ts::multiply(f(a), u)); };
  const ts::Array g = ts::grad(loss)(x);
  EXPECT_EQ(g.sharding(), x.sharding()) << what << ": the gradient keeps x's layout";
  const auto gh = g.to_vector<double>();
  std::vector<double> gfd(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<double> e(static_cast<size_t>(n), 0.0);
    e[i] = 1.0;
    gfd[i] = (loss(shifted(x, e, kStep)).item<double>() - loss(shifted(x, e, -kStep)).item<double>()) / (2 * kStep);
  }
  expect_close(gh, gfd, what + ": grad");
  return g;
}

const int kMeshes[] = {1, 2, 3, 8};

// ================================================================= interp2d

struct Table {
  ts::Array x, y, f;
};

// A smooth function on a non-uniform 6 x 5 grid, rows of 3.
Table table(const ts::Mesh& mesh) {
  const std::vector<double> xs{0.0, 0.4, 1.1, 1.5, 2.3, 3.0}, ys{-1.0, -0.2, 0.5, 0.9, 2.0};
  std::vector<double> f;
  for (double a : xs)
    for (double b : ys)
      for (int r = 0; r < 3; ++r) f.push_back(std::sin(a + 0.3 * r) * std::cos(0.7 * b) + 0.1 * a * b * r);
  const ts::NamedSharding rep(mesh, ts::P());
  return {ts::device_put(xs, {6}, rep), ts::device_put(ys, {5}, rep), ts::device_put(f, {6, 5, 3}, rep)};
}

struct InterpCase {
  const char* method;
  bool extrapolate;
};

class Interp2dRules : public ::testing::TestWithParam<InterpCase> {};

TEST_P(Interp2dRules, QueriesAndTableAgainstFiniteDifferences) {
  const InterpCase c = GetParam();
  ts::Interp2dOptions opt{.method = c.method};
  if (c.extrapolate) opt.fill = std::nullopt;
  for (int nd : kMeshes) {
    const ts::Mesh mesh = line(nd);
    const Table t = table(mesh);
    const ts::NamedSharding rows(mesh, ts::P("x"));
    // 11 queries (uneven over 2, 3, 8), off the knots; with extrapolation
    // some lie outside the grid (the edge cells' polynomials continue), with
    // the NaN fill all lie inside (outside, the value is NaN).
    std::vector<double> xq = wave_values(11, 1, c.extrapolate ? -0.3 : 0.05, c.extrapolate ? 3.3 : 2.95);
    std::vector<double> yq = wave_values(11, 2, c.extrapolate ? -1.3 : -0.95, c.extrapolate ? 2.2 : 1.95);
    const ts::Array XQ = ts::device_put(xq, {11}, rows), YQ = ts::device_put(yq, {11}, rows);
    const std::string what = std::string(c.method) + (c.extrapolate ? " extrapolating" : "") + " on " +
                             std::to_string(nd) + " devices";
    check_derivatives([&](const ts::Array& a) { return ts::interp2d(a, YQ, t.x, t.y, t.f, opt); }, XQ, what + " d/dxq");
    check_derivatives([&](const ts::Array& a) { return ts::interp2d(XQ, a, t.x, t.y, t.f, opt); }, YQ, what + " d/dyq");
    check_derivatives([&](const ts::Array& a) { return ts::interp2d(XQ, YQ, t.x, t.y, a, opt); }, t.f, what + " d/df");
    // Both query coordinates at once, through one function of a (2, 11) array.
    const ts::Array both = ts::device_put(
        [&] {
          std::vector<double> v = xq;
          v.insert(v.end(), yq.begin(), yq.end());
          return v;
        }(),
        {2, 11}, ts::NamedSharding(mesh, ts::P(ts::none, "x")));
    check_derivatives(
        [&](const ts::Array& a) {
          auto row = [&](int r) { return ts::squeeze(ts::slice(a, {{r, r + 1, 1}, {}}), {0}); };
          return ts::interp2d(row(0), row(1), t.x, t.y, t.f, opt);
        },
        both, what + " d/d(xq, yq)");
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, Interp2dRules,
                         ::testing::Values(InterpCase{"linear", false}, InterpCase{"cubic", false},
                                           InterpCase{"linear", true}, InterpCase{"cubic", true}),
                         [](const auto& info) {
                           return std::string(info.param.method) + (info.param.extrapolate ? "_extrapolate" : "");
                         });

TEST(Interp2dRules, SlopesOfTheCubicAreThePiecewisePolynomials) {
  // On a table linear in x and y the cubic interpolant is exact, so its
  // slopes are the plane's: 2 and -3 everywhere inside.
  const ts::Mesh mesh = line(3);
  const ts::NamedSharding rep(mesh, ts::P()), rows(mesh, ts::P("x"));
  const std::vector<double> xs{0.0, 0.5, 1.5, 2.0}, ys{0.0, 1.0, 1.2};
  std::vector<double> f;
  for (double a : xs)
    for (double b : ys) f.push_back(2 * a - 3 * b + 1);
  const ts::Array X = ts::device_put(xs, {4}, rep), Y = ts::device_put(ys, {3}, rep),
                  F = ts::device_put(f, {4, 3}, rep);
  const ts::Array xq = ts::device_put(std::vector<double>{0.1, 0.7, 1.9, 1.2, 0.0}, {5}, rows);
  const ts::Array yq = ts::device_put(std::vector<double>{0.3, 1.1, 0.05, 0.9, 1.2}, {5}, rows);
  const ts::Array ones = ts::ones({5}, ts::f64, rows);
  auto [y1, tx] = ts::jvp([&](const ts::Array& a) { return ts::interp2d(a, yq, X, Y, F); }, {xq}, {ones});
  auto [y2, ty] = ts::jvp([&](const ts::Array& a) { return ts::interp2d(xq, a, X, Y, F); }, {yq}, {ones});
  for (double d : tx.to_vector<double>()) EXPECT_NEAR(d, 2.0, 1e-12);
  for (double d : ty.to_vector<double>()) EXPECT_NEAR(d, -3.0, 1e-12);
}

TEST(Interp2dRules, VmapOfTheGradientOverCotangents) {
  // jacrev batches the transpose over the result's cotangents (the table's
  // cotangent per output element) against jacfwd.
  const ts::Mesh mesh = line(2);
  const Table t = table(mesh);
  const ts::NamedSharding rows(mesh, ts::P("x"));
  const ts::Array xq = ts::device_put(wave_values(5, 1, 0.1, 2.9), {5}, rows);
  const ts::Array yq = ts::device_put(wave_values(5, 2, -0.9, 1.9), {5}, rows);
  auto f = [&](const ts::Array& a) { return ts::interp2d(xq, yq, t.x, t.y, a); };
  const auto jf = ts::jacfwd(f)(t.f).to_vector<double>();
  const auto jr = ts::jacrev(f)(t.f).to_vector<double>();
  expect_close(jr, jf, "jacrev vs jacfwd");
}

TEST(Interp2dRules, GridIsRefused) {
  const ts::Mesh mesh = line(1);
  const Table t = table(mesh);
  const ts::Array q = ts::device_put(std::vector<double>{0.5, 1.0}, {2}, ts::NamedSharding(mesh, ts::P()));
  expect_error<ts::Error>(
      [&] { ts::jvp([&](const ts::Array& a) { return ts::interp2d(q, q, a, t.y, t.f); }, {t.x}, {t.x}); },
      "[interp2d] is not differentiable with respect to the grid x/y", {"expected tangents for xq, yq and f", "got a tangent for x"});
  expect_error<ts::Error>(
      [&] { ts::grad([&](const ts::Array& a) { return ts::sum(ts::interp2d(q, q, t.x, a, t.f)); })(t.y); },
      "[interp2d] is not differentiable with respect to the grid x/y", {"got a tangent for y"});
}

// ====================================================== resample_accumulate

struct Spectra {
  ts::Array flux, wave, target, seg, weights, scale;
  std::int64_t S = 3;
};

// 13 rows of 12 wavelengths in [1, 2.2] resampled onto 9 targets in
// [1.15, 2.0] (so the ends of some rows are held), 3 segments, one row
// dropped (id -1); Doppler-like scales near 1.
Spectra spectra(const ts::Mesh& mesh) {
  const ts::NamedSharding rows(mesh, ts::P("x")), rep(mesh, ts::P());
  const std::int64_t n = 13, K = 12, T = 9;
  std::vector<double> wave(K), target(T);
  for (std::int64_t k = 0; k < K; ++k) wave[k] = 1.0 + 0.1 * static_cast<double>(k) + 0.013 * std::sin(3.0 * k);
  for (std::int64_t j = 0; j < T; ++j) target[j] = 1.15 + 0.85 * static_cast<double>(j) / (T - 1);
  std::vector<double> flux(n * K);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < K; ++k)
      flux[i * K + k] = 1.0 + 0.5 * std::sin(0.9 * k + 0.4 * i) + 0.1 * static_cast<double>(i % 3);
  std::vector<std::int32_t> seg(n);
  for (std::int64_t i = 0; i < n; ++i) seg[i] = static_cast<std::int32_t>(i % 3);
  seg[5] = -1;
  Spectra s;
  s.flux = ts::device_put(flux, {n, K}, rows);
  s.wave = ts::device_put(wave, {K}, rep);
  s.target = ts::device_put(target, {T}, rep);
  s.seg = ts::device_put(seg, {n}, rows);
  s.weights = ts::device_put(wave_values(n, 4, 0.5, 2.0), {n}, rows);
  s.scale = ts::device_put(wave_values(n, 6, 0.97, 1.03), {n}, rows);
  return s;
}

ts::Array cube(const Spectra& s, const ts::Array& flux, const ts::Array& weights, const ts::Array& scale) {
  return ts::exact_total(ts::resample_accumulate(flux, s.wave, s.target, s.seg, s.S, 1e3,
                                                 {.weights = weights, .wave_scale = scale}),
                         ts::f64);
}

TEST(ResampleAccumulateRules, AgainstFiniteDifferences) {
  for (int nd : kMeshes) {
    const Spectra s = spectra(line(nd));
    const std::string on = " on " + std::to_string(nd) + " devices";
    check_derivatives([&](const ts::Array& a) { return cube(s, s.flux, a, s.scale); }, s.weights, "weights" + on);
    check_derivatives([&](const ts::Array& a) { return cube(s, a, s.weights, s.scale); }, s.flux, "flux" + on);
    check_derivatives([&](const ts::Array& a) { return cube(s, s.flux, s.weights, a); }, s.scale, "wave_scale" + on);
  }
}

TEST(ResampleAccumulateRules, ScaleDerivativeIsNotZero) {
  // A Doppler shift moves flux between target bins: the derivative in the
  // scale is far from zero (a rule that left the wavelengths fixed would
  // pass the weights' and fluxes' checks and give 0 here).
  const Spectra s = spectra(line(1));
  const ts::Array ones = ts::ones({13}, ts::f64, s.scale.sharding());
  auto [y, t] = ts::jvp([&](const ts::Array& a) { return cube(s, s.flux, s.weights, a); }, {s.scale}, {ones});
  double big = 0;
  for (double v : t.to_vector<double>()) big = std::max(big, std::abs(v));
  EXPECT_GT(big, 0.1);
}

TEST(ResampleAccumulateRules, WithoutWeightsOrScaleAndWithInit) {
  const Spectra s = spectra(line(1));
  const ts::NamedSharding rep(s.flux.sharding().mesh(), ts::P());
  const ts::Array flux = ts::device_put(s.flux.to_vector<double>(), s.flux.shape(), rep);
  const ts::Array seg = ts::device_put(s.seg.to_vector<std::int32_t>(), s.seg.shape(), rep);
  check_derivatives(
      [&](const ts::Array& a) {
        return ts::exact_total(ts::resample_accumulate(a, s.wave, s.target, seg, s.S, 1e3), ts::f64);
      },
      flux, "flux alone");
  // init: the tangent of init is added to the rows' tangent.
  const ts::Array init = ts::exact_limbs(ts::ones({s.S, 9}, ts::f64, rep), 1e3);
  check_derivatives(
      [&](const ts::Array& a) {
        const ts::Array acc = ts::exact_limbs(ts::multiply(a, a), 1e3);
        return ts::exact_total(ts::resample_accumulate(flux, s.wave, s.target, seg, s.S, 1e3, {.init = acc}), ts::f64);
      },
      ts::exact_total(init, ts::f64), "init");
}

TEST(ResampleAccumulateRules, GradientOfASumIsBitwiseTheSameOnEveryDeviceCount) {
  std::vector<std::vector<double>> ref;
  for (int nd = 1; nd <= 8; ++nd) {
    const Spectra s = spectra(line(nd));
    auto loss = [&](const ts::Array& f, const ts::Array& w, const ts::Array& c) {
      return ts::sum(ts::multiply(cube(s, f, w, c), cube(s, f, w, c)));
    };
    auto [gf, gw, gc] = ts::grad(loss, ts::argnums<0, 1, 2>)(s.flux, s.weights, s.scale);
    // Forward mode: the tangent's exact accumulator sums the rows exactly.
    const ts::Array dir = ts::device_put(wave_values(13, 7, -1, 1), {13}, s.scale.sharding());
    auto [y, t] = ts::jvp([&](const ts::Array& c) { return cube(s, s.flux, s.weights, c); }, {s.scale}, {dir});
    auto [y2, t2] = ts::jvp([&](const ts::Array& w) { return cube(s, s.flux, w, s.scale); }, {s.weights}, {dir});
    const std::vector<std::vector<double>> got{gf.to_vector<double>(), gw.to_vector<double>(), gc.to_vector<double>(),
                                               t.to_vector<double>(), t2.to_vector<double>()};
    if (nd == 1) {
      ref = got;
      continue;
    }
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].size(), ref[k].size());
      for (size_t i = 0; i < got[k].size(); ++i)
        EXPECT_EQ(std::memcmp(&got[k][i], &ref[k][i], sizeof(double)), 0)
            << "result " << k << " element " << i << " on " << nd << " devices: " << got[k][i] << " vs "
            << ref[k][i];
    }
  }
}

TEST(ResampleAccumulateRules, VjpWithoutThePrimalIsThePullback) {
  // resample_accumulate_vjp gives the pullback's bits without forming the
  // accumulator, on sharded rows, with and without weights and scales.
  for (int nd : {1, 3}) {
    const Spectra s = spectra(line(nd));
    const ts::NamedSharding rep(s.flux.sharding().mesh(), ts::P());
    std::vector<double> c(3 * s.S * 9);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = std::sin(0.7 * static_cast<double>(i)) + (i < c.size() / 3 ? 1 : 0);
    const ts::Array ct = ts::device_put(c, {3, s.S, 9}, rep);
    auto f = [&](const ts::Array& fl, const ts::Array& w, const ts::Array& sc) {
      return ts::resample_accumulate(fl, s.wave, s.target, s.seg, s.S, 1e3, {.weights = w, .wave_scale = sc});
    };
    auto [acc, pull] = ts::vjp(f, s.flux, s.weights, s.scale);
    auto [gf, gw, gs] = pull(ct);
    const ts::ResampleCotangents r = ts::resample_accumulate_vjp(ct, s.flux, s.wave, s.target, s.seg, s.S,
                                                                 {.weights = s.weights, .wave_scale = s.scale});
    for (auto [a, b, what] : {std::tuple{r.flux, gf, "flux"}, {r.weights, gw, "weights"}, {r.wave_scale, gs, "scale"}}) {
      EXPECT_EQ(a.sharding(), b.sharding()) << what;
      const auto x = a.to_vector<double>(), y = b.to_vector<double>();
      ASSERT_EQ(x.size(), y.size()) << what;
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(double)), 0) << what << " on " << nd << " devices";
    }
    const ts::ResampleCotangents bare = ts::resample_accumulate_vjp(ct, s.flux, s.wave, s.target, s.seg, s.S);
    EXPECT_FALSE(bare.weights.valid());
    EXPECT_FALSE(bare.wave_scale.valid());
    auto [acc2, pull2] = ts::vjp([&](const ts::Array& fl) { return ts::resample_accumulate(fl, s.wave, s.target, s.seg, s.S, 1e3); }, s.flux);
    const auto want = std::get<0>(pull2(ct)).to_vector<double>(), got = bare.flux.to_vector<double>();
    EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(double)), 0);
  }
  const Spectra s = spectra(line(1));
  const ts::Array bad = ts::zeros({3, s.S, 8}, ts::f64, ts::NamedSharding(s.flux.sharding().mesh(), ts::P()));
  ts::testing::expect_error<ts::ShapeError>(
      [&] { ts::resample_accumulate_vjp(bad, s.flux, s.wave, s.target, s.seg, s.S); }, "[resample_accumulate_vjp]",
      {"ct must have the accumulator's shape (3, 3, 9)"});
  ts::testing::expect_error<ts::ValueError>(
      [&] {
        ts::resample_accumulate_vjp(ts::zeros({3, s.S, 9}, ts::f64, bad.sharding()), s.flux, s.wave, s.target, s.seg,
                                    s.S, {.init = ts::zeros({3, s.S, 9}, ts::f64, bad.sharding())});
      },
      "[resample_accumulate_vjp]", {"init"});
}

TEST(ResampleAccumulateRules, ShardedRowsAreNotGathered) {
  // The gradient's rows stay where the particles lie: each device's block
  // of the flux cotangent is its own rows (a gather would still give the
  // right values, so the layout is what is checked).
  const Spectra s = spectra(line(3));
  const ts::Array g = ts::grad([&](const ts::Array& f) { return ts::sum(cube(s, f, s.weights, s.scale)); })(s.flux);
  EXPECT_EQ(g.sharding(), s.flux.sharding());
  EXPECT_EQ(ts::typeof(g), ts::typeof(s.flux));
}

TEST(ResampleAccumulateRules, UnderJit) {
  // One compiled program for the forward and backward passes gives the
  // eager gradient (the rows stay sharded over 3 devices).
  const Spectra s = spectra(line(3));
  const ts::Mesh mesh = s.flux.sharding().mesh();
  const Table t = table(mesh);
  auto loss = [&](const ts::Array& w) {
    const ts::Array q = ts::multiply(w, 1.2);
    return ts::add(ts::sum(cube(s, s.flux, w, s.scale)), ts::sum(ts::interp2d(q, q, t.x, t.y, t.f)));
  };
  auto jg = ts::jit([&](ts::Array w) { return ts::grad(loss)(w); });
  expect_close(jg(s.weights).to_vector<double>(), ts::grad(loss)(s.weights).to_vector<double>(), "jit(grad)");
}

TEST(ResampleAccumulateRules, WavelengthGridsAreRefused) {
  const Spectra s = spectra(line(1));
  expect_error<ts::Error>(
      [&] {
        ts::jvp([&](const ts::Array& w) {
          return ts::exact_total(ts::resample_accumulate(s.flux, w, s.target, s.seg, s.S, 1e3), ts::f64);
        }, {s.wave}, {s.wave});
      },
      "[resample_accumulate] is not differentiable with respect to the wavelength grids",
      {"expected tangents for flux, weights, wave_scale and init only", "got a tangent for wave"});
}

// ============================================== exact_limbs / exact_total

TEST(ExactRules, LimbsAndTotalAreLinear) {
  for (int nd : kMeshes) {
    const ts::Mesh mesh = line(nd);
    const ts::Array x = ts::device_put(wave_values(10 * 3, 8, -5, 5), {10, 3}, ts::NamedSharding(mesh, ts::P("x")));
    const std::string on = " on " + std::to_string(nd) + " devices";
    // A sum over the sharded rows through the limbs, read back.
    check_derivatives(
        [](const ts::Array& a) { return ts::exact_total(ts::sum(ts::exact_limbs(a, 100.0), {1}), ts::f64); }, x,
        "exact sum" + on);
    check_derivatives([](const ts::Array& a) { return ts::exact_total(ts::exact_limbs(a, 100.0), ts::f64); }, x,
                      "round trip" + on);
    // The tangent of the limbs is an accumulator holding the tangent's value.
    auto [l, tl] = ts::jvp([](const ts::Array& a) { return ts::exact_limbs(a, 100.0); }, {x}, {x});
    expect_close(ts::exact_total(tl, ts::f64).to_vector<double>(), x.to_vector<double>(), "limbs tangent" + on);
  }
}

// ============================================================ searchsorted

TEST(SearchRules, SearchsortedHasAZeroTangent) {
  for (int nd : kMeshes) {
    const ts::Mesh mesh = line(nd);
    const ts::Array edges = ts::device_put(std::vector<double>{0.0, 0.3, 0.5, 1.0}, {4}, ts::NamedSharding(mesh, ts::P()));
    const ts::Array x = ts::device_put(wave_values(9, 9, 0.01, 0.99), {9}, ts::NamedSharding(mesh, ts::P("x")));
    // x times its bin index: the index is piecewise constant.
    check_derivatives(
        [&](const ts::Array& a) {
          return ts::multiply(a, ts::astype(ts::searchsorted(edges, a, ts::Side::right), ts::f64));
        },
        x, "searchsorted on " + std::to_string(nd) + " devices");
  }
}

// ================================================================== median

TEST(SearchRules, MedianThroughTheMiddleElements) {
  for (int nd : kMeshes) {
    const ts::Mesh mesh = line(nd);
    const std::string on = " on " + std::to_string(nd) + " devices";
    for (std::int64_t n : {9, 10}) {
      const ts::Array x = ts::device_put(wave_values(n * 2, 10, -3, 3), {n, 2}, ts::NamedSharding(mesh, ts::P("x")));
      check_derivatives([](const ts::Array& a) { return ts::median(a, {0}); }, x,
                        "median of " + std::to_string(n) + on);
      const ts::Array mask = ts::device_put(
          [&] {
            std::vector<std::uint8_t> m(static_cast<size_t>(n * 2));
            for (size_t i = 0; i < m.size(); ++i) m[i] = i % 3 != 1;
            return m;
          }(),
          {n, 2}, ts::NamedSharding(mesh, ts::P("x")));
      check_derivatives([&](const ts::Array& a) { return ts::median(a, {0}, {.where = ts::astype(mask, ts::bool_)}); },
                        x, "masked median of " + std::to_string(n) + on);
    }
  }
}

TEST(SearchRules, EvenMedianSplitsTheDerivative) {
  const ts::Mesh mesh = line(2);
  const ts::Array x = ts::device_put(std::vector<double>{4, 1, 3, 2}, {4}, ts::NamedSharding(mesh, ts::P("x")));
  const ts::Array g = ts::grad([](const ts::Array& a) { return ts::median(a); })(x);
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0, 0, 0.5, 0.5}));
}

// ============================================================ convolutions

TEST(StencilRules, ConvolutionsAreDifferentiable) {
  for (int nd : kMeshes) {
    const ts::Mesh mesh = line(nd);
    const std::string on = " on " + std::to_string(nd) + " devices";
    const ts::NamedSharding rows(mesh, ts::P("x")), rep(mesh, ts::P());
    const ts::Array x = ts::device_put(wave_values(11 * 4, 11, -1, 1), {11, 4}, rows);
    const ts::Array k1 = ts::device_put(std::vector<double>{0.25, 0.5, 0.125}, {3}, rep);
    const ts::Array k2 = ts::device_put(wave_values(9, 12, -1, 1), {3, 3}, rep);
    check_derivatives([&](const ts::Array& a) { return ts::convolve(a, k1, 0); }, x, "convolve x" + on);
    // (convolve's kernel is differentiable in forward mode only.)
    check_derivatives([&](const ts::Array& a) { return ts::convolve(x, a, 0); }, k1, "convolve kernel" + on, false);
    check_derivatives([&](const ts::Array& a) { return ts::convolve2d(a, k2); }, x, "convolve2d x" + on);
  }
}

TEST(StencilRules, Convolve2dKernelGradientIsRefused) {
  const ts::Mesh mesh = line(2);
  const ts::Array x = ts::device_put(wave_values(20, 1, -1, 1), {5, 4}, ts::NamedSharding(mesh, ts::P("x")));
  const ts::Array k = ts::device_put(wave_values(4, 2, -1, 1), {2, 2}, ts::NamedSharding(mesh, ts::P()));
  expect_error<ts::Error>([&] { ts::grad([&](const ts::Array& a) { return ts::sum(ts::convolve2d(a, k)); })(x); },
                          "[convolve2d] reverse-mode differentiation is supported for x with an odd-sized kernel only",
                          {"(2, 2)"});
  // Forward mode in the kernel works.
  auto [y, t] = ts::jvp([&](const ts::Array& a) { return ts::convolve2d(x, a); }, {k}, {k});
  expect_close(t.to_vector<double>(), y.to_vector<double>(), "convolve2d is linear in its kernel");
}

}  // namespace
