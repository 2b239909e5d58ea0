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
  // all_to_all acts per example too: device d's 4 elements go one to each
  // device, so each example's 4x4 blocks come back transposed.
  auto a2a = ts::shard_map([](ts::Array xl) { return ts::all_to_all(xl, "x", 0, 0, true); }, m, {ts::P("x")}, ts::P("x"));
  ts::Array ev16 = data({3, 16}, ts::NamedSharding(m, ts::P()));
  EXPECT_EQ(ts::vmap(a2a)(ev16).to_vector<float>(),
            ts::reshape(ts::transpose(ts::reshape(ev16, {3, 4, 4}), {0, 2, 1}), {3, 16}).to_vector<float>());
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

namespace {

// An argument of a batched call: its shape, whether it holds i32 indices,
// and its values.
struct Arg {
  ts::Shape shape;
  std::vector<double> v;
  bool ints = false;
};

Arg floats(const ts::Shape& shape, int salt) {
  const auto v = iota_data<float>(ts::testing::numel(shape), salt);
  std::vector<double> d;
  for (float x : v) d.push_back(x / 16.0);
  return {shape, d, false};
}

// Indices in [lo, hi) in a scrambled order (7 is prime to every range the
// tests use, so consecutive ones differ): repeats, and negative ones where
// lo < 0.
Arg indices(const ts::Shape& shape, std::int64_t lo, std::int64_t hi, int salt = 0) {
  std::vector<double> d;
  for (std::int64_t i = 0; i < ts::testing::numel(shape); ++i)
    d.push_back(static_cast<double>(lo + (i * 7 + salt) % (hi - lo)));
  return {shape, d, true};
}

ts::Array make(const Arg& a, const ts::NamedSharding& s) {
  if (!a.ints) return ts::device_put(std::vector<float>(a.v.begin(), a.v.end()), a.shape, s);
  std::vector<std::int32_t> iv;
  for (double x : a.v) iv.push_back(static_cast<std::int32_t>(x));
  return ts::device_put(iv, a.shape, s);
}

// vmap of f against the loop over the examples (a stack of per-example
// results), exactly (tol 0) or to tol. Every mapped argument's batch dim is
// sharded the same way: over no axis, each axis and all axes of every test
// mesh (uneven blocks where the batch does not divide); unmapped arguments
// are replicated.
void check_batched(const std::string& what, const Fn& f, const std::vector<Arg>& args, const std::vector<int>& axes,
                   double tol = 0) {
  for (const ts::Mesh& m : ts::testing::test_meshes()) {
    std::vector<ts::PartitionSpec::Entry> batch_entries{ts::none};
    for (const auto& a : m.axis_names()) batch_entries.emplace_back(a);
    if (m.ndim() == 2) batch_entries.emplace_back(m.axis_names());
    for (const auto& be : batch_entries) {
      std::vector<ts::Array> xs;
      for (size_t k = 0; k < args.size(); ++k) {
        std::vector<ts::PartitionSpec::Entry> e(args[k].shape.size(), ts::none);
        if (axes[k] != ts::not_mapped) e[axes[k]] = be;
        xs.push_back(make(args[k], ts::NamedSharding(m, ts::PartitionSpec(e))));
      }
      ts::VmapOptions opt;
      opt.in_axes = axes;
      std::string label = what + " with the batch on " + m.str() + " " + ts::typeof(xs[0]);
      for (size_t k = 1; k < xs.size(); ++k) label += ", " + ts::typeof(xs[k]);
      ts::Array got, want;
      using A = ts::Array;
      // An error names the case and leaves the other cases to run.
      try {
        switch (xs.size()) {
          case 1:
            got = ts::vmap([&](A a) { return f({a}); }, opt)(xs[0]);
            break;
          case 2:
            got = ts::vmap([&](A a, A b) { return f({a, b}); }, opt)(xs[0], xs[1]);
            break;
          case 3:
            got = ts::vmap([&](A a, A b, A c) { return f({a, b, c}); }, opt)(xs[0], xs[1], xs[2]);
            break;
          case 5:
            got = ts::vmap(
                [&](A a, A b, A c, A d, A e) {
                  return f({a, b, c, d, e});
                },
                opt)(xs[0], xs[1], xs[2], xs[3], xs[4]);
            break;
          default:
            FAIL() << "check_batched takes 1, 2, 3 or 5 arguments";
        }
        want = loop(f, xs, axes);
      } catch (const std::exception& e) {
        ADD_FAILURE() << label << " raised: " << e.what();
        return;
      }
      if (tol == 0) {
        ASSERT_EQ(got.shape(), want.shape()) << label;
        ASSERT_EQ(got.dtype(), want.dtype()) << label;
        // Equal values, NaN where the loop has NaN (an empty median).
        const auto g = got.to_vector<double>(), w = want.to_vector<double>();
        for (size_t i = 0; i < g.size(); ++i)
          if (!(std::isnan(g[i]) && std::isnan(w[i]))) {
            ASSERT_EQ(g[i], w[i]) << label << " element " << i;
          }
      } else {
        expect_close(got, want, tol, label);
      }
    }
  }
}

}  // namespace

