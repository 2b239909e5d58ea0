// Stencils and scans: diff, cumsum, convolve, convolve2d, interp.
// Naive references on host vectors, goldens (from numpy / scipy / jax), the
// SPMD property over many meshes and layouts (uneven, tiny and empty sizes
// included), the communication they emit (halos and totals only), every
// error path, the primitives' rules, and jit == eager bitwise.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <type_traits>

#include "primitives/stencil.hpp"
#include "tessera/tessera.hpp"
#include "test_util.hpp"
#include "trace_util.hpp"
#include "transforms/trace.hpp"

namespace ts = tessera;
using ts::testing::expect_jit_matches;
using ts::testing::expect_same;
using ts::testing::rule_of;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::iota_data;
using ts::testing::test_meshes;

namespace {

// -------------------------------------------------------------- host side

// Storage type of a dtype on the host (bool as uint8_t).
template <class R>
ts::Array put(const std::vector<R>& v, const ts::Shape& shape, const ts::NamedSharding& s) {
  if constexpr (std::is_same_v<R, std::uint8_t>) {
    std::vector<bool> b(v.begin(), v.end());
    return ts::device_put(b, shape, s);
  } else {
    return ts::device_put(v, shape, s);
  }
}

template <class R>
std::vector<R> fetch(const ts::Array& a) {
  if constexpr (std::is_same_v<R, std::uint8_t>) {
    auto v = a.to_vector<std::int32_t>();
    return std::vector<R>(v.begin(), v.end());
  } else {
    return a.to_vector<R>();
  }
}

template <class R>
std::vector<R> data_of(std::int64_t n, int salt = 0) {
  if constexpr (std::is_same_v<R, std::uint8_t>) {
    std::vector<R> v(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<R>(((i * 5 + salt) / 3) % 2);
    return v;
  } else {
    return iota_data<R>(n, salt);
  }
}

std::int64_t numel(const ts::Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

struct Lines {
  std::int64_t outer = 1, len = 0, inner = 1;
};
Lines lines(const ts::Shape& s, int axis) {
  Lines l;
  for (int d = 0; d < axis; ++d) l.outer *= s[d];
  l.len = s[axis];
  for (size_t d = axis + 1; d < s.size(); ++d) l.inner *= s[d];
  return l;
}

template <class R>
R ref_sub(R hi, R lo) {
  if constexpr (std::is_same_v<R, std::uint8_t>)
    return hi != lo;
  else if constexpr (std::is_integral_v<R>) {
    using U = std::make_unsigned_t<R>;
    return static_cast<R>(static_cast<U>(hi) - static_cast<U>(lo));
  } else {
    return hi - lo;
  }
}

// A prepend/append operand on the host: data and shape (rank 0 broadcasts).
template <class R>
struct Extra {
  std::vector<R> data;
  ts::Shape shape;
};

// jnp.diff: concatenate along axis, then n passes of differences.
template <class R>
std::vector<R> ref_diff(const std::vector<R>& x, const ts::Shape& shape, int n, int axis,
                        const std::optional<Extra<R>>& pre = {}, const std::optional<Extra<R>>& app = {}) {
  const Lines l = lines(shape, axis);
  auto rows_of = [&](const std::optional<Extra<R>>& e) -> std::int64_t {
    if (!e) return 0;
    return e->shape.empty() ? 1 : e->shape[axis];
  };
  const std::int64_t np = rows_of(pre), na = rows_of(app);
  std::int64_t len = np + l.len + na;
  // seq[o][r][j]
  std::vector<R> seq(static_cast<size_t>(l.outer * len * l.inner));
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t r = 0; r < len; ++r)
      for (std::int64_t j = 0; j < l.inner; ++j) {
        R v;
        if (r < np)
          v = pre->shape.empty() ? pre->data[0] : pre->data[(o * np + r) * l.inner + j];
        else if (r < np + l.len)
          v = x[(o * l.len + r - np) * l.inner + j];
        else
          v = app->shape.empty() ? app->data[0] : app->data[(o * na + r - np - l.len) * l.inner + j];
        seq[(o * len + r) * l.inner + j] = v;
      }
  for (int p = 0; p < n && len > 0; ++p) {
    std::vector<R> next(static_cast<size_t>(l.outer * (len - 1) * l.inner));
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t r = 0; r + 1 < len; ++r)
        for (std::int64_t j = 0; j < l.inner; ++j)
          next[(o * (len - 1) + r) * l.inner + j] =
              ref_sub(seq[(o * len + r + 1) * l.inner + j], seq[(o * len + r) * l.inner + j]);
    seq = std::move(next);
    --len;
  }
  return seq;
}

template <class R>
using CumOut = std::conditional_t<std::is_same_v<R, std::uint8_t>, std::int32_t, R>;

template <class R>
std::vector<CumOut<R>> ref_cumsum(const std::vector<R>& x, const ts::Shape& shape, int axis) {
  using O = CumOut<R>;
  const Lines l = lines(shape, axis);
  std::vector<O> out(x.size());
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t j = 0; j < l.inner; ++j) {
      O acc = 0;
      for (std::int64_t r = 0; r < l.len; ++r) {
        const auto i = (o * l.len + r) * l.inner + j;
        if constexpr (std::is_integral_v<O>) {
          using U = std::make_unsigned_t<O>;
          acc = static_cast<O>(static_cast<U>(acc) + static_cast<U>(static_cast<O>(x[i])));
        } else {
          acc += static_cast<O>(x[i]);
        }
        out[i] = acc;
      }
    }
  return out;
}

// np.convolve(line, w, 'same') for len(w) <= len(line), and the same centring
// (scipy.signal.convolve 'same') otherwise: out[i] = sum_k w[k] x[i + (K-1)/2 - k].
std::vector<double> ref_convolve(const std::vector<double>& x, const ts::Shape& shape, const std::vector<double>& w,
                                 int axis) {
  const Lines l = lines(shape, axis);
  const auto K = static_cast<std::int64_t>(w.size());
  std::vector<double> out(x.size(), 0.0);
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t j = 0; j < l.inner; ++j)
      for (std::int64_t i = 0; i < l.len; ++i) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          const std::int64_t r = i + (K - 1) / 2 - k;
          if (r >= 0 && r < l.len) acc += w[k] * x[(o * l.len + r) * l.inner + j];
        }
        out[(o * l.len + i) * l.inner + j] = acc;
      }
  return out;
}

// scipy.signal.convolve2d(x, w, mode='same') over the last two dims.
std::vector<double> ref_convolve2d(const std::vector<double>& x, const ts::Shape& shape, const std::vector<double>& w,
                                   std::int64_t kr, std::int64_t kc) {
  const int nd = static_cast<int>(shape.size());
  const std::int64_t R = shape[nd - 2], C = shape[nd - 1], outer = numel(shape) / std::max<std::int64_t>(R * C, 1);
  std::vector<double> out(x.size(), 0.0);
  if (R * C == 0) return out;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t j = 0; j < C; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < kr; ++p)
          for (std::int64_t q = 0; q < kc; ++q) {
            const std::int64_t r = i + (kr - 1) / 2 - p, c = j + (kc - 1) / 2 - q;
            if (r >= 0 && r < R && c >= 0 && c < C) acc += w[p * kc + q] * x[(o * R + r) * C + c];
          }
        out[(o * R + i) * C + j] = acc;
      }
  return out;
}

// jnp.interp's formula in double.
std::vector<double> ref_interp(const std::vector<double>& x, const std::vector<double>& xp,
                               const std::vector<double>& fp) {
  const auto n = static_cast<std::int64_t>(xp.size());
  std::vector<double> out(x.size());
  for (size_t e = 0; e < x.size(); ++e) {
    const double v = x[e];
    std::int64_t i = 0;
    while (i < n && (std::isnan(v) || xp[i] <= v)) ++i;
    i = std::min(std::max<std::int64_t>(i, 1), n - 1);
    const std::int64_t im1 = (i - 1 + n) % n;
    const double dx = xp[i] - xp[im1];
    double f = std::abs(dx) <= 0.0 ? fp[im1] : fp[im1] + (v - xp[im1]) / dx * (fp[i] - fp[im1]);
    if (v < xp[0]) f = fp[0];
    if (v > xp[n - 1]) f = fp[n - 1];
    out[e] = f;
  }
  return out;
}

// A 1-device replicated sharding on the first device.
ts::NamedSharding single() { return ts::NamedSharding(test_meshes()[0], ts::P()); }

ts::Array f64(const std::vector<double>& v, const ts::Shape& shape, const ts::NamedSharding& s) {
  return ts::device_put(v, shape, s);
}

ts::NamedSharding rows8() { return ts::NamedSharding(ts::make_mesh({8}, {"x"}), ts::P("x")); }

}  // namespace

// =================================================================== diff

