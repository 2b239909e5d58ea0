// Zero-size dims in every op family: GEMMs with m, n, k or a batch dim of 0,
// reductions over empty dims (identities for sum/prod/any/all, ShapeError
// for max/min/argmax, as JAX) and over non-empty dims of arrays with another
// empty dim, stencils, scans, shape ops, indexing, creation, elementwise,
// random, resharding and shard_map. Each result is compared with a plain
// host reference on 1-d and 2-d meshes of 1 to 8 devices and many layouts
// (empty shards everywhere).
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"
#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::iota_data;
using ts::testing::numel;
using ts::testing::test_meshes;

namespace {

// A random-ish but exact f32 array of `shape` under sharding `s`.
ts::Array put(const ts::Shape& shape, const ts::NamedSharding& s, int salt = 0) {
  return ts::device_put(iota_data<float>(numel(shape), salt), shape, s);
}

// Per-dim layouts of a rank-`rank` array on every test mesh; `fn(sharding)`.
template <class F>
void layouts(int rank, F&& fn) {
  for_each_layout(rank, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    fn(s);
  });
}

void expect_array(const ts::Array& a, const ts::Shape& shape, const std::vector<float>& want) {
  ASSERT_EQ(a.shape(), shape);
  ASSERT_EQ(a.size(), numel(shape));
  EXPECT_EQ(a.to_vector<float>(), want);
  // Every shard agrees with the layout rule, empty ones included.
  for (const auto& sh : a.addressable_shards()) {
    ASSERT_EQ(sh.index.size(), shape.size());
    ts::Shape local;
    for (const auto& sl : sh.index) local.push_back(sl.size());
    EXPECT_EQ(sh.data.shape(), local);
  }
}

// (batch..., m, k) @ (batch..., k, n) on the host with NumPy broadcasting of
// the batch dims (each operand rank 2 or 3 here).
std::vector<float> ref_matmul(const ts::Shape& sa, const std::vector<float>& a, const ts::Shape& sb,
                              const std::vector<float>& b, ts::Shape* out) {
  const std::int64_t ba = sa.size() == 3 ? sa[0] : 1, bb = sb.size() == 3 ? sb[0] : 1;
  const std::int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  const std::int64_t batch = ba == 1 ? bb : ba;
  const bool batched = sa.size() == 3 || sb.size() == 3;
  *out = batched ? ts::Shape{batch, m, n} : ts::Shape{m, n};
  std::vector<float> c(static_cast<size_t>(batch * m * n), 0.0f);
  for (std::int64_t t = 0; t < batch; ++t) {
    const std::int64_t ta = ba == 1 ? 0 : t, tb = bb == 1 ? 0 : t;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        float acc = 0;
        for (std::int64_t p = 0; p < k; ++p) acc += a[(ta * m + i) * k + p] * b[(tb * k + p) * n + j];
        c[(t * m + i) * n + j] = acc;
      }
  }
  return c;
}

}  // namespace


// ------------------------------------------------------------------- GEMM

TEST(ZeroSize, MatmulBatchZeroByMatrix) {
  // The case that used to crash in BLAS: (0, 16, 7) @ (7, 3), f32 and f64,
  // on one device and sharded, and every other zero-size GEMM dim.
  const std::vector<std::pair<ts::Shape, ts::Shape>> cases = {
      {{0, 16, 7}, {7, 3}}, {{0, 4, 5}, {0, 5, 3}}, {{0, 4, 5}, {1, 5, 3}}, {{1, 4, 5}, {0, 5, 3}},
      {{2, 0, 5}, {5, 3}},  {{2, 4, 0}, {0, 3}},    {{2, 4, 5}, {5, 0}},    {{0, 5}, {5, 3}},
      {{4, 0}, {0, 3}},     {{4, 5}, {5, 0}},       {{3, 0, 0}, {3, 0, 2}}, {{0, 0, 0}, {0, 0}},
  };
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(ts::shape_str(sa) + " @ " + ts::shape_str(sb));
    const auto ha = iota_data<float>(numel(sa), 1), hb = iota_data<float>(numel(sb), 2);
    ts::Shape so;
    const auto want = ref_matmul(sa, ha, sb, hb, &so);
    layouts(static_cast<int>(sa.size()), [&](const ts::NamedSharding& s) {
      const ts::NamedSharding rb(s.mesh(), ts::P());
      auto a = ts::device_put(ha, sa, s);
      auto b = ts::device_put(hb, sb, rb);
      expect_array(ts::matmul(a, b), so, want);
      auto a64 = ts::astype(a, ts::f64), b64 = ts::astype(b, ts::f64);
      auto c64 = ts::matmul(a64, b64);
      EXPECT_EQ(c64.dtype(), ts::f64);
      EXPECT_EQ(c64.shape(), so);
      auto got = c64.to_vector<double>();
      EXPECT_EQ(std::vector<float>(got.begin(), got.end()), want);
    });
  }
}

