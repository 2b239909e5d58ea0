// jit: results bitwise equal to eager execution on every test mesh and
// layout (including uneven ones and random programs), the cache (one
// compilation per signature), the program text, fusion, in/out shardings,
// static arguments, captured constants, nesting, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <atomic>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/native.hpp"
#include "backend/cuda/fused.hpp"
#include "primitives/primitive.hpp"
#include "runtime/gpus.hpp"
#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_same;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::iota_data;
using ts::testing::random_spec;
using ts::testing::test_meshes;

namespace jit_tree {
struct Particles {
  ts::Array x, v;
  int substeps = 1;
};
template <class L>
struct Stars {
  L coords, mass;
  int generation = 0;
};
}  // namespace jit_tree

TESSERA_TREE(jit_tree::Particles, x, v, substeps)
TESSERA_TREE_TEMPLATE(jit_tree::Stars, coords, mass, generation)

namespace {

ts::Array layer(ts::Array x) { return 2.0f * ts::sin(x) + 1.0f; }

// A 1-d mesh over the first n devices.
ts::Mesh line(int n, const char* axis = "x") { return ts::Mesh(ts::testing::first_devices(n), {n}, {axis}); }

}  // namespace

TEST(Jit, MatchesEagerOnEveryLayout) {
  auto f = ts::jit(layer);
  int layouts = 0;
  for (ts::Shape shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 9}}) {
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto x = ts::device_put(iota_data<float>(shape[0] * shape[1]), shape, s);
      expect_same(f(x), layer(x), ts::typeof(x));
      ++layouts;
    });
  }
  // One compilation per distinct (shape, sharding).
  EXPECT_EQ(f.cache_size(), layouts);
}

TEST(Jit, CachesPerSignature) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  int traces = 0;
  auto f = ts::jit([&](ts::Array x) {
    ++traces;
    return ts::exp(x) * 3.0f;
  });
  auto x = ts::device_put(iota_data<float>(100), {100}, ts::NamedSharding(m, ts::P("x")));
  auto y1 = f(x);
  auto y2 = f(x);
  auto x2 = ts::device_put(iota_data<float>(100, 1), {100}, ts::NamedSharding(m, ts::P("x")));
  auto y3 = f(x2);  // same signature, new data
  EXPECT_EQ(traces, 1);
  EXPECT_EQ(f.cache_size(), 1);
  expect_same(y3, ts::exp(x2) * 3.0f, "new data");
  f(ts::device_put(x, ts::NamedSharding(m, ts::P())));  // new sharding
  f(ts::device_put(iota_data<float>(101), {101}, ts::NamedSharding(m, ts::P("x"))));  // new shape
  f(ts::astype(x, ts::f64));                                                            // new dtype
  EXPECT_EQ(traces, 4);
  EXPECT_EQ(f.cache_size(), 4);
  expect_same(y1, y2, "cached call");
}