TEST(Diff, Goldens) {
  auto s = single();
  EXPECT_EQ(ts::diff(f64({1, 4, 9, 16}, {4}, s)).to_vector<double>(), (std::vector<double>{3, 5, 7}));
  EXPECT_EQ(ts::diff(f64({1, 4, 9, 16}, {4}, s), 2).to_vector<double>(), (std::vector<double>{2, 2}));
  EXPECT_EQ(ts::diff(f64({1, 4, 9, 16}, {4}, s), 3).to_vector<double>(), (std::vector<double>{0}));
  EXPECT_EQ(ts::diff(f64({1, 4, 9, 16}, {4}, s), 5).shape(), (ts::Shape{0}));
  // jnp.diff([[1,2,4],[7,11,16]], axis=0, prepend=0) = [[1,2,4],[6,9,12]]
  std::vector<std::int32_t> m{1, 2, 4, 7, 11, 16};
  auto x = ts::device_put(m, {2, 3}, s);
  auto zero = ts::device_put(std::vector<std::int32_t>{0}, {}, s);
  auto d = ts::diff(x, 1, 0, {.prepend = zero});
  EXPECT_EQ(d.dtype(), ts::i32);
  EXPECT_EQ(d.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 4, 6, 9, 12}));
  // jnp.diff(same, n=2, axis=1, append=[[0],[1]]) = [[1,-6],[1,-20]]
  auto app = ts::device_put(std::vector<std::int32_t>{0, 1}, {2, 1}, s);
  EXPECT_EQ(ts::diff(x, 2, 1, {.append = app}).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, -6, 1, -20}));
  // bool uses not_equal: [T,F,F,T] -> [T,F,T]
  auto b = ts::diff(ts::device_put(std::vector<bool>{true, false, false, true}, {4}, s));
  EXPECT_EQ(b.dtype(), ts::bool_);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  // n = 0 returns x itself, prepend ignored (as jnp.diff).
  auto same = ts::diff(x, 0, 0, {.prepend = zero});
  EXPECT_EQ(same.shape(), x.shape());
  EXPECT_EQ(same.to_vector<std::int32_t>(), m);
}

TEST(Diff, DtypesPromoteLikeConcatenate) {
  auto s = single();
  auto x = ts::device_put(std::vector<std::int32_t>{1, 2}, {2}, s);
  auto p = ts::device_put(std::vector<double>{1.5}, {1}, s);
  auto d = ts::diff(x, 1, 0, {.prepend = p});
  EXPECT_EQ(d.dtype(), ts::f64);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{-0.5, 1.0}));
  auto bx = ts::device_put(std::vector<bool>{true, false}, {2}, s);
  auto d2 = ts::diff(bx, 1, 0, {.append = ts::device_put(std::vector<std::int32_t>{5}, {1}, s)});
  EXPECT_EQ(d2.dtype(), ts::i32);
  EXPECT_EQ(d2.to_vector<std::int32_t>(), (std::vector<std::int32_t>{-1, 5}));
  // Integer wrap-around, like XLA.
  auto big = ts::device_put(std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 1}, {2}, s);
  EXPECT_EQ(ts::diff(big).to_vector<std::int32_t>()[0], std::numeric_limits<std::int32_t>::min() + 1);
}

// Every layout, uneven and tiny sizes (size < devices, size <= n, 0), n = 1..3,
// with and without prepend/append (full arrays and scalars).
TEST(Diff, SpmdMatchesReference) {
  const std::vector<ts::Shape> shapes{{13, 6}, {3, 5}, {1, 4}, {0, 3}, {9, 0}};
  std::mt19937 rng(7);
  int checked = 0;
  for (const auto& shape : shapes) {
    const auto xv = data_of<float>(numel(shape));
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto x = put(xv, shape, s);
      for (int axis : {0, 1, -1}) {
        const int ax = axis < 0 ? axis + 2 : axis;
        for (int n : {1, 2, 3}) {
          auto d = ts::diff(x, n, axis);
          ASSERT_EQ(d.sharding(), s);
          ASSERT_EQ(d.to_vector<float>(), ref_diff(xv, shape, n, ax)) << s.str() << " n=" << n << " axis=" << axis;
          ++checked;
        }
        // prepend (2 rows, own random layout) and append (scalar or 1 row).
        ts::Shape ps = shape;
        ps[ax] = 2;
        Extra<float> pre{data_of<float>(numel(ps), 3), ps};
        auto pspec = ts::testing::random_spec(rng, s.mesh(), 2);
        auto pa = put(pre.data, ps, ts::NamedSharding(s.mesh(), pspec));
        for (bool scalar_app : {false, true}) {
          ts::Shape as = shape;
          as[ax] = 1;
          Extra<float> app{scalar_app ? std::vector<float>{2.5f} : data_of<float>(numel(as), 5),
                           scalar_app ? ts::Shape{} : as};
          auto aa = put(app.data, app.shape, ts::NamedSharding(s.mesh(), ts::P()));
          for (int n : {1, 3}) {
            auto d = ts::diff(x, n, axis, {.prepend = pa, .append = aa});
            ASSERT_EQ(d.sharding(), s);
            ASSERT_EQ(d.to_vector<float>(), ref_diff<float>(xv, shape, n, ax, pre, app))
                << s.str() << " prepend " << pspec.str() << " n=" << n << " axis=" << axis;
            ++checked;
          }
        }
      }
    });
  }
  EXPECT_GT(checked, 1000);
}

// 1-d and 3-d arrays, larger n, long prepends that shift every block.
TEST(Diff, SpmdOtherRanks) {
  for (std::int64_t len : {0, 1, 2, 5, 8, 17}) {
    const auto xv = data_of<double>(len);
    for_each_layout(1, [&](const ts::NamedSharding& s) {
      auto x = put(xv, {len}, s);
      for (int n : {1, 2, 4, 6}) ASSERT_EQ(ts::diff(x, n).to_vector<double>(), ref_diff(xv, {len}, n, 0)) << s.str();
      Extra<double> pre{data_of<double>(7, 1), {7}};
      auto pa = put(pre.data, {7}, s);
      for (int n : {1, 5})
        ASSERT_EQ(ts::diff(x, n, 0, {.prepend = pa, .append = pa}).to_vector<double>(),
                  ref_diff<double>(xv, {len}, n, 0, pre, pre))
            << s.str() << " n=" << n;
      // Scalars on both sides (each broadcast to one row).
      Extra<double> lo{{-3.0}, {}}, hi{{4.5}, {}};
      auto rep = ts::NamedSharding(s.mesh(), ts::P());
      for (int n : {1, 2})
        ASSERT_EQ(
            ts::diff(x, n, 0, {.prepend = put(lo.data, {}, rep), .append = put(hi.data, {}, rep)}).to_vector<double>(),
            ref_diff<double>(xv, {len}, n, 0, lo, hi))
            << s.str() << " n=" << n;
    });
  }
  const ts::Shape shape{3, 4, 5};
  const auto xv = data_of<std::int64_t>(60);
  for_each_layout(3, [&](const ts::NamedSharding& s) {
    auto x = put(xv, shape, s);
    for (int axis = 0; axis < 3; ++axis)
      for (int n : {1, 2})
        ASSERT_EQ(ts::diff(x, n, axis).to_vector<std::int64_t>(), ref_diff(xv, shape, n, axis))
            << s.str() << " axis=" << axis;
  });
}

template <class R>
void diff_dtype_case() {
  const ts::Shape shape{11, 3};
  const auto xv = data_of<R>(33);
  for (const auto& mesh : test_meshes()) {
    for (const auto& spec : {ts::P(mesh.axis_names()[0]), ts::P(ts::none, mesh.axis_names().back())}) {
      ts::NamedSharding s(mesh, spec);
      auto x = put(xv, shape, s);
      for (int n : {1, 2, 3}) {
        auto d = ts::diff(x, n, 0);
        ASSERT_EQ(d.dtype(), x.dtype());
        ASSERT_EQ(fetch<R>(d), ref_diff(xv, shape, n, 0)) << s.str() << " n=" << n;
      }
      Extra<R> pre{data_of<R>(3, 2), {1, 3}};
      auto d = ts::diff(x, 2, 0, {.prepend = put(pre.data, {1, 3}, s)});
      ASSERT_EQ(fetch<R>(d), ref_diff<R>(xv, shape, 2, 0, pre)) << s.str();
    }
  }
}

TEST(Diff, EveryDtype) {
  diff_dtype_case<std::uint8_t>();
  diff_dtype_case<std::int32_t>();
  diff_dtype_case<std::int64_t>();
  diff_dtype_case<float>();
  diff_dtype_case<double>();
}

