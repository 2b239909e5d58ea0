// Tests of the creation ops (zeros, ones, full, arange, linspace, eye,
// scalar): golden cases against numpy's results, then the SPMD property over
// many meshes and layouts (every shard, replicas included, holds exactly the
// reference block), then every error path; the primitives' rules and
// parameters, and jit == eager (with reshard, the identity primitive).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "primitives/primitive.hpp"
#include "tessera/tessera.hpp"
#include "test_util.hpp"
#include "trace_util.hpp"
#include "transforms/trace.hpp"

namespace ts = tessera;
using ts::testing::expect_same;
using ts::testing::rule_of;
using ts::testing::numel;
using ts::testing::sub_block;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::iota_data;
using ts::testing::random_spec;
using ts::testing::test_meshes;

namespace {

ts::Mesh mesh1() { return ts::Mesh(std::vector<ts::Device>{ts::devices()[0]}, {1}, {"x"}); }
ts::NamedSharding rep1() { return ts::NamedSharding(mesh1(), ts::P()); }
ts::Mesh mesh24() { return ts::make_mesh({2, 4}, {"x", "y"}); }

// The array has the expected type and sharding, gathers to `ref`, and every
// device (replicas included) holds exactly its block of `ref`.
template <class T>
void expect_array(const ts::Array& a, const std::vector<T>& ref, const ts::Shape& shape, const ts::NamedSharding& s) {
  ASSERT_EQ(a.shape(), shape);
  EXPECT_EQ(a.dtype(), ts::dtype_of<T>());
  EXPECT_EQ(a.sharding(), s);
  EXPECT_EQ(a.to_vector<T>(), ref);
  int pos = 0;
  for (const ts::Shard& sh : a.addressable_shards()) {
    EXPECT_EQ(sh.index, s.shard_index(shape, pos)) << "position " << pos;
    EXPECT_EQ(sh.data.to_vector<T>(), sub_block(ref, shape, sh.index)) << "position " << pos;
    ++pos;
  }
}

// Calls f(T{}) for every dtype.
template <class F>
void for_each_dtype(F&& f) {
  f(bool{});
  f(std::int32_t{});
  f(std::int64_t{});
  f(float{});
  f(double{});
}

std::string layout_str(const ts::NamedSharding& s, const ts::Shape& shape) {
  return s.str() + " shape " + ts::shape_str(shape);
}

// ------------------------------------------------------------ references

template <class T>
std::vector<T> eye_ref(std::int64_t n, std::int64_t m, std::int64_t k) {
  std::vector<T> out(static_cast<size_t>(n * m), T(0));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j)
      if (j - i == k) out[static_cast<size_t>(i * m + j)] = T(1);
  return out;
}

// numpy.arange's values for a numeric T.
template <class T>
std::vector<T> arange_ref(double start, double stop, double step) {
  std::vector<T> out;
  const double n = std::ceil((stop - start) / step);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i)
    out.push_back(static_cast<T>(start + static_cast<double>(i) * step));
  return out;
}

// numpy.linspace (numpy >= 2: integers are floored).
template <class T>
std::vector<T> linspace_ref(double start, double stop, std::int64_t num, bool endpoint) {
  std::vector<T> out;
  const double div = static_cast<double>(endpoint ? num - 1 : num);
  for (std::int64_t i = 0; i < num; ++i) {
    double y = div > 0 ? static_cast<double>(i) * ((stop - start) / div) + start : start;
    if (endpoint && num > 1 && i == num - 1) y = stop;
    if constexpr (std::is_integral_v<T>) y = std::floor(y);
    out.push_back(static_cast<T>(y));
  }
  return out;
}

// ---------------------------------------------------------------- golden

