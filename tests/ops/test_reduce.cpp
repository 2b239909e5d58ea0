// Reductions: local reduce + all-reduce / reduce-scatter over the mesh axes
// of the reduced dims, checked against a host reference on many layouts;
// the primitives' sharding rules, and every op under jit bitwise equal to
// eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "backend/cpu/reduce.hpp"
#include "kernels/combine.hpp"
#include "test_util.hpp"
#include "trace_util.hpp"
#include "transforms/trace.hpp"

namespace ts = tessera;
using ts::testing::expect_same;
using ts::testing::rule_of;
using ts::testing::numel;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::iota_data;
using ts::testing::random_spec;
using ts::testing::test_meshes;

namespace {

// Host reference: reduce `x` (shape) over `axes` with f, starting at init;
// result in keepdims layout.
std::vector<double> ref_reduce(const std::vector<double>& x, const ts::Shape& shape, const std::vector<int>& axes,
                               double init, const std::function<double(double, double)>& f) {
  const int r = static_cast<int>(shape.size());
  ts::Shape out = shape;
  for (int a : axes) out[a] = 1;
  std::vector<double> y(static_cast<size_t>(numel(out)), init);
  std::vector<std::int64_t> idx(r, 0);
  for (size_t k = 0; k < x.size(); ++k) {
    std::int64_t o = 0;
    for (int d = 0; d < r; ++d) o = o * out[d] + (out[d] == 1 ? 0 : idx[d]);
    y[o] = f(y[o], x[k]);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

ts::Shape drop(const ts::Shape& s, const std::vector<int>& axes, bool keepdims) {
  ts::Shape o;
  for (int d = 0; d < static_cast<int>(s.size()); ++d) {
    bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!red) o.push_back(s[d]);
    else if (keepdims) o.push_back(1);
  }
  return o;
}

}  // namespace

TEST(ReduceSpmd, EveryOpEveryLayoutAndAxisSet) {
  const std::vector<ts::Shape> shapes = {{9, 5}, {3, 2}, {1, 7}, {0, 3}};
  const std::vector<std::vector<int>> axis_sets = {{0}, {1}, {0, 1}};
  int cases = 0;
  for (const auto& shape : shapes) {
    const auto h = iota_data<double>(numel(shape), 1);
    // Factors -1, 1 and 2 for prod: every product (at most 2^45 here) is exact
    // in i64 and f64 whatever the order.
    std::vector<double> hp(h.size());
    for (size_t i = 0; i < h.size(); ++i) hp[i] = i % 3 == 0 ? -1.0 : static_cast<double>(i % 3);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto xi = ts::device_put(std::vector<std::int64_t>(h.begin(), h.end()), shape, s);
      auto xf = ts::device_put(h, shape, s);
      auto pi = ts::device_put(std::vector<std::int64_t>(hp.begin(), hp.end()), shape, s);
      auto pf = ts::device_put(hp, shape, s);
      for (const auto& axes : axis_sets) {
        for (bool keep : {false, true}) {
          SCOPED_TRACE(s.str() + " shape " + ts::shape_str(shape) + " axes " + std::to_string(axes.size()) +
                       (keep ? " keepdims" : ""));
          ts::Axes ax(axes);
          ts::ReduceOptions opt{.keepdims = keep};
          const ts::Shape oshape = drop(shape, axes, keep);
          auto sum = ts::sum(xi, ax, opt);
          EXPECT_EQ(sum.shape(), oshape);
          EXPECT_EQ(sum.dtype(), ts::i64);
          EXPECT_EQ(sum.to_vector<double>(), ref_reduce(h, shape, axes, 0, std::plus<double>()));
          const auto want_prod = ref_reduce(hp, shape, axes, 1, std::multiplies<double>());
          auto prod = ts::prod(pi, ax, opt);
          EXPECT_EQ(prod.shape(), oshape);
          EXPECT_EQ(prod.dtype(), ts::i64);
          EXPECT_EQ(prod.to_vector<double>(), want_prod);
          EXPECT_EQ(ts::prod(pf, ax, opt).to_vector<double>(), want_prod);
          bool empty_axis = false;
          for (int a : axes) empty_axis = empty_axis || shape[a] == 0;
          if (!empty_axis) {
            EXPECT_EQ(ts::max(xf, ax, opt).to_vector<double>(),
                      ref_reduce(h, shape, axes, -INFINITY, [](double u, double v) { return std::max(u, v); }));
            EXPECT_EQ(ts::min(xi, ax, opt).to_vector<double>(),
                      ref_reduce(h, shape, axes, INFINITY, [](double u, double v) { return std::min(u, v); }));
          }
          auto mean = ts::mean(xf, ax, opt).to_vector<double>();
          auto want = ref_reduce(h, shape, axes, 0, std::plus<double>());
          std::int64_t cnt = 1;
          for (int a : axes) cnt *= shape[a];
          for (size_t i = 0; i < want.size(); ++i) {
            if (cnt == 0) EXPECT_TRUE(std::isnan(mean[i]));
            else EXPECT_NEAR(mean[i], want[i] / static_cast<double>(cnt), 1e-12);
          }
          auto pos = xi > 0;
          EXPECT_EQ(ts::any(pos, ax, opt).to_vector<double>(),
                    ref_reduce(h, shape, axes, 0, [](double u, double v) { return (u != 0 || v > 0) ? 1.0 : 0.0; }));
          EXPECT_EQ(ts::all(pos, ax, opt).to_vector<double>(),
                    ref_reduce(h, shape, axes, 1, [](double u, double v) { return (u != 0 && v > 0) ? 1.0 : 0.0; }));
          ++cases;
        }
      }
    });
  }
  EXPECT_GT(cases, 300);
}