// Explicit axes: every op keeps the operand's sharding, no out_sharding needed.
TEST(Stencil, ExplicitMesh) {
  auto mesh = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  const auto xv = data_of<float>(20 * 3);
  auto x = put(xv, {20, 3}, ts::NamedSharding(mesh, ts::P("X")));
  auto d = ts::diff(x, 1, 0);
  EXPECT_EQ(ts::typeof(d), "f32[19@X,3]");
  EXPECT_EQ(d.to_vector<float>(), ref_diff(xv, {20, 3}, 1, 0));
  auto c = ts::cumsum(x, 0);
  EXPECT_EQ(ts::typeof(c), "f32[20@X,3]");
  EXPECT_EQ(c.to_vector<float>(), ref_cumsum(xv, {20, 3}, 0));
  auto k = ts::device_put(std::vector<float>{1, 2, 1}, {3}, ts::NamedSharding(mesh, ts::P()));
  EXPECT_EQ(ts::typeof(ts::convolve(x, k, 0)), "f32[20@X,3]");
  auto k2 = ts::device_put(std::vector<float>{1, 2, 1, 0}, {2, 2}, ts::NamedSharding(mesh, ts::P()));
  EXPECT_EQ(ts::typeof(ts::convolve2d(x, k2)), "f32[20@X,3]");
  EXPECT_EQ(ts::typeof(ts::interp(x, k, k)), "f32[20@X,3]");
}

// Only halos cross devices: n rows per device boundary at most.
TEST(Diff, MovesOnlyHalos) {
  const ts::Shape shape{64, 64};
  const auto xv = data_of<float>(64 * 64);
  auto x = put(xv, shape, rows8());
  ts::Array d;
  auto ex = ts::explain([&] { d = ts::diff(x, 1, 0); });
  EXPECT_GT(ex.bytes_moved(), 0);
  EXPECT_LE(ex.bytes_moved(), 8 * 64 * 4) << ex.str();
  EXPECT_EQ(ex.bytes_moved(), 7 * 64 * 4) << ex.str();  // one row per block boundary
  EXPECT_EQ(d.to_vector<float>(), ref_diff(xv, shape, 1, 0));
  for (const auto& r : ex.records) EXPECT_EQ(r.op, "diff");

  for (int n : {2, 3}) {
    auto ex2 = ts::explain([&] { d = ts::diff(x, n, 0); });
    EXPECT_LE(ex2.bytes_moved(), 8 * n * 64 * 4) << ex2.str();
    EXPECT_EQ(d.to_vector<float>(), ref_diff(xv, shape, n, 0));
  }
  // With a replicated zero row prepended (the finite-difference benchmark).
  auto zero = put(std::vector<float>(64, 0.f), {1, 64}, ts::NamedSharding(x.sharding().mesh(), ts::P()));
  auto ex3 = ts::explain([&] { d = ts::diff(x, 1, 0, {.prepend = zero}); });
  EXPECT_EQ(ex3.bytes_moved(), 7 * 64 * 4) << ex3.str();
  EXPECT_EQ(d.shape(), shape);
  Extra<float> pre{std::vector<float>(64, 0.f), {1, 64}};
  EXPECT_EQ(d.to_vector<float>(), ref_diff<float>(xv, shape, 1, 0, pre));

  // Across the unsharded axis: nothing moves.
  auto ex4 = ts::explain([&] { d = ts::diff(x, 1, 1); });
  EXPECT_EQ(ex4.bytes_moved(), 0) << ex4.str();
  auto cols = put(xv, shape, ts::NamedSharding(x.sharding().mesh(), ts::P(ts::none, "x")));
  auto ex5 = ts::explain([&] { d = ts::diff(cols, 1, 0, {.prepend = zero}); });
  EXPECT_EQ(ex5.bytes_moved(), 0) << ex5.str();
  EXPECT_EQ(d.to_vector<float>(), ref_diff<float>(xv, shape, 1, 0, pre));
}

TEST(Diff, Errors) {
  auto s = single();
  auto x = f64({1, 2, 3, 4, 5, 6}, {2, 3}, s);
  expect_error<ts::ShapeError>([&] { ts::diff(x, -1); }, "[diff]", {"n must be >= 0", "-1"});
  expect_error<ts::ShapeError>([&] { ts::diff(x, 1, 2); }, "[diff]", {"axis 2", "rank 2"});
  expect_error<ts::ShapeError>([&] { ts::diff(x, 1, -3); }, "[diff]", {"axis -3"});
  expect_error<ts::ShapeError>([&] { ts::diff(f64({1}, {}, s)); }, "[diff]", {"at least 1-d", "()"});
  expect_error<ts::ShapeError>(
      [&] {
        ts::diff(x, 1, 0, {.prepend = f64({1, 2}, {1, 2}, s)});
      },
      "[diff]", {"prepend", "(2, 3)", "(1, 2)", "axis 0"});
  expect_error<ts::ShapeError>(
      [&] {
        ts::diff(x, 1, 1, {.append = f64({1, 2}, {2}, s)});
      },
      "[diff]", {"append", "(2,)"});
  expect_error<ts::Error>([&] { ts::diff(ts::Array{}); }, "[diff]", {"x"});
  expect_error<ts::Error>([&] { ts::diff(x, 1, 0, {.prepend = ts::Array{}}); }, "[diff]", {"prepend"});
  auto other = f64({0, 0, 0}, {1, 3}, ts::NamedSharding(test_meshes()[1], ts::P()));
  expect_error<ts::ShardingError>([&] { ts::diff(x, 1, 0, {.prepend = other}); }, "[diff]", {"different meshes"});
}

// ================================================================= cumsum

TEST(Cumsum, Goldens) {
  auto s = single();
  auto x = ts::device_put(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, {2, 3}, s);
  EXPECT_EQ(ts::cumsum(x, 0).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(ts::cumsum(x, -1).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 3, 6, 4, 9, 15}));
  auto b = ts::cumsum(ts::device_put(std::vector<bool>{true, true, false, true}, {4}, s), 0);
  EXPECT_EQ(b.dtype(), ts::i32);
  EXPECT_EQ(b.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 2, 3}));
  auto l = ts::cumsum(ts::device_put(std::vector<std::int64_t>{1, 2}, {2}, s), 0);
  EXPECT_EQ(l.dtype(), ts::i64);
}

TEST(Cumsum, SpmdMatchesReference) {
  const std::vector<ts::Shape> shapes{{13, 6}, {3, 5}, {1, 4}, {0, 3}, {5, 0}};
  int checked = 0;
  for (const auto& shape : shapes) {
    const auto xv = data_of<std::int32_t>(numel(shape));
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto x = put(xv, shape, s);
      for (int axis : {0, 1}) {
        auto c = ts::cumsum(x, axis);
        ASSERT_EQ(c.sharding(), s);
        ASSERT_EQ(c.to_vector<std::int32_t>(), ref_cumsum(xv, shape, axis)) << s.str() << " axis=" << axis;
        ++checked;
      }
    });
  }
  for (std::int64_t len : {0, 1, 3, 7, 29}) {
    const auto xv = data_of<double>(len);
    for_each_layout(1, [&](const ts::NamedSharding& s) {
      ASSERT_EQ(ts::cumsum(put(xv, {len}, s), 0).to_vector<double>(), ref_cumsum(xv, {len}, 0)) << s.str();
    });
  }
  const auto xv = data_of<float>(2 * 9 * 3);
  for_each_layout(3, [&](const ts::NamedSharding& s) {
    auto x = put(xv, {2, 9, 3}, s);
    for (int axis = 0; axis < 3; ++axis)
      ASSERT_EQ(ts::cumsum(x, axis).to_vector<float>(), ref_cumsum(xv, {2, 9, 3}, axis)) << s.str();
  });
  EXPECT_GT(checked, 400);
}

template <class R>
void cumsum_dtype_case() {
  const ts::Shape shape{10, 3};
  const auto xv = data_of<R>(30);
  for (const auto& mesh : test_meshes()) {
    ts::NamedSharding s(mesh, ts::P(mesh.axis_names()[0]));
    auto c = ts::cumsum(put(xv, shape, s), 0);
    ASSERT_EQ(c.dtype(), ts::dtype_of<CumOut<R>>());
    ASSERT_EQ(c.template to_vector<CumOut<R>>(), ref_cumsum(xv, shape, 0)) << s.str();
  }
}

TEST(Cumsum, EveryDtype) {
  cumsum_dtype_case<std::uint8_t>();
  cumsum_dtype_case<std::int32_t>();
  cumsum_dtype_case<std::int64_t>();
  cumsum_dtype_case<float>();
  cumsum_dtype_case<double>();
}

// Random floats: close to the sequential scan, and bitwise the same every run.
TEST(Cumsum, FloatsCloseAndDeterministic) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> xv(1000 * 4);
  for (auto& v : xv) v = u(rng);
  const auto ref = ref_cumsum(xv, {1000, 4}, 0);
  for (const auto& mesh : test_meshes()) {
    ts::NamedSharding s(mesh, ts::P(mesh.axis_names()[0]));
    auto x = put(xv, {1000, 4}, s);
    auto a = ts::cumsum(x, 0).to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], ref[i], 1e-12) << s.str();
    for (int rep = 0; rep < 3; ++rep) ASSERT_EQ(ts::cumsum(x, 0).to_vector<double>(), a);
  }
}