TEST(Jit, FusesElementwiseChainsIntoOneLoop) {
  ts::Mesh m = line(4);
  auto x = ts::device_put(iota_data<float>(4099), {4099}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::jit(layer);
  const std::string ir = f.lower(x).as_text();
  EXPECT_NE(ir.find("%0: f32[4099@x]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("sin(%0)"), std::string::npos) << ir;
  EXPECT_NE(ir.find("multiply[lhs=2]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("fused loop [sin, multiply, add]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("compiled: 1 steps"), std::string::npos) << ir;
  EXPECT_EQ(f.cache_size(), 1);  // lower() compiles and caches
  expect_same(f(x), layer(x), "fused");
}

// A fused loop compiled with fewer registers (cuda::set_fused_max_registers,
// for the benchmarks) is a kernel of its own, with the same bits, the
// inputs beyond sin's polynomial (|x| > 8192) included.
TEST(Jit, FusedLoopsHeldToFewerRegistersGiveTheSameBits) {
  if (ts::devices()[0].kind() != "cuda" || ts::detail::emulated_gpus() > 0)
    GTEST_SKIP() << "NVRTC's kernels run on real GPUs only";
  ts::Mesh m = line(4);
  std::vector<float> host = iota_data<float>(4099);
  for (std::size_t i = 0; i < host.size(); i += 97) host[i] = (i % 2 ? -1.0f : 1.0f) * 3.0e7f / static_cast<float>(i + 1);
  auto x = ts::device_put(host, {4099}, ts::NamedSharding(m, ts::P("x")));
  const ts::Array want = ts::jit(layer)(x);
  const ts::cuda::FusedStats before = ts::cuda::fused_stats();
  struct Reset {
    ~Reset() { ts::cuda::set_fused_max_registers(0); }
  } reset;
  ts::cuda::set_fused_max_registers(32);
  const ts::Array got = ts::jit([](const ts::Array& v) { return layer(v); })(x);
  const ts::cuda::FusedStats after = ts::cuda::fused_stats();
  EXPECT_GT(after.compiled + after.loaded, before.compiled + before.loaded) << after.last_error;
  EXPECT_EQ(after.failed, before.failed) << after.last_error;
  expect_same(got, want, "32 registers");
}

// Every shape of a fused loop with polynomials (cpu::CudaLoopShape): split
// into the polynomials' kernel and its fix-up (the default), one kernel,
// other steps. Each gives the eager ops' bits, with and without inputs
// beyond the polynomials' range, call after call (the cached calls replay
// graphs, which hold both kernels: the fix-up must find its mark cleared
// after a call that needed it).
TEST(Jit, EveryFusedLoopShapeGivesTheEagerBitsCallAfterCall) {
  namespace cpu = tessera::cpu;
  if (ts::devices()[0].kind() != "cuda" || ts::detail::emulated_gpus() > 0)
    GTEST_SKIP() << "NVRTC's kernels run on real GPUs only";
  const cpu::CudaLoopShape before = cpu::cuda_loop_shape();
  struct Reset {
    cpu::CudaLoopShape shape;
    ~Reset() { cpu::set_cuda_loop_shape(shape); }
  } reset{before};
  auto g = [](const ts::Array& v) { return std::make_tuple(layer(v), ts::exp(v * 0.01f) - ts::cos(v)); };
  for (const int devices : {1, 3}) {
    ts::Mesh m = line(devices);
    const std::int64_t n = 100003;
    const std::vector<double> v = ts::testing::uniform_doubles(n, 17, -50, 50);
    std::vector<float> plain(v.begin(), v.end()), beyond = plain;
    for (std::size_t i = 5; i < beyond.size(); i += 4099) beyond[i] = (i % 2 ? -1.0f : 1.0f) * 3.0e7f / static_cast<float>(i);
    beyond[beyond.size() - 1] = -std::numeric_limits<float>::infinity();  // in the last thread's tail
    const auto sh = ts::NamedSharding(m, ts::P("x"));
    const ts::Array xp = ts::device_put(plain, {n}, sh), xb = ts::device_put(beyond, {n}, sh);
    const auto [wp0, wp1] = g(xp);
    const auto [wb0, wb1] = g(xb);
    for (const cpu::CudaLoopShape& shape :
         std::vector<cpu::CudaLoopShape>{{0, true}, {0, false}, {3, true}, {16, true}, {4, false}}) {
      cpu::set_cuda_loop_shape(shape);
      auto f = ts::jit([&](const ts::Array& v) { return g(v); });
      const std::string what = "step " + std::to_string(shape.step) + (shape.split ? ", split" : ", one kernel") +
                               " on " + m.str();
      for (int call = 0; call < 3; ++call) {
        const auto [b0, b1] = f(xb);
        expect_same(b0, wb0, what + ", beyond, call " + std::to_string(call));
        expect_same(b1, wb1, what + ", beyond (exp, cos), call " + std::to_string(call));
        const auto [p0, p1] = f(xp);
        expect_same(p0, wp0, what + ", call " + std::to_string(call));
        expect_same(p1, wp1, what + " (exp, cos), call " + std::to_string(call));
      }
    }
  }
  EXPECT_EQ(ts::cuda::fused_stats().failed, 0) << ts::cuda::fused_stats().last_error;
}

// Results of 4 MiB and more per device leave a fused loop through
// non-temporal stores; block lengths that are not a multiple of 16 bytes
// exercise the tail of each copy.
TEST(Jit, LargeFusedResultsMatchEager) {
  auto g = [](ts::Array x) { return std::make_tuple(2.0f * ts::sin(x) + 1.0f, ts::where(ts::greater(x, 0.5f), x, -x)); };
  auto f = ts::jit(g);
  for (int devices : {1, 3}) {
    ts::Mesh m = line(devices);
    const std::int64_t n = (std::int64_t(3) << 20) + 7;  // over 4 MiB of f32 per device on 1 and 3 devices
    auto x = ts::random::uniform(ts::random::key(4), {n}, ts::f32, ts::NamedSharding(m, ts::P("x")), -3, 3);
    auto [a1, b1] = f(x);
    auto [a2, b2] = g(x);
    expect_same(a1, a2, "sin chain on " + m.str());
    expect_same(b1, b2, "where on " + m.str());
  }
}

TEST(Jit, LongChainsAndIntermediatesUsedTwice) {
  // Values made inside a fused run and read again later (and returned) are
  // materialised; the rest stay in tiles.
  auto g = [](ts::Array x) {
    ts::Array a = ts::tanh(x);
    ts::Array b = a * a + 0.5f;
    ts::Array c = ts::where(ts::greater(b, a), b, a) - ts::sqrt(ts::abs(a));
    for (int i = 0; i < 16; ++i) c = c * 0.99f + a;
    return std::make_tuple(c, a);
  };
  auto f = ts::jit(g);
  for (const ts::Mesh& m : test_meshes()) {
    auto x = ts::device_put(iota_data<double>(5000), {50, 100}, ts::NamedSharding(m, ts::P(m.axis_names()[0])));
    auto [c1, a1] = f(x);
    auto [c2, a2] = g(x);
    expect_same(c1, c2, m.str());
    expect_same(a1, a2, m.str());
  }
}

TEST(Jit, ConflictingShardingsReshardAsEagerDoes) {
  for (const ts::Mesh& m : test_meshes()) {
    if (m.size() == 1) continue;
    const auto ax = m.axis_names()[0];
    auto a = ts::device_put(iota_data<float>(7 * 6), {7, 6}, ts::NamedSharding(m, ts::P(ax)));
    auto b = ts::device_put(iota_data<float>(7 * 6, 3), {7, 6}, ts::NamedSharding(m, ts::P(ts::none, ax)));
    auto f = ts::jit([](ts::Array p, ts::Array q) { return ts::sin(p) + q * 2.0f; });
    expect_same(f(a, b), ts::sin(a) + b * 2.0f, m.str());
    const std::string ir = f.lower(a, b).as_text();
    EXPECT_NE(ir.find("= reshard %"), std::string::npos) << ir;
    EXPECT_NE(ir.find("per device) for add"), std::string::npos) << ir;
  }
}

TEST(Jit, InAndOutShardings) {
  ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  ts::NamedSharding rows(m, ts::P("x")), cols(m, ts::P(ts::none, "y")), rep(m, ts::P());
  auto f = ts::jit([](ts::Array a, ts::Array b) { return std::make_tuple(a + b, ts::cos(a)); },
                   {.in_shardings = {rows, rows}, .out_shardings = {cols, rep}});
  auto a = ts::device_put(iota_data<float>(30), {5, 6}, rep);
  auto b = ts::device_put(iota_data<float>(30, 2), {5, 6}, cols);
  auto [s, c] = f(a, b);
  EXPECT_EQ(s.sharding(), cols);
  EXPECT_EQ(c.sharding(), rep);
  auto hs = s.to_vector<float>(), hc = c.to_vector<float>(), ha = a.to_vector<float>(), hb = b.to_vector<float>();
  for (size_t i = 0; i < ha.size(); ++i) {
    EXPECT_EQ(hs[i], ha[i] + hb[i]);
    EXPECT_EQ(hc[i], ts::cos(a).to_vector<float>()[i]);
  }
  auto bad = ts::jit([](ts::Array x) { return x + 1.0f; }, {.in_shardings = {rows, rows}});
  expect_error<ts::ShardingError>([&] { bad(a); }, "[jit]", {"in_shardings has 2 entries for 1 array leaves (argument 0)"});
  auto bad_out = ts::jit([](ts::Array x) { return x + 1.0f; }, {.out_shardings = {rows, rows}});
  expect_error<ts::ShardingError>([&] { bad_out(a); }, "[jit]", {"out_shardings has 2 entries for 1 results"});
}

// Pytree arguments and results: a registered struct and a string map in,
// a struct out; the structure (lengths, keys) and the non-array leaves are
// part of the cache key; in_shardings per array leaf names the leaves.
TEST(Jit, PytreeArgumentsAndResults) {
  ts::Mesh m = line(4);
  const ts::NamedSharding s(m, ts::P("x")), rep(m, ts::P());
  jit_tree::Particles p{ts::device_put(iota_data<float>(10), {10}, s), ts::device_put(iota_data<float>(10, 3), {10}, s),
                        2};
  std::map<std::string, ts::Array> params{{"scale", ts::device_put(iota_data<float>(1, 5), {1}, rep)}};
  auto step = [](const jit_tree::Particles& q, const std::map<std::string, ts::Array>& w) {
    jit_tree::Particles out = q;
    out.x = q.x + q.v * w.at("scale") * static_cast<float>(q.substeps);
    out.v = q.v * 0.5f;
    return out;
  };
  auto f = ts::jit(step);
  const jit_tree::Particles a = f(p, params), b = step(p, params);
  expect_same(a.x, b.x, "x");
  expect_same(a.v, b.v, "v");
  EXPECT_EQ(a.substeps, 2);
  EXPECT_EQ(f.cache_size(), 1);
  p.substeps = 3;  // a static leaf: a new program
  expect_same(f(p, params).x, step(p, params).x, "substeps 3");
  EXPECT_EQ(f.cache_size(), 2);
  params["offset"] = params["scale"];  // a new key: a new structure
  expect_same(f(p, params).x, step(p, params).x, "two keys");
  EXPECT_EQ(f.cache_size(), 3);
  // Vectors of different lengths are different signatures too.
  auto total = ts::jit([](const std::vector<ts::Array>& xs) {
    ts::Array t = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) t = t + xs[i];
    return std::make_tuple(t, xs);
  });
  auto [t2, xs2] = total(std::vector<ts::Array>{p.x, p.v});
  auto [t3, xs3] = total(std::vector<ts::Array>{p.x, p.v, p.x});
  expect_same(t3, p.x + p.v + p.x, "three");
  EXPECT_EQ(xs3.size(), 3u);
  EXPECT_EQ(total.cache_size(), 2);
  // Two entries for two arguments: each lays out every array of its argument.
  auto per_arg = ts::jit(step, {.in_shardings = {s, s}});
  expect_same(per_arg(p, params).x, step(p, params).x, "in_shardings per argument");
  auto bad = ts::jit(step, {.in_shardings = {s, s, s}});
  expect_error<ts::ShardingError>([&] { bad(p, params); }, "[jit]",
                                  {"in_shardings has 3 entries for 4 array leaves", "argument 0 x, argument 0 v",
                                   "argument 1 ['offset'], argument 1 ['scale']", "in 2 arguments"});
}

TEST(Jit, StaticArgumentsAreCacheKeys) {
  ts::Mesh m = line(3);
  auto x = ts::device_put(iota_data<float>(10), {10}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::jit([](ts::Array a, double scale, int power) {
    ts::Array r = a;
    for (int i = 1; i < power; ++i) r = r * a;
    return r * scale;
  });
  expect_same(f(x, 0.5, 2), x * x * 0.5, "0.5, 2");
  expect_same(f(x, 0.5, 3), x * x * x * 0.5, "0.5, 3");
  expect_same(f(x, 0.25, 2), x * x * 0.25, "0.25, 2");
  f(x, 0.5, 2);
  EXPECT_EQ(f.cache_size(), 3);
  // Vectors of arrays are flattened.
  auto total = ts::jit([](std::vector<ts::Array> xs) {
    ts::Array s = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) s = s + xs[i];
    return s;
  });
  expect_same(total(std::vector<ts::Array>{x, x, x}), x + x + x, "vector");
}

TEST(Jit, CapturedArraysBecomeConstants) {
  ts::Mesh m = line(4);
  auto w = ts::device_put(iota_data<float>(12), {12}, ts::NamedSharding(m, ts::P()));
  auto f = ts::jit([&](ts::Array x) { return x * w + w; });
  auto x = ts::device_put(iota_data<float>(12, 5), {12}, ts::NamedSharding(m, ts::P("x")));
  expect_same(f(x), x * w + w, "constant");
  EXPECT_NE(f.lower(x).as_text().find("= constant"), std::string::npos);
}

TEST(Jit, NestedJitAndJitInsideShardMap) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto inner = ts::jit([](ts::Array x) { return ts::exp(x) - 1.0f; });
  auto outer = ts::jit([&](ts::Array x) { return inner(x) * 2.0f; });
  auto x = ts::device_put(iota_data<float>(20), {20}, ts::NamedSharding(m, ts::P("x")));
  expect_same(outer(x), (ts::exp(x) - 1.0f) * 2.0f, "nested");
  EXPECT_EQ(inner.cache_size(), 0);  // traced inline into the outer program
  auto body = ts::shard_map([&](ts::Array xl) { return inner(xl); }, m, {ts::P("x")}, ts::P("x"));
  expect_same(body(x), ts::exp(x) - 1.0f, "jit in shard_map");
  // A jitted result varies over its inputs' axes, so check_vma still sees
  // that it is not replicated.
  std::string local_type;
  auto wrong = ts::shard_map(
      [&](ts::Array xl) {
        ts::Array y = inner(xl);
        if (ts::axis_index("x").item<int>() == 0) local_type = ts::typeof(y);
        return y;
      },
      m, {ts::P("x")}, ts::P());
  expect_error<ts::ShardingError>([&] { wrong(x); }, "[shard_map]", {"varies over 'x'", "{V:x}"});
  EXPECT_EQ(local_type, "f32[3]{V:x}");
}

// shard_map inside jit: the call is one global step of the program, with
// the types its members give (uneven blocks, a tiled all_gather whose length
// sums the members'), a jitted call inside the body, errors at trace time.
TEST(Jit, ShardMapInsideJit) {
  for (const ts::Mesh& m : test_meshes()) {
    const std::string ax = m.axis_names()[0];
    auto sm = ts::shard_map(
        [&](ts::Array xl, ts::Array wl) {
          ts::Array part = ts::psum(ts::sum(ts::sin(xl) * wl), ax);
          ts::Array whole = ts::all_gather(xl * 2.0f, ax, 0, true);
          return std::make_tuple(part, whole, xl + 1.0f);
        },
        m, {ts::P(ax), ts::P()}, {ts::P(), ts::P(), ts::P(ax)});
    auto g = [&](ts::Array x, ts::Array w) {
      auto [p, whole, y] = sm(ts::exp(x * 0.1f), w);
      return std::make_tuple(p + 1.0f, whole, y * w);
    };
    auto f = ts::jit(g);
    for (std::int64_t n : {std::int64_t(3), std::int64_t(13)}) {  // fewer elements than devices, and uneven
      auto x = ts::device_put(iota_data<float>(n), {n}, ts::NamedSharding(m, ts::P(ax)));
      auto w = ts::device_put(iota_data<float>(1, 2), {1}, ts::NamedSharding(m, ts::P()));
      auto [a1, b1, c1] = f(x, w);
      auto [a2, b2, c2] = g(x, w);
      expect_same(a1, a2, "psum on " + m.str());
      expect_same(b1, b2, "all_gather on " + m.str());
      expect_same(c1, c2, "local result on " + m.str());
      const std::string ir = f.lower(x, w).as_text();
      EXPECT_NE(ir.find("global "), std::string::npos) << ir;
      EXPECT_NE(ir.find("= shard_map[mesh="), std::string::npos) << ir;
      // The collectives' records are the eager call's.
      ts::Array a3, a4;
      auto ej = ts::explain([&] { a3 = std::get<0>(f(x, w)); });
      auto ee = ts::explain([&] { a4 = std::get<0>(g(x, w)); });
      EXPECT_EQ(ej.str(), ee.str()) << m.str();
    }
  }
  // Without check_vma, replicas may differ: as eagerly, every device gets
  // the block of the replica at coordinate 0 of the axes out_specs leaves out.
  {
    ts::Mesh m2 = ts::make_mesh({4, 2}, {"a", "b"});
    auto differs = ts::shard_map(
        [](ts::Array xl) { return xl + ts::astype(ts::axis_index("b"), ts::f32) * 10.0f; }, m2, {ts::P("a")},
        ts::P("a"), {.check_vma = false});
    auto jd = ts::jit([&](ts::Array v) { return differs(v * 2.0f); });
    auto x = ts::device_put(iota_data<float>(9), {9}, ts::NamedSharding(m2, ts::P("a")));
    expect_same(jd(x), differs(x * 2.0f), "replicas without check_vma");
  }
  // jit inside the body of a shard_map inside jit.
  ts::Mesh m = line(4);
  auto inner = ts::jit([](ts::Array v) { return ts::tanh(v) * 3.0f; });
  auto body = ts::shard_map([&](ts::Array xl) { return ts::psum(inner(xl), "x"); }, m, {ts::P("x")}, ts::P());
  auto outer = ts::jit([&](ts::Array x) { return body(x + 1.0f) - 1.0f; });
  auto x = ts::device_put(iota_data<float>(8), {8}, ts::NamedSharding(m, ts::P("x")));
  expect_same(outer(x), body(x + 1.0f) - 1.0f, "jit in shard_map in jit");
  EXPECT_EQ(outer.cache_size(), 1);
  // check_vma errors surface while tracing, at the user's call site.
  auto wrong = ts::shard_map([](ts::Array xl) { return xl * 2.0f; }, m, {ts::P("x")}, ts::P());
  auto bad = ts::jit([&](ts::Array v) { return wrong(v); });
  expect_error<ts::ShardingError>([&] { bad(x); }, "[shard_map]", {"varies over 'x'", "test_jit.cpp", "traced by jit"});
  EXPECT_EQ(bad.cache_size(), 0);
}

TEST(Jit, Errors) {
  ts::Mesh m = line(2);
  auto x = ts::device_put(iota_data<float>(6), {6}, ts::NamedSharding(m, ts::P("x")));
  auto reads = ts::jit([](ts::Array a) {
    (void)a.to_vector<float>();
    return a;
  });
  expect_error<ts::Error>([&] { reads(x); }, "[to_vector]", {"cannot read f32[6@x]", "traced by jit"});
  ts::Array leaked;
  auto leak = ts::jit([&](ts::Array a) {
    leaked = a + 1.0f;
    return a;
  });
  leak(x);
  expect_error<ts::Error>([&] { (void)(leaked * 2.0f); }, "[multiply]", {"f32[6@x]", "escaped its function"});
  // Shape errors raised while tracing name the op.
  auto bad = ts::jit([](ts::Array a, ts::Array b) { return a + b; });
  auto y = ts::device_put(iota_data<float>(4), {4}, ts::NamedSharding(m, ts::P()));
  expect_error<ts::ShapeError>([&] { bad(x, y); }, "[add]", {"(6,)", "(4,)"});
  EXPECT_EQ(bad.cache_size(), 0);
  // The function still works afterwards.
  expect_same(bad(x, x), x + x, "after error");
}

// Random programs of elementwise ops on random meshes and layouts (uneven,
// smaller than the mesh, two operands laid out differently): jit equals
// eager bitwise, values and shardings.
TEST(Jit, RandomProgramsMatchEagerBitwise) {
  std::mt19937 rng(1234);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 60; ++trial) {
    const ts::Mesh mesh = ts::testing::random_mesh(rng, 8);
    const int rank = uni(0, 3);
    ts::Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(uni(1, 9));
    const ts::DType dt = uni(0, 1) ? ts::f32 : ts::f64;
    std::vector<int> ops;
    for (int k = uni(1, 12); k > 0; --k) ops.push_back(uni(0, 9));
    auto prog = [&](ts::Array a, ts::Array b) {
      std::vector<ts::Array> vals{a, b};
      for (int op : ops) {
        const ts::Array& p = vals[vals.size() - 1];
        const ts::Array& q = vals[static_cast<size_t>(uni(0, static_cast<int>(vals.size()) - 1))];
        switch (op) {
          case 0: vals.push_back(p + q); break;
          case 1: vals.push_back(p * q); break;
          case 2: vals.push_back(ts::sin(p)); break;
          case 3: vals.push_back(ts::tanh(p) * 0.5); break;
          case 4: vals.push_back(ts::maximum(p, q)); break;
          case 5: vals.push_back(ts::where(ts::less(p, q), p, 1.5)); break;
          case 6: vals.push_back(ts::astype(ts::astype(p, ts::f32), dt)); break;
          case 7: vals.push_back(1.0 - p); break;
          case 8: vals.push_back(ts::exp(ts::negative(ts::abs(p)))); break;
          default: vals.push_back(p / (ts::abs(q) + 1.0)); break;
        }
      }
      return vals.back();
    };
    auto a = ts::astype(ts::device_put(iota_data<float>(ts::testing::numel(shape), trial), shape,
                                       ts::NamedSharding(mesh, random_spec(rng, mesh, rank))),
                        dt);
    auto b = ts::astype(ts::device_put(iota_data<float>(ts::testing::numel(shape), trial + 1), shape,
                                       ts::NamedSharding(mesh, random_spec(rng, mesh, rank))),
                        dt);
    const auto seed = rng();
    rng.seed(seed);
    ts::Array eager = prog(a, b);
    rng.seed(seed);
    auto f = ts::jit(prog);
    ts::Array jitted = f(a, b);
    std::string what = "trial ";
    what += std::to_string(trial);
    what += ' ';
    what += ts::typeof(a);
    what += ' ';
    what += ts::typeof(b);
    expect_same(jitted, eager, what);
  }
}

// The SPMD tutorial's layer under jit: x sharded on the contracting dim, w
// replicated. The program slices w locally and all-reduces the 512 partial
// sums instead of gathering x; results equal eager bitwise.
TEST(Jit, ShardedContractionAllReducesTheSmallResult) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::device_put(iota_data<float>(1024), {1024}, ts::NamedSharding(m, ts::P("x")));
  auto w = ts::device_put(iota_data<float>(1024 * 512, 1), {1024, 512}, ts::NamedSharding(m, ts::P()));
  auto b = ts::device_put(iota_data<float>(512, 2), {512}, ts::NamedSharding(m, ts::P()));
  auto layer_fn = [](ts::Array xv, ts::Array wv, ts::Array bv) { return ts::sigmoid(ts::matmul(xv, wv) + bv); };
  auto f = ts::jit(layer_fn);
  expect_same(f(x, w, b), layer_fn(x, w, b), "mlp");
  const std::string ir = f.lower(x, w, b).as_text();
  EXPECT_NE(ir.find("all-reduce"), std::string::npos) << ir;
  EXPECT_NE(ir.find("over (x) (14.0 KiB per device)"), std::string::npos) << ir;
  EXPECT_NE(ir.find("fused loop [add, sigmoid]"), std::string::npos) << ir;
}