// take: the operand batched with shared indices (the rule: gather along the
// axis one further), and indices per example, batched alone or with the
// operand (one gather per example). Negative indices wrap.
TEST(Vmap, TakeWithBatchedOperandAndOrIndices) {
  const int nm = ts::not_mapped;
  auto take0 = [](auto a) { return ts::take(a[0], a[1], 0); };
  auto take1 = [](auto a) { return ts::take(a[0], a[1], 1); };
  check_batched("take, operand and indices batched", take0, {floats({5, 6, 3}, 1), indices({5, 4}, -2, 6)}, {0, 0});
  check_batched("take, indices batched", take0, {floats({6, 3}, 2), indices({5, 4}, -6, 6, 1)}, {nm, 0});
  check_batched("take, both batched along dim 1, gather axis 1", take1,
                {floats({6, 5, 3}, 3), indices({4, 5}, -3, 3, 2)}, {1, 1});
  check_batched("take, operand batched along dim 2, shared indices, gather axis 1", take1,
                {floats({3, 6, 5}, 4), indices({4}, -6, 6, 3)}, {2, nm});
  check_batched("take, operand batched, shared indices", take0, {floats({5, 6, 3}, 5), indices({7}, -6, 6, 4)},
                {0, nm});
}

// scatter_add: the rule (rows stay dim 0, the batch goes second) for the
// target, the updates or both batched along any dim; indices per example
// one at a time. Repeated and negative indices.
TEST(Vmap, ScatterAdd) {
  const int nm = ts::not_mapped;
  auto sa = [](auto a) { return ts::scatter_add(a[0], a[1], a[2]); };
  check_batched("scatter_add, target and updates batched", sa,
                {floats({5, 6, 3}, 1), indices({4}, -3, 6), floats({5, 4, 3}, 2)}, {0, nm, 0});
  check_batched("scatter_add, target batched along dim 1", sa,
                {floats({6, 5, 3}, 3), indices({4}, -6, 6, 1), floats({4, 3}, 4)}, {1, nm, nm});
  check_batched("scatter_add, updates batched along dim 2", sa,
                {floats({6, 3}, 5), indices({4}, 0, 3, 2), floats({4, 3, 5}, 6)}, {nm, nm, 2});
  check_batched("scatter_add, indices batched too", sa,
                {floats({5, 6, 3}, 7), indices({5, 4}, -6, 6, 3), floats({5, 4, 3}, 8)}, {0, 0, 0});
  // A 1-d target: the batch becomes its second dim.
  check_batched("scatter_add, 1-d target", sa, {floats({6, 5}, 9), indices({4}, 0, 6, 1), floats({4, 5}, 1)},
                {1, nm, 1});
}

