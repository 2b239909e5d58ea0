// Elementwise ops: promotion, broadcasting, the sharding rule, and the SPMD
// property (gathered sharded result == single-device reference) on many
// meshes and layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <functional>

#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::numel;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::iota_data;

namespace {

// Host reference of a broadcasting binary op, in double.
std::vector<double> ref_binary(const std::vector<double>& a, const ts::Shape& as, const std::vector<double>& b,
                               const ts::Shape& bs, const ts::Shape& out, const std::function<double(double, double)>& f) {
  const int r = static_cast<int>(out.size());
  std::vector<double> y(static_cast<size_t>(numel(out)));
  std::vector<std::int64_t> idx(r, 0);
  auto offset = [&](const ts::Shape& s) {
    std::int64_t o = 0;
    const int sr = static_cast<int>(s.size());
    for (int d = 0; d < sr; ++d) o = o * s[d] + (s[d] == 1 ? 0 : idx[d + r - sr]);
    return o;
  };
  for (size_t k = 0; k < y.size(); ++k) {
    y[k] = f(a[offset(as)], b[offset(bs)]);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Equal element by element, NaN matching NaN.
void expect_same(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": " << got[i] << ", want NaN";
    else
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
  }
}

// JAX's maximum / minimum: NaN in either operand gives NaN.
double ref_max(double u, double v) { return std::isnan(u) || std::isnan(v) ? NAN : std::max(u, v); }
double ref_min(double u, double v) { return std::isnan(u) || std::isnan(v) ? NAN : std::min(u, v); }

// Host data with many ties between the two operands: values -2..2, and (when
// `nan_every` > 0) NaN at every nan_every-th element starting at nan_from.
std::vector<double> small_data(std::int64_t n, int salt, int nan_every = 0, int nan_from = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<double>((i * 3 + salt) % 5 - 2);
    if (nan_every > 0 && i % nan_every == nan_from) v[i] = NAN;
  }
  return v;
}

ts::NamedSharding replicated(const ts::Mesh& m) { return ts::NamedSharding(m, ts::P()); }

}  // namespace