// ------------------------------------------- primitives that fix their layout

namespace {

namespace td = tessera::detail;

// No operands, layout a parameter (as creation ops are): each device writes
// the global flat index of its elements.
class TestIota final : public td::Primitive {
 public:
  TestIota(ts::Shape shape, ts::NamedSharding s) : shape_(std::move(shape)), s_(std::move(s)) {}
  std::string_view name() const override { return "test_iota"; }
  std::vector<td::TypeInfo> infer(std::span<const td::AbstractArray>) const override { return {{shape_, ts::DType::f32}}; }
  td::ShardingRule rule(std::span<const td::AbstractArray>) const override {
    td::ShardingRule r;
    r.results.emplace_back();
    for (size_t d = 0; d < shape_.size(); ++d) {
      r.factors.push_back({shape_[d]});
      r.results[0].push_back(static_cast<int>(d));
    }
    return r;
  }
  std::optional<std::vector<ts::NamedSharding>> layouts(std::span<const td::AbstractArray>,
                                                        const std::vector<td::TypeInfo>&) const override {
    return std::vector<ts::NamedSharding>{s_};
  }
  void eval_cpu(const td::LocalArgs&, td::LocalOuts& out) const override {
    // 2-d only (the test's shapes).
    float* p = static_cast<float*>(out[0].data);
    for (auto i = out[0].box[0].start; i < out[0].box[0].stop; ++i)
      for (auto j = out[0].box[1].start; j < out[0].box[1].stop; ++j) *p++ = static_cast<float>(i * shape_[1] + j);
  }
  std::string params() const override { return "shape=" + std::to_string(shape_[0]) + "x" + std::to_string(shape_[1]); }