// segment_sum: data batched (the rule: the batch goes second), ids per
// example one at a time; ids out of range (4, -1) are dropped.
TEST(Vmap, SegmentSum) {
  const int nm = ts::not_mapped;
  auto seg = [](auto a) { return ts::segment_sum(a[0], a[1], 4); };
  check_batched("segment_sum, data batched", seg, {floats({5, 6, 3}, 1), indices({6}, -1, 5)}, {0, nm});
  check_batched("segment_sum, data batched along dim 2", seg, {floats({6, 3, 5}, 2), indices({6}, 0, 5, 2)}, {2, nm});
  check_batched("segment_sum, ids batched along dim 1", seg, {floats({6, 3}, 3), indices({6, 5}, -1, 5, 1)}, {nm, 1});
  check_batched("segment_sum, both batched, 1-d data", seg, {floats({5, 6}, 4), indices({5, 6}, 0, 4, 3)}, {0, 0});
}

// convolve: the signal batched with a shared kernel (the rule: along the
// axis one further), odd and even kernels; a kernel per example one at a time.
TEST(Vmap, Convolve) {
  const int nm = ts::not_mapped;
  check_batched("convolve, signal batched", [](auto a) { return ts::convolve(a[0], a[1], 0); },
                {floats({5, 9}, 1), floats({3}, 2)}, {0, nm});
  check_batched("convolve, signal batched along dim 1, even kernel, axis -1",
                [](auto a) { return ts::convolve(a[0], a[1], -1); }, {floats({4, 5, 7}, 3), floats({4}, 4)}, {1, nm});
  check_batched("convolve, signal along dim 0 of the example", [](auto a) { return ts::convolve(a[0], a[1], 0); },
                {floats({7, 4, 5}, 5), floats({5}, 6)}, {2, nm});
  check_batched("convolve, kernel batched", [](auto a) { return ts::convolve(a[0], a[1], 0); },
                {floats({5, 9}, 7), floats({5, 3}, 8)}, {0, 0});
  check_batched("convolve, only the kernel batched", [](auto a) { return ts::convolve(a[0], a[1], 0); },
                {floats({9}, 9), floats({3, 5}, 1)}, {nm, 1});
}