TEST(ReduceSpmd, FloatSumsMatchWithinTolerance) {
  ts::Shape shape{37, 23};
  std::vector<float> h(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(0.1f * static_cast<float>(i)) * 3.0f;
  std::vector<double> hd(h.begin(), h.end());
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    auto x = ts::device_put(h, shape, s);
    for (int axis : {0, 1}) {
      auto got = ts::sum(x, axis).to_vector<float>();
      auto want = ref_reduce(hd, shape, {axis}, 0, std::plus<double>());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << s.str();
    }
    EXPECT_NEAR(ts::sum(x).item<double>(), ref_reduce(hd, shape, {0, 1}, 0, std::plus<double>())[0], 1e-3);
  });
}

TEST(ReduceSharding, AllReduceOverShardedAxisKeepsOtherSharding) {
  ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  auto x = ts::device_put(iota_data<float>(10 * 12), {10, 12}, ts::NamedSharding(m, ts::P("x", "y")));
  ts::Array s0;
  auto ex = ts::explain([&] { s0 = ts::sum(x, {0}); });
  EXPECT_EQ(ts::typeof(s0), "f32[12@y]");  // replicated over x, still sharded over y
  ASSERT_EQ(ex.records.size(), 1u);
  EXPECT_EQ(ex.records[0].op, "sum");
  EXPECT_EQ(ex.records[0].kind, "all-reduce");
  // Each device receives its 3-element block from its one partner: 12 bytes.
  for (auto b : ex.records[0].bytes_received) EXPECT_EQ(b, 12);
  // Reducing an unsharded dim communicates nothing: no record beyond the
  // reshard's.
  auto ex2 = ts::explain([&] { (void)ts::sum(ts::reshard(x, ts::P(ts::none, "y")), {0}); });
  ASSERT_EQ(ex2.records.size(), 1u) << ex2.str();
  EXPECT_EQ(ex2.records.back().op, "reshard");
}

TEST(ReduceSharding, ReduceScatterWhenOutputIsSharded) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto h = iota_data<double>(16 * 24);
  auto x = ts::device_put(h, {16, 24}, ts::NamedSharding(m, ts::P("x")));
  ts::Array y;
  auto ex = ts::explain([&] { y = ts::sum(x, {0}, {.out_sharding = ts::P("x")}); });
  EXPECT_EQ(ts::typeof(y), "f64[24@x]");
  ASSERT_FALSE(ex.records.empty());
  EXPECT_EQ(ex.records[0].kind, "reduce-scatter");
  // Each device receives only its 3 columns from each of the 7 others.
  for (auto b : ex.records[0].bytes_received) EXPECT_EQ(b, 7 * 3 * 8);
  EXPECT_EQ(y.to_vector<double>(), ref_reduce(h, {16, 24}, {0}, 0, std::plus<double>()));
  // An out_sharding the reduction cannot produce directly is reached by a reshard.
  ts::Mesh m2 = ts::make_mesh({2, 4}, {"a", "b"});
  auto x2 = ts::device_put(h, {16, 24}, ts::NamedSharding(m2, ts::P("a", "b")));
  auto y2 = ts::sum(x2, {0}, {.out_sharding = ts::P("a")});
  EXPECT_EQ(ts::typeof(y2), "f64[24@a]");
  EXPECT_EQ(y2.to_vector<double>(), ref_reduce(h, {16, 24}, {0}, 0, std::plus<double>()));
}