TEST(Creation, ZerosOnesFullGolden) {
  auto s = rep1();
  expect_array(ts::zeros({2, 3}, ts::f32, s), std::vector<float>(6, 0.0f), {2, 3}, s);
  expect_array(ts::ones({4}, ts::i32, s), std::vector<std::int32_t>(4, 1), {4}, s);
  expect_array(ts::ones({2, 1}, ts::bool_, s), std::vector<bool>(2, true), {2, 1}, s);
  expect_array(ts::zeros({3}, ts::bool_, s), std::vector<bool>(3, false), {3}, s);
  expect_array(ts::full({2, 2}, 3.5, ts::f64, s), std::vector<double>(4, 3.5), {2, 2}, s);
  expect_array(ts::full({3}, 7LL, ts::i64, s), std::vector<std::int64_t>(3, 7), {3}, s);
  expect_array(ts::full({3}, 5000000000LL, ts::i64, s), std::vector<std::int64_t>(3, 5000000000LL), {3}, s);
  // Floats into integers truncate toward zero; nonzero is true (numpy astype).
  expect_array(ts::full({2}, 2.9, ts::i32, s), std::vector<std::int32_t>(2, 2), {2}, s);
  expect_array(ts::full({2}, -2.9, ts::i32, s), std::vector<std::int32_t>(2, -2), {2}, s);
  expect_array(ts::full({2}, 0.5, ts::bool_, s), std::vector<bool>(2, true), {2}, s);
  expect_array(ts::full({2}, 0.0, ts::bool_, s), std::vector<bool>(2, false), {2}, s);
  expect_array(ts::full({2}, true, ts::f32, s), std::vector<float>(2, 1.0f), {2}, s);
  expect_array(ts::full({2}, 0.1, ts::f32, s), std::vector<float>(2, 0.1f), {2}, s);
  expect_array(ts::full({2}, std::numeric_limits<std::int32_t>::min(), ts::i32, s),
               std::vector<std::int32_t>(2, std::numeric_limits<std::int32_t>::min()), {2}, s);
  // Rank 0 and empty arrays.
  expect_array(ts::full({}, 4, ts::i32, s), std::vector<std::int32_t>{4}, {}, s);
  expect_array(ts::zeros({0, 5}, ts::f32, s), std::vector<float>{}, {0, 5}, s);
}

TEST(Creation, ArangeGolden) {
  auto s = rep1();
  expect_array(ts::arange(0, 5, 1, ts::i32, s), std::vector<std::int32_t>{0, 1, 2, 3, 4}, {5}, s);
  expect_array(ts::arange(1, 2, 0.25, ts::f64, s), std::vector<double>{1, 1.25, 1.5, 1.75}, {4}, s);
  expect_array(ts::arange(5, 0, -2, ts::i64, s), std::vector<std::int64_t>{5, 3, 1}, {3}, s);
  // np.arange(0, 0.3, 0.1) has 3 elements; np.arange(0, 1, 0.1) has 10.
  expect_array(ts::arange(0, 0.3, 0.1, ts::f64, s), std::vector<double>{0, 0.1, 0.2}, {3}, s);
  EXPECT_EQ(ts::arange(0, 1, 0.1, ts::f32, s).shape(), ts::Shape{10});
  expect_array(ts::arange(0, 3, 0.5, ts::f32, s), std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}, {6}, s);
  // np.arange(-2.5, 0, 1, dtype=int) == [-2, -1, 0].
  expect_array(ts::arange(-2.5, 0, 1, ts::i32, s), std::vector<std::int32_t>{-2, -1, 0}, {3}, s);
  // Empty ranges.
  expect_array(ts::arange(3, 1, 1, ts::i32, s), std::vector<std::int32_t>{}, {0}, s);
  expect_array(ts::arange(1, 3, -1, ts::f64, s), std::vector<double>{}, {0}, s);
  expect_array(ts::arange(2, 2, 1, ts::f64, s), std::vector<double>{}, {0}, s);
}