TEST(ElementwisePromotion, JaxLikeTable) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto i32 = ts::device_put(std::vector<std::int32_t>{1, 2, 3}, {3}, replicated(m));
  auto i64 = ts::device_put(std::vector<std::int64_t>{1, 2, 3}, {3}, replicated(m));
  auto f32 = ts::device_put(std::vector<float>{1, 2, 3}, {3}, replicated(m));
  auto f64 = ts::device_put(std::vector<double>{1, 2, 3}, {3}, replicated(m));
  auto b = ts::device_put(std::vector<bool>{true, false, true}, {3}, replicated(m));
  EXPECT_EQ((i32 + f32).dtype(), ts::f32);
  EXPECT_EQ((i32 + i64).dtype(), ts::i64);
  EXPECT_EQ((i64 + f32).dtype(), ts::f32);
  EXPECT_EQ((f32 + f64).dtype(), ts::f64);
  EXPECT_EQ((b + i32).dtype(), ts::i32);
  EXPECT_EQ((b + b).dtype(), ts::bool_);
  // Weak scalars.
  EXPECT_EQ((2.0 * f32).dtype(), ts::f32);
  EXPECT_EQ((f32 + 1).dtype(), ts::f32);
  EXPECT_EQ((i32 + 2).dtype(), ts::i32);
  EXPECT_EQ((i32 * 2.5).dtype(), ts::f32);
  EXPECT_EQ((b + 1).dtype(), ts::i32);
  EXPECT_EQ((i64 + 1).dtype(), ts::i64);
  // Division and comparisons.
  EXPECT_EQ((i32 / i32).dtype(), ts::f32);
  EXPECT_EQ((f64 / 2).dtype(), ts::f64);
  EXPECT_EQ((i32 < f32).dtype(), ts::bool_);
  EXPECT_EQ(ts::sin(i32).dtype(), ts::f32);
  EXPECT_EQ(ts::abs(i32).dtype(), ts::i32);
  EXPECT_EQ(ts::isnan(f32).dtype(), ts::bool_);
  EXPECT_EQ((b + b).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ((i32 / i32).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ((i32 * 2.5).to_vector<float>(), (std::vector<float>{2.5f, 5.f, 7.5f}));
}

TEST(ElementwiseGolden, ContractExample) {
  ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<float> h(10 * 8);
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0.01f * static_cast<float>(i);
  ts::Array a = ts::device_put(h, {10, 8}, ts::NamedSharding(m, ts::P("x", "y")));
  ts::Array y = 2.0f * ts::sin(a) + 1.0f;
  EXPECT_EQ(ts::typeof(y), "f32[10@x,8@y]");
  auto got = y.to_vector<float>();
  for (size_t i = 0; i < h.size(); ++i) EXPECT_NEAR(got[i], 2.0f * std::sin(h[i]) + 1.0f, 1e-6f) << i;
}

// f32 exp and sigmoid are polynomial too: relative accuracy over the range,
// overflow to inf, underflow to 0 and denormals, NaN.
TEST(ElementwiseGolden, Float32ExpAccuracy) {
  std::vector<float> h;
  for (float v = -110.0f; v < 100.0f; v += 0.0173f) h.push_back(v);
  h.push_back(INFINITY);
  h.push_back(-INFINITY);
  h.push_back(std::nanf(""));
  ts::Mesh m = ts::make_mesh({4}, {"x"}, {}, ts::testing::ids({0, 1, 2, 3}));
  auto x = ts::device_put(h, {static_cast<std::int64_t>(h.size())}, ts::NamedSharding(m, ts::P("x")));
  auto e = ts::exp(x).to_vector<float>(), s = ts::sigmoid(x).to_vector<float>();
  for (size_t i = 0; i < h.size(); ++i) {
    const double want = std::exp(static_cast<double>(h[i]));
    const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(h[i])));
    if (std::isnan(h[i])) {
      EXPECT_TRUE(std::isnan(e[i]) && std::isnan(s[i]));
    } else if (want > 3.4e38) {
      EXPECT_EQ(e[i], INFINITY) << h[i];
    } else {
      EXPECT_NEAR(e[i], want, 2e-7 * want + 1e-45) << h[i];
    }
    if (!std::isnan(h[i])) {
      EXPECT_NEAR(s[i], sig, 2e-7) << h[i];
    }
  }
}

// f32 sin/cos are polynomial (vectorised); check them against double math
// over a wide range, including the large-argument fallback, inf and NaN.
TEST(ElementwiseGolden, Float32TrigAccuracy) {
  std::vector<float> h;
  for (float v = -9000.0f; v < 9000.0f; v += 0.731f) h.push_back(v);
  for (float v = -3.5f; v < 3.5f; v += 1e-3f) h.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, 1e6f, -3e7f, 1e30f}) h.push_back(v);
  h.push_back(INFINITY);
  h.push_back(std::nanf(""));
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::device_put(h, {static_cast<std::int64_t>(h.size())}, ts::NamedSharding(m, ts::P("x")));
  auto s = ts::sin(x).to_vector<float>(), c = ts::cos(x).to_vector<float>();
  for (size_t i = 0; i < h.size(); ++i) {
    if (!std::isfinite(h[i])) {
      EXPECT_TRUE(std::isnan(s[i]) && std::isnan(c[i])) << h[i];
      continue;
    }
    const double tol = std::fabs(h[i]) <= 8192.0f ? 2e-7 : 1e-6;
    EXPECT_NEAR(s[i], std::sin(static_cast<double>(h[i])), tol) << h[i];
    EXPECT_NEAR(c[i], std::cos(static_cast<double>(h[i])), tol) << h[i];
  }
  EXPECT_EQ(std::signbit(s[h.size() - 8]), false);  // sin(+0) = +0
  EXPECT_EQ(std::signbit(s[h.size() - 7]), true);   // sin(-0) = -0
}