// Found by tessera_fuzz (under UBSan): integer sums and products overflowed
// (undefined in C++) instead of wrapping as XLA does; 11 elements take both
// the eight-lane path and the tail.
TEST(ReduceGolden, IntegerSumsAndProductsWrap) {
  constexpr std::int32_t mx = std::numeric_limits<std::int32_t>::max();
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    auto a = ts::device_put(std::vector<std::int32_t>{mx, mx, 3, 1, 1, 1, 1, 1, 1, 1, 1}, {11}, s);
    EXPECT_EQ(ts::sum(a).item<std::int32_t>(), 9) << s.str();  // 2 * mx + 11 mod 2^32
    auto b = ts::device_put(std::vector<std::int64_t>{1 << 30, 1 << 30, 5, 3}, {4}, s);
    EXPECT_EQ(ts::prod(b).item<std::int64_t>(), -(std::int64_t{1} << 60)) << s.str();  // 15 * 2^60 mod 2^64
  });
}

TEST(ReduceGolden, DtypesAndArgReductions) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  ts::NamedSharding s(m, ts::P("x"));
  auto b = ts::device_put(std::vector<bool>{true, true, false, true, false}, {5}, s);
  EXPECT_EQ(ts::sum(b).dtype(), ts::i32);
  EXPECT_EQ(ts::sum(b).item<int>(), 3);
  EXPECT_EQ(ts::mean(b).dtype(), ts::f32);
  EXPECT_FLOAT_EQ(ts::mean(b).item<float>(), 0.6f);
  auto v = ts::device_put(std::vector<float>{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, {11}, s);
  EXPECT_EQ(ts::argmax(v, 0).item<int>(), 5);
  EXPECT_EQ(ts::argmin(v, 0).item<int>(), 1);  // first of the ties
  EXPECT_EQ(ts::argmax(v, 0).dtype(), ts::i32);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto w = ts::device_put(std::vector<float>{1, 7, nan, 7, nan}, {5}, s);
  EXPECT_EQ(ts::argmax(w, 0).item<int>(), 2);
  EXPECT_EQ(ts::argmin(w, 0).item<int>(), 2);
  EXPECT_TRUE(std::isnan(ts::max(w).item<float>()));
  EXPECT_TRUE(std::isnan(ts::min(w).item<float>()));
  EXPECT_TRUE(std::isnan(ts::prod(w).item<float>()));
  // 2-d argmax along each axis on many layouts.
  const ts::Shape shape{7, 6};
  auto h = iota_data<double>(42, 2);
  for_each_layout(2, [&](const ts::NamedSharding& sh) {
    auto x = ts::device_put(h, shape, sh);
    auto a0 = ts::argmax(x, 0).to_vector<int>();
    auto a1 = ts::argmin(x, 1, {.keepdims = true});
    EXPECT_EQ(a1.shape(), (ts::Shape{7, 1}));
    auto a1v = a1.to_vector<int>();
    for (int j = 0; j < 6; ++j) {
      int best = 0;
      for (int i = 1; i < 7; ++i)
        if (h[i * 6 + j] > h[best * 6 + j]) best = i;
      EXPECT_EQ(a0[j], best) << sh.str();
    }
    for (int i = 0; i < 7; ++i) {
      int best = 0;
      for (int j = 1; j < 6; ++j)
        if (h[i * 6 + j] < h[i * 6 + best]) best = j;
      EXPECT_EQ(a1v[i], best) << sh.str();
    }
  });
}

// The first index of the best value: NaN first, then the largest (or
// smallest); 0.0 and -0.0 tie.
template <class T>
int first_best(const std::vector<T>& h, bool is_max) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(h.size()); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(h[best])) break;
      if (std::isnan(h[i])) {
        best = i;
        continue;
      }
    }
    if (is_max ? h[i] > h[best] : h[i] < h[best]) best = i;
  }
  return best;
}

template <class T>
void check_arg_ties(const std::vector<T>& h) {
  for_each_layout(1, [&](const ts::NamedSharding& sh) {
    const ts::Array x = ts::device_put(h, {static_cast<std::int64_t>(h.size())}, sh);
    EXPECT_EQ(ts::argmax(x, 0).item<int>(), first_best(h, true)) << sh.str() << " " << ts::dtype_name(x.dtype());
    EXPECT_EQ(ts::argmin(x, 0).item<int>(), first_best(h, false)) << sh.str() << " " << ts::dtype_name(x.dtype());
  });
}

// Across device boundaries: ties go to the first index whichever device
// holds it, NaN wins at its first occurrence, and devices holding nothing of
// the axis (uneven layouts) never win, even against the dtype's extremes.
TEST(ReduceGolden, ArgReductionsAcrossDevicesTieToTheFirstIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  check_arg_ties<float>({0.0f, -0.0f, 3, 3, -1, 3});
  check_arg_ties<float>({1, -0.0f, 0.0f, -0.0f});
  check_arg_ties<float>({5, nan, 7, nan, 9});
  check_arg_ties<float>({5, 2, 7, 2, 9, 9, nan});
  check_arg_ties<double>({-inf, -inf, -inf});
  check_arg_ties<double>({inf, inf});
  check_arg_ties<std::int8_t>({-128, -128, -128});
  check_arg_ties<std::int8_t>({127, -128, 127, -128, 127});
  check_arg_ties<std::uint64_t>({~std::uint64_t{0}, 0, ~std::uint64_t{0}, 0});
  check_arg_ties<bool>({false, true, true});
  check_arg_ties<bool>({false, false, false});
}