TEST(Creation, LinspaceGolden) {
  auto s = rep1();
  expect_array(ts::linspace(0, 1, 5, ts::f64, s), std::vector<double>{0, 0.25, 0.5, 0.75, 1}, {5}, s);
  expect_array(ts::linspace(0, 1, 5, ts::f64, s, false), std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8}, {5},
               s);
  expect_array(ts::linspace(0, 1, 3, ts::f32, s), std::vector<float>{0, 0.5f, 1}, {3}, s);
  expect_array(ts::linspace(2, 3, 1, ts::f64, s), std::vector<double>{2}, {1}, s);
  expect_array(ts::linspace(2, 3, 1, ts::f64, s, false), std::vector<double>{2}, {1}, s);
  expect_array(ts::linspace(2, 3, 0, ts::f64, s), std::vector<double>{}, {0}, s);
  expect_array(ts::linspace(5, -5, 3, ts::f64, s), std::vector<double>{5, 0, -5}, {3}, s);
  // np.linspace(0, 10, 4, dtype=int) == [0, 3, 6, 10]; negatives floor:
  // np.linspace(0, -5, 4, dtype=int) == [0, -2, -4, -5].
  expect_array(ts::linspace(0, 10, 4, ts::i32, s), std::vector<std::int32_t>{0, 3, 6, 10}, {4}, s);
  expect_array(ts::linspace(0, -5, 4, ts::i64, s), std::vector<std::int64_t>{0, -2, -4, -5}, {4}, s);
  // The endpoint is stop exactly, not start + (num - 1) * step.
  auto v = ts::linspace(0.1, 0.7, 7, ts::f64, s).to_vector<double>();
  EXPECT_EQ(v.back(), 0.7);
}

TEST(Creation, EyeGolden) {
  auto s = rep1();
  expect_array(ts::eye(3, 3, 0, ts::f32, s), std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}, s);
  expect_array(ts::eye(2, 4, 1, ts::i32, s), std::vector<std::int32_t>{0, 1, 0, 0, 0, 0, 1, 0}, {2, 4}, s);
  expect_array(ts::eye(3, 2, -1, ts::i64, s), std::vector<std::int64_t>{0, 0, 1, 0, 0, 1}, {3, 2}, s);
  expect_array(ts::eye(2, 2, 0, ts::bool_, s), std::vector<bool>{true, false, false, true}, {2, 2}, s);
  expect_array(ts::eye(2, 2, 5, ts::f64, s), std::vector<double>(4, 0.0), {2, 2}, s);
  expect_array(ts::eye(2, 2, -7, ts::f64, s), std::vector<double>(4, 0.0), {2, 2}, s);
  // Extreme k must not overflow.
  expect_array(ts::eye(2, 3, std::numeric_limits<std::int64_t>::max(), ts::f32, s), std::vector<float>(6, 0.0f), {2, 3},
               s);
  expect_array(ts::eye(2, 3, std::numeric_limits<std::int64_t>::min(), ts::f32, s), std::vector<float>(6, 0.0f), {2, 3},
               s);
  expect_array(ts::eye(0, 3, 0, ts::f32, s), std::vector<float>{}, {0, 3}, s);
}

TEST(Creation, ScalarIsReplicatedRankZero) {
  for (const ts::Mesh& m : ts::testing::test_meshes()) {
    const ts::NamedSharding rep(m, ts::P());
    expect_array(ts::scalar(3.5, ts::f32, m), std::vector<float>{3.5f}, {}, rep);
    expect_array(ts::scalar(-7, ts::i64, m), std::vector<std::int64_t>{-7}, {}, rep);
    expect_array(ts::scalar(2.75, ts::i32, m), std::vector<std::int32_t>{2}, {}, rep);
    expect_array(ts::scalar(1, ts::bool_, m), std::vector<bool>{true}, {}, rep);
    EXPECT_EQ(ts::scalar(0.25, ts::f64, m).item<double>(), 0.25);
    EXPECT_EQ(ts::scalar(1, ts::f32, m).ndim(), 0);
  }
}

TEST(Creation, ExplicitMeshTypeString) {
  ts::Mesh em = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  ts::Array z = ts::zeros({8, 4}, ts::f32, ts::NamedSharding(em, ts::P("X")));
  EXPECT_EQ(ts::typeof(z), "f32[8@X,4]");
  ts::Array e = ts::eye(5, 3, 0, ts::f64, ts::NamedSharding(em, ts::P(ts::none, "X")));
  EXPECT_EQ(ts::typeof(e), "f64[5,3@X]");
  expect_array(e, eye_ref<double>(5, 3, 0), {5, 3}, ts::NamedSharding(em, ts::P(ts::none, "X")));
}