// f64 sin/cos are polynomial too, within a few ulp of the exact value up
// to |x| = 1e5 (an absolute bound: the reduction's error is absolute);
// beyond, the shared slow path (kernels/libm.hpp: an exact reduction) is
// within 0.55 ulp of the exact value, measured in ulp of the result, so a
// platform's libm (1 or 2 ulp off here and there) or a polynomial past its
// range fails. Exact: long double (glibc's sinl / cosl reduce exactly). On
// emulated and real GPUs too (the cuda suites): the same bits.
TEST(ElementwiseGolden, Float64TrigAccuracy) {
  std::vector<double> h;
  for (double v = -1.2e5; v < 1.2e5; v += 7.31) h.push_back(v);
  for (double v = -7.0; v < 7.0; v += 1e-3) h.push_back(v);
  for (double v = 1e5; v < 1e300; v *= 1.37) h.push_back(v), h.push_back(-v);
  const std::vector<double> special = {0.0, -0.0, 1e-300, 3.141592653589793, 1.5707963267948966, 1e5, 0x1.86a0000000001p+16,
                                       1e6, -3e7, 1e22, 1e300, 1.7976931348623157e308, 0x1.6ac5b262ca1ffp+849,
                                       INFINITY, -INFINITY, std::nan("")};
  const std::size_t first_special = h.size();
  h.insert(h.end(), special.begin(), special.end());
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::device_put(h, {static_cast<std::int64_t>(h.size())}, ts::NamedSharding(m, ts::P("x")));
  auto s = ts::sin(x).to_vector<double>(), c = ts::cos(x).to_vector<double>();
  // The error in ulp of the exact value's binade.
  auto ulps = [](double got, long double exact) {
    int e = 0;
    std::frexp(exact, &e);
    return static_cast<double>(std::fabs(static_cast<long double>(got) - exact) / std::ldexp(1.0L, std::max(e - 53, -1074)));
  };
  double worst_abs = 0, worst_ulp = 0;
  long slow = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    if (!std::isfinite(h[i])) {
      EXPECT_TRUE(std::isnan(s[i]) && std::isnan(c[i])) << h[i];
      continue;
    }
    const long double xs = std::sin(static_cast<long double>(h[i])), xc = std::cos(static_cast<long double>(h[i]));
    if (std::fabs(h[i]) > 1e5) {
      ++slow;
      worst_ulp = std::max({worst_ulp, ulps(s[i], xs), ulps(c[i], xc)});
      EXPECT_LT(ulps(s[i], xs), 0.55) << h[i];
      EXPECT_LT(ulps(c[i], xc), 0.55) << h[i];
      continue;
    }
    worst_abs = std::max({worst_abs, static_cast<double>(std::fabs(s[i] - xs)), static_cast<double>(std::fabs(c[i] - xc))});
    ASSERT_NEAR(s[i], static_cast<double>(xs), 3e-16) << h[i];
    ASSERT_NEAR(c[i], static_cast<double>(xc), 3e-16) << h[i];
  }
  EXPECT_GT(slow, 4000);
  std::printf("  polynomial: max abs error %.3g; slow path (%ld inputs): max %.4f ulp\n", worst_abs, slow, worst_ulp);
  EXPECT_EQ(std::signbit(s[first_special]), false);     // sin(+0) = +0
  EXPECT_EQ(std::signbit(s[first_special + 1]), true);  // sin(-0) = -0
  // The double nearest a multiple of pi/2: cos is all cancellation.
  EXPECT_EQ(c[first_special + 12], -0x1.14ae72e6ba22fp-61);
}

// f32 tanh and log are polynomial too: within a few ulp of double math over
// their whole range, with the special values recomputed exactly.
TEST(ElementwiseGolden, Float32TanhLogAccuracy) {
  std::vector<float> h;
  for (float v = -12.0f; v < 12.0f; v += 1.3e-3f) h.push_back(v);
  for (float v = 1e-6f; v < 1e6f; v *= 1.0007f) h.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, 1e-40f, 3e38f, -1.0f, 0.625f, -0.625f, 9.0f, 50.0f, -50.0f}) h.push_back(v);
  h.push_back(INFINITY);
  h.push_back(-INFINITY);
  h.push_back(std::nanf(""));
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::device_put(h, {static_cast<std::int64_t>(h.size())}, ts::NamedSharding(m, ts::P("x")));
  auto t = ts::tanh(x).to_vector<float>(), l = ts::log(x).to_vector<float>();
  // Relative error bound: 4 ulp of f32 (2^-21), absolute near zero.
  auto close = [](float got, double want) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(got - want) <= 4.8e-7 * std::fabs(want) + 1e-38;
  };
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_TRUE(close(t[i], std::tanh(static_cast<double>(h[i])))) << "tanh(" << h[i] << ") = " << t[i];
    EXPECT_TRUE(close(l[i], std::log(static_cast<double>(h[i])))) << "log(" << h[i] << ") = " << l[i];
  }
  EXPECT_TRUE(std::signbit(t[h.size() - 13]));  // tanh(-0) = -0
}