// Integer products wrap modulo 2^bits as in XLA; the reference multiplies in
// the unsigned type, where wrapping is defined and the order does not matter.
template <class T>
void check_prod_wraps() {
  using U = std::make_unsigned_t<T>;
  const ts::Shape shape{6, 5};
  std::vector<T> h(30);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = static_cast<T>((i % 2 ? -1 : 1) * static_cast<std::int64_t>(100003 + 7919 * i));
  auto ref = [&](const std::vector<int>& axes) {
    std::vector<T> out(axes.size() == 2 ? 1 : static_cast<size_t>(axes[0] == 0 ? 5 : 6));
    std::vector<U> acc(out.size(), U(1));
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 5; ++j) {
        const size_t o = axes.size() == 2 ? 0 : axes[0] == 0 ? j : i;
        acc[o] = static_cast<U>(acc[o] * static_cast<U>(h[i * 5 + j]));
      }
    for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<T>(acc[k]);
    return out;
  };
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    ts::Array x = ts::device_put(h, shape, s);
    for (const std::vector<int>& axes : {std::vector<int>{0}, std::vector<int>{1}, std::vector<int>{0, 1}}) {
      ts::Array p = ts::prod(x, ts::Axes(axes));
      EXPECT_EQ(p.dtype(), ts::dtype_of<T>());
      EXPECT_EQ(p.to_vector<T>(), ref(axes)) << s.str() << " axes " << axes.size() << " first " << axes[0];
    }
  });
}

TEST(ReduceSpmd, IntegerProdWrapsLikeXla) {
  check_prod_wraps<std::int32_t>();
  check_prod_wraps<std::int64_t>();
  // 65536^2 = 2^32 wraps to 0 in i32; 3^20 = 3486784401 wraps to 3^20 - 2^32.
  ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  auto z = ts::device_put(std::vector<std::int32_t>{65536, 65536}, {2}, ts::NamedSharding(m, ts::P("x")));
  EXPECT_EQ(ts::prod(z).item<std::int32_t>(), 0);
  auto t = ts::device_put(std::vector<std::int32_t>(20, 3), {20}, ts::NamedSharding(m, ts::P({"x", "y"})));
  EXPECT_EQ(ts::prod(t).item<std::int32_t>(), -808182895);
}

TEST(ReduceSpmd, FloatProdOverflowsToInfAndPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    // Every partial product has magnitude >= 1, so every order overflows.
    std::vector<float> big(12, 1e10f);
    EXPECT_EQ(ts::prod(ts::device_put(big, {12}, s)).item<float>(), INFINITY);
    big[5] = -1e10f;
    EXPECT_EQ(ts::prod(ts::device_put(big, {12}, s)).item<float>(), -INFINITY);
    std::vector<float> small{1.5f, -2.0f, 4.0f, 0.5f, 3.0f, -1.0f, 2.0f, 0.25f, 8.0f};
    EXPECT_EQ(ts::prod(ts::device_put(small, {9}, s)).item<float>(), 72.0f);
    small[7] = nan;
    EXPECT_TRUE(std::isnan(ts::prod(ts::device_put(small, {9}, s)).item<float>()));
    std::vector<double> dbig(12, 1e200);
    EXPECT_EQ(ts::prod(ts::device_put(dbig, {12}, s)).item<double>(), INFINITY);
  });
}

TEST(ReduceSharding, ExplicitModeTypeKnown) {
  ts::Mesh m = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  auto x = ts::device_put(iota_data<float>(8 * 4), {8, 4}, ts::NamedSharding(m, ts::P("X")));
  EXPECT_EQ(ts::typeof(ts::sum(x, {1})), "f32[8@X]");
  EXPECT_EQ(ts::typeof(ts::sum(x, {0})), "f32[4]");
  EXPECT_EQ(ts::typeof(ts::mean(x, {1}, {.keepdims = true})), "f32[8@X,1]");
}