TEST(Creation, MovesNothing) {
  const ts::NamedSharding s(mesh24(), ts::P("x", "y"));
  auto ex = ts::explain([&] {
    ts::zeros({13, 7}, ts::f32, s);
    ts::eye(13, 7, 1, ts::f32, s);
    ts::arange(0, 13, 1, ts::i32, ts::NamedSharding(mesh24(), ts::P({"x", "y"})));
    ts::linspace(0, 1, 13, ts::f64, ts::NamedSharding(mesh24(), ts::P("y")));
  });
  EXPECT_EQ(ex.bytes_moved(), 0);
}

// ---------------------------------------------------------- SPMD property

const std::vector<ts::Shape> kShapes2 = {{0, 3}, {1, 1}, {3, 2}, {13, 5}, {2, 11}};
const std::vector<std::int64_t> kSizes1 = {0, 1, 3, 7, 13};

TEST(CreationSpmd, ZerosOnesFull) {
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    for (const auto& shape : kShapes2) {
      SCOPED_TRACE(layout_str(s, shape));
      const auto n = static_cast<size_t>(numel(shape));
      for_each_dtype([&](auto t) {
        using T = decltype(t);
        constexpr ts::DType dt = ts::dtype_of<T>();
        SCOPED_TRACE(ts::dtype_name(dt));
        expect_array(ts::zeros(shape, dt, s), std::vector<T>(n, T(0)), shape, s);
        expect_array(ts::ones(shape, dt, s), std::vector<T>(n, T(1)), shape, s);
        expect_array(ts::full(shape, -3, dt, s), std::vector<T>(n, static_cast<T>(-3)), shape, s);
      });
    }
  });
}

TEST(CreationSpmd, FullRank3) {
  const ts::Shape shape{3, 1, 5};
  for_each_layout(3, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    expect_array(ts::full(shape, 2.5, ts::f64, s), std::vector<double>(15, 2.5), shape, s);
  });
}

TEST(CreationSpmd, Eye) {
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    for (const auto& shape : kShapes2) {
      for (std::int64_t k : {0L, 1L, -2L}) {
        SCOPED_TRACE(layout_str(s, shape) + " k " + std::to_string(k));
        for_each_dtype([&](auto t) {
          using T = decltype(t);
          expect_array(ts::eye(shape[0], shape[1], k, ts::dtype_of<T>(), s), eye_ref<T>(shape[0], shape[1], k), shape,
                       s);
        });
      }
    }
  });
}

TEST(CreationSpmd, Arange) {
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    for (auto n : kSizes1) {
      SCOPED_TRACE(layout_str(s, {n}));
      const double nd = static_cast<double>(n);
      expect_array(ts::arange(0, nd, 1, ts::i32, s), arange_ref<std::int32_t>(0, nd, 1), {n}, s);
      expect_array(ts::arange(-5, -5 + 2 * nd, 2, ts::i64, s), arange_ref<std::int64_t>(-5, -5 + 2 * nd, 2), {n}, s);
      expect_array(ts::arange(1, 1 + 0.25 * nd, 0.25, ts::f32, s), arange_ref<float>(1, 1 + 0.25 * nd, 0.25), {n}, s);
      expect_array(ts::arange(3, 3 - 0.1 * nd + 0.05, -0.1, ts::f64, s),
                   arange_ref<double>(3, 3 - 0.1 * nd + 0.05, -0.1), {n}, s);
    }
  });
}