// The other rules with no test of their own above: a sharding constraint,
// stop_gradient, interp2d (queries batched: one call; a table per example:
// one call each), searchsorted (values batched; a sequence per example),
// median (with a batched mask), argmin along dim 1.
TEST(Vmap, ConstraintStopGradientInterp2dSearchsortedMedian) {
  const int nm = ts::not_mapped;
  // A constraint that moves the example's last dim onto "x" (a constraint
  // the example already meets is no op at all); the batch, along dim 1,
  // keeps its layout: replicated, or over "y".
  const ts::Mesh m4 = line(4), m23(ts::testing::first_devices(6), {2, 3}, {"x", "y"});
  for (const auto& [m, batch] : std::vector<std::pair<ts::Mesh, ts::PartitionSpec>>{
           {m4, ts::P()}, {m23, ts::P()}, {m23, ts::P(ts::none, "y")}}) {
    const ts::Array x = data({4, 5, 6}, ts::NamedSharding(m, batch), 1);
    // On the argument itself, so the rule sees the batch where in_axes put it.
    auto f = [](ts::Array a) { return ts::with_sharding_constraint(a, ts::P(ts::none, "x")) * 2.0f + 1.0f; };
    const ts::Array got = ts::vmap(f, {.in_axes = {1}})(x);
    const std::string what = "with_sharding_constraint on " + ts::typeof(x);
    expect_close(got, loop([&](auto a) { return f(a[0]); }, {x}, {1}), 0, what);
    EXPECT_EQ(got.sharding().spec()[2].axes(), std::vector<std::string>{"x"}) << what << ": " << ts::typeof(got);
    EXPECT_EQ(got.sharding().spec()[0].axes(), batch.size() > 1 ? batch[1].axes() : std::vector<std::string>{})
        << what << ": " << ts::typeof(got);
  }
  check_batched("stop_gradient", [](auto a) { return ts::stop_gradient(a[0]) * a[0]; }, {floats({4, 5}, 2)}, {1});
  // A 4x5 grid with a 2-d table row per knot; queries inside the grid.
  Arg gx{{4}, {0.0, 1.0, 2.5, 3.0}}, gy{{5}, {-1.0, 0.0, 0.5, 2.0, 3.0}};
  Arg qx = floats({5, 3}, 3), qy = floats({5, 3}, 4);
  for (double& v : qx.v) v = 1.5 + v / 3.0;
  for (double& v : qy.v) v = 1.0 + v / 2.0;
  for (const char* method : {"linear", "cubic"}) {
    const std::string name = std::string("interp2d ") + method;
    auto f2 = [method](auto a) { return ts::interp2d(a[0], a[1], a[2], a[3], a[4], {.method = method}); };
    check_batched(name + ", queries batched", f2, {qx, qy, gx, gy, floats({4, 5, 2}, 5)}, {0, 0, nm, nm, nm}, 1e-6);
    check_batched(name + ", the table batched along dim 2", f2, {qx, qy, gx, gy, floats({4, 5, 3, 2}, 6)},
                  {nm, nm, nm, nm, 2}, 1e-6);
  }
  check_batched("searchsorted, values batched", [](auto a) { return ts::searchsorted(a[0], a[1]); },
                {Arg{{7}, {-2, -1, -1, 0, 0.5, 1, 3}}, floats({4, 5}, 6)}, {nm, 1});
  check_batched("searchsorted right, sequences batched",
                [](auto a) { return ts::searchsorted(a[0], a[1], ts::Side::right); },
                {Arg{{3, 4}, {-1, 0, 0, 2, -2, -1, 0.5, 1, 0, 0, 0, 0}}, floats({6}, 7)}, {0, nm});
  check_batched("median", [](auto a) { return ts::median(a[0], {0}); }, {floats({5, 6, 3}, 8)}, {0});
  check_batched("median with a mask, batched along dim 1",
                [](auto a) { return ts::median(a[0], {1}, {.where = a[1] > 0.0f}); },
                {floats({3, 5, 4}, 9), floats({3, 5, 4}, 1)}, {1, 1});
  check_batched("argmin along dim 1", [](auto a) { return ts::astype(ts::argmin(a[0], 1), ts::f32); },
                {floats({4, 5, 6}, 2)}, {2});
}