TEST(ZeroSize, MatmulRhsSharded) {
  const std::vector<std::pair<ts::Shape, ts::Shape>> cases = {
      {{0, 16, 7}, {7, 3}}, {{4, 0}, {0, 3}}, {{4, 5}, {5, 0}}, {{0, 5}, {5, 3}}, {{2, 4, 0}, {2, 0, 3}}};
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(ts::shape_str(sa) + " @ " + ts::shape_str(sb));
    const auto ha = iota_data<float>(numel(sa), 1), hb = iota_data<float>(numel(sb), 2);
    ts::Shape so;
    const auto want = ref_matmul(sa, ha, sb, hb, &so);
    layouts(static_cast<int>(sb.size()), [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(ha, sa, ts::NamedSharding(s.mesh(), ts::P()));
      auto b = ts::device_put(hb, sb, s);
      expect_array(ts::matmul(a, b), so, want);
    });
  }
}

TEST(ZeroSize, DotDotGeneralEinsum) {
  layouts(2, [&](const ts::NamedSharding& s) {
    const ts::NamedSharding rep(s.mesh(), ts::P());
    auto a = put({4, 0}, s), b = put({0, 3}, rep);
    expect_array(ts::dot(a, b), {4, 3}, std::vector<float>(12, 0.0f));
    auto v = put({0}, rep);
    expect_array(ts::dot(v, v), {}, {0.0f});
    expect_array(ts::dot_general(a, b, {.lhs_contracting = {1}, .rhs_contracting = {0}}), {4, 3},
                 std::vector<float>(12, 0.0f));
    // A batch dim of zero in dot_general and einsum.
    auto c = put({0, 2}, s), d = put({0, 2}, rep);
    expect_array(ts::dot_general(c, d, {{1}, {1}, {0}, {0}}), {0}, {});
    expect_array(ts::einsum("ij,kj->ik", c, put({3, 2}, rep)), {0, 3}, {});
    expect_array(ts::einsum("ij,ik->jk", c, put({0, 5}, rep)), {2, 5}, std::vector<float>(10, 0.0f));
    expect_array(ts::einsum("bij,bjk->bik", put({0, 2, 3}, rep), put({0, 3, 4}, rep)), {0, 2, 4}, {});
  });
}

// ------------------------------------------------------------- reductions

TEST(ZeroSize, ReductionsOverEmptyDimsGiveIdentities) {
  layouts(2, [&](const ts::NamedSharding& s) {
    auto x = put({0, 3}, s);
    expect_array(ts::sum(x), {}, {0.0f});
    expect_array(ts::sum(x, {0}), {3}, {0, 0, 0});
    expect_array(ts::sum(x, {1}), {0}, {});
    expect_array(ts::sum(x, {0}, {.keepdims = true}), {1, 3}, {0, 0, 0});
    expect_array(ts::prod(x, {0}), {3}, {1, 1, 1});
    expect_array(ts::prod(x), {}, {1.0f});
    EXPECT_EQ(ts::any(x, {0}).to_vector<bool>(), (std::vector<bool>{false, false, false}));
    EXPECT_EQ(ts::all(x, {0}).to_vector<bool>(), (std::vector<bool>{true, true, true}));
    EXPECT_EQ(ts::all(x).to_vector<bool>(), (std::vector<bool>{true}));
    // mean of nothing is NaN, as jnp.mean.
    auto mu = ts::mean(x, {0}).to_vector<float>();
    ASSERT_EQ(mu.size(), 3u);
    for (float v : mu) EXPECT_TRUE(std::isnan(v));
    // Reducing a non-empty dim of an array with an empty dim: empty result.
    expect_array(ts::max(x, {1}), {0}, {});
    expect_array(ts::min(x, {1}), {0}, {});
    EXPECT_EQ(ts::argmax(x, 1).shape(), (ts::Shape{0}));
    EXPECT_EQ(ts::argmin(x, 1).size(), 0);
    expect_array(ts::mean(x, {1}), {0}, {});
    // Integer sums of nothing.
    auto xi = ts::astype(x, ts::i32);
    EXPECT_EQ(ts::sum(xi, {0}).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 0, 0}));
    EXPECT_EQ(ts::prod(xi, {0}).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1, 1}));
  });
}