TEST(CreationSpmd, Linspace) {
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    for (auto n : kSizes1) {
      SCOPED_TRACE(layout_str(s, {n}));
      for (bool endpoint : {true, false}) {
        expect_array(ts::linspace(-1, 2, n, ts::f64, s, endpoint), linspace_ref<double>(-1, 2, n, endpoint), {n}, s);
        expect_array(ts::linspace(0.5, -3, n, ts::f32, s, endpoint), linspace_ref<float>(0.5, -3, n, endpoint), {n}, s);
        expect_array(ts::linspace(-7, 20, n, ts::i32, s, endpoint), linspace_ref<std::int32_t>(-7, 20, n, endpoint),
                     {n}, s);
        expect_array(ts::linspace(100, -3, n, ts::i64, s, endpoint), linspace_ref<std::int64_t>(100, -3, n, endpoint),
                     {n}, s);
      }
    }
  });
}

// ------------------------------------------------------------------ errors

TEST(CreationErrors, NegativeDims) {
  auto s = rep1();
  expect_error<ts::ShapeError>([&] { ts::zeros({-1, 2}, ts::f32, s); }, "[zeros]", {">= 0", "(-1, 2)"});
  expect_error<ts::ShapeError>([&] { ts::ones({3, -2}, ts::i32, s); }, "[ones]", {">= 0", "(3, -2)"});
  expect_error<ts::ShapeError>([&] { ts::full({-4}, 1.0, ts::f64, s); }, "[full]", {"(-4,)"});
  expect_error<ts::ShapeError>([&] { ts::eye(-1, 3, 0, ts::f32, s); }, "[eye]", {"n=-1", "m=3"});
  expect_error<ts::ShapeError>([&] { ts::eye(2, -3, 0, ts::f32, s); }, "[eye]", {"m=-3"});
  expect_error<ts::ShapeError>([&] { ts::linspace(0, 1, -1, ts::f32, s); }, "[linspace]", {"num", "-1"});
}

TEST(CreationErrors, ShardingRank) {
  const ts::NamedSharding s2(mesh24(), ts::P("x", "y"));
  expect_error<ts::ShardingError>([&] { ts::zeros({8}, ts::f32, s2); }, "[zeros]", {"rank 1"});
  expect_error<ts::ShardingError>([&] { ts::ones({}, ts::f32, s2); }, "[ones]", {"rank 0"});
  expect_error<ts::ShardingError>([&] { ts::full({4}, 1, ts::i32, s2); }, "[full]", {"rank"});
  expect_error<ts::ShardingError>([&] { ts::arange(0, 4, 1, ts::i32, s2); }, "[arange]", {"rank 1"});
  expect_error<ts::ShardingError>([&] { ts::linspace(0, 4, 5, ts::f32, s2); }, "[linspace]", {"rank 1"});
  const ts::NamedSharding s3(mesh24(), ts::P("x", ts::none, "y"));
  expect_error<ts::ShardingError>([&] { ts::eye(4, 4, 0, ts::f32, s3); }, "[eye]", {"rank 2"});
}

TEST(CreationErrors, Unreduced) {
  const ts::NamedSharding u(mesh24(), ts::PartitionSpec({ts::PartitionSpec::Entry("x")}, {"y"}));
  expect_error<ts::ShardingError>([&] { ts::zeros({4}, ts::f32, u); }, "[zeros]", {"unreduced"});
  expect_error<ts::ShardingError>([&] { ts::eye(4, 4, 0, ts::f32, u); }, "[eye]", {"unreduced"});
}

TEST(CreationErrors, ValueDoesNotFitDtype) {
  auto s = rep1();
  expect_error<ts::DTypeError>([&] { ts::full({2}, 1e10, ts::i32, s); }, "[full]", {"1e+10", "i32"});
  expect_error<ts::DTypeError>([&] { ts::full({2}, 3000000000LL, ts::i32, s); }, "[full]", {"3000000000", "i32"});
  expect_error<ts::DTypeError>([&] { ts::full({2}, std::nan(""), ts::i64, s); }, "[full]", {"nan", "i64"});
  expect_error<ts::DTypeError>([&] { ts::full({2}, 1e19, ts::i64, s); }, "[full]", {"i64"});
  expect_error<ts::DTypeError>([&] { ts::scalar(1e300, ts::i32, mesh24()); }, "[scalar]", {"i32"});
  expect_error<ts::DTypeError>([&] { ts::arange(0, 4e9, 1e9, ts::i32, s); }, "[arange]", {"3e+09", "i32"});
  expect_error<ts::DTypeError>([&] { ts::linspace(0, 1e19, 3, ts::i64, s); }, "[linspace]", {"i64"});
}