 private:
  ts::Shape shape_;
  ts::NamedSharding s_;
};

// Lowers itself on whole arrays (as halo exchanges and reshapes do).
class TestRoll final : public td::Primitive {
 public:
  std::string_view name() const override { return "test_roll"; }
  std::vector<td::TypeInfo> infer(std::span<const td::AbstractArray> in) const override {
    return {{in[0].shape, in[0].dtype}};
  }
  td::ShardingRule rule(std::span<const td::AbstractArray> in) const override {
    td::ShardingRule r;
    r.operands.emplace_back();
    r.results.emplace_back();
    for (size_t d = 0; d < in[0].shape.size(); ++d) {
      r.factors.push_back({in[0].shape[d], d == 0 ? td::FactorKind::Permutation : td::FactorKind::PassThrough});
      r.operands[0].push_back(static_cast<int>(d));
      r.results[0].push_back(static_cast<int>(d));
    }
    return r;
  }
  std::optional<std::vector<ts::NamedSharding>> layouts(std::span<const td::AbstractArray> in,
                                                        const std::vector<td::TypeInfo>&) const override {
    return std::vector<ts::NamedSharding>{in[0].sharding};
  }
  bool lowers_itself() const override { return true; }
  std::vector<ts::Array> eval_global(const td::ExecContext&, const std::vector<ts::Array>& in,
                                     const std::vector<td::TypeInfo>&,
                                     const std::vector<ts::NamedSharding>& l) const override {
    return {ts::device_put(ts::roll(in[0], 1, 0), l[0])};
  }
  void eval_cpu(const td::LocalArgs&, td::LocalOuts&) const override { FAIL() << "test_roll runs on whole arrays"; }
};

}  // namespace