TEST(ZeroSize, MaxMinArgmaxOfNothingRaise) {
  for (const auto& m : test_meshes()) {
    ts::NamedSharding s(m, ts::P("x"));
    auto x = put({0, 3}, s);
    expect_error<ts::ShapeError>([&] { ts::max(x, {0}); }, "[max]", {"size 0", "axis 0"});
    expect_error<ts::ShapeError>([&] { ts::min(x); }, "[min]", {"size 0"});
    expect_error<ts::ShapeError>([&] { ts::argmax(x, 0); }, "[argmax]", {"size 0"});
    expect_error<ts::ShapeError>([&] { ts::argmin(x, 0); }, "[argmin]", {"size 0"});
    // The runtime is fine afterwards.
    expect_array(ts::sum(put({2, 3}, s), {0}), {3}, {-59, -45, -31});
  }
}

// ------------------------------------------------------ stencils and scans

TEST(ZeroSize, StencilsAndScans) {
  layouts(2, [&](const ts::NamedSharding& s) {
    const ts::NamedSharding rep(s.mesh(), ts::P());
    auto x = put({0, 5}, s);
    expect_array(ts::diff(x, 1, 1), {0, 4}, {});
    expect_array(ts::diff(x, 1, 0), {0, 5}, {});
    expect_array(ts::cumsum(x, 0), {0, 5}, {});
    expect_array(ts::cumsum(x, 1), {0, 5}, {});
    auto k = ts::device_put(std::vector<float>{1, 2, 1}, {3}, rep);
    expect_array(ts::convolve(x, k, 1), {0, 5}, {});
    expect_array(ts::convolve(x, k, 0), {0, 5}, {});
    expect_array(ts::convolve2d(x, ts::device_put(std::vector<float>{1, 1, 1, 1}, {2, 2}, rep)), {0, 5}, {});
    // diff of a dim of size 1 is empty; prepend onto an empty array is not.
    auto y = put({1, 4}, s);
    expect_array(ts::diff(y, 1, 0), {0, 4}, {});
    auto pre = put({2, 5}, rep, 3);
    const auto hp = iota_data<float>(10, 3);
    std::vector<float> want;
    for (int j = 0; j < 5; ++j) want.push_back(hp[5 + j] - hp[j]);
    expect_array(ts::diff(x, 1, 0, {.prepend = pre}), {1, 5}, want);
    // interp at no points, and with an empty x of any shape.
    auto xp = ts::device_put(std::vector<float>{0, 1, 2}, {3}, rep);
    auto fp = ts::device_put(std::vector<float>{0, 10, 20}, {3}, rep);
    expect_array(ts::interp(x, xp, fp), {0, 5}, {});
  });
}

// --------------------------------------------------------------- shape ops