TEST(ReduceErrors, AxesAndEmpty) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::device_put(iota_data<float>(6), {2, 3}, ts::NamedSharding(m, ts::P("x")));
  expect_error<ts::ShapeError>([&] { (void)ts::sum(x, {2}); }, "[sum]", {"axis 2", "rank 2"});
  expect_error<ts::ShapeError>([&] { (void)ts::mean(x, {0, -2}); }, "[mean]", {"more than once"});
  expect_error<ts::ShapeError>([&] { (void)ts::argmax(x, -3); }, "[argmax]", {"out of range"});
  auto e = ts::device_put(std::vector<float>{}, {0, 3}, ts::NamedSharding(m, ts::P("x")));
  expect_error<ts::ShapeError>([&] { (void)ts::max(e, {0}); }, "[max]", {"size 0"});
  expect_error<ts::ShapeError>([&] { (void)ts::argmin(e, 0); }, "[argmin]", {"size 0"});
  expect_error<ts::ShardingError>([&] { (void)ts::sum(x, {0}, {.out_sharding = ts::P("x", "x")}); }, "[sum]",
                                  {"more than once"});
  expect_error<ts::ShardingError>([&] { (void)ts::sum(x, {0}, {.out_sharding = ts::P("x", ts::none)}); }, "[sum]",
                                  {"rank 1"});
}

TEST(ReduceDeterminism, BitwiseEqualAcrossRuns) {
  ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<float> h(301 * 7);
  for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(0.37f * static_cast<float>(i)) * 1e3f;
  auto x = ts::device_put(h, {301, 7}, ts::NamedSharding(m, ts::P({"x", "y"})));
  auto first = ts::sum(x, {0}).to_vector<float>();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ts::sum(x, {0}).to_vector<float>(), first);
}

// ------------------------------------------------------------ sharding rule

TEST(ReduceRule, GoldenText) {
  ts::NamedSharding rep(ts::make_mesh({8}, {"x"}), ts::P());
  auto z = [&](ts::Shape s, ts::DType t = ts::f32) { return ts::zeros(s, t, rep); };
  const auto a = z({8, 16}), b = z({2, 3, 4}), c = z({5, 6}, ts::bool_), d = z({});
  // One factor per operand dim, in dim order; reduced dims are reduction
  // factors, absent from the result (or size-1 dims outside every factor
  // with keepdims).
  auto r = rule_of([&] { ts::sum(a, 1); });
  EXPECT_EQ(r.first, "([i,j])->([i]) {i=8,j=16} reduction={j}");
  EXPECT_EQ(r.second, "sum axes=[1]");
  r = rule_of([&] { ts::max(a, 0, {.keepdims = true}); });
  EXPECT_EQ(r.first, "([i,j])->([1,j]) {i=8,j=16} reduction={i}");
  EXPECT_EQ(r.second, "max axes=[0] keepdims=true");
  r = rule_of([&] { ts::prod(b, {0, 2}, {.out_sharding = ts::P("x")}); });
  EXPECT_EQ(r.first, "([i,j,k])->([j]) {i=2,j=3,k=4} reduction={i,k}");
  EXPECT_EQ(r.second, "prod axes=[0, 2] out_sharding=PartitionSpec('x',)");
  r = rule_of([&] { ts::all(c); });
  EXPECT_EQ(r.first, "([i,j])->([]) {i=5,j=6} reduction={i,j}");
  EXPECT_EQ(r.second, "all axes=[0, 1]");
  r = rule_of([&] { ts::min(d, {}); });
  EXPECT_EQ(r.first, "([])->([])");
  EXPECT_EQ(r.second, "min axes=[]");
  // mean binds a sum named "mean" (then a divide).
  r = rule_of([&] { ts::mean(a, {-1}, {.keepdims = true}); }, /*only=*/false);
  EXPECT_EQ(r.first, "([i,j])->([i,1]) {i=8,j=16} reduction={j}");
  EXPECT_EQ(r.second, "mean op=sum axes=[1] keepdims=true");
  // argmax lowers itself; its rule describes it.
  r = rule_of([&] { ts::argmax(a, 0); });
  EXPECT_EQ(r.first, "([i,j])->([j]) {i=8,j=16} reduction={i}");
  EXPECT_EQ(r.second, "argmax axes=[0]");
}

// ------------------------------------------------------------------- jit

namespace {

enum class Op { Sum, Prod, Max, Min, Any, All, Mean, Argmax, Argmin };
constexpr const char* kOpNames[] = {"sum", "prod", "max", "min", "any", "all", "mean", "argmax", "argmin"};

struct ReduceCase {
  Op op;
  std::vector<int> axes;  // empty: all (argmax: axes[0])
  bool keepdims = false;
  std::optional<ts::PartitionSpec> out;
};

ts::Array apply(const ReduceCase& c, const ts::Array& x) {
  const ts::Axes ax = c.axes.empty() ? ts::Axes() : ts::Axes(c.axes);
  const ts::ReduceOptions opt{.keepdims = c.keepdims, .out_sharding = c.out};
  switch (c.op) {
    case Op::Sum: return ts::sum(x, ax, opt);
    case Op::Prod: return ts::prod(x, ax, opt);
    case Op::Max: return ts::max(x, ax, opt);
    case Op::Min: return ts::min(x, ax, opt);
    case Op::Any: return ts::any(x, ax, opt);
    case Op::All: return ts::all(x, ax, opt);
    case Op::Mean: return ts::mean(x, ax, opt);
    case Op::Argmax: return ts::argmax(x, c.axes[0], opt);
    case Op::Argmin: return ts::argmin(x, c.axes[0], opt);
  }
  return x;
}

}  // namespace