TEST(Jit, PrimitivesThatFixTheirLayoutOrLowerThemselves) {
  std::mt19937 rng(7);
  for (const ts::Mesh& mesh : test_meshes()) {
    for (int trial = 0; trial < 3; ++trial) {
      const ts::Shape shape{7, 3};
      const ts::NamedSharding s(mesh, random_spec(rng, mesh, 2));
      auto prog = [&](ts::Array x) {
        ts::Array i = td::bind1(std::make_shared<TestIota>(shape, s), {});
        ts::Array r = td::bind1(std::make_shared<TestRoll>(), {x * 2.0f});
        return i + r;
      };
      const std::vector<float> h = iota_data<float>(21);
      auto x = ts::device_put(h, shape, ts::NamedSharding(mesh, ts::P()));
      const ts::Array eager = prog(x);
      // Row i holds i*3+j + 2*x[i-1 (mod 7)].
      std::vector<float> want(21);
      for (int i = 0; i < 7; ++i)
        for (int j = 0; j < 3; ++j) want[i * 3 + j] = static_cast<float>(i * 3 + j) + 2.0f * h[((i + 6) % 7) * 3 + j];
      EXPECT_EQ(eager.to_vector<float>(), want) << mesh.str();
      auto f = ts::jit(prog);
      expect_same(f(x), eager, mesh.str());
      const std::string text = f.lower(x).as_text();
      EXPECT_NE(text.find("kernel %"), std::string::npos) << text;
      EXPECT_NE(text.find("= test_iota[shape=7x3]()"), std::string::npos) << text;
      EXPECT_NE(text.find("global %"), std::string::npos) << text;
      EXPECT_NE(text.find("test_roll(%"), std::string::npos) << text;
    }
  }
}