// Signed zeros as the sequential scan (and NumPy) gives them: y0 = x0, so a
// leading run of -0s stays -0, also on a device whose blocks before are
// empty (fewer elements than devices) or hold only -0s.
TEST(Cumsum, LeadingNegativeZerosStayNegativeOnEveryLayout) {
  int checked = 0;
  for (std::int64_t len : {1, 2, 3, 5, 9}) {
    std::vector<double> xv(static_cast<size_t>(len), -0.0);
    if (len > 3) xv[3] = 1.5;
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = i == 0 ? xv[0] : want[i - 1] + xv[i];
    for_each_layout(1, [&](const ts::NamedSharding& s) {
      const auto got = ts::cumsum(put(xv, {len}, s), 0).to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]))
            << s.str() << " len " << len << " element " << i << ": " << got[i] << ", want " << want[i];
      ++checked;
    });
  }
  EXPECT_GT(checked, 50);
}

// Only the shard totals cross devices, never the array.
TEST(Cumsum, MovesOnlyTotals) {
  const ts::Shape shape{1024, 16};
  const auto xv = data_of<float>(1024 * 16);
  auto x = put(xv, shape, rows8());
  ts::Array c;
  auto ex = ts::explain([&] { c = ts::cumsum(x, 0); });
  // Device c receives the totals (16 floats) of the c devices before it.
  EXPECT_EQ(ex.bytes_moved(), 28 * 16 * 4) << ex.str();
  EXPECT_EQ(c.to_vector<float>(), ref_cumsum(xv, shape, 0));
  auto ex2 = ts::explain([&] { c = ts::cumsum(x, 1); });
  EXPECT_EQ(ex2.bytes_moved(), 0) << ex2.str();
}

TEST(Cumsum, Errors) {
  auto s = single();
  auto x = f64({1, 2, 3, 4}, {2, 2}, s);
  expect_error<ts::ShapeError>([&] { ts::cumsum(x, 2); }, "[cumsum]", {"axis 2", "rank 2"});
  expect_error<ts::ShapeError>([&] { ts::cumsum(f64({1}, {}, s), 0); }, "[cumsum]", {"rank 0"});
  expect_error<ts::Error>([&] { ts::cumsum(ts::Array{}, 0); }, "[cumsum]", {"x"});
}

// =============================================================== convolve

TEST(Convolve, Goldens) {
  auto s = single();
  // np.convolve([1..5], [1,1,1,1], 'same') = [3, 6, 10, 14, 12]
  EXPECT_EQ(ts::convolve(f64({1, 2, 3, 4, 5}, {5}, s), f64({1, 1, 1, 1}, {4}, s)).to_vector<double>(),
            (std::vector<double>{3, 6, 10, 14, 12}));
  EXPECT_EQ(ts::convolve(f64({1, 2, 3}, {3}, s), f64({0, 1, 0.5}, {3}, s)).to_vector<double>(),
            (std::vector<double>{1, 2.5, 4}));
  // np.convolve(arange(1, 8), [1, -2, 3], 'same')
  EXPECT_EQ(ts::convolve(f64({1, 2, 3, 4, 5, 6, 7}, {7}, s), f64({1, -2, 3}, {3}, s)).to_vector<double>(),
            (std::vector<double>{0, 2, 4, 6, 8, 10, 4}));
  // A kernel longer than the line keeps the line's length, centred as
  // scipy.signal.convolve(..., 'same') (np.convolve would return max(L, K)).
  EXPECT_EQ(ts::convolve(f64({1, 2, 3}, {3}, s), f64({1, 2, 3, 4, 5}, {5}, s)).to_vector<double>(),
            (std::vector<double>{10, 16, 22}));
  EXPECT_EQ(ts::convolve(f64({1, 2}, {2}, s), f64({1, 2, 3, 4}, {4}, s)).to_vector<double>(),
            (std::vector<double>{4, 7}));
  // Integer operands give f32 (jnp.convolve promotes to inexact).
  auto i = ts::convolve(ts::device_put(std::vector<std::int32_t>{1, 2, 3}, {3}, s),
                        ts::device_put(std::vector<std::int32_t>{1, 1}, {2}, s));
  EXPECT_EQ(i.dtype(), ts::f32);
  EXPECT_EQ(i.to_vector<float>(), (std::vector<float>{1, 3, 5}));
  auto f = ts::convolve(ts::device_put(std::vector<float>{1, 2}, {2}, s), f64({1, 1}, {2}, s));
  EXPECT_EQ(f.dtype(), ts::f64);
}

TEST(Convolve, SpmdMatchesReference) {
  const std::vector<ts::Shape> shapes{{17, 5}, {3, 4}, {1, 3}, {0, 2}};
  const std::vector<std::vector<double>> kernels{{2}, {1, -1}, {1, 2, 3}, {1, -2, 3, -4}, {1, 1, 2, 3, 5, 8, 13}};
  std::mt19937 rng(11);
  int checked = 0;
  for (const auto& shape : shapes) {
    const auto xv = data_of<double>(numel(shape));
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto x = put(xv, shape, s);
      for (const auto& w : kernels) {
        // The kernel in its own random layout (brought to every device).
        const auto K = static_cast<std::int64_t>(w.size());
        auto k = put(w, {K}, ts::NamedSharding(s.mesh(), ts::testing::random_spec(rng, s.mesh(), 1)));
        for (int axis : {0, 1}) {
          auto c = ts::convolve(x, k, axis);
          ASSERT_EQ(c.sharding(), s);
          ASSERT_EQ(c.to_vector<double>(), ref_convolve(xv, shape, w, axis)) << s.str() << " K=" << K;
          ++checked;
        }
      }
    });
  }
  EXPECT_GT(checked, 1000);
}

template <class R>
void convolve_dtype_case() {
  const auto xv = data_of<R>(23 * 2);
  std::vector<double> xd(xv.begin(), xv.end());
  const std::vector<double> w{1, -2, 3};
  for (const auto& mesh : test_meshes()) {
    ts::NamedSharding s(mesh, ts::P(mesh.axis_names()[0]));
    auto c = ts::convolve(put(xv, {23, 2}, s), ts::device_put(std::vector<std::int32_t>{1, -2, 3}, {3}, s), 0);
    ASSERT_EQ(c.dtype(), (std::is_same_v<R, double> ? ts::f64 : ts::f32));
    ASSERT_EQ(c.template to_vector<double>(), ref_convolve(xd, {23, 2}, w, 0)) << s.str();
  }
}

TEST(Convolve, EveryDtype) {
  convolve_dtype_case<std::uint8_t>();
  convolve_dtype_case<std::int32_t>();
  convolve_dtype_case<std::int64_t>();
  convolve_dtype_case<float>();
  convolve_dtype_case<double>();
}

TEST(Convolve, MovesOnlyHalos) {
  const ts::Shape shape{64, 64};
  const auto xv = data_of<float>(64 * 64);
  auto x = put(xv, shape, rows8());
  auto k = ts::device_put(std::vector<float>{1, 2, 3, 4, 5}, {5}, ts::NamedSharding(x.sharding().mesh(), ts::P()));
  ts::Array c;
  auto ex = ts::explain([&] { c = ts::convolve(x, k, 0); });
  // K = 5: 2 rows before and 2 after each block.
  EXPECT_GT(ex.bytes_moved(), 0);
  EXPECT_LE(ex.bytes_moved(), 8 * 4 * 64 * 4) << ex.str();
  EXPECT_EQ(ex.bytes_moved(), 7 * 2 * 2 * 64 * 4) << ex.str();
  EXPECT_EQ(c.to_vector<double>(), ref_convolve(std::vector<double>(xv.begin(), xv.end()), shape, {1, 2, 3, 4, 5}, 0));
  auto ex2 = ts::explain([&] { c = ts::convolve(x, k, 1); });
  EXPECT_EQ(ex2.bytes_moved(), 0) << ex2.str();
}

TEST(Convolve, Errors) {
  auto s = single();
  auto x = f64({1, 2, 3, 4}, {2, 2}, s);
  expect_error<ts::ShapeError>(
      [&] {
        ts::convolve(x, f64({1, 2, 3, 4}, {2, 2}, s));
      },
      "[convolve]", {"kernel must be 1-d", "(2, 2)"});
  expect_error<ts::ShapeError>([&] { ts::convolve(x, f64({}, {0}, s)); }, "[convolve]", {"kernel", "empty"});
  expect_error<ts::ShapeError>([&] { ts::convolve(x, f64({1}, {1}, s), 2); }, "[convolve]", {"axis 2"});
  expect_error<ts::ShapeError>([&] { ts::convolve(f64({1}, {}, s), f64({1}, {1}, s)); }, "[convolve]",
                               {"at least 1-d"});
  expect_error<ts::Error>([&] { ts::convolve(x, ts::Array{}); }, "[convolve]", {"kernel"});
  auto other = f64({1}, {1}, ts::NamedSharding(test_meshes()[1], ts::P()));
  expect_error<ts::ShardingError>([&] { ts::convolve(x, other); }, "[convolve]", {"different meshes"});
}

