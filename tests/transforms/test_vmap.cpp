// vmap and chunked maps: every batching rule against a loop over the
// examples, on every test layout, in_axes/out_axes, nesting, composition
// with jit and shard_map, chunks (global and per device, with remainders)
// bitwise equal to the whole batch, memory bounded by the chunk, and the
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::expect_same;
using ts::testing::for_each_layout;
using ts::testing::iota_data;

namespace {

using Fn = std::function<ts::Array(const std::vector<ts::Array>&)>;

ts::Array example(const ts::Array& x, int axis, std::int64_t i) {
  std::vector<ts::SliceSpec> sl(static_cast<size_t>(x.ndim()));
  sl[axis] = ts::SliceSpec{i, i + 1, 1};
  return ts::squeeze(ts::slice(x, sl), {axis});
}

// f applied to each example in turn, stacked along dim 0.
ts::Array loop(const Fn& f, const std::vector<ts::Array>& xs, const std::vector<int>& axes) {
  std::int64_t n = -1;
  for (size_t k = 0; k < xs.size(); ++k)
    if (axes[k] != ts::not_mapped) n = xs[k].shape()[axes[k]];
  std::vector<ts::Array> outs;
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<ts::Array> args;
    for (size_t k = 0; k < xs.size(); ++k) args.push_back(axes[k] == ts::not_mapped ? xs[k] : example(xs[k], axes[k], i));
    outs.push_back(f(args));
  }
  return ts::stack(outs, 0);
}

void expect_close(const ts::Array& a, const ts::Array& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    ASSERT_NEAR(va[i], vb[i], tol * (1 + std::abs(vb[i]))) << what << " element " << i;
}

ts::Array data(const ts::Shape& shape, const ts::NamedSharding& s, int salt = 0) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v = iota_data<float>(n, salt);
  for (auto& x : v) x = x / 16.0f;
  return ts::device_put(v, shape, s);
}

ts::Mesh line(int n, const char* axis = "x") { return ts::Mesh(ts::testing::first_devices(n), {n}, {axis}); }

// The batched function against the loop, on a batch sharded every way.
void check_rule(const std::string& what, const Fn& f, const std::vector<ts::Shape>& shapes, const std::vector<int>& axes,
                double tol = 0) {
  for_each_layout(static_cast<int>(shapes[0].size()), [&](const ts::NamedSharding& s) {
    std::vector<ts::Array> xs;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const ts::NamedSharding sk = shapes[k].size() == shapes[0].size() ? s : ts::NamedSharding(s.mesh(), ts::P());
      xs.push_back(data(shapes[k], sk, static_cast<int>(k) * 5));
    }
    ts::VmapOptions opt;
    opt.in_axes = axes;
    ts::Array got = xs.size() == 1 ? ts::vmap([&](ts::Array a) { return f({a}); }, opt)(xs[0])
                                   : ts::vmap([&](ts::Array a, ts::Array b) { return f({a, b}); }, opt)(xs[0], xs[1]);
    ts::Array want = loop(f, xs, axes);
    const std::string label = what + " on " + s.str();
    if (tol == 0) {
      ASSERT_EQ(got.shape(), want.shape()) << label;
      EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>()) << label;
    } else {
      expect_close(got, want, tol, label);
    }
  });
}

}  // namespace

TEST(Vmap, ElementwiseWithBroadcasting) {
  check_rule("2*sin(x)+y", [](auto a) { return 2.0f * ts::sin(a[0]) + a[1]; }, {{5, 3}, {3}}, {0, ts::not_mapped});
  check_rule("x*y both mapped, ranks differ", [](auto a) { return a[0] * a[1]; }, {{5, 3, 2}, {5, 2}}, {0, 0});
  check_rule("where", [](auto a) { return ts::where(a[0] > 0.0f, a[0], a[1]); }, {{4, 6}, {4}}, {1, ts::not_mapped});
  check_rule("mapped along dim 1", [](auto a) { return ts::exp(a[0]) - ts::tanh(a[0]); }, {{3, 7}}, {1});
}