// a (shape as) op b (shape bs) over every layout of `a` and a spread of b's.
void check_binary_layouts(const ts::Shape& as, const ts::Shape& bs) {
  const ts::Shape out = [&] {
    ts::Shape o(std::max(as.size(), bs.size()));
    for (size_t i = 0; i < o.size(); ++i) {
      std::int64_t da = i < o.size() - as.size() ? 1 : as[i - (o.size() - as.size())];
      std::int64_t db = i < o.size() - bs.size() ? 1 : bs[i - (o.size() - bs.size())];
      o[i] = da == 1 ? db : da;
    }
    return o;
  }();
  const auto ha = iota_data<double>(numel(as), 3), hb = iota_data<double>(numel(bs), 11);
  const auto want_add = ref_binary(ha, as, hb, bs, out, [](double u, double v) { return u + v; });
  const auto want_max = ref_binary(ha, as, hb, bs, out, [](double u, double v) { return std::max(u, v); });
  const auto want_lt = ref_binary(ha, as, hb, bs, out, [](double u, double v) { return u < v ? 1.0 : 0.0; });
  // Comparisons and minimum / maximum on operands with ties and NaNs (in both
  // operands, at different places): f32 a against f64 b (compared in f64),
  // and i32 against i32 (ties, no NaN).
  const auto ca = small_data(numel(as), 1, 4, 1), cb = small_data(numel(bs), 2, 5, 3);
  const auto ia = small_data(numel(as), 4), ib = small_data(numel(bs), 0);
  struct Cmp {
    const char* name;
    std::function<ts::Array(const ts::Array&, const ts::Array&)> op;
    std::function<double(double, double)> ref;
    bool returns_bool;
  };
  const std::vector<Cmp> cmps = {
      {"maximum", [](const ts::Array& a, const ts::Array& b) { return ts::maximum(a, b); }, ref_max, false},
      {"minimum", [](const ts::Array& a, const ts::Array& b) { return ts::minimum(a, b); }, ref_min, false},
      {"==", [](const ts::Array& a, const ts::Array& b) { return a == b; },
       [](double u, double v) { return u == v ? 1.0 : 0.0; }, true},
      {"!=", [](const ts::Array& a, const ts::Array& b) { return a != b; },
       [](double u, double v) { return u != v ? 1.0 : 0.0; }, true},
      {"<", [](const ts::Array& a, const ts::Array& b) { return a < b; },
       [](double u, double v) { return u < v ? 1.0 : 0.0; }, true},
      {"<=", [](const ts::Array& a, const ts::Array& b) { return a <= b; },
       [](double u, double v) { return u <= v ? 1.0 : 0.0; }, true},
      {">", [](const ts::Array& a, const ts::Array& b) { return a > b; },
       [](double u, double v) { return u > v ? 1.0 : 0.0; }, true},
      {">=", [](const ts::Array& a, const ts::Array& b) { return a >= b; },
       [](double u, double v) { return u >= v ? 1.0 : 0.0; }, true},
  };
  std::vector<std::vector<double>> want_c, want_i;
  for (const auto& c : cmps) {
    want_c.push_back(ref_binary(ca, as, cb, bs, out, c.ref));
    want_i.push_back(ref_binary(ia, as, ib, bs, out, c.ref));
  }
  int cases = 0;
  for_each_layout(static_cast<int>(as.size()), [&](const ts::NamedSharding& sa) {
    std::vector<ts::NamedSharding> sbs{ts::NamedSharding(sa.mesh(), ts::P())};
    for (const auto& name : sa.mesh().axis_names()) {
      std::vector<ts::PartitionSpec::Entry> e(bs.size(), ts::none);
      if (!bs.empty()) e.back() = name;
      sbs.emplace_back(sa.mesh(), ts::PartitionSpec(e));
    }
    for (const auto& sb : sbs) {
      SCOPED_TRACE("a " + sa.str() + " " + ts::shape_str(as) + ", b " + sb.str() + " " + ts::shape_str(bs));
      auto a = ts::device_put(std::vector<std::int32_t>(ha.begin(), ha.end()), as, sa);
      auto b = ts::device_put(std::vector<double>(hb.begin(), hb.end()), bs, sb);
      auto y = a + b;
      ASSERT_EQ(y.shape(), out);
      ASSERT_EQ(y.dtype(), ts::f64);
      EXPECT_EQ(y.to_vector<double>(), want_add);
      EXPECT_EQ(ts::maximum(a, b).to_vector<double>(), want_max);
      EXPECT_EQ(as_double((a < b).to_vector<std::int32_t>()), want_lt);
      const auto fa = ts::device_put(std::vector<float>(ca.begin(), ca.end()), as, sa);
      const auto fb = ts::device_put(cb, bs, sb);
      const auto i32a = ts::device_put(std::vector<std::int32_t>(ia.begin(), ia.end()), as, sa);
      const auto i32b = ts::device_put(std::vector<std::int32_t>(ib.begin(), ib.end()), bs, sb);
      for (size_t k = 0; k < cmps.size(); ++k) {
        const auto& c = cmps[k];
        auto yf = c.op(fa, fb);
        auto yi = c.op(i32a, i32b);
        ASSERT_EQ(yf.shape(), out) << c.name;
        EXPECT_EQ(yf.dtype(), c.returns_bool ? ts::bool_ : ts::f64) << c.name;
        EXPECT_EQ(yi.dtype(), c.returns_bool ? ts::bool_ : ts::i32) << c.name;
        expect_same(yf.to_vector<double>(), want_c[k], std::string(c.name) + " f32 vs f64");
        expect_same(yi.to_vector<double>(), want_i[k], std::string(c.name) + " i32 vs i32");
      }
      // Every shard holds its block of the output sharding.
      for (const auto& sh : y.addressable_shards())
        EXPECT_EQ(sh.index, y.sharding().shard_index(out, y.sharding().mesh().device_position(sh.device)));
      ++cases;
    }
  });
  EXPECT_GT(cases, 50);
}