// ============================================================= convolve2d

TEST(Convolve2d, Goldens) {
  auto s = single();
  std::vector<double> a(20);
  for (int i = 0; i < 20; ++i) a[i] = i * i;
  // scipy.signal.convolve2d(arange(20).reshape(4, 5)**2, k, mode='same')
  EXPECT_EQ(ts::convolve2d(f64(a, {4, 5}, s), f64({1, 2, 3, 4}, {2, 2}, s)).to_vector<double>(),
            (std::vector<double>{0,   1,   6,   17,  34,   25,  89,   137,  205,  293,
                                 175, 529, 677, 845, 1033, 525, 1469, 1717, 1985, 2273}));
  EXPECT_EQ(ts::convolve2d(f64(a, {4, 5}, s), f64({1, 0, -1, 2, 0, -2, 1, 0, -1}, {3, 3}, s)).to_vector<double>(),
            (std::vector<double>{38,  32,  44,  56,  -82,  194, 96,  112, 128, -306,
                                 534, 176, 192, 208, -726, 633, 172, 184, 196, -817}));
  // Kernel larger than the input: scipy keeps in1's shape.
  std::vector<double> k35(15);
  for (int i = 0; i < 15; ++i) k35[i] = i + 1;
  EXPECT_EQ(ts::convolve2d(f64({1, 2, 3, 4}, {2, 2}, s), f64(k35, {3, 5}, s)).to_vector<double>(),
            (std::vector<double>{39, 49, 89, 99}));
  auto i = ts::convolve2d(ts::device_put(std::vector<std::int32_t>{1, 2, 3, 4}, {2, 2}, s),
                          ts::device_put(std::vector<std::int32_t>{1}, {1, 1}, s));
  EXPECT_EQ(i.dtype(), ts::f32);
  EXPECT_EQ(i.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Convolve2d, SpmdMatchesReference) {
  const std::vector<ts::Shape> shapes{{11, 9}, {3, 2}, {1, 5}, {0, 4}, {2, 5, 7}};
  struct K {
    std::int64_t r, c;
  };
  const std::vector<K> ks{{1, 1}, {2, 2}, {3, 3}, {2, 5}, {4, 1}, {7, 3}};
  int checked = 0;
  for (const auto& shape : shapes) {
    const auto xv = data_of<double>(numel(shape));
    for_each_layout(static_cast<int>(shape.size()), [&](const ts::NamedSharding& s) {
      auto x = put(xv, shape, s);
      for (const auto& k : ks) {
        const auto w = data_of<double>(k.r * k.c, 9);
        auto c = ts::convolve2d(x, put(w, {k.r, k.c}, ts::NamedSharding(s.mesh(), ts::P())));
        ASSERT_EQ(c.sharding(), s);
        ASSERT_EQ(c.to_vector<double>(), ref_convolve2d(xv, shape, w, k.r, k.c))
            << s.str() << " kernel " << k.r << "x" << k.c;
        ++checked;
      }
    });
  }
  EXPECT_GT(checked, 500);
}

TEST(Convolve2d, MovesOnlyHalos) {
  const ts::Shape shape{64, 64};
  const auto xv = data_of<float>(64 * 64);
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  auto x = put(xv, shape, ts::NamedSharding(mesh, ts::P("x", "y")));
  auto k = ts::device_put(std::vector<float>(9, 1.f), {3, 3}, ts::NamedSharding(mesh, ts::P()));
  ts::Array c;
  auto ex = ts::explain([&] { c = ts::convolve2d(x, k); });
  // Blocks of 32 x 16, one row/column of halo on each side (corners included).
  EXPECT_GT(ex.bytes_moved(), 0);
  EXPECT_LE(ex.bytes_moved(), 8 * (2 * 32 + 2 * 16 + 4) * 4) << ex.str();
  EXPECT_EQ(c.to_vector<float>(), [&] {
    auto r = ref_convolve2d(std::vector<double>(xv.begin(), xv.end()), shape, std::vector<double>(9, 1.0), 3, 3);
    return std::vector<float>(r.begin(), r.end());
  }());
}

TEST(Convolve2d, Errors) {
  auto s = single();
  auto x = f64({1, 2, 3, 4}, {2, 2}, s);
  expect_error<ts::ShapeError>(
      [&] {
        ts::convolve2d(x, f64({1, 2}, {2}, s));
      },
      "[convolve2d]", {"kernel must be 2-d", "(2,)"});
  expect_error<ts::ShapeError>([&] { ts::convolve2d(x, f64({}, {0, 3}, s)); }, "[convolve2d]", {"kernel", "empty"});
  expect_error<ts::ShapeError>(
      [&] {
        ts::convolve2d(f64({1, 2}, {2}, s), f64({1}, {1, 1}, s));
      },
      "[convolve2d]", {"at least 2-d", "(2,)"});
  expect_error<ts::Error>([&] { ts::convolve2d(ts::Array{}, x); }, "[convolve2d]", {"x"});
}

// ================================================================= interp

TEST(Interp, Goldens) {
  auto s = single();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto xp = ts::device_put(std::vector<float>{0, 1, 1, 2, 4}, {5}, s);
  auto fp = ts::device_put(std::vector<float>{0, 10, 20, 30, 50}, {5}, s);
  auto x = ts::device_put(std::vector<float>{-1, 0, 0.5, 1, 1.5, 2, 3, 4, 5, nan}, {10}, s);
  auto r = ts::interp(x, xp, fp);
  EXPECT_EQ(r.dtype(), ts::f32);
  auto v = r.to_vector<float>();
  // jnp.interp: [0, 0, 5, 20, 25, 30, 40, 50, 50, nan]
  const std::vector<float> want{0, 0, 5, 20, 25, 30, 40, 50, 50};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(v[i], want[i]) << i;
  EXPECT_TRUE(std::isnan(v[9]));
  // One point: constant.
  auto one = ts::interp(ts::device_put(std::vector<float>{0.25f, 7}, {2}, s),
                        ts::device_put(std::vector<float>{3}, {1}, s), ts::device_put(std::vector<float>{2}, {1}, s));
  EXPECT_EQ(one.to_vector<float>(), (std::vector<float>{2, 2}));
  // Dtypes as jnp.interp: ints give f32; f64 anywhere gives f64.
  auto ix = ts::device_put(std::vector<std::int32_t>{1, 2}, {2}, s);
  auto ixp = ts::device_put(std::vector<std::int32_t>{0, 3}, {2}, s);
  EXPECT_EQ(ts::interp(ix, ixp, ixp).dtype(), ts::f32);
  EXPECT_EQ(ts::interp(ix, ixp, ixp).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(ts::interp(ix, ixp, f64({0, 6}, {2}, s)).dtype(), ts::f64);
  // x and xp compute in f32 (1/3 rounded), fp in f64, as jnp.interp does:
  // [2.0000000596046448, 4.0000001192092896].
  EXPECT_EQ(ts::interp(ix, ixp, f64({0, 6}, {2}, s)).to_vector<double>(),
            (std::vector<double>{2.0000000596046448, 4.0000001192092896}));
}

TEST(Interp, SpmdMatchesReference) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-2, 12);
  const std::vector<double> xpv{0, 0.5, 2, 2, 3.25, 7, 10}, fpv{1, -1, 4, 6, 0, 2.5, 3};
  for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{2, 3}, ts::Shape{0, 4}}) {
    std::vector<double> xv(static_cast<size_t>(numel(shape)));
    for (auto& v : xv) v = u(rng);
    if (!xv.empty()) xv[0] = 2, xv.back() = 10;
    const auto ref = ref_interp(xv, xpv, fpv);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto xp = put(xpv, {7}, ts::NamedSharding(s.mesh(), ts::testing::random_spec(rng, s.mesh(), 1)));
      auto fp = put(fpv, {7}, ts::NamedSharding(s.mesh(), ts::P()));
      auto r = ts::interp(put(xv, shape, s), xp, fp);
      ASSERT_EQ(r.sharding(), s);
      ASSERT_EQ(r.dtype(), ts::f64);
      auto got = r.to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-12) << s.str() << " at " << i;
      // f32 everywhere: f32 result, close to the f64 one.
      std::vector<float> xf(xv.begin(), xv.end()), xpf(xpv.begin(), xpv.end()), fpf(fpv.begin(), fpv.end());
      auto rf = ts::interp(put(xf, shape, s), put(xpf, {7}, ts::NamedSharding(s.mesh(), ts::P())),
                           put(fpf, {7}, ts::NamedSharding(s.mesh(), ts::P())));
      ASSERT_EQ(rf.dtype(), ts::f32);
      auto gf = rf.to_vector<float>();
      for (size_t i = 0; i < gf.size(); ++i) ASSERT_NEAR(gf[i], ref[i], 1e-5) << s.str() << " at " << i;
    });
  }
}