TEST(ZeroSize, ShapeOps) {
  layouts(2, [&](const ts::NamedSharding& s) {
    const ts::NamedSharding rep(s.mesh(), ts::P());
    auto x = put({0, 6}, s);
    expect_array(ts::reshape(x, {3, 0, 2}), {3, 0, 2}, {});
    expect_array(ts::reshape(x, {0}), {0}, {});
    expect_array(ts::reshape(x, {-1, 3}), {0, 3}, {});
    expect_array(ts::transpose(x), {6, 0}, {});
    expect_array(ts::swapaxes(x, 0, 1), {6, 0}, {});
    expect_array(ts::expand_dims(x, 1), {0, 1, 6}, {});
    expect_array(ts::slice(x, {{}, {1, 4}}), {0, 3}, {});
    expect_array(ts::slice(put({4, 6}, s), {{2, 2}, {}}), {0, 6}, {});
    expect_array(ts::slice(put({4, 6}, s), {{}, {5, 1}}), {4, 0}, {});
    expect_array(ts::slice(put({4, 6}, s), {{}, {{}, {}, -1}}), {4, 6}, [] {
      auto h = iota_data<float>(24);
      std::vector<float> r;
      for (int i = 0; i < 4; ++i)
        for (int j = 5; j >= 0; --j) r.push_back(h[i * 6 + j]);
      return r;
    }());
    expect_array(ts::roll(x, 2, 0), {0, 6}, {});
    expect_array(ts::roll(x, 2, 1), {0, 6}, {});
    expect_array(ts::flip(x, 0), {0, 6}, {});
    expect_array(ts::flip(x, 1), {0, 6}, {});
    expect_array(ts::broadcast_to(put({0, 1}, s), {0, 4}), {0, 4}, {});
    expect_array(ts::broadcast_to(put({1, 6}, rep), {0, 6}), {0, 6}, {});
    expect_array(ts::broadcast_to(put({6}, rep), {3, 0, 6}), {3, 0, 6}, {});
    // Pad an empty array: the result is all pad value.
    expect_array(ts::pad(x, {{1, 1}, {0, 0}}, 7.0f), {2, 6}, std::vector<float>(12, 7.0f));
    expect_array(ts::pad(put({2, 0}, s), {{0, 0}, {1, 2}}, -1.0f), {2, 3}, std::vector<float>(6, -1.0f));
    // Concatenate and stack with empty pieces.
    auto y = put({2, 6}, s, 5);
    expect_array(ts::concatenate({x, y, x}, 0), {2, 6}, iota_data<float>(12, 5));
    expect_array(ts::concatenate({x, x}, 1), {0, 12}, {});
    expect_array(ts::stack({x, x}, 0), {2, 0, 6}, {});
    expect_array(ts::stack({x, x, x}, 2), {0, 6, 3}, {});
    expect_array(ts::squeeze(put({0, 1}, rep), {1}), {0}, {});
  });
}

// ---------------------------------------------------------------- indexing

TEST(ZeroSize, Indexing) {
  layouts(2, [&](const ts::NamedSharding& s) {
    const ts::NamedSharding rep(s.mesh(), ts::P());
    auto x = put({4, 3}, s);
    const ts::NamedSharding rep1(s.mesh(), ts::P());
    auto none_idx = ts::device_put(std::vector<std::int32_t>{}, {0}, rep1);
    expect_array(ts::take(x, none_idx, 0), {0, 3}, {});
    expect_array(ts::take(x, none_idx, 1), {4, 0}, {});
    auto e = put({0, 3}, s);
    auto idx = ts::device_put(std::vector<std::int32_t>{}, {0}, rep1);
    expect_array(ts::take(e, idx, 0), {0, 3}, {});
    expect_array(ts::take(e, ts::device_put(std::vector<std::int32_t>{0, 2}, {2}, rep1), 1), {0, 2}, {});
    // scatter_add with no updates leaves x; into an empty trailing dim.
    expect_array(ts::scatter_add(x, idx, put({0, 3}, rep)), {4, 3}, iota_data<float>(12));
    expect_array(ts::scatter_add(put({4, 0}, s), ts::device_put(std::vector<std::int32_t>{1, 3}, {2}, rep1),
                                 put({2, 0}, rep)),
                 {4, 0}, {});
    // segment_sum of nothing is zeros; zero segments is empty.
    expect_array(ts::segment_sum(put({0, 3}, s), idx, 2), {2, 3}, std::vector<float>(6, 0.0f));
    auto ids = ts::device_put(std::vector<std::int32_t>{0, 1, 0, 1}, {4}, rep1);
    expect_array(ts::segment_sum(x, ids, 0), {0, 3}, {});
  });
}

// ---------------------------------------------- creation, elementwise, random