// Every op under jit equals eager bitwise (values, dtype, sharding) on every
// test mesh, on spread and random layouts including uneven sizes and sizes
// smaller than the device count, with and without keepdims and a random
// out_sharding; the program names the primitive.
TEST(ReduceJit, EveryOpMatchesEagerBitwise) {
  std::mt19937 rng(11);
  int cases = 0;
  for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 9}, ts::Shape{0, 3}, ts::Shape{2, 3, 7}}) {
    const int rank = static_cast<int>(shape.size());
    std::vector<float> h(static_cast<size_t>(numel(shape)));
    for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(0.37f * static_cast<float>(i)) * 1e3f;
    if (h.size() > 4) h[3] = h[1];  // a tie for argmax/argmin
    for_each_layout(rank, [&](const ts::NamedSharding& s0) {
      // Half the layouts random (mixed spec forms) instead.
      const ts::NamedSharding s = rng() % 2 ? s0 : ts::NamedSharding(s0.mesh(), random_spec(rng, s0.mesh(), rank));
      const ts::Array xf = ts::device_put(h, shape, s);
      const ts::Array xi = ts::astype(xf, ts::i32);
      for (int o = 0; o <= static_cast<int>(Op::Argmin); ++o) {
        ReduceCase c{static_cast<Op>(o), {}, false, std::nullopt};
        const bool arg = c.op == Op::Argmax || c.op == Op::Argmin;
        std::vector<std::vector<int>> axis_sets = {{0}, {rank - 1}};
        if (!arg) axis_sets.push_back({}), axis_sets.push_back({0, rank - 1});
        const std::vector<int>& axes = axis_sets[rng() % axis_sets.size()];
        c.axes = axes;
        c.keepdims = rng() % 2;
        bool empty = false;
        for (int a : axes.empty() ? std::vector<int>{0, rank - 1} : axes) empty = empty || shape[a] == 0;
        if (empty && (c.op == Op::Max || c.op == Op::Min || arg)) continue;
        const int reduced = axes.empty() ? rank : static_cast<int>(axes.size());
        if (rng() % 3 == 0) c.out = random_spec(rng, s.mesh(), c.keepdims ? rank : rank - reduced);
        const ts::Array& x = c.op == Op::Prod || c.op == Op::Min ? xi : xf;
        const std::string what = std::string(kOpNames[o]) + " of " + ts::typeof(x) + " axes " +
                                 std::to_string(axes.size()) + (c.keepdims ? " keepdims" : "") +
                                 (c.out ? " out " + c.out->str() : "");
        auto f = ts::jit([c](ts::Array v) { return apply(c, v); });
        expect_same(f(x), apply(c, x), what);
        const std::string ir = f.lower(x).as_text();
        EXPECT_NE(ir.find(std::string("= ") + kOpNames[o] + "["), std::string::npos) << what << "\n" << ir;
        if (arg) {
          EXPECT_NE(ir.find("global %"), std::string::npos) << what << "\n" << ir;
        }
        ++cases;
      }
    });
  }
  EXPECT_GT(cases, 1000);
}

// Under jit the combine is a program step: a reduce-scatter into the
// requested layout, a max-combine for max; explain sees the same records as
// eager.
TEST(ReduceJit, CombineStepsAndRecords) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::device_put(iota_data<double>(16 * 24), {16, 24}, ts::NamedSharding(m, ts::P("x")));
  auto scatter = [](ts::Array v) { return ts::sum(v, {0}, {.out_sharding = ts::P("x")}); };
  auto f = ts::jit(scatter);
  ts::Array a, b;
  auto ex_eager = ts::explain([&] { a = scatter(x); });
  auto ex_jit = ts::explain([&] { b = f(x); });
  expect_same(b, a, "reduce-scatter");
  EXPECT_EQ(ex_jit.str(), ex_eager.str());
  std::string ir = f.lower(x).as_text();
  EXPECT_NE(ir.find("= reduce-scatter %"), std::string::npos) << ir;
  EXPECT_NE(ir.find("over (x) (168 B per device) for sum"), std::string::npos) << ir;
  auto g = ts::jit([](ts::Array v) { return ts::max(v, {0}); });
  expect_same(g(x), ts::max(x, {0}), "max");
  ir = g.lower(x).as_text();
  EXPECT_NE(ir.find("= all-reduce(max) %"), std::string::npos) << ir;
  // argmax's two combines run inside its global step.
  auto h = ts::jit([](ts::Array v) { return ts::argmax(v, 0); });
  ex_eager = ts::explain([&] { a = ts::argmax(x, 0); });
  ex_jit = ts::explain([&] { b = h(x); });
  expect_same(b, a, "argmax");
  EXPECT_EQ(ex_jit.str(), ex_eager.str());
  EXPECT_EQ(ex_eager.records.size(), 2u) << ex_eager.str();
}