TEST(Interp, PurelyLocal) {
  auto x = put(data_of<float>(64), {64}, rows8());
  auto rep = ts::NamedSharding(x.sharding().mesh(), ts::P());
  auto xp = ts::device_put(std::vector<float>{-40, 0, 56}, {3}, rep);
  auto fp = ts::device_put(std::vector<float>{0, 1, 2}, {3}, rep);
  ts::Array r;
  auto ex = ts::explain([&] { r = ts::interp(x, xp, fp); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(r.sharding(), x.sharding());
}

TEST(Interp, Errors) {
  auto s = single();
  auto x = f64({1, 2}, {2}, s);
  expect_error<ts::ShapeError>(
      [&] {
        ts::interp(x, f64({1, 2, 3, 4}, {2, 2}, s), f64({1, 2, 3, 4}, {2, 2}, s));
      },
      "[interp]", {"xp and fp must be 1-d", "(2, 2)"});
  expect_error<ts::ShapeError>(
      [&] {
        ts::interp(x, f64({1, 2}, {2}, s), f64({1, 2, 3}, {3}, s));
      },
      "[interp]", {"equal size", "(2,)", "(3,)"});
  expect_error<ts::ShapeError>([&] { ts::interp(x, f64({}, {0}, s), f64({}, {0}, s)); }, "[interp]", {"empty"});
  expect_error<ts::Error>([&] { ts::interp(x, ts::Array{}, x); }, "[interp]", {"xp"});
  auto other = f64({1, 2}, {2}, ts::NamedSharding(test_meshes()[1], ts::P()));
  expect_error<ts::ShardingError>([&] { ts::interp(x, other, other); }, "[interp]", {"different meshes"});
}

// ============================================================== primitives

TEST(StencilRule, GoldenText) {
  ts::NamedSharding rep(ts::make_mesh({8}, {"x"}), ts::P());
  auto z = [&](ts::Shape s) { return ts::zeros(s, ts::f32, rep); };
  // Output row i of diff needs x rows [i, i + n]: a halo of n after each block.
  const auto x = z({16, 4});
  auto r = rule_of([&] { ts::diff(x, 1, 0); });
  EXPECT_EQ(r.first, "([i,j])->([i,j]) {i=16,j=4} halo={i(0,1)}");
  EXPECT_EQ(r.second, "diff n=1 axis=0");
  // prepend (concatenated: whole where needed) shifts the halo before the block;
  // a scalar append has no dims.
  const auto pre = z({16, 1}), app = z({});
  r = rule_of([&] { ts::diff(x, 2, 1, {.prepend = pre, .append = app}); });
  EXPECT_EQ(r.first, "([i,j],[i,k],[])->([i,j]) {i=16,j=4,k=1} need_replication={k} halo={j(1,1)}");
  EXPECT_EQ(r.second, "diff n=2 axis=1 with=prepend,append");
  const auto app3 = z({3, 4});
  r = rule_of([&] { ts::diff(x, 1, 0, {.append = app3}); });
  EXPECT_EQ(r.first, "([i,j],[k,j])->([i,j]) {i=16,j=4,k=3} need_replication={k} halo={i(0,1)}");
  EXPECT_EQ(r.second, "diff n=1 axis=0 with=append");
  // A scan depends on every row before it (only block totals move).
  const auto big = z({1024, 16});
  r = rule_of([&] { ts::cumsum(big, 0); });
  EXPECT_EQ(r.first, "([i,j])->([i,j]) {i=1024,j=16} halo={i(1023,0)}");
  EXPECT_EQ(r.second, "cumsum axis=0");
  // 'same' convolution with K = 5 taps: 2 rows before and 2 after each block.
  const auto sq = z({64, 64}), k5 = z({5}), k4 = z({4});
  r = rule_of([&] { ts::convolve(sq, k5, 1); });
  EXPECT_EQ(r.first, "([i,j],[k])->([i,j]) {i=64,j=64,k=5} need_replication={k} halo={j(2,2)}");
  EXPECT_EQ(r.second, "convolve axis=1");
  r = rule_of([&] { ts::convolve(sq, k4, 0); });
  EXPECT_EQ(r.first, "([i,j],[k])->([i,j]) {i=64,j=64,k=4} need_replication={k} halo={i(2,1)}");
  const auto x3 = z({2, 8, 6}), k34 = z({3, 4});
  r = rule_of([&] { ts::convolve2d(x3, k34); });
  EXPECT_EQ(r.first,
            "([i,j,k],[l,m])->([i,j,k]) {i=2,j=8,k=6,l=3,m=4} need_replication={l,m} halo={j(1,1),k(2,1)}");
  EXPECT_EQ(r.second, "convolve2d ");
  // interp: elementwise in x, the tables whole on every device.
  const auto xi = z({5, 3}), tab = z({4});
  r = rule_of([&] { ts::interp(xi, tab, tab); });
  EXPECT_EQ(r.first, "([i,j],[k],[k])->([i,j]) {i=5,j=3,k=4} need_replication={k}");
  EXPECT_EQ(r.second, "interp ");
}

// ===================================================================== jit

// Every op under jit equals eager bitwise (values, dtype, sharding) on every
// test mesh, x in a spread of layouts (uneven blocks, dims smaller than the
// device count, empty), the other operands in random layouts.
TEST(StencilJit, MatchesEagerOnEveryLayout) {
  std::mt19937 rng(17);
  const auto diff_fn = [](ts::Array x, int n, int axis) { return ts::diff(x, n, axis); };
  const auto diff_pa_fn = [](ts::Array x, ts::Array pre, ts::Array app, int axis) {
    return ts::diff(x, 2, axis, {.prepend = pre, .append = app});
  };
  const auto cumsum_fn = [](ts::Array x, int axis) { return ts::cumsum(x, axis); };
  const auto convolve_fn = [](ts::Array x, ts::Array k, int axis) { return ts::convolve(x, k, axis); };
  const auto convolve2d_fn = [](ts::Array x, ts::Array k) { return ts::convolve2d(x, k); };
  const auto interp_fn = [](ts::Array x, ts::Array xp, ts::Array fp) { return ts::interp(x, xp, fp); };
  auto jdiff = ts::jit(diff_fn);
  auto jdiff_pa = ts::jit(diff_pa_fn);
  auto jcumsum = ts::jit(cumsum_fn);
  auto jconvolve = ts::jit(convolve_fn);
  auto jconvolve2d = ts::jit(convolve2d_fn);
  auto jinterp = ts::jit(interp_fn);
  int cases = 0;
  for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 9}, ts::Shape{0, 3}}) {
    const auto xv = data_of<std::int32_t>(numel(shape), 3);
    const auto fv = data_of<float>(numel(shape), 1);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      const ts::Mesh& mesh = s.mesh();
      auto random_layout = [&](int rank) { return ts::NamedSharding(mesh, ts::testing::random_spec(rng, mesh, rank)); };
      const auto x = put(xv, shape, s);
      const auto xf = put(fv, shape, s);
      const std::string what = ts::typeof(x);
      for (int axis : {0, 1}) {
        for (int n : {1, 2, 3}) expect_jit_matches(jdiff, diff_fn, "diff", what, xf, n, axis);
        ts::Shape ps = shape;
        ps[axis] = 2;
        const auto pre = ts::device_put(data_of<double>(numel(ps), 5), ps, random_layout(2));
        const auto app = ts::device_put(std::vector<float>{-1.5f}, {}, random_layout(0));
        expect_jit_matches(jdiff_pa, diff_pa_fn, "diff", what, x, pre, app, axis);
        expect_jit_matches(jcumsum, cumsum_fn, "cumsum", what, x, axis);
        expect_jit_matches(jcumsum, cumsum_fn, "cumsum", what, xf, axis);
        const auto k = ts::device_put(std::vector<float>{1, -2, 3, 0.5f}, {4}, random_layout(1));
        expect_jit_matches(jconvolve, convolve_fn, "convolve", what, x, k, axis);
        expect_jit_matches(jconvolve, convolve_fn, "convolve", what, xf, k, axis);
      }
      const auto k2 = ts::device_put(std::vector<double>{1, 2, 0, -1, 0.5, 3}, {2, 3}, random_layout(2));
      expect_jit_matches(jconvolve2d, convolve2d_fn, "convolve2d", what, xf, k2);
      const auto xp = ts::device_put(std::vector<float>{-3, 0, 10, 40}, {4}, random_layout(1));
      const auto fp = ts::device_put(std::vector<double>{1, 2, 0, 5}, {4}, random_layout(1));
      expect_jit_matches(jinterp, interp_fn, "interp", what, x, xp, fp);
      ++cases;
    });
  }
  EXPECT_GT(cases, 100);
}