TEST(ZeroSize, CreationElementwiseRandom) {
  layouts(2, [&](const ts::NamedSharding& s) {
    for (ts::Shape shape : {ts::Shape{0, 5}, ts::Shape{3, 0}, ts::Shape{0, 0}}) {
      SCOPED_TRACE(ts::shape_str(shape));
      expect_array(ts::zeros(shape, ts::f32, s), shape, {});
      expect_array(ts::ones(shape, ts::f64, s), shape, {});
      expect_array(ts::full(shape, 3, ts::i32, s), shape, {});
      auto r = ts::random::uniform(ts::random::key(1), shape, ts::f32, s);
      expect_array(r, shape, {});
      expect_array(ts::random::normal(ts::random::key(2), shape, ts::f64, s), shape, {});
      auto x = put(shape, s);
      expect_array(x + 1.0f, shape, {});
      expect_array(ts::sin(x) * x, shape, {});
      expect_array(ts::where(x > 0.0f, x, 2.0f), shape, {});
      EXPECT_EQ(ts::astype(x, ts::bool_).size(), 0);
      // Broadcasting against a size-1 dim gives size 0.
      auto one = put({1, shape[1]}, ts::NamedSharding(s.mesh(), ts::P()));
      expect_array(x - one, shape, {});
      auto made = ts::make_array_from_callback(shape, ts::f32, s, [](const std::vector<ts::Slice>& idx) {
        std::int64_t n = 1;
        for (const auto& sl : idx) n *= sl.size();
        return std::vector<float>(static_cast<size_t>(n), 1.0f);
      });
      expect_array(made, shape, {});
    }
    expect_array(ts::eye(0, 3, 0, ts::f32, s), {0, 3}, {});
    expect_array(ts::eye(3, 0, 1, ts::f32, s), {3, 0}, {});
  });
  for (const auto& m : test_meshes()) {
    ts::NamedSharding s(m, ts::P("x"));
    expect_array(ts::arange(3, 3, 1, ts::f32, s), {0}, {});
    expect_array(ts::arange(3, 0, 1, ts::f32, s), {0}, {});
    expect_array(ts::linspace(0, 1, 0, ts::f32, s), {0}, {});
  }
}

// ---------------------------------------------- reshard, device_put, shard_map

TEST(ZeroSize, ReshardAndDevicePut) {
  for (const auto& m : test_meshes()) {
    const ts::Mesh other = test_meshes().back();
    ts::NamedSharding a(m, ts::P("x")), b(m, ts::P(ts::none, "x"));
    for (ts::Shape shape : {ts::Shape{0, 7}, ts::Shape{5, 0}}) {
      auto x = put(shape, a);
      expect_array(ts::reshard(x, b), shape, {});
      expect_array(ts::reshard(x, ts::P()), shape, {});
      expect_array(ts::device_put(x, ts::NamedSharding(other, ts::P("x", "y"))), shape, {});
      expect_array(ts::with_sharding_constraint(x, b), shape, {});
    }
  }
}

TEST(ZeroSize, ShardMap) {
  for (const auto& m : test_meshes()) {
    SCOPED_TRACE(m.str());
    ts::NamedSharding s(m, ts::P("x"));
    auto x = put({0, 4}, s);
    auto f = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(xl, {0}), "x"); }, m, {ts::P("x")}, ts::P());
    expect_array(f(x), {4}, {0, 0, 0, 0});
    auto g = ts::shard_map([](ts::Array xl) { return xl * 2.0f; }, m, {ts::P("x")}, ts::P("x"));
    expect_array(g(x), {0, 4}, {});
    auto h = ts::shard_map([](ts::Array xl) { return ts::all_gather(xl, "x", 0, true); }, m, {ts::P("x")}, ts::P(),
                           {.check_vma = false});
    expect_array(h(x), {0, 4}, {});
    // Fewer rows than devices: most local blocks empty, the matmul on each.
    auto y = put({3, 0}, s);
    auto w = put({0, 2}, ts::NamedSharding(m, ts::P()));
    auto mm = ts::shard_map([](ts::Array yl, ts::Array wl) { return ts::matmul(yl, wl); }, m, {ts::P("x"), ts::P()},
                            ts::P("x"));
    expect_array(mm(y, w), {3, 2}, std::vector<float>(6, 0.0f));
  }
}