// n floats of magnitudes 2^-30 to 2^31 and either sign: every other order
// of the additions gives other bits.
static std::vector<float> far_apart(std::int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-30, 30);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = static_cast<float>(std::ldexp(mant(rng), ex(rng)) * (rng() & 1 ? 1 : -1));
  return x;
}

// A sum along a row longer than kSumPiece elements is its pieces' sums in
// order: each piece in eight lanes merged into the running value, then the
// piece's tail. The order is written out here in plain loops (f32 summed in
// f64) and must match the kernel bit for bit, whole and fed in chunks that
// cut the pieces anywhere.
TEST(ReduceKernel, LongRowsAreSummedPieceByPiece) {
  namespace cpu = ts::detail::cpu;
  constexpr std::int64_t kPiece = ts::detail::kSumPiece;
  std::mt19937 rng(12);
  for (const std::int64_t len : {kPiece - 1, kPiece, kPiece + 1, kPiece + 8, 2 * kPiece + 13, 5 * kPiece + 7}) {
    const std::vector<float> x = far_apart(2 * len, rng);
    std::vector<float> want(2);
    for (int row = 0; row < 2; ++row) {
      const float* r = x.data() + row * len;
      double v = 0;
      for (std::int64_t start = 0; start < len; start += kPiece) {
        const std::int64_t n = std::min(kPiece, len - start), full8 = n / 8 * 8;
        double lane[8] = {};
        for (std::int64_t j = 0; j < full8; ++j) lane[j % 8] += r[start + j];
        v += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        for (std::int64_t j = full8; j < n; ++j) v += r[start + j];
      }
      want[static_cast<size_t>(row)] = static_cast<float>(v);
    }
    std::vector<float> got(2);
    cpu::reduce(ts::detail::ReduceOp::Sum, ts::f32, x.data(), {2, len}, {false, true}, got.data());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * 2), 0) << "rows of " << len;
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<float> pieces(2);
      auto r = cpu::make_reducer(ts::detail::ReduceOp::Sum, ts::f32, {2, len}, {false, true}, pieces.data());
      for (std::int64_t at = 0; at < 2 * len;) {
        const std::int64_t n = std::min<std::int64_t>(2 * len - at, 1 + static_cast<std::int64_t>(rng() % 5000));
        r->feed(x.data() + at, n);
        at += n;
      }
      r->finish();
      EXPECT_EQ(std::memcmp(want.data(), pieces.data(), sizeof(float) * 2), 0) << "rows of " << len << " in chunks";
    }
  }
}

// A sum over a leading dim meets each output element's rows in pieces of
// kRowPiece rows: each piece summed from zero (f32 in f64), then added to
// the element's running value. Written out in plain loops, it must match the
// kernel bit for bit, whole and fed in chunks; so must a reduction over two
// leading dims, whose rows meet an output row interleaved with others'.
TEST(ReduceKernel, ColumnsAreSummedInPiecesOfRows) {
  namespace cpu = ts::detail::cpu;
  constexpr std::int64_t kRows = ts::detail::kRowPiece;
  std::mt19937 rng(13);
  for (const std::int64_t n : {kRows - 1, kRows, kRows + 1, 3 * kRows + 5}) {
    for (const int split : {1, 2}) {  // reduce dim 0 of (n, 3) or dims 0, 1 of (split, n / split + ..., 3)
      const ts::Shape shape = split == 1 ? ts::Shape{n, 3} : ts::Shape{2, n, 3};
      const std::vector<bool> reduced = split == 1 ? std::vector<bool>{true, false} : std::vector<bool>{true, true, false};
      const std::int64_t rows = split == 1 ? n : 2 * n;
      const std::vector<float> x = far_apart(rows * 3, rng);
      std::vector<float> want(3);
      for (int c = 0; c < 3; ++c) {
        double acc = 0, part = 0;
        std::int64_t in_part = 0;
        for (std::int64_t i = 0; i < rows; ++i) {
          part += x[static_cast<size_t>(i * 3 + c)];
          if (++in_part == kRows) acc += part, part = 0, in_part = 0;
        }
        if (in_part > 0) acc += part;
        want[static_cast<size_t>(c)] = static_cast<float>(acc);
      }
      std::vector<float> got(3);
      cpu::reduce(ts::detail::ReduceOp::Sum, ts::f32, x.data(), shape, reduced, got.data());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * 3), 0) << rows << " rows";
      std::vector<float> chunked(3);
      auto r = cpu::make_reducer(ts::detail::ReduceOp::Sum, ts::f32, shape, reduced, chunked.data());
      for (std::int64_t at = 0; at < rows * 3;) {
        const std::int64_t len = std::min<std::int64_t>(rows * 3 - at, 1 + static_cast<std::int64_t>(rng() % 700));
        r->feed(x.data() + at, len);
        at += len;
      }
      r->finish();
      EXPECT_EQ(std::memcmp(want.data(), chunked.data(), sizeof(float) * 3), 0) << rows << " rows in chunks";
    }
  }
}