TEST(ElementwiseSpmd, SameShapes) { check_binary_layouts({7, 5}, {7, 5}); }
TEST(ElementwiseSpmd, BroadcastRow) { check_binary_layouts({6, 5}, {5}); }
TEST(ElementwiseSpmd, BroadcastColumn) { check_binary_layouts({6, 5}, {6, 1}); }
TEST(ElementwiseSpmd, BroadcastBothWays) { check_binary_layouts({1, 5}, {3, 1}); }
TEST(ElementwiseSpmd, SmallerThanShardCount) { check_binary_layouts({3, 2}, {3, 2}); }
TEST(ElementwiseSpmd, ZeroSize) { check_binary_layouts({0, 4}, {4}); }
TEST(ElementwiseSpmd, Rank3) { check_binary_layouts({2, 3, 5}, {3, 1}); }

TEST(ElementwiseSpmd, UnaryOpsEveryLayout) {
  const ts::Shape shape{9, 4};
  std::vector<double> h(36);
  for (size_t i = 0; i < h.size(); ++i) h[i] = -2.3 + 0.17 * static_cast<double>(i);
  struct U {
    const char* name;
    std::function<ts::Array(const ts::Array&)> op;
    std::function<double(double)> ref;
  };
  const std::vector<U> ops = {
      {"neg", [](const ts::Array& x) { return -x; }, [](double v) { return -v; }},
      {"abs", [](const ts::Array& x) { return ts::abs(x); }, [](double v) { return std::abs(v); }},
      {"exp", [](const ts::Array& x) { return ts::exp(x); }, [](double v) { return std::exp(v); }},
      {"log", [](const ts::Array& x) { return ts::log(ts::abs(x)); }, [](double v) { return std::log(std::abs(v)); }},
      {"log1p", [](const ts::Array& x) { return ts::log1p(ts::abs(x)); },
       [](double v) { return std::log1p(std::abs(v)); }},
      {"expm1", [](const ts::Array& x) { return ts::expm1(x); }, [](double v) { return std::expm1(v); }},
      {"sqrt", [](const ts::Array& x) { return ts::sqrt(ts::abs(x)); }, [](double v) { return std::sqrt(std::abs(v)); }},
      {"rsqrt", [](const ts::Array& x) { return ts::rsqrt(ts::abs(x)); },
       [](double v) { return 1.0 / std::sqrt(std::abs(v)); }},
      {"sin", [](const ts::Array& x) { return ts::sin(x); }, [](double v) { return std::sin(v); }},
      {"cos", [](const ts::Array& x) { return ts::cos(x); }, [](double v) { return std::cos(v); }},
      {"tanh", [](const ts::Array& x) { return ts::tanh(x); }, [](double v) { return std::tanh(v); }},
      {"sigmoid", [](const ts::Array& x) { return ts::sigmoid(x); }, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"floor", [](const ts::Array& x) { return ts::floor(x); }, [](double v) { return std::floor(v); }},
      {"ceil", [](const ts::Array& x) { return ts::ceil(x); }, [](double v) { return std::ceil(v); }},
      {"round", [](const ts::Array& x) { return ts::round(x * 2.0); }, [](double v) { return std::nearbyint(v * 2.0); }},
      {"sign", [](const ts::Array& x) { return ts::sign(x); }, [](double v) { return double((v > 0) - (v < 0)); }},
  };
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    auto x = ts::device_put(h, shape, s);
    for (const auto& u : ops) {
      SCOPED_TRACE(std::string(u.name) + " on " + s.str());
      auto y = u.op(x);
      EXPECT_EQ(y.sharding(), s);
      auto got = y.to_vector<double>();
      for (size_t i = 0; i < h.size(); ++i) EXPECT_NEAR(got[i], u.ref(h[i]), 1e-12 * (1 + std::abs(u.ref(h[i])))) << i;
    }
  });
}