// A stencil inside a larger jitted program: its global step reads the
// values the fused loop before it wrote, and the values after it read its
// result.
TEST(StencilJit, InsideAProgram) {
  const auto step = [](ts::Array u, ts::Array k) {
    auto v = ts::convolve(ts::exp(u * 0.01f), k, 0);
    auto d = ts::diff(v, 1, 0, {.prepend = ts::zeros({1, 16}, ts::f32, ts::NamedSharding(u.sharding().mesh(), ts::P()))});
    return ts::cumsum(d * 2.0f, 0) + 1.0f;
  };
  const ts::Shape shape{64, 16};
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  const auto u = put(data_of<float>(64 * 16), shape, ts::NamedSharding(mesh, ts::P(std::vector<std::string>{"x", "y"})));
  const auto k = ts::device_put(std::vector<float>{0.25f, 0.5f, 0.25f}, {3}, ts::NamedSharding(mesh, ts::P()));
  auto j = ts::jit(step);
  expect_same(j(u, k), step(u, k), "program");
  const std::string text = j.lower(u, k).as_text();
  for (const char* prim : {"global %", "= convolve[axis=0]", "= diff[n=1 axis=0 with=prepend]", "= cumsum[axis=0]"})
    EXPECT_NE(text.find(prim), std::string::npos) << prim << "\n" << text;
}

// =============================================================== gradient

namespace {

// jnp.gradient along `axis`, edge_order 1, spacing h: differences in x's own
// type (integers wrap), converted to T, halved inside, over h.
template <class T, class R>
std::vector<T> ref_gradient(const std::vector<R>& x, const ts::Shape& shape, int axis, double h) {
  const Lines l = lines(shape, axis);
  std::vector<T> out(x.size());
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t j = 0; j < l.inner; ++j)
      for (std::int64_t i = 0; i < l.len; ++i) {
        const std::int64_t lo = std::max<std::int64_t>(i - 1, 0), hi = std::min(i + 1, l.len - 1);
        const T d = static_cast<T>(ref_sub(x[(o * l.len + hi) * l.inner + j], x[(o * l.len + lo) * l.inner + j]));
        out[(o * l.len + i) * l.inner + j] = hi - lo == 2 ? d * T(0.5) / static_cast<T>(h) : d / static_cast<T>(h);
      }
  return out;
}

std::vector<double> random_doubles(std::int64_t n, unsigned seed) {
  return tessera::testing::uniform_doubles(n, seed, -10, 10);
}

}  // namespace

TEST(Gradient, Goldens) {
  auto s = single();
  // jnp.gradient(jnp.array([1., 2., 4., 7., 11.])) = [1., 1.5, 2.5, 3.5, 4.]
  EXPECT_EQ(ts::gradient(f64({1, 2, 4, 7, 11}, {5}, s), 0).to_vector<double>(),
            (std::vector<double>{1, 1.5, 2.5, 3.5, 4}));
  // ... with spacing 2: [0.5, 0.75, 1.25, 1.75, 2.]
  EXPECT_EQ(ts::gradient(f64({1, 2, 4, 7, 11}, {5}, s), 0, 2.0).to_vector<double>(),
            (std::vector<double>{0.5, 0.75, 1.25, 1.75, 2}));
  // jnp.gradient(jnp.array([[1., 2., 6.], [3., 4., 5.]])) = [[[2, 2, -1], [2, 2, -1]],
  //                                                         [[1, 2.5, 4], [1, 1, 1]]]
  auto m = f64({1, 2, 6, 3, 4, 5}, {2, 3}, s);
  EXPECT_EQ(ts::gradient(m, 0).to_vector<double>(), (std::vector<double>{2, 2, -1, 2, 2, -1}));
  EXPECT_EQ(ts::gradient(m, -1).to_vector<double>(), (std::vector<double>{1, 2.5, 4, 1, 1, 1}));
  const auto both = ts::gradient(m);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].to_vector<double>(), (std::vector<double>{2, 2, -1, 2, 2, -1}));
  EXPECT_EQ(both[1].to_vector<double>(), (std::vector<double>{1, 2.5, 4, 1, 1, 1}));
  // Two points: both ends one-sided.
  EXPECT_EQ(ts::gradient(f64({3, 5}, {2}, s), 0).to_vector<double>(), (std::vector<double>{2, 2}));
  EXPECT_EQ(ts::gradient(f64({3, 5}, {2}, s)).size(), 1u);
  // Integers give f32 (jnp.gradient promotes to inexact); f32 stays f32.
  auto i = ts::gradient(ts::device_put(std::vector<std::int32_t>{1, 4, 9, 16}, {4}, s), 0);
  EXPECT_EQ(i.dtype(), ts::f32);
  EXPECT_EQ(i.to_vector<float>(), (std::vector<float>{3, 4, 6, 7}));
  EXPECT_EQ(ts::gradient(ts::device_put(std::vector<float>{1, 4}, {2}, s), 0).dtype(), ts::f32);
  // Unsigned differences wrap before the conversion, as in jnp: [5, 3] -> 3 - 5 = 254 in u8.
  auto u = ts::gradient(ts::device_put(std::vector<std::uint8_t>{5, 3}, {2}, s), 0);
  EXPECT_EQ(u.to_vector<float>(), (std::vector<float>{254, 254}));
}

// Every layout of 1-d, 2-d and 3-d arrays on 1-d and 2-d meshes of 1..8
// devices: uneven blocks, dims smaller than the number of parts, empty
// arrays, the axis sharded and not; bitwise the reference.
TEST(Gradient, SpmdMatchesReference) {
  const std::vector<ts::Shape> shapes{{13, 6}, {3, 5}, {2, 9}, {9, 2}, {0, 4}, {5, 0}};
  int checked = 0;
  for (const auto& shape : shapes) {
    const auto xv = random_doubles(numel(shape), 1);
    const auto iv = data_of<std::int32_t>(numel(shape), 2);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto x = put(xv, shape, s);
      auto xi = put(iv, shape, s);
      for (int axis : {0, 1, -1}) {
        const int ax = axis < 0 ? axis + 2 : axis;
        if (shape[ax] < 2) continue;
        for (double h : {1.0, 0.1, 3.0}) {
          auto g = ts::gradient(x, axis, h);
          ASSERT_EQ(g.sharding(), s);
          ASSERT_EQ(g.to_vector<double>(), (ref_gradient<double>(xv, shape, ax, h))) << s.str() << " axis=" << axis;
          ++checked;
        }
        auto gi = ts::gradient(xi, axis, 0.5);
        ASSERT_EQ(gi.dtype(), ts::f32);
        ASSERT_EQ(gi.sharding(), s);
        ASSERT_EQ(gi.to_vector<float>(), (ref_gradient<float>(iv, shape, ax, 0.5))) << s.str() << " axis=" << axis;
      }
    });
  }
  for (std::int64_t len : {2, 3, 5, 8, 17}) {
    const auto xv = random_doubles(len, 3);
    const std::vector<float> xf(xv.begin(), xv.end());
    for_each_layout(1, [&](const ts::NamedSharding& s) {
      auto g = ts::gradient(put(xf, {len}, s), 0, 0.1);
      ASSERT_EQ(g.sharding(), s);
      ASSERT_EQ(g.to_vector<float>(), (ref_gradient<float>(xf, {len}, 0, 0.1))) << s.str();
      ++checked;
    });
  }
  const ts::Shape shape{3, 4, 5};
  const auto xv = random_doubles(60, 4);
  for_each_layout(3, [&](const ts::NamedSharding& s) {
    auto x = put(xv, shape, s);
    const auto all = ts::gradient(x);
    ASSERT_EQ(all.size(), 3u);
    for (int axis = 0; axis < 3; ++axis) {
      ASSERT_EQ(all[axis].sharding(), s);
      ASSERT_EQ(all[axis].to_vector<double>(), (ref_gradient<double>(xv, shape, axis, 1.0)))
          << s.str() << " axis=" << axis;
    }
    ++checked;
  });
  EXPECT_GT(checked, 1000);
}