// Calls from several host threads at once, each a program with collectives:
// they run one at a time and every result is right.
TEST(Jit, ConcurrentCallsWithCollectives) {
  ts::Mesh m = ts::make_mesh({4, 2}, {"x", "y"});
  const std::vector<float> hx = iota_data<float>(40), hw = iota_data<float>(40 * 6, 5);
  auto x = ts::device_put(hx, {40}, ts::NamedSharding(m, ts::P("x")));
  auto w = ts::device_put(hw, {40, 6}, ts::NamedSharding(m, ts::P(ts::none, "y")));
  auto f = ts::jit([](ts::Array a, ts::Array b) { return ts::matmul(a, b) * 2.0f; },
                   {.out_shardings = {ts::NamedSharding(m, ts::P("x"))}});
  const auto want = (ts::matmul(x, w) * 2.0f).to_vector<float>();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i)
        if (f(x, w).to_vector<float>() != want) ++wrong;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(f.cache_size(), 1);
}

// Layouts that later uses need flow back to the producers: a contraction
// whose result is constrained reduce-scatters straight into the layout, and
// an elementwise chain whose result is wanted on more devices is computed
// there from the start (one fused loop).
TEST(Jit, RequiredLayoutsFlowBackToProducers) {
  ts::Mesh m = ts::make_mesh({4, 2}, {"x", "y"});
  const std::vector<float> hx = iota_data<float>(64), hw = iota_data<float>(64 * 24, 5);
  auto x = ts::device_put(hx, {64}, ts::NamedSharding(m, ts::P("x")));
  auto w = ts::device_put(hw, {64, 24}, ts::NamedSharding(m, ts::P()));
  const ts::NamedSharding rows(m, ts::P("x"));
  auto f = ts::jit([](ts::Array a, ts::Array b) { return ts::matmul(a, b); }, {.out_shardings = {rows}});
  expect_same(f(x, w), ts::device_put(ts::matmul(x, w), rows), "contraction");
  std::string text = f.lower(x, w).as_text();
  EXPECT_NE(text.find("reduce-scatter"), std::string::npos) << text;
  EXPECT_EQ(text.find("all-reduce"), std::string::npos) << text;

  auto h = ts::device_put(iota_data<float>(16 * 6), {16, 6}, ts::NamedSharding(m, ts::P("x")));
  const ts::NamedSharding fine(m, ts::P({"x", "y"}));
  auto g = ts::jit(layer, {.out_shardings = {fine}});
  expect_same(g(h), ts::device_put(layer(h), fine), "chain");
  text = g.lower(h).as_text();
  const auto at = text.find("compiled:");
  EXPECT_NE(text.find("reshard %0 (local slice", at), std::string::npos) << text;
  EXPECT_NE(text.find("fused loop [sin, multiply, add]", at), std::string::npos) << text;
  // The constraint itself moves nothing.
  EXPECT_NE(text.find("(none, 0 B per device) for with_sharding_constraint", at), std::string::npos) << text;
}