TEST(ElementwiseGolden, PredicatesLogicalWhereClipAstype) {
  ts::Mesh m = ts::make_mesh({4, 2}, {"x", "y"});
  ts::NamedSharding s(m, ts::P("x"));
  const double nan = std::nan("");
  const double inf = INFINITY;
  auto x = ts::device_put(std::vector<double>{1.5, -2.5, nan, inf, 0.5, -0.5}, {6}, s);
  EXPECT_EQ(ts::isnan(x).to_vector<bool>(), (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_EQ(ts::isfinite(x).to_vector<bool>(), (std::vector<bool>{true, true, false, false, true, true}));
  auto r = ts::round(x).to_vector<double>();  // half to even
  EXPECT_EQ(r[0], 2.0);
  EXPECT_EQ(r[1], -2.0);
  EXPECT_EQ(r[4], 0.0);
  auto p = ts::device_put(std::vector<bool>{true, true, false, false}, {4}, s);
  auto q = ts::device_put(std::vector<bool>{true, false, true, false}, {4}, s);
  EXPECT_EQ(ts::logical_and(p, q).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(ts::logical_or(p, q).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(ts::logical_xor(p, q).to_vector<bool>(), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ((!p).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  auto a = ts::device_put(std::vector<std::int32_t>{1, 2, 3, 4}, {4}, s);
  auto b = ts::device_put(std::vector<std::int32_t>{10, 20, 30, 40}, {4}, ts::NamedSharding(m, ts::P()));
  EXPECT_EQ(ts::where(p, a, b).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 30, 40}));
  EXPECT_EQ(ts::where(p, a, 0).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 0, 0}));
  EXPECT_EQ(ts::where(p, -1, b).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-1, -1, 30, 40}));
  EXPECT_EQ(ts::clip(a, 2, 3).to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 2, 3, 3}));
  EXPECT_EQ(ts::clip(a, std::nullopt, 2).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 2, 2}));
  auto f = ts::device_put(std::vector<float>{-1.7f, 0.0f, 2.9f}, {3}, s);
  EXPECT_EQ(ts::astype(f, ts::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-1, 0, 2}));
  EXPECT_EQ(ts::astype(f, ts::bool_).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  // Integer pow, floor division semantics are not exposed; divide is true division.
  EXPECT_EQ(ts::pow(a, 2).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 4, 9, 16}));
  EXPECT_EQ((7 - a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{6, 5, 4, 3}));
  auto mx = ts::maximum(x, 0.0).to_vector<double>();
  EXPECT_TRUE(std::isnan(mx[2]));  // NaN propagates
  expect_same(ts::minimum(x, 0.0).to_vector<double>(), {0.0, -2.5, nan, 0.0, 0.0, -0.5}, "minimum(x, 0)");
  expect_same(ts::minimum(1.0, x).to_vector<double>(), {1.0, -2.5, nan, 1.0, 0.5, -0.5}, "minimum(1, x)");
  expect_same(ts::maximum(0.0, x).to_vector<double>(), {1.5, 0.0, nan, inf, 0.5, 0.0}, "maximum(0, x)");
  // Every comparison with NaN is false, except !=.
  EXPECT_EQ((x == x).to_vector<bool>(), (std::vector<bool>{true, true, false, true, true, true}));
  EXPECT_EQ((x != x).to_vector<bool>(), (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_EQ((x <= x).to_vector<bool>(), (std::vector<bool>{true, true, false, true, true, true}));
  EXPECT_EQ((x >= 0.5).to_vector<bool>(), (std::vector<bool>{true, false, false, true, true, false}));
  EXPECT_EQ((0.5 <= x).to_vector<bool>(), (std::vector<bool>{true, false, false, true, true, false}));
  EXPECT_EQ((x != 0.5).to_vector<bool>(), (std::vector<bool>{true, true, true, true, false, true}));
  EXPECT_EQ((x == 0.5).to_vector<bool>(), (std::vector<bool>{false, false, false, false, true, false}));
}

TEST(ElementwiseSharding, MergesCompatibleShardingsWithoutMovingData) {
  ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  auto a = ts::device_put(iota_data<float>(8 * 12), {8, 12}, ts::NamedSharding(m, ts::P("x")));
  auto b = ts::device_put(iota_data<float>(8 * 12, 5), {8, 12}, ts::NamedSharding(m, ts::P(ts::none, "y")));
  ts::Array y;
  auto ex = ts::explain([&] { y = a + b; });
  EXPECT_EQ(ts::typeof(y), "f32[8@x,12@y]");
  EXPECT_EQ(ex.bytes_moved(), 0);  // local slices only
  // Replicated + sharded keeps the sharding, nothing moves.
  auto r = ts::device_put(iota_data<float>(12), {12}, ts::NamedSharding(m, ts::P()));
  ts::Array z;
  auto ex2 = ts::explain([&] { z = a * r; });
  EXPECT_EQ(ts::typeof(z), "f32[8@x,12]");
  EXPECT_EQ(ex2.bytes_moved(), 0);
}

TEST(ElementwiseSharding, AutoConflictMovesFewestBytes) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  // Equal sizes: either layout moves as much; the first operand's wins.
  auto p = ts::device_put(iota_data<float>(64), {16, 4}, ts::NamedSharding(m, ts::P("x")));
  auto q = ts::device_put(iota_data<float>(64), {16, 4}, ts::NamedSharding(m, ts::P(ts::none, "x")));
  EXPECT_EQ((p + q).sharding().spec(), ts::P("x"));
  EXPECT_EQ((q + p).sharding().spec(), ts::P(ts::none, "x"));
  // a (16,1) on rows, b (16,4) on columns. Keeping a's layout, each device
  // receives b's 2x4 block (28 bytes it lacks); keeping b's, each device
  // would need all 16 values of a (56 bytes): a's layout wins although b is
  // the larger operand.
  auto a = ts::device_put(iota_data<float>(16), {16, 1}, ts::NamedSharding(m, ts::P("x")));
  auto b = ts::device_put(iota_data<float>(16 * 4), {16, 4}, ts::NamedSharding(m, ts::P(ts::none, "x")));
  auto y = a + b;
  EXPECT_EQ(y.sharding().spec(), ts::P("x"));
  auto ha = a.to_vector<float>(), hb = b.to_vector<float>(), hy = y.to_vector<float>();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(hy[i * 4 + j], ha[i] + hb[i * 4 + j]);
}