TEST(CreationErrors, BadRanges) {
  auto s = rep1();
  expect_error<ts::ShapeError>([&] { ts::arange(0, 5, 0, ts::f32, s); }, "[arange]", {"step", "nonzero"});
  expect_error<ts::ShapeError>([&] { ts::arange(0, INFINITY, 1, ts::f32, s); }, "[arange]", {"finite", "inf"});
  expect_error<ts::ShapeError>([&] { ts::arange(std::nan(""), 1, 1, ts::f32, s); }, "[arange]", {"finite"});
  expect_error<ts::ShapeError>([&] { ts::arange(0, 1e300, 1e-300, ts::f64, s); }, "[arange]", {"too many"});
  expect_error<ts::DTypeError>([&] { ts::arange(0, 2, 1, ts::bool_, s); }, "[arange]", {"bool"});
  expect_error<ts::DTypeError>([&] { ts::linspace(0, 1, 2, ts::bool_, s); }, "[linspace]", {"bool"});
}

// ------------------------------------------------------- primitives and jit

TEST(CreationRule, GoldenText) {
  const ts::NamedSharding s(mesh24(), ts::P("x", "y"));
  const ts::NamedSharding s1(mesh24(), ts::P("y"));
  // No operands: one pass-through factor per result dim; the layout is the
  // caller's (the primitive fixes it), the value a parameter.
  auto r = rule_of([&] { ts::zeros({13, 7}, ts::f32, s); });
  EXPECT_EQ(r.first, "()->([i,j]) {i=13,j=7}");
  EXPECT_EQ(r.second, "zeros value=0");
  r = rule_of([&] { ts::ones({2, 3}, ts::bool_, s); });
  EXPECT_EQ(r.second, "ones value=true");
  // The value as written: converted to the dtype first.
  r = rule_of([&] { ts::full({3}, 2.9, ts::i32, s1); });
  EXPECT_EQ(r.first, "()->([i]) {i=3}");
  EXPECT_EQ(r.second, "full value=2");
  r = rule_of([&] { ts::full({3}, -0.0, ts::f64, s1); });
  EXPECT_EQ(r.second, "full value=-0");
  r = rule_of([&] { ts::scalar(0.1, ts::f32, mesh24()); });
  EXPECT_EQ(r.first, "()->([])");
  EXPECT_EQ(r.second, "scalar value=0.10000000149011612");
  r = rule_of([&] { ts::arange(1, 2, 0.25, ts::f64, s1); });
  EXPECT_EQ(r.first, "()->([i]) {i=4}");
  EXPECT_EQ(r.second, "arange start=1 step=0.25");
  r = rule_of([&] { ts::linspace(0, 1, 5, ts::f64, s1, false); });
  EXPECT_EQ(r.first, "()->([i]) {i=5}");
  EXPECT_EQ(r.second, "linspace start=0 stop=1 num=5 endpoint=false");
  // k past the last column is clamped: the same (empty) diagonal.
  r = rule_of([&] { ts::eye(3, 4, 9, ts::f32, s); });
  EXPECT_EQ(r.first, "()->([i,j]) {i=3,j=4}");
  EXPECT_EQ(r.second, "eye k=4");
}