// An op that raises while tracing names the user's file and line (ops called
// by name; operators have no call site in C++).
TEST(Jit, TracingErrorsNameTheCallSite) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::zeros({8, 4}, ts::f32, ts::NamedSharding(m, ts::P("x")));
  const int line = __LINE__ + 1;
  auto f = ts::jit([](ts::Array v) { return ts::sin(ts::matmul(v, v)); }, {}, "model");
  expect_error<ts::ShapeError>([&] { f(x); }, "[matmul]",
                               {"test_jit.cpp:" + std::to_string(line) + ", traced by model)"});
  // Eagerly the same error has no site (the caller's stack says where).
  try {
    ts::matmul(x, x);
    FAIL();
  } catch (const ts::ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).find("test_jit.cpp"), std::string::npos) << e.what();
  }
  // A later error from an operator does not reuse an old site.
  auto g = ts::jit([](ts::Array v) { return v + ts::zeros({3}, ts::f32, v.sharding()); });
  try {
    g(x);
    FAIL();
  } catch (const ts::Error& e) {
    EXPECT_EQ(std::string(e.what()).find("test_jit.cpp"), std::string::npos) << e.what();
  }
}

// Operands that broadcast (a bias row, a column, a rank-0 array) join the
// fused loop; results equal eager bitwise on every layout.
TEST(Jit, BroadcastOperandsFuse) {
  auto prog = [](ts::Array x, ts::Array row, ts::Array col, ts::Array s) {
    return ts::sigmoid(x + row) * col - s;
  };
  auto f = ts::jit(prog);
  int layouts = 0;
  std::mt19937 rng(3);
  for (ts::Shape shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 9}}) {
    for_each_layout(2, [&](const ts::NamedSharding& sx) {
      const ts::Mesh& m = sx.mesh();
      auto x = ts::device_put(iota_data<float>(shape[0] * shape[1]), shape, sx);
      auto row = ts::device_put(iota_data<float>(shape[1], 7), {shape[1]}, ts::NamedSharding(m, random_spec(rng, m, 1)));
      auto col = ts::device_put(iota_data<float>(shape[0], 3), {shape[0], 1}, ts::NamedSharding(m, ts::P()));
      auto s = ts::device_put(std::vector<float>{0.25f}, {}, ts::NamedSharding(m, ts::P()));
      expect_same(f(x, row, col, s), prog(x, row, col, s), ts::typeof(x) + " + " + ts::typeof(row));
      ++layouts;
    });
  }
  ts::Mesh m = ts::make_mesh({4, 2}, {"x", "y"});
  auto x = ts::zeros({16, 8}, ts::f32, ts::NamedSharding(m, ts::P("x", "y")));
  auto row = ts::zeros({8}, ts::f32, ts::NamedSharding(m, ts::P("y")));
  auto col = ts::zeros({16, 1}, ts::f32, ts::NamedSharding(m, ts::P("x")));
  auto s = ts::zeros({}, ts::f32, ts::NamedSharding(m, ts::P()));
  const std::string text = f.lower(x, row, col, s).as_text();
  EXPECT_NE(text.find("compiled: 1 steps\n  fused loop [add, sigmoid, multiply, subtract]"), std::string::npos) << text;
  EXPECT_GT(layouts, 10);
}