TEST(ElementwiseSharding, ExplicitModeKnowsTypeAndRejectsConflicts) {
  ts::Mesh m = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  auto a = ts::device_put(iota_data<float>(8 * 4), {8, 4}, ts::NamedSharding(m, ts::P("X")));
  auto r = ts::device_put(iota_data<float>(4), {4}, ts::NamedSharding(m, ts::P()));
  EXPECT_EQ(ts::typeof(a * r), "f32[8@X,4]");
  auto c = ts::device_put(iota_data<float>(8 * 4), {8, 4}, ts::NamedSharding(m, ts::P(ts::none, "X")));
  expect_error<ts::ShardingError>([&] { (void)(a + c); }, "[add]", {"incompatible shardings for broadcasting", "f32[8@X,4]", "f32[8,4@X]", "out_sharding"});
  // out_sharding resolves it.
  auto y = ts::add(a, c, {.out_sharding = ts::P("X")});
  EXPECT_EQ(ts::typeof(y), "f32[8@X,4]");
  auto ha = a.to_vector<float>(), hc = c.to_vector<float>(), hy = y.to_vector<float>();
  for (size_t i = 0; i < ha.size(); ++i) EXPECT_EQ(hy[i], ha[i] + hc[i]);
}

TEST(ElementwiseErrors, ShapesMeshesEmpty) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto d = ts::devices();
  ts::Mesh m4(std::vector<ts::Device>(d.begin(), d.begin() + 4), {4}, {"x"});
  auto a = ts::device_put(iota_data<float>(3), {3}, ts::NamedSharding(m, ts::P()));
  auto b = ts::device_put(iota_data<float>(4), {4}, ts::NamedSharding(m, ts::P()));
  expect_error<ts::ShapeError>([&] { (void)(a + b); }, "[add]", {"(3,)", "(4,)", "cannot be broadcast"});
  expect_error<ts::ShapeError>([&] { (void)ts::where(a > 0, a, b); }, "[where]", {"cannot be broadcast"});
  auto c = ts::device_put(iota_data<float>(3), {3}, ts::NamedSharding(m4, ts::P()));
  expect_error<ts::ShardingError>([&] { (void)ts::multiply(a, c); }, "[multiply]", {"different meshes"});
  expect_error<ts::Error>([&] { (void)ts::sin(ts::Array()); }, "[sin]", {"empty"});
  expect_error<ts::ShardingError>([&] { (void)ts::add(a, a, {.out_sharding = ts::P("z")}); }, "[add]", {"'z'"});
  expect_error<ts::ShardingError>([&] { (void)ts::add(a, a, {.out_sharding = ts::P("x", ts::none)}); }, "[add]",
                                  {"rank 1"});
}