TEST(CreationJit, MatchesEagerOnEveryLayout) {
  std::mt19937 rng(11);
  for (const ts::Mesh& mesh : test_meshes()) {
    for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 9}, ts::Shape{0, 3}}) {
      const ts::NamedSharding s(mesh, random_spec(rng, mesh, 2));
      const ts::NamedSharding s1(mesh, random_spec(rng, mesh, 1));
      const ts::NamedSharding sx(mesh, random_spec(rng, mesh, 2));
      const std::int64_t n = shape[0] * shape[1];
      const double rows = static_cast<double>(shape[0]);
      // Creation next to the argument (its layout read from the traced
      // value) and on its own layouts.
      auto prog = [&](ts::Array x) {
        return std::vector<ts::Array>{
            x + ts::zeros(shape, ts::f32, x.sharding()),
            x * ts::ones(shape, ts::f32, s),
            ts::full(shape, -2.5, ts::f64, s),
            ts::full(shape, 7, ts::u8, s),
            ts::ones(shape, ts::bool_, s),
            ts::scalar(3, ts::i64, mesh),
            ts::arange(-3, -3 + 0.5 * rows, 0.5, ts::f32, s1),
            ts::arange(0, rows, 1, ts::i32, s1),
            ts::linspace(-1, 2, shape[0], ts::f64, s1, false),
            ts::linspace(-7, 20, shape[0], ts::i64, s1),
            ts::eye(shape[0], shape[1], 1, ts::f32, s),
            ts::eye(shape[0], shape[1], -1, ts::i32, s)};
      };
      const ts::Array x = ts::device_put(iota_data<float>(n), shape, sx);
      const std::vector<ts::Array> eager = prog(x);
      auto f = ts::jit(prog);
      const std::vector<ts::Array> got = f(x);
      ASSERT_EQ(got.size(), eager.size());
      for (size_t i = 0; i < got.size(); ++i)
        expect_same(got[i], eager[i], "result " + std::to_string(i) + " " + s.str() + " " + ts::shape_str(shape));
      const std::string text = f.lower(x).as_text();
      for (const char* want : {"= zeros[value=0]()", "= ones[value=1]()", "= full[value=-2.5]()", "= full[value=7]()",
                               "= ones[value=true]()", "= scalar[value=3]()", "= arange[start=-3 step=0.5]()",
                               "= linspace[start=-1 stop=2 num=", "endpoint=false]()", "= eye[k=1]()", "kernel %"})
        EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
      // Nothing moves for the created values.
      EXPECT_EQ(text.find("for zeros"), std::string::npos) << text;
      EXPECT_EQ(text.find("for eye"), std::string::npos) << text;
    }
  }
}

TEST(CreationJit, DifferentParametersTraceApart) {
  const ts::NamedSharding s(mesh24(), ts::P("x"));
  const ts::Array x = ts::zeros({6}, ts::f32, s);
  auto a = ts::jit([&](ts::Array v) { return v + ts::full({6}, 1.5, ts::f32, s); });
  auto b = ts::jit([&](ts::Array v) { return v + ts::full({6}, 2.5, ts::f32, s); });
  EXPECT_EQ(a(x).to_vector<float>(), std::vector<float>(6, 1.5f));
  EXPECT_EQ(b(x).to_vector<float>(), std::vector<float>(6, 2.5f));
  EXPECT_NE(a.lower(x).as_text(), b.lower(x).as_text());
}

// reshard is the identity primitive carrying a sharding constraint: under
// jit it becomes a reshard step, with the values and layout of eager.
TEST(ReshardJit, MatchesEager) {
  std::mt19937 rng(5);
  for (const ts::Mesh& mesh : test_meshes()) {
    for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 1}}) {
      const ts::NamedSharding from(mesh, random_spec(rng, mesh, 2));
      const ts::NamedSharding to(mesh, random_spec(rng, mesh, 2));
      const ts::Array x = ts::device_put(iota_data<float>(shape[0] * shape[1]), shape, from);
      auto prog = [&](ts::Array v) { return ts::reshard(v * 2.0f, to); };
      auto f = ts::jit(prog);
      expect_same(f(x), prog(x), from.str() + " -> " + to.str());
      if (from == to) continue;  // nothing to constrain: no primitive
      const std::string text = f.lower(x).as_text();
      EXPECT_NE(text.find("= reshard[sharding="), std::string::npos) << text;
    }
  }
}

}  // namespace