TEST(Vmap, Reductions) {
  check_rule("sum axis 0", [](auto a) { return ts::sum(a[0], {0}); }, {{5, 4, 3}}, {0});
  check_rule("max keepdims", [](auto a) { return ts::max(a[0], {1}, {.keepdims = true}); }, {{5, 4, 3}}, {1});
  check_rule("mean all", [](auto a) { return ts::mean(a[0]); }, {{6, 4}}, {0}, 1e-6);
  check_rule("argmax", [](auto a) { return ts::astype(ts::argmax(a[0], 0), ts::f32); }, {{4, 5}}, {0});
}

TEST(Vmap, Matmul) {
  check_rule("w @ x, x mapped", [](auto a) { return ts::matmul(a[1], a[0]); }, {{6, 4}, {3, 4}}, {0, ts::not_mapped},
             1e-6);
  check_rule("x @ w, x mapped", [](auto a) { return ts::matmul(a[0], a[1]); }, {{6, 2, 4}, {4, 3}},
             {0, ts::not_mapped}, 1e-6);
  check_rule("both mapped", [](auto a) { return ts::matmul(a[0], a[1]); }, {{5, 2, 4}, {5, 4, 3}}, {0, 0}, 1e-6);
  check_rule("dot_general batch dims", [](auto a) {
    return ts::dot_general(a[0], a[1], {.lhs_contracting = {2}, .rhs_contracting = {1}, .lhs_batch = {0}, .rhs_batch = {0}});
  }, {{3, 2, 2, 4}, {2, 4, 5}}, {0, ts::not_mapped}, 1e-6);
}

TEST(Vmap, ShapeOps) {
  check_rule("transpose", [](auto a) { return ts::transpose(a[0]); }, {{4, 3, 2}}, {1});
  check_rule("reshape", [](auto a) { return ts::reshape(a[0], {6}); }, {{5, 2, 3}}, {0});
  check_rule("slice", [](auto a) { return ts::slice(a[0], {{1, 5, 2}}); }, {{3, 7}}, {0});
  check_rule("pad", [](auto a) { return ts::pad(a[0], {{1, 2}}, 3); }, {{3, 4}}, {0});
  check_rule("concatenate with unmapped", [](auto a) { return ts::concatenate({a[0], a[1]}, 0); }, {{3, 4}, {2}},
             {0, ts::not_mapped});
  check_rule("stack", [](auto a) { return ts::stack({a[0], a[0] * 2.0f}, 1); }, {{3, 4}}, {0});
  check_rule("flip, roll", [](auto a) { return ts::roll(ts::flip(a[0], 0), 2, 0); }, {{3, 5}}, {0});
  check_rule("expand/squeeze", [](auto a) { return ts::squeeze(ts::expand_dims(a[0], 0)); }, {{3, 5}}, {0});
  check_rule("broadcast_to", [](auto a) { return ts::broadcast_to(a[0], {2, 4}); }, {{3, 4}}, {0});
}

TEST(Vmap, StencilsAndIndexing) {
  check_rule("diff", [](auto a) { return ts::diff(a[0], 2, 0); }, {{3, 9}}, {0});
  check_rule("diff with prepend", [](auto a) { return ts::diff(a[0], 1, 0, {.prepend = a[1]}); }, {{3, 6}, {2}},
             {0, ts::not_mapped});
  check_rule("cumsum", [](auto a) { return ts::cumsum(a[0], 0); }, {{4, 7}}, {0});
  check_rule("take (rows of a mapped matrix)", [](auto a) {
    return ts::take(a[0], ts::astype(ts::arange(0, 3, 1, ts::i32, ts::NamedSharding(a[0].sharding().mesh(), ts::P())),
                                      ts::i32), 0);
  }, {{3, 5, 2}}, {0});
  // A primitive without a batching rule runs once per example.
  check_rule("interp (one at a time)", [](auto a) { return ts::interp(a[0], a[1], a[1] * 2.0f); }, {{3, 4}, {5}},
             {0, ts::not_mapped});
}