// Found by tessera_fuzz (under UBSan): integer add/negative/abs overflowed
// (undefined in C++) instead of wrapping as XLA does, and unary ops on an
// empty integer block passed a null buffer to memcpy/memset.
TEST(ElementwiseGolden, IntegerOverflowWrapsAndEmptyBlocks) {
  constexpr std::int32_t mx = std::numeric_limits<std::int32_t>::max(), mn = std::numeric_limits<std::int32_t>::min();
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    auto a = ts::device_put(std::vector<std::int32_t>{mx, mn, -5}, {3}, s);
    EXPECT_EQ((a + a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-2, 0, -10})) << s.str();
    EXPECT_EQ((a + 1).to_vector<std::int32_t>(), (std::vector<std::int32_t>{mn, mn + 1, -4})) << s.str();
    EXPECT_EQ(ts::negative(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-mx, mn, 5})) << s.str();
    EXPECT_EQ(ts::abs(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{mx, mn, 5})) << s.str();
    auto e = ts::device_put(std::vector<std::int64_t>{}, {0}, s);
    for (auto f : {&ts::isnan, &ts::isfinite, &ts::floor, &ts::ceil, &ts::negative}) EXPECT_EQ(f(e, {}).size(), 0);
  });
}

TEST(ElementwiseDeterminism, BitwiseEqualAcrossRuns) {
  ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<float> h(33 * 17);
  for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(0.37f * static_cast<float>(i));
  auto x = ts::device_put(h, {33, 17}, ts::NamedSharding(m, ts::P("x", "y")));
  auto run = [&] { return (ts::exp(x) * 3.0f - ts::tanh(x) / (x * x + 1.0f)).to_vector<float>(); };
  auto first = run();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run(), first);
}