// The collectives' batching rule (the batch rides along as a leading dim,
// the collective's axes shift by one) for each collective, against a loop
// of the shard_map over the examples: psum_scatter tiled (uneven) and
// untiled, pmean, pmin, all_gather untiled and tiled, all_to_all tiled and
// untiled, on a 1-d and a 2-d mesh.
TEST(Vmap, CollectivesInShardMapBodies) {
  const ts::Mesh m3 = line(3), m23(ts::testing::first_devices(6), {2, 3}, {"x", "y"});
  struct Case {
    const char* what;
    const ts::Mesh* mesh;
    ts::Shape example;
    ts::PartitionSpec in, out;
    std::function<ts::Array(ts::Array)> body;
  };
  const std::vector<Case> cases = {
      {"psum_scatter tiled, uneven",
       &m3,
       {21, 2},
       ts::P("x"),
       ts::P("x"),
       [](ts::Array v) { return ts::psum_scatter(v, "x", 0, true); }},
      {"psum_scatter tiled over y, dim 1",
       &m23,
       {4, 15},
       ts::P("x", "y"),
       ts::P("x", "y"),
       [](ts::Array v) { return ts::psum_scatter(v, "y", 1, true); }},
      {"psum_scatter untiled",
       &m3,
       {9, 2},
       ts::P("x"),
       ts::P("x"),
       [](ts::Array v) { return ts::psum_scatter(v, "x", 0, false); }},
      {"pmean", &m23, {4, 6}, ts::P("x", "y"), ts::P(ts::none, "y"), [](ts::Array v) { return ts::pmean(v, "x"); }},
      {"pmin", &m3, {6, 2}, ts::P("x"), ts::P(), [](ts::Array v) { return ts::pmin(v, "x"); }},
      {"all_gather untiled, axis 1",
       &m3,
       {6, 2},
       ts::P("x"),
       ts::P(),
       [](ts::Array v) { return ts::all_gather(v, "x", 1); }},
      {"all_gather tiled over y, axis -1",
       &m23,
       {4, 6},
       ts::P("x", "y"),
       ts::P("x"),
       [](ts::Array v) { return ts::all_gather(v, "y", -1, true); }},
      {"all_to_all tiled",
       &m3,
       {6, 9},
       ts::P("x"),
       ts::P("x"),
       [](ts::Array v) { return ts::all_to_all(v, "x", 1, 0, true); }},
      {"all_to_all untiled over y",
       &m23,
       {6, 6},
       ts::P("x", "y"),
       ts::P("x", "y"),
       [](ts::Array v) { return ts::all_to_all(v, "y", 0, 1, false); }},
  };
  for (const auto& c : cases) {
    auto sm = ts::shard_map([body = c.body](ts::Array xl) { return body(ts::sin(xl) * 2.0f); }, *c.mesh, {c.in}, c.out);
    for (int axis : {0, 2}) {
      ts::Shape batched = c.example;
      batched.insert(batched.begin() + axis, 4);
      const ts::Array xs = data(batched, ts::NamedSharding(*c.mesh, ts::P()), axis);
      const ts::Array got = ts::vmap(sm, {.in_axes = {axis}})(xs);
      const ts::Array want = loop([&](auto a) { return sm(a[0]); }, {xs}, {axis});
      // Sums over the devices may associate differently per example.
      expect_close(got, want, 1e-6, std::string(c.what) + " on " + c.mesh->str() + ", in_axes " + std::to_string(axis));
    }
  }
}

// An op batched by the fallback rule (one application per example) over no
// examples: a device's block of a batch sharded unevenly in a chunked vmap
// (3 examples over 4 devices), or an empty batch. The results are empty
// along the batch with the types one example gives, and the chunked vmap
// equals the loop.
TEST(Vmap, FallbackRuleOverNoExamples) {
  const ts::Mesh mesh(ts::testing::first_devices(4), {4}, {"x"});
  const auto k = ts::device_put(std::vector<double>{0.5, -1, 2, 0.25}, {2, 2}, ts::NamedSharding(mesh, ts::P()));
  auto f = [&](ts::Array x) { return ts::convolve2d(x, k); };
  const auto empty = ts::zeros({0, 3, 5}, ts::DType::f64, ts::NamedSharding(mesh, ts::P()));
  const auto none_out = ts::vmap(f)(empty);
  EXPECT_EQ(none_out.shape(), (ts::Shape{0, 3, 5}));
  EXPECT_EQ(none_out.dtype(), ts::DType::f64);
  const auto xs = ts::device_put(iota_data<double>(3 * 3 * 5), {3, 3, 5}, ts::NamedSharding(mesh, ts::P("x")));
  const auto got = ts::vmap(f, {.chunk_size = 1})(xs).to_vector<double>();
  std::vector<double> want;
  for (std::int64_t b = 0; b < 3; ++b) {
    const auto one =
        ts::convolve2d(ts::squeeze(ts::slice(xs, {ts::SliceSpec{b, b + 1, 1}}), {0}), k).to_vector<double>();
    want.insert(want.end(), one.begin(), one.end());
  }
  EXPECT_EQ(got, want);
}