TEST(Vmap, InAndOutAxesNestingAndTrees) {
  const ts::Mesh m = line(4);
  ts::Array x = data({5, 3}, ts::NamedSharding(m, ts::P("x"))), w = data({3}, ts::NamedSharding(m, ts::P()), 3);
  // out_axes moves the batch dim.
  auto f = [](ts::Array a, ts::Array b) { return ts::stack({a, b}, 0); };
  ts::Array y = ts::vmap(f, {.in_axes = {0, ts::not_mapped}, .out_axes = {2}})(x, w);
  EXPECT_EQ(y.shape(), (ts::Shape{2, 3, 5}));
  expect_close(y, ts::transpose(loop([&](auto a) { return f(a[0], a[1]); }, {x, w}, {0, ts::not_mapped}), {1, 2, 0}), 0,
               "out_axes 2");
  // Nested: an outer product of two batches.
  auto inner = ts::vmap([](ts::Array a, ts::Array b) { return a * b; }, {.in_axes = {ts::not_mapped, 0}});
  ts::Array u = data({4}, ts::NamedSharding(m, ts::P("x"))), v = data({6}, ts::NamedSharding(m, ts::P()), 1);
  ts::Array outer = ts::vmap([&](ts::Array a, ts::Array b) { return inner(a, b); }, {.in_axes = {0, ts::not_mapped}})(u, v);
  auto hu = u.to_vector<float>(), hv = v.to_vector<float>(), ho = outer.to_vector<float>();
  ASSERT_EQ(outer.shape(), (ts::Shape{4, 6}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(ho[i * 6 + j], hu[i] * hv[j]);
  // Pytrees in and out; an unbatched result is broadcast.
  std::map<std::string, ts::Array> in{{"a", x}, {"b", x * 2.0f}};
  auto g = [](const std::map<std::string, ts::Array>& t) {
    return std::make_tuple(t.at("a") + t.at("b"), ts::sum(t.at("a")));
  };
  auto [s, total] = ts::vmap(g)(in);
  expect_close(s, x * 3.0f, 1e-6, "tree sum");
  expect_close(total, ts::sum(x, {1}), 1e-6, "tree total");
}

TEST(Vmap, ComposesWithJit) {
  const ts::Mesh m = line(8);
  ts::Array x = data({13, 6}, ts::NamedSharding(m, ts::P("x")));
  auto f = [](ts::Array a) { return ts::sum(ts::sin(a) * a); };
  ts::Array want = ts::vmap(f)(x);
  // jit of vmap: one compiled program.
  auto jf = ts::jit([&](ts::Array a) { return ts::vmap(f)(a); });
  expect_same(jf(x), want, "jit(vmap)");
  // vmap of jit: the jitted function is batched (traced inline).
  expect_same(ts::vmap(ts::jit(f))(x), want, "vmap(jit)");
}

TEST(Vmap, ChunksEqualTheWholeBatchBitwise) {
  auto f = [](ts::Array a, ts::Array w) { return ts::tanh(ts::matmul(w, a)) + ts::sum(a); };
  for (int n : {1, 3, 8}) {
    const ts::Mesh m = line(n);
    for (const auto& spec : {ts::P(), ts::P("x")}) {
      for (std::int64_t rows : {1, 7, 13, 40}) {
        ts::Array x = data({rows, 5}, ts::NamedSharding(m, spec));
        ts::Array w = data({4, 5}, ts::NamedSharding(m, ts::P()), 2);
        ts::Array whole = ts::vmap(f, {.in_axes = {0, ts::not_mapped}})(x, w);
        for (std::int64_t c : {1, 2, 3, 64}) {
          ts::Array chunked = ts::vmap(f, {.in_axes = {0, ts::not_mapped}, .chunk_size = c})(x, w);
          const std::string what = std::to_string(rows) + " rows on " + x.sharding().str() + ", chunk " + std::to_string(c);
          ASSERT_EQ(chunked.shape(), whole.shape()) << what;
          EXPECT_EQ(chunked.to_vector<float>(), whole.to_vector<float>()) << what;
          // A batch sharded over devices stays sharded.
          EXPECT_EQ(chunked.sharding().spec()[0].axes(), x.sharding().spec()[0].axes()) << what;
        }
        // lax.map's form.
        ts::Array mapped = ts::map([&](ts::Array a) { return f(a, w); }, x, {.batch_size = 4});
        EXPECT_EQ(mapped.to_vector<float>(), whole.to_vector<float>());
      }
    }
  }
}

TEST(Vmap, ChunkedMemoryGrowsWithTheChunkNotTheBatch) {
  const ts::Mesh m = line(2);
  // Each example makes a 256 KiB intermediate (its outer product).
  auto f = [](ts::Array a) { return ts::sum(ts::multiply(ts::expand_dims(a, 1), ts::expand_dims(a, 0))); };
  auto peak = [&](std::int64_t rows, std::int64_t chunk) {
    ts::Array x = data({rows, 256}, ts::NamedSharding(m, ts::P("x")));
    x.block_until_ready();
    for (const auto& d : m.devices()) ts::reset_peak_memory(d);
    ts::Array y = ts::vmap(f, {.chunk_size = chunk})(x);
    y.block_until_ready();
    std::int64_t p = 0;
    for (const auto& d : m.devices()) p = std::max<std::int64_t>(p, ts::memory_stats(d).peak_bytes_in_use);
    return p;
  };
  const auto small = peak(64, 4), big = peak(256, 4), wide = peak(64, 32);
  // 4x the batch, same chunk: about the same peak; 8x the chunk: far more.
  EXPECT_LT(big, small * 3 / 2) << small << " " << big;
  EXPECT_GT(wide, small * 3) << small << " " << wide;
}

TEST(Vmap, Errors) {
  const ts::Mesh m = line(2);
  ts::Array x = data({4, 3}, ts::NamedSharding(m, ts::P())), y = data({5, 3}, ts::NamedSharding(m, ts::P()));
  auto add = [](ts::Array a, ts::Array b) { return a + b; };
  expect_error<ts::ShapeError>([&] { ts::vmap(add)(x, y); }, "[vmap]", {"mapped axes differ", "4", "5"});
  expect_error<ts::ShapeError>([&] { ts::vmap(add, {.in_axes = {0, 0, 0}})(x, y); }, "[vmap]", {"3 entries for 2 arguments"});
  expect_error<ts::ShapeError>([&] { ts::vmap(add, {.in_axes = {2, 0}})(x, x); }, "[vmap]", {"axis 2", "rank 2"});
  expect_error<ts::ShapeError>([&] { ts::vmap(add, {.in_axes = {ts::not_mapped}})(x, x); }, "[vmap]", {"no argument is mapped"});
  expect_error<ts::ShapeError>([&] { ts::vmap([](ts::Array a) { return a; }, {.out_axes = {ts::not_mapped}})(x); },
                               "[vmap]", {"not_mapped", "depends on the example"});
  expect_error<ts::ShapeError>([&] { ts::vmap([](ts::Array a) { return a; }, {.chunk_size = -1})(x); }, "[vmap]",
                               {"chunk_size must be >= 0"});
  expect_error<ts::ShapeError>([&] { ts::map([](ts::Array a) { return a; }, x, {.batch_size = -2}); }, "[map]",
                               {"batch_size"});
  // An op's own error inside the batched function names the op.
  expect_error<ts::ShapeError>([&] { ts::vmap([](ts::Array a) { return ts::reshape(a, {7}); })(x); }, "[reshape]");
}

TEST(Vmap, OfShardMapAndSpmdAxisName) {
  const ts::Mesh m = line(4);
  // A body without collectives: each device's block, batched.
  auto body = ts::shard_map([](ts::Array xl) { return 2.0f * ts::sin(xl) + 1.0f; }, m, {ts::P("x")}, ts::P("x"));
  ts::Array xs = data({3, 10}, ts::NamedSharding(m, ts::P()));
  ts::Array got = ts::vmap(body)(xs);
  EXPECT_EQ(got.to_vector<float>(), (2.0f * ts::sin(xs) + 1.0f).to_vector<float>());
  // Collectives act per example: the batch rides along.
  auto with_psum = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(xl), "x"); }, m, {ts::P("x")}, ts::P());
  const auto per = ts::vmap(with_psum)(xs).to_vector<float>(), want = ts::sum(xs, {1}).to_vector<float>();
  ASSERT_EQ(per.size(), want.size());
  for (size_t i = 0; i < per.size(); ++i) EXPECT_NEAR(per[i], want[i], 1e-5f);
  auto gather = ts::shard_map([](ts::Array xl) { return ts::all_gather(xl * 2.0f, "x", 0, true); }, m, {ts::P("x")}, ts::P());
  ts::Array ev = data({3, 8}, ts::NamedSharding(m, ts::P()));
  EXPECT_EQ(ts::vmap(gather)(ev).to_vector<float>(), (ev * 2.0f).to_vector<float>());
  auto shift = ts::shard_map([](ts::Array xl) { return ts::ppermute(xl, "x", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); }, m,
                             {ts::P("x")}, ts::P("x"));
  EXPECT_EQ(ts::vmap(shift)(ev).to_vector<float>(), ts::roll(ev, 2, 1).to_vector<float>());
  auto with_pmax = ts::shard_map([](ts::Array xl) { return ts::pmax(ts::max(xl), "x"); }, m, {ts::P("x")}, ts::P());
  EXPECT_EQ(ts::vmap(with_pmax)(xs).to_vector<float>(), ts::max(xs, {1}).to_vector<float>());
  // all_to_all under vmap is not supported yet: a clear error.
  auto a2a = ts::shard_map([](ts::Array xl) { return ts::all_to_all(xl, "x", 0, 0, true); }, m, {ts::P("x")}, ts::P("x"));
  expect_error<ts::Error>([&] { ts::vmap(a2a)(ev); }, "[all_to_all]", {"vmap", "not support"});
  // spmd_axis_name: the batch dim is sharded over the axis throughout.
  ts::Array b = data({8, 5}, ts::NamedSharding(m, ts::P()));
  ts::Array r = ts::vmap([](ts::Array a) { return ts::exp(a) * 2.0f; }, {.spmd_axis_name = "x"})(b);
  EXPECT_EQ(r.sharding().spec()[0].axes(), std::vector<std::string>{"x"});
  EXPECT_EQ(r.to_vector<float>(), (ts::exp(b) * 2.0f).to_vector<float>());
}

// A batch sharded over devices, chunked per device, with a result that does
// not depend on the example (out_axes not_mapped) beside a mapped one.
TEST(Vmap, PerDeviceChunksWithAnUnmappedResult) {
  const ts::Mesh m = line(4);
  ts::Array x = data({11, 3}, ts::NamedSharding(m, ts::P("x")));
  ts::Array w = data({3}, ts::NamedSharding(m, ts::P()), 4);
  auto f = [](ts::Array a, ts::Array b) { return std::make_tuple(a * b, ts::sum(b)); };
  auto [ys, total] = ts::vmap(f, {.in_axes = {0, ts::not_mapped}, .out_axes = {1, ts::not_mapped}, .chunk_size = 2})(x, w);
  EXPECT_EQ(ys.shape(), (ts::Shape{3, 11}));
  EXPECT_EQ(ys.to_vector<float>(), ts::transpose(x * w).to_vector<float>());
  EXPECT_EQ(total.to_vector<float>(), ts::sum(w).to_vector<float>());
}