// Only one row per block boundary and direction crosses devices.
TEST(Gradient, MovesOnlyHalos) {
  const ts::Shape shape{64, 64};
  const auto xv = random_doubles(64 * 64, 5);
  const std::vector<float> xf(xv.begin(), xv.end());
  auto x = put(xf, shape, rows8());
  ts::Array g;
  auto ex = ts::explain([&] { g = ts::gradient(x, 0); });
  EXPECT_EQ(ex.bytes_moved(), 7 * 2 * 64 * 4) << ex.str();
  ASSERT_FALSE(ex.records.empty());
  for (const auto& r : ex.records) EXPECT_EQ(r.op, "gradient");
  EXPECT_EQ(g.to_vector<float>(), (ref_gradient<float>(xf, shape, 0, 1.0)));
  // Across the unsharded axis: nothing moves, and explain says so.
  auto ex2 = ts::explain([&] { g = ts::gradient(x, 1); });
  EXPECT_EQ(ex2.bytes_moved(), 0) << ex2.str();
  ASSERT_EQ(ex2.records.size(), 1u) << ex2.str();
  EXPECT_EQ(ex2.records[0].kind, "none");
  // Blocks of 32 x 16 on a 2 x 4 mesh, along the columns: 3 boundaries per
  // row of blocks, one column of 32 rows each way.
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  auto x2 = put(xf, shape, ts::NamedSharding(mesh, ts::P("x", "y")));
  auto ex3 = ts::explain([&] { g = ts::gradient(x2, 1); });
  EXPECT_EQ(ex3.bytes_moved(), 2 * 3 * 2 * 32 * 4) << ex3.str();
  EXPECT_EQ(g.to_vector<float>(), (ref_gradient<float>(xf, shape, 1, 1.0)));
}

TEST(Gradient, Errors) {
  auto s = single();
  auto x = f64({1, 2, 3, 4, 5, 6}, {2, 3}, s);
  expect_error<ts::ShapeError>([&] { ts::gradient(f64({1}, {1}, s), 0); }, "[gradient]",
                               {"too small", "numerical gradient", "at least 2 elements", "(1,)"});
  expect_error<ts::ShapeError>(
      [&] {
        ts::gradient(f64({1, 2, 3}, {3, 1}, s), 1);
      },
      "[gradient]", {"axis 1", "at least 2", "(3, 1)"});
  expect_error<ts::ShapeError>([&] { ts::gradient(f64({1, 2, 3}, {3, 1}, s)); }, "[gradient]", {"axis 1"});
  expect_error<ts::ShapeError>([&] { ts::gradient(f64({1}, {}, s), 0); }, "[gradient]", {"at least 1-d", "()"});
  expect_error<ts::ShapeError>([&] { ts::gradient(f64({1}, {}, s)); }, "[gradient]", {"at least 1-d"});
  expect_error<ts::ShapeError>([&] { ts::gradient(x, 2); }, "[gradient]", {"axis 2", "rank 2"});
  expect_error<ts::DTypeError>(
      [&] {
        ts::gradient(ts::device_put(std::vector<bool>{true, false}, {2}, s), 0);
      },
      "[gradient]", {"bool"});
  expect_error<ts::Error>([&] { ts::gradient(ts::Array{}, 0); }, "[gradient]", {"f"});
}

// jit equals eager bitwise on every layout; vmap equals a loop; the JVP of
// a linear op is the op on the tangent; the transpose passes the dot-product
// test.
TEST(Gradient, Transformations) {
  const auto fn = [](ts::Array x, int axis) { return ts::gradient(x, axis, 0.5); };
  auto jfn = ts::jit(fn);
  for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{2, 9}}) {
    const auto xv = random_doubles(numel(shape), 6);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      const auto x = put(xv, shape, s);
      for (int axis : {0, 1}) expect_jit_matches(jfn, fn, "gradient", ts::typeof(x), x, axis);
    });
  }
  // vmap over a batch dim first or last, against the loop.
  const ts::Shape bshape{4, 7, 5};
  const auto bv = random_doubles(numel(bshape), 7);
  const auto xs = put(bv, bshape, ts::NamedSharding(test_meshes()[1], ts::P(ts::none, "x")));
  auto per = ts::vmap([](ts::Array a) { return ts::gradient(a, 0, 0.25); })(xs);
  for (std::int64_t b = 0; b < 4; ++b) {
    auto one = ts::gradient(ts::squeeze(ts::slice(xs, {{b, b + 1}}), {0}), 0, 0.25);
    auto got = ts::squeeze(ts::slice(per, {{b, b + 1}}), {0});
    EXPECT_EQ(got.to_vector<double>(), one.to_vector<double>()) << b;
  }
  auto last = ts::vmap([](ts::Array a) { return ts::gradient(a, 1); }, {.in_axes = {2}})(xs);
  for (std::int64_t b = 0; b < 5; ++b) {
    auto one = ts::gradient(ts::squeeze(ts::slice(xs, {{}, {}, {b, b + 1}}), {2}), 1);
    auto got = ts::squeeze(ts::slice(last, {{b, b + 1}}), {0});
    EXPECT_EQ(got.to_vector<double>(), one.to_vector<double>()) << b;
  }
  // JVP and VJP on a sharded layout.
  const ts::Shape shape{11, 6};
  const auto s = ts::NamedSharding(test_meshes()[3], ts::P("x"));
  const auto x = put(random_doubles(66, 8), shape, s), t = put(random_doubles(66, 9), shape, s);
  const auto f = [](const ts::Array& a) { return ts::gradient(a, 0, 0.3); };
  auto [y, dy] = ts::jvp(f, {x}, {t});
  expect_same(y, f(x), "primal");
  expect_same(dy, f(t), "tangent");
  const auto u = put(random_doubles(66, 10), shape, s);
  auto [y2, pullback] = ts::vjp(f, x);
  auto [ct] = pullback(u);
  const double lhs = ts::sum(u * f(t)).item<double>(), rhs = ts::sum(ct * t).item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-9 * std::max(1.0, std::abs(lhs)));
  // Along the other axis, and with two rows (both ends one-sided).
  const auto g1 = [](const ts::Array& a) { return ts::gradient(a, 1, 2.0); };
  auto [y3, pb1] = ts::vjp(g1, x);
  auto [ct1] = pb1(u);
  EXPECT_NEAR(ts::sum(u * g1(t)).item<double>(), ts::sum(ct1 * t).item<double>(), 1e-9);
  const auto x2 = put(random_doubles(12, 11), {2, 6}, s), t2 = put(random_doubles(12, 12), {2, 6}, s);
  const auto u2 = put(random_doubles(12, 13), {2, 6}, s);
  auto [y4, pb2] = ts::vjp(f, x2);
  auto [ct2] = pb2(u2);
  EXPECT_NEAR(ts::sum(u2 * f(t2)).item<double>(), ts::sum(ct2 * t2).item<double>(), 1e-9);
}

// ============================================================ the engine

// The stencils and the scan no longer partition themselves: the engine
// reads their halos and scans from the rules.
TEST(StencilRule, TheEnginePartitionsFromTheRule) {
  namespace td = ts::detail;
  for (const td::PrimitivePtr& p : {td::make_diff(1, 0, false, false), td::make_cumsum(0), td::make_convolve(0),
                                    td::make_convolve2d(), td::make_gradient(0, 1.0)})
    EXPECT_FALSE(p->lowers_itself()) << p->name();
  const auto x = ts::zeros({16, 4}, ts::f32, rows8());
  const auto in = td::abstract_of({x});
  auto g = td::make_gradient(0, 1.0);
  const auto gp = td::partition(*g, in, g->infer(in));
  ASSERT_EQ(gp.halos.size(), 1u);
  EXPECT_EQ(gp.halos[0].lo, 1);
  EXPECT_EQ(gp.halos[0].hi, 1);
  EXPECT_FALSE(gp.scan.has_value());
  EXPECT_EQ(gp.results[0], x.sharding());
  auto c = td::make_cumsum(0);
  const auto cp = td::partition(*c, in, c->infer(in));
  EXPECT_TRUE(cp.halos.empty());
  ASSERT_TRUE(cp.scan.has_value());
  EXPECT_EQ(cp.scan->dim, 0);
  // Results keep x's layout even where a prepend's layout would shard more.
  auto rep = ts::NamedSharding(rows8().mesh(), ts::P());
  const auto xr = ts::zeros({16, 4}, ts::f32, rep),
             pre = ts::zeros({1, 4}, ts::f32, ts::NamedSharding(rows8().mesh(), ts::P(ts::none, "x")));
  auto d = td::make_diff(1, 0, true, false);
  const auto din = td::abstract_of({xr, pre});
  const auto dp = td::partition(*d, din, d->infer(din));
  EXPECT_EQ(dp.results[0], rep);
  EXPECT_EQ(dp.operands[1], rep);
}

TEST(StencilRule, GradientGoldenText) {
  ts::NamedSharding rep(ts::make_mesh({8}, {"x"}), ts::P());
  const auto x = ts::zeros({16, 4}, ts::f32, rep);
  auto r = rule_of([&] { ts::gradient(x, 0); });
  EXPECT_EQ(r.first, "([i,j])->([i,j]) {i=16,j=4} halo={i(1,1)}");
  EXPECT_EQ(r.second, "gradient axis=0 spacing=1");
  r = rule_of([&] { ts::gradient(x, 1, 0.1); });
  EXPECT_EQ(r.first, "([i,j])->([i,j]) {i=16,j=4} halo={j(1,1)}");
  EXPECT_EQ(r.second, "gradient axis=1 spacing=0.1");
}