// A reduction at the end of an elementwise chain joins the fused loop: the
// chain's result is never written, and the values equal eager bitwise (the
// streamed reduction adds in the same order) on every layout.
TEST(Jit, TrailingReductionsFuse) {
  auto loss = [](ts::Array a, ts::Array b) { ts::Array d = a - b;
    return ts::mean(d * d);
  };
  auto rows = [](ts::Array a, ts::Array) { return ts::max(ts::sin(a) * 2.0f, 1); };
  auto cols = [](ts::Array a, ts::Array b) { return ts::sum(a * b + 1.0f, 0, {.keepdims = true}); };
  const std::vector<std::function<ts::Array(ts::Array, ts::Array)>> progs = {loss, rows, cols};
  std::mt19937 rng(5);
  int layouts = 0;
  for (size_t p = 0; p < progs.size(); ++p) {
    auto f = ts::jit(progs[p]);
    for (ts::Shape shape : {ts::Shape{37, 21}, ts::Shape{3, 2}, ts::Shape{1, 9}}) {
      for_each_layout(2, [&](const ts::NamedSharding& s) {
        const auto n = shape[0] * shape[1];
        auto a = ts::device_put(iota_data<float>(n), shape, s);
        auto b = ts::device_put(iota_data<float>(n, 9), shape, ts::NamedSharding(s.mesh(), random_spec(rng, s.mesh(), 2)));
        expect_same(f(a, b), progs[p](a, b), "program " + std::to_string(p) + " on " + ts::typeof(a));
        ++layouts;
      });
    }
  }
  EXPECT_GT(layouts, 30);
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto a = ts::zeros({64, 4}, ts::f32, ts::NamedSharding(m, ts::P("x")));
  const std::string text = ts::jit(loss).lower(a, a).as_text();
  EXPECT_NE(text.find("fused loop [subtract, multiply -> mean]"), std::string::npos) << text;
  EXPECT_NE(text.find("all-reduce"), std::string::npos) << text;
}

// Shardings as trees: a NamedSharding per field (the struct templated over
// its leaf type), one sharding for a whole argument, one out_sharding for
// all results; a mismatch names where the trees part.
TEST(Jit, ShardingTrees) {
  const ts::Mesh mesh = line(4);
  const ts::NamedSharding rows(mesh, ts::P("x")), rep(mesh, ts::P());
  jit_tree::Stars<ts::Array> stars{ts::device_put(iota_data<float>(30), {10, 3}, rep),
                                   ts::device_put(iota_data<float>(10), {10}, rep), 2};
  auto f = [](const jit_tree::Stars<ts::Array>& s, ts::Array w) {
    return std::make_tuple(s.coords * w, s.mass * static_cast<float>(s.generation));
  };
  const jit_tree::Stars<ts::NamedSharding> layout{rows, ts::NamedSharding(mesh, ts::P()), 0};
  auto jf = ts::jit(f, {.in_shardings = {layout, rep}, .out_shardings = {rows}});
  ts::Array w = ts::device_put(iota_data<float>(3), {3}, rep);
  auto [c, m] = jf(stars, w);
  EXPECT_EQ(c.sharding(), rows);
  EXPECT_EQ(m.sharding(), rows);
  EXPECT_EQ(c.to_vector<float>(), (stars.coords * w).to_vector<float>());
  // One sharding for every array of an argument.
  auto jg = ts::jit(f, {.in_shardings = {rows, rep}});
  auto [c2, m2] = jg(stars, w);
  EXPECT_EQ(c2.sharding(), rows);
  EXPECT_EQ(m2.sharding(), rows);
  // A tree that does not match the argument's: the path where they part.
  std::map<std::string, ts::NamedSharding> wrong{{"coords", rows}};
  auto bad = ts::jit([](const std::map<std::string, ts::Array>& t) { return t.at("coords"); },
                     {.in_shardings = {wrong}});
  std::map<std::string, ts::Array> arg{{"coords", stars.coords}, {"mass", stars.mass}};
  expect_error<ts::ShapeError>([&] { bad(arg); }, "[jit]",
                               {"tree structure mismatch", "in_shardings entry 0", "no value for the array at", "mass"});
}

// Moving a traced value to another mesh: it has no contents to carry, so
// device_put raises naming itself and the transformation (not a read error
// from deep inside); moving before or after the function works.
TEST(Jit, DevicePutToAnotherMeshInsideRaises) {
  const ts::Mesh a(ts::testing::first_devices(2), {2}, {"x"});
  const std::vector<ts::Device> others = {ts::devices()[2], ts::devices()[3]};
  const ts::Mesh b(others, {2}, {"x"});
  const auto x = ts::device_put(std::vector<float>{1, 2, 3, 4}, {4}, ts::NamedSharding(a, ts::P("x")));
  auto move = [&](ts::Array v) { return ts::device_put(v * 2.0, ts::NamedSharding(b, ts::P())); };
  expect_error<ts::ShardingError>([&] { ts::jit(move)(x); }, "[device_put]",
                                  {"traced by jit", "another mesh", "before calling"});
  expect_error<ts::ShardingError>([&] { ts::vmap(move)(x); }, "[device_put]", {"traced by vmap"});
  EXPECT_EQ(
      ts::device_put(ts::jit([](ts::Array v) { return v * 2.0; })(x), ts::NamedSharding(b, ts::P())).to_vector<float>(),
      (std::vector<float>{2, 4, 6, 8}));
}