// The streaming form of the local reduction (the end of a fused loop under
// jit) gives bitwise the whole-block result for any split into pieces.
TEST(ReduceKernel, AnySplitGivesTheSameBits) {
  namespace cpu = ts::detail::cpu;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> val(-1e3f, 1e3f);
  const std::vector<ts::Shape> shapes = {{}, {1}, {7}, {37}, {3, 21}, {4, 8}, {2, 3, 19}, {5, 1, 9}, {0, 4}};
  for (const ts::Shape& shape : shapes) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = val(rng);
    const int rank = static_cast<int>(shape.size());
    for (unsigned mask = 0; mask < (1u << rank); ++mask) {
      std::vector<bool> reduced(rank);
      std::int64_t nout = 1;
      for (int d = 0; d < rank; ++d) {
        reduced[d] = (mask >> d) & 1u;
        if (!reduced[d]) nout *= shape[d];
      }
      for (auto op : {ts::detail::ReduceOp::Sum, ts::detail::ReduceOp::Max}) {
        std::vector<float> whole(static_cast<size_t>(nout)), pieces(static_cast<size_t>(nout));
        cpu::reduce(op, ts::f32, x.data(), shape, reduced, whole.data());
        for (int trial = 0; trial < 4; ++trial) {
          auto r = cpu::make_reducer(op, ts::f32, shape, reduced, pieces.data());
          for (std::int64_t at = 0; at < n;) {
            const std::int64_t len = std::min<std::int64_t>(n - at, 1 + static_cast<std::int64_t>(rng() % 23));
            r->feed(x.data() + at, len);
            at += len;
          }
          r->finish();
          EXPECT_TRUE(whole.empty() || std::memcmp(whole.data(), pieces.data(), whole.size() * sizeof(float)) == 0)
              << "shape rank " << rank << " mask " << mask;
        }
      }
    }
  }
}

// Rows of hundreds of kSumPiece pieces reduced on a device (a GPU's warp
// walks their merges there) give the CPU kernel's bits: whole tiles of
// merges, a tile and a tail, one row and several, sums in f32 (f64 lanes),
// f64 and i32 (wrapping), and max.
TEST(ReduceKernel, LongRowsOnADeviceHaveTheCpuKernelsBits) {
  namespace cpu = ts::detail::cpu;
  constexpr std::int64_t kPiece = ts::detail::kSumPiece;
  const ts::Mesh one(std::vector<ts::Device>{ts::devices()[0]}, {1}, {"x"});
  const ts::NamedSharding on_one(one, ts::P());
  std::mt19937 rng(17);
  auto check = [&](auto tag, const std::vector<decltype(tag)>& x, std::int64_t rows, std::int64_t len) {
    using T = decltype(tag);
    const ts::DType t = ts::dtype_of<T>();
    const ts::Array a = ts::device_put(x, {rows, len}, on_one);
    for (auto op : {ts::detail::ReduceOp::Sum, ts::detail::ReduceOp::Max}) {
      std::vector<T> want(static_cast<size_t>(rows));
      cpu::reduce(op, t, x.data(), {rows, len}, {false, true}, want.data());
      const ts::Array y = op == ts::detail::ReduceOp::Sum ? ts::sum(a, {1}) : ts::max(a, {1});
      const std::vector<T> got = y.to_vector<T>();
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(T)), 0)
          << (op == ts::detail::ReduceOp::Sum ? "sum" : "max") << " of " << rows << " rows of " << len << " "
          << ts::dtype_name(t);
    }
  };
  for (const std::int64_t len : {128 * kPiece, 300 * kPiece + 13}) {
    for (const std::int64_t rows : {std::int64_t(1), std::int64_t(3)}) {
      check(float{}, far_apart(rows * len, rng), rows, len);
      const std::vector<float> f = far_apart(rows * len, rng);
      check(double{}, std::vector<double>(f.begin(), f.end()), rows, len);
      std::vector<std::int32_t> i(f.size());
      for (std::size_t k = 0; k < i.size(); ++k) i[k] = static_cast<std::int32_t>(rng());
      check(std::int32_t{}, i, rows, len);
    }
  }
}
