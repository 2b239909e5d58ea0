// take, scatter_add, segment_sum: naive references, golden cases, the SPMD
// property over many meshes and layouts, the collectives they emit, bitwise
// determinism, every error path, the primitives' rules, and jit == eager
// bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "trace_util.hpp"
#include "transforms/trace.hpp"

namespace ts = tessera;
using ts::testing::expect_jit_matches;
using ts::testing::expect_same;
using ts::testing::rule_of;
using ts::none;
using ts::P;
using ts::testing::expect_error;

namespace {

using Dims = std::vector<std::vector<std::string>>;

// ------------------------------------------------------------- references

std::int64_t prod(const ts::Shape& s, size_t from = 0, size_t to = 99) {
  std::int64_t n = 1;
  for (size_t d = from; d < std::min(to, s.size()); ++d) n *= s[d];
  return n;
}

// np.take(x, idx, axis) with negative indices counting from the end.
template <class T>
std::vector<T> take_ref(const std::vector<T>& x, const ts::Shape& shape, const std::vector<std::int64_t>& idx,
                        int axis) {
  const std::int64_t outer = prod(shape, 0, axis), n = shape[axis], inner = prod(shape, axis + 1);
  std::vector<T> out;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i : idx)
      for (std::int64_t k = 0; k < inner; ++k) out.push_back(x[(o * n + (i < 0 ? i + n : i)) * inner + k]);
  return out;
}

// x.at[idx].add(upd) along axis 0: negative indices wrap, out of range dropped.
template <class T>
std::vector<T> scatter_add_ref(std::vector<T> x, const ts::Shape& shape, const std::vector<std::int64_t>& idx,
                               const std::vector<T>& upd) {
  const std::int64_t n = shape[0], inner = prod(shape, 1);
  for (size_t i = 0; i < idx.size(); ++i) {
    std::int64_t r = idx[i] < 0 ? idx[i] + n : idx[i];
    if (r < 0 || r >= n) continue;
    for (std::int64_t k = 0; k < inner; ++k) x[r * inner + k] += upd[i * inner + k];
  }
  return x;
}

// jax.ops.segment_sum: ids outside [0, num_segments) dropped.
template <class T>
std::vector<T> segment_sum_ref(const std::vector<T>& data, const ts::Shape& shape, const std::vector<std::int64_t>& ids,
                               std::int64_t num_segments) {
  const std::int64_t inner = prod(shape, 1);
  std::vector<T> out(static_cast<size_t>(num_segments * inner), T{0});
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= num_segments) continue;
    for (std::int64_t k = 0; k < inner; ++k) out[ids[i] * inner + k] += data[i * inner + k];
  }
  return out;
}

// ---------------------------------------------------------------- helpers

ts::Array put_ints(const std::vector<std::int64_t>& v, ts::DType t, const ts::NamedSharding& s) {
  const ts::Shape shape{static_cast<std::int64_t>(v.size())};
  if (t == ts::i64) return ts::device_put(v, shape, s);
  std::vector<std::int32_t> w(v.begin(), v.end());
  return ts::device_put(w, shape, s);
}

ts::PartitionSpec spec_of(const Dims& dims) {
  std::vector<ts::PartitionSpec::Entry> e;
  for (const auto& d : dims) {
    if (d.empty())
      e.emplace_back(none);
    else
      e.emplace_back(d);
  }
  return ts::PartitionSpec(e);
}

Dims dims_of(const ts::NamedSharding& s, int rank) {
  Dims d(rank);
  for (int i = 0; i < rank; ++i) d[i] = s.spec()[i].axes();
  return d;
}

bool has(const std::vector<std::string>& v, const std::string& a) { return std::find(v.begin(), v.end(), a) != v.end(); }

std::vector<std::int64_t> random_ints(std::mt19937& rng, std::int64_t n, std::int64_t lo, std::int64_t hi) {
  std::uniform_int_distribution<std::int64_t> u(lo, hi);
  std::vector<std::int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// Kinds of the records of `op` in an explanation.
std::vector<std::string> kinds(const ts::Explanation& ex, const std::string& op) {
  std::vector<std::string> k;
  for (const auto& r : ex.records)
    if (r.op == op) k.push_back(r.kind);
  return k;
}

ts::Mesh mesh1d(int n) {
  auto d = ts::devices();
  return ts::Mesh(std::vector<ts::Device>(d.begin(), d.begin() + n), {n}, {"x"});
}

// =================================================================== take

TEST(Take, Golden1d) {
  ts::NamedSharding rep(mesh1d(1), P());
  std::vector<int> x{10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  auto a = ts::device_put(x, {10}, rep);
  auto out = ts::take(a, put_ints({3, 0, -1, 3, -10}, ts::i32, rep));
  EXPECT_EQ(out.shape(), (ts::Shape{5}));
  EXPECT_EQ(out.dtype(), ts::i32);
  EXPECT_EQ(out.to_vector<int>(), (std::vector<int>{13, 10, 19, 13, 10}));
}

TEST(Take, Golden2dBothAxes) {
  ts::NamedSharding rep(mesh1d(2), P());
  std::vector<float> x{0, 1, 2, 3, 4, 5};  // (2, 3)
  auto a = ts::device_put(x, {2, 3}, rep);
  auto c = ts::take(a, put_ints({2, 0}, ts::i64, rep), 1);
  EXPECT_EQ(c.shape(), (ts::Shape{2, 2}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 0, 5, 3}));
  auto r = ts::take(a, put_ints({1, 1, 0}, ts::i32, rep), -2);
  EXPECT_EQ(r.shape(), (ts::Shape{3, 3}));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{3, 4, 5, 3, 4, 5, 0, 1, 2}));
  auto e = ts::take(a, put_ints({}, ts::i32, rep), 1);
  EXPECT_EQ(e.shape(), (ts::Shape{2, 0}));
}

TEST(Take, BoolAndF64KeepDtype) {
  ts::NamedSharding s(mesh1d(4), P("x"));
  auto b = ts::device_put(std::vector<bool>{true, false, false, true, true}, {5}, s);
  auto tb = ts::take(b, put_ints({1, 0, 4}, ts::i64, s));
  EXPECT_EQ(tb.dtype(), ts::bool_);
  EXPECT_EQ(tb.to_vector<bool>(), (std::vector<bool>{false, true, true}));
  auto d = ts::device_put(std::vector<double>{0.5, 1.5, 2.5}, {3}, s);
  EXPECT_EQ(ts::take(d, put_ints({2, 2}, ts::i32, s)).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
}

// The output is x's layout with `axis` taking the indices' axes (minus those
// x's other dims use); values equal the reference on every mesh and layout.
TEST(Take, SpmdProperty) {
  std::mt19937 rng(7);
  int cases = 0;
  for (const ts::Shape& shape : {ts::Shape{7, 3}, ts::Shape{2, 5}, ts::Shape{1, 9}}) {
    const auto xh = ts::testing::iota_data<std::int32_t>(prod(shape));
    ts::testing::for_each_layout(2, [&](const ts::NamedSharding& xs) {
      const ts::Mesh& mesh = xs.mesh();
      auto x = ts::device_put(xh, shape, xs);
      for (int axis : {0, 1}) {
        for (std::int64_t n : {0, 3, 11}) {
          auto idx = random_ints(rng, n, -shape[axis], shape[axis] - 1);
          ts::NamedSharding is(mesh, ts::testing::random_spec(rng, mesh, 1));
          const ts::DType it = (cases % 2) ? ts::i32 : ts::i64;
          auto out = ts::take(x, put_ints(idx, it, is), axis);
          ++cases;
          ASSERT_EQ(out.to_vector<std::int32_t>(), take_ref(xh, shape, idx, axis))
              << xs.str() << " indices " << is.str() << " axis " << axis;
          Dims want = dims_of(xs, 2);
          want[axis].clear();
          std::vector<std::string> kept;
          for (const auto& a : is.spec()[0].axes())
            if (!has(want[1 - axis], a)) kept.push_back(a);
          want[axis] = kept;
          EXPECT_EQ(out.sharding(), ts::NamedSharding(mesh, spec_of(want)))
              << xs.str() << " indices " << is.str() << " axis " << axis << " got " << out.sharding().str();
        }
      }
    });
  }
  EXPECT_GT(cases, 400);
}

TEST(Take, Rank3MiddleAxis) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  const ts::Shape shape{3, 5, 4};
  const auto xh = ts::testing::iota_data<float>(60);
  auto x = ts::device_put(xh, shape, ts::NamedSharding(mesh, P("x", "y", none)));
  std::vector<std::int64_t> idx{4, -1, 0, 2, 2, 1};
  auto out = ts::take(x, put_ints(idx, ts::i32, ts::NamedSharding(mesh, P("y"))), 1);
  EXPECT_EQ(out.shape(), (ts::Shape{3, 6, 4}));
  EXPECT_EQ(out.to_vector<float>(), take_ref(xh, shape, idx, 1));
  EXPECT_EQ(out.sharding().spec(), P("x", "y"));
}

// Gathering along a sharded axis all-gathers x along that axis only;
// gathering along an unsharded axis moves nothing.
TEST(Take, CommunicationIsVisible) {
  auto mesh = ts::make_mesh({8}, {"x"});
  std::vector<float> xh(16 * 4);
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>(i);
  auto x = ts::device_put(xh, {16, 4}, ts::NamedSharding(mesh, P("x")));
  auto rep_idx = put_ints({15, 0, 7}, ts::i32, ts::NamedSharding(mesh, P()));
  ts::Array out;
  auto ex = ts::explain([&] { out = ts::take(x, rep_idx, 0); });
  EXPECT_EQ(kinds(ex, "take"), (std::vector<std::string>{"all-gather"}));
  // Each device receives the 7 blocks it lacks: 14 rows of 4 floats.
  EXPECT_EQ(ex.records.at(0).bytes_received.at(0), 14 * 4 * 4);
  EXPECT_EQ(out.sharding().spec(), P());
  EXPECT_EQ(out.to_vector<float>(), take_ref(xh, {16, 4}, {15, 0, 7}, 0));

  const std::vector<std::int64_t> cols{3, 1, 0, 2, 3, 3, 1, 0, 2};
  auto ex2 = ts::explain([&] { out = ts::take(x, put_ints(cols, ts::i64, ts::NamedSharding(mesh, P())), 1); });
  EXPECT_EQ(ex2.bytes_moved(), 0) << ex2.str();
  EXPECT_EQ(out.sharding().spec(), P("x"));
  EXPECT_EQ(out.to_vector<float>(), take_ref(xh, {16, 4}, cols, 1));
  // Indices sharded over 'x' too: x's dim 0 keeps 'x', the indices are gathered.
  auto ex3 = ts::explain([&] { out = ts::take(x, put_ints(cols, ts::i64, ts::NamedSharding(mesh, P("x"))), 1); });
  EXPECT_EQ(kinds(ex3, "take"), (std::vector<std::string>{"all-gather"}));
  EXPECT_EQ(out.sharding().spec(), P("x"));
  EXPECT_EQ(out.to_vector<float>(), take_ref(xh, {16, 4}, cols, 1));
}

TEST(Take, SmallIndexArrayIsGatheredNotX) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  auto x = ts::device_put(ts::testing::iota_data<int>(40), {10, 4}, ts::NamedSharding(mesh, P(none, "y")));
  auto idx = put_ints({1, 9, 3, 3, 0}, ts::i32, ts::NamedSharding(mesh, P({"x", "y"})));
  ts::Array out;
  auto ex = ts::explain([&] { out = ts::take(x, idx, 0); });
  EXPECT_EQ(out.sharding().spec(), P("x", "y"));
  // Only indices moved (an i32 array of 5): x stayed in place.
  EXPECT_LE(ex.bytes_moved(), 8 * 5 * 4) << ex.str();
  EXPECT_EQ(out.to_vector<int>(), take_ref(ts::testing::iota_data<int>(40), {10, 4}, {1, 9, 3, 3, 0}, 0));
}

TEST(Take, ExplicitMode) {
  auto mesh = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  auto x = ts::device_put(ts::testing::iota_data<int>(10), {10}, ts::NamedSharding(mesh, P()));
  auto idx = put_ints({9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0}, ts::i32, ts::NamedSharding(mesh, P("X")));
  auto out = ts::take(x, idx, 0);
  EXPECT_EQ(ts::typeof(out), "i32[11@X]");
  auto xs = ts::device_put(ts::testing::iota_data<int>(10), {10}, ts::NamedSharding(mesh, P("X")));
  expect_error<ts::ShardingError>([&] { ts::take(xs, idx, 0); }, "[take]", {"axis 0", "'X'", "reshard x"});
  auto x2 = ts::device_put(ts::testing::iota_data<int>(20), {2, 10}, ts::NamedSharding(mesh, P(none, "X")));
  expect_error<ts::ShardingError>([&] { ts::take(x2, idx, 0); }, "[take]", {"'X'", "reshard"});
}

TEST(Take, Errors) {
  auto mesh = mesh1d(4);
  ts::NamedSharding s(mesh, P("x"));
  auto x = ts::device_put(ts::testing::iota_data<float>(10), {10}, s);
  expect_error<ts::ShapeError>([&] { ts::take(x, put_ints({1, 12, 3}, ts::i32, s)); }, "[take]",
                               {"[take] index 12 is out of range for axis 0 of size 10"});
  expect_error<ts::ShapeError>([&] { ts::take(x, put_ints({-11}, ts::i64, s)); }, "[take]",
                               {"index -11 is out of range for axis 0 of size 10"});
  // The bad index is only on the last device.
  expect_error<ts::ShapeError>([&] { ts::take(x, put_ints({0, 1, 2, 3, 4, 5, 6, 10}, ts::i32, s)); }, "[take]",
                               {"index 10"});
  auto fidx = ts::device_put(std::vector<float>{1, 2}, {2}, s);
  expect_error<ts::DTypeError>([&] { ts::take(x, fidx); }, "[take]", {"integer", "f32"});
  auto bidx = ts::device_put(std::vector<bool>{true}, {1}, s);
  expect_error<ts::DTypeError>([&] { ts::take(x, bidx); }, "[take]", {"integer", "bool"});
  auto idx2 = ts::device_put(std::vector<int>{1, 2, 3, 4}, {2, 2}, s);
  expect_error<ts::ShapeError>([&] { ts::take(x, idx2); }, "[take]", {"1-d", "(2, 2)"});
  auto idx = put_ints({1}, ts::i32, s);
  expect_error<ts::ShapeError>([&] { ts::take(x, idx, 1); }, "[take]", {"axis 1", "rank 1"});
  auto scalar = ts::device_put(std::vector<float>{1}, {}, ts::NamedSharding(mesh, P()));
  expect_error<ts::ShapeError>([&] { ts::take(scalar, idx, 0); }, "[take]", {"rank 0"});
  auto other = put_ints({1}, ts::i32, ts::NamedSharding(mesh1d(2), P()));
  expect_error<ts::ShardingError>([&] { ts::take(x, other); }, "[take]", {"different meshes"});
  expect_error<ts::Error>([&] { ts::take(ts::Array(), idx); }, "[take]", {"x"});
  // The runtime stays usable.
  EXPECT_EQ(ts::take(x, idx).to_vector<float>(), (std::vector<float>{ts::testing::iota_data<float>(10)[1]}));
}

// ============================================================ scatter_add

TEST(ScatterAdd, Golden) {
  ts::NamedSharding rep(mesh1d(1), P());
  auto x = ts::device_put(std::vector<int>{0, 0, 0, 0, 0}, {5}, rep);
  auto u = ts::device_put(std::vector<int>{1, 2, 3, 4, 5, 6}, {6}, rep);
  // 7 and -6 are out of range (dropped); -1 is the last row.
  auto out = ts::scatter_add(x, put_ints({0, 2, 0, -1, 7, -6}, ts::i32, rep), u);
  EXPECT_EQ(out.to_vector<int>(), (std::vector<int>{4, 0, 2, 0, 4}));

  auto x2 = ts::device_put(std::vector<float>{1, 1, 1, 1, 1, 1}, {3, 2}, rep);
  auto u2 = ts::device_put(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}, rep);
  auto o2 = ts::scatter_add(x2, put_ints({2, 2, 0}, ts::i64, rep), u2);
  EXPECT_EQ(o2.to_vector<float>(), (std::vector<float>{6, 7, 1, 1, 5, 7}));
}

TEST(ScatterAdd, UpdatesTakeXDtype) {
  ts::NamedSharding s(mesh1d(3), P("x"));
  auto x = ts::device_put(std::vector<double>{0.5, 0.5, 0.5, 0.5}, {4}, s);
  auto u = ts::device_put(std::vector<int>{1, 2, 3}, {3}, s);
  auto out = ts::scatter_add(x, put_ints({3, 3, 0}, ts::i32, s), u);
  EXPECT_EQ(out.dtype(), ts::f64);
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{3.5, 0.5, 0.5, 3.5}));
  // bool: addition is logical or.
  auto b = ts::device_put(std::vector<bool>{false, true, false}, {3}, s);
  auto ub = ts::device_put(std::vector<bool>{true, true, false, true}, {4}, s);
  auto ob = ts::scatter_add(b, put_ints({0, 1, 2, 0}, ts::i32, s), ub);
  EXPECT_EQ(ob.dtype(), ts::bool_);
  EXPECT_EQ(ob.to_vector<bool>(), (std::vector<bool>{true, true, false}));
}

// Any mesh and layout, uneven rows, fewer rows than devices, no rows at all,
// duplicates and out-of-range indices; output sharding = x's or out_sharding.
TEST(ScatterAdd, SpmdProperty) {
  std::mt19937 rng(11);
  int cases = 0;
  for (const ts::Shape& xshape : {ts::Shape{5, 3}, ts::Shape{1, 2}, ts::Shape{12, 1}}) {
    const auto xh = ts::testing::iota_data<std::int32_t>(prod(xshape), 3);
    ts::testing::for_each_layout(2, [&](const ts::NamedSharding& us) {
      const ts::Mesh& mesh = us.mesh();
      for (std::int64_t n : {0, 2, 13}) {
        const ts::Shape ushape{n, xshape[1]};
        const auto uh = ts::testing::iota_data<std::int32_t>(prod(ushape), 5);
        auto idx = random_ints(rng, n, -xshape[0] - 2, xshape[0] + 1);
        ts::NamedSharding xs(mesh, ts::testing::random_spec(rng, mesh, 2));
        ts::NamedSharding is(mesh, ts::testing::random_spec(rng, mesh, 1));
        auto x = ts::device_put(xh, xshape, xs);
        auto u = ts::device_put(uh, ushape, us);
        auto ia = put_ints(idx, (cases % 2) ? ts::i32 : ts::i64, is);
        const auto want = scatter_add_ref(xh, xshape, idx, uh);
        for (int variant = 0; variant < 3; ++variant) {
          ts::OutOptions opt;
          if (variant == 1) opt.out_sharding = P();
          if (variant == 2) opt.out_sharding = ts::testing::random_spec(rng, mesh, 2);
          auto out = ts::scatter_add(x, ia, u, opt);
          ++cases;
          const std::string where = "x " + xs.str() + " updates " + us.str() + " indices " + is.str() + " out " +
                                    (opt.out_sharding ? opt.out_sharding->str() : "default");
          ASSERT_EQ(out.to_vector<std::int32_t>(), want) << where;
          EXPECT_EQ(out.sharding(), opt.out_sharding ? ts::NamedSharding(mesh, *opt.out_sharding) : xs) << where;
          EXPECT_EQ(out.shape(), xshape);
        }
      }
    });
  }
  EXPECT_GT(cases, 1000);
}

// Rows sharded: all-reduce to a replicated output, reduce-scatter to a
// row-sharded one (out_sharding or x's own sharding).
TEST(ScatterAdd, AllReduceOrReduceScatter) {
  auto mesh = ts::make_mesh({8}, {"x"});
  ts::NamedSharding rows(mesh, P("x")), rep(mesh, P());
  std::mt19937 rng(3);
  auto idx = random_ints(rng, 100, 0, 9);
  const auto uh = ts::testing::iota_data<float>(100 * 4);
  const auto xh = ts::testing::iota_data<float>(10 * 4, 1);
  auto u = ts::device_put(uh, {100, 4}, rows);
  auto ia = put_ints(idx, ts::i32, rows);
  auto x = ts::device_put(xh, {10, 4}, rep);
  const auto want = scatter_add_ref(xh, {10, 4}, idx, uh);

  ts::Array out;
  auto ex = ts::explain([&] { out = ts::scatter_add(x, ia, u); });
  EXPECT_EQ(kinds(ex, "scatter_add"), (std::vector<std::string>{"all-reduce"})) << ex.str();
  // Every device receives the 7 other full partials (10 x 4 floats).
  EXPECT_EQ(ex.records.at(0).bytes_received.at(3), 7 * 10 * 4 * 4);
  EXPECT_EQ(out.sharding(), rep);
  EXPECT_EQ(out.to_vector<float>(), want);

  ex = ts::explain([&] { out = ts::scatter_add(x, ia, u, {.out_sharding = P("x")}); });
  EXPECT_EQ(kinds(ex, "scatter_add"), (std::vector<std::string>{"reduce-scatter", "local slice"})) << ex.str();
  EXPECT_EQ(out.sharding(), rows);
  EXPECT_EQ(out.to_vector<float>(), want);

  auto xr = ts::device_put(xh, {10, 4}, rows);  // x sharded: the output is too
  ex = ts::explain([&] { out = ts::scatter_add(xr, ia, u); });
  EXPECT_EQ(kinds(ex, "scatter_add"), (std::vector<std::string>{"reduce-scatter"})) << ex.str();
  EXPECT_EQ(out.sharding(), rows);
  EXPECT_EQ(out.to_vector<float>(), want);
}

// The astronomy case: particles over both axes of a 2-d mesh scattered into
// a cube sharded over one axis. Rows over (x, y): the reduction covers both.
TEST(ScatterAdd, ParticlesIntoCube) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  const std::int64_t npart = 1001, nvox = 6 * 6, nchan = 5;
  std::mt19937 rng(5);
  auto vox = random_ints(rng, npart, 0, nvox - 1);
  const auto spectra = ts::testing::iota_data<double>(npart * nchan);
  auto u = ts::device_put(spectra, {npart, nchan}, ts::NamedSharding(mesh, P({"x", "y"})));
  auto ia = put_ints(vox, ts::i64, ts::NamedSharding(mesh, P({"x", "y"})));
  auto cube = ts::device_put(std::vector<double>(nvox * nchan, 0.0), {nvox, nchan},
                             ts::NamedSharding(mesh, P("x")));
  ts::Array out;
  auto ex = ts::explain([&] { out = ts::scatter_add(cube, ia, u); });
  EXPECT_EQ(kinds(ex, "scatter_add"), (std::vector<std::string>{"reduce-scatter"})) << ex.str();
  EXPECT_EQ(out.sharding().spec(), P("x"));
  EXPECT_EQ(out.to_vector<double>(), scatter_add_ref(std::vector<double>(nvox * nchan, 0.0), {nvox, nchan}, vox, spectra));

  // Rows over x only, cube sharded over y: each device only accumulates its
  // own y block of the cube, then an all-reduce over x of that block.
  auto ux = ts::device_put(spectra, {npart, nchan}, ts::NamedSharding(mesh, P("x")));
  auto cy = ts::device_put(std::vector<double>(nvox * nchan, 1.0), {nvox, nchan}, ts::NamedSharding(mesh, P("y")));
  ex = ts::explain([&] { out = ts::scatter_add(cy, ia, ux); });
  // Records: the indices move to the updates' rows, then the all-reduce.
  ASSERT_EQ(ex.records.size(), 2u) << ex.str();
  EXPECT_EQ(ex.records[1].kind, "all-reduce") << ex.str();
  // A device receives only its own 9 voxels from its one partner along x.
  EXPECT_EQ(ex.records[1].bytes_received.at(0), 1 * 9 * nchan * 8) << ex.str();
  EXPECT_EQ(out.sharding().spec(), P("y"));
  EXPECT_EQ(out.to_vector<double>(), scatter_add_ref(std::vector<double>(nvox * nchan, 1.0), {nvox, nchan}, vox, spectra));
}

TEST(ScatterAdd, ExplicitKeepsXSharding) {
  auto mesh = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  ts::NamedSharding s(mesh, P("X"));
  auto x = ts::device_put(ts::testing::iota_data<int>(10), {10}, s);
  std::vector<std::int64_t> idx{9, 9, 1, 0, 4, 3, 3, 2, 7, 5, 6, 8, 8};
  auto u = ts::device_put(ts::testing::iota_data<int>(13), {13}, s);
  auto out = ts::scatter_add(x, put_ints(idx, ts::i32, s), u);
  EXPECT_EQ(ts::typeof(out), "i32[10@X]");
  EXPECT_EQ(out.to_vector<int>(),
            scatter_add_ref(ts::testing::iota_data<int>(10), {10}, idx, ts::testing::iota_data<int>(13)));
  auto r = ts::scatter_add(x, put_ints(idx, ts::i32, s), u, {.out_sharding = P()});
  EXPECT_EQ(ts::typeof(r), "i32[10]");
}

TEST(ScatterAdd, Errors) {
  auto mesh = mesh1d(4);
  ts::NamedSharding s(mesh, P("x"));
  auto x = ts::device_put(ts::testing::iota_data<float>(12), {4, 3}, s);
  auto u = ts::device_put(ts::testing::iota_data<float>(6), {2, 3}, s);
  auto idx = put_ints({0, 3}, ts::i32, s);
  auto fidx = ts::device_put(std::vector<float>{0, 3}, {2}, s);
  expect_error<ts::DTypeError>([&] { ts::scatter_add(x, fidx, u); }, "[scatter_add]", {"integer", "f32"});
  auto bidx = ts::device_put(std::vector<bool>{false, true}, {2}, s);
  expect_error<ts::DTypeError>([&] { ts::scatter_add(x, bidx, u); }, "[scatter_add]", {"indices", "bool"});
  auto u_bad = ts::device_put(ts::testing::iota_data<float>(8), {2, 4}, s);
  expect_error<ts::ShapeError>([&] { ts::scatter_add(x, idx, u_bad); }, "[scatter_add]",
                               {"updates", "(2, 3)", "(2, 4)"});
  auto u_rows = ts::device_put(ts::testing::iota_data<float>(9), {3, 3}, s);
  expect_error<ts::ShapeError>([&] { ts::scatter_add(x, idx, u_rows); }, "[scatter_add]", {"updates", "(3, 3)"});
  auto u_rank = ts::device_put(ts::testing::iota_data<float>(2), {2}, s);
  expect_error<ts::ShapeError>([&] { ts::scatter_add(x, idx, u_rank); }, "[scatter_add]", {"updates", "(2,)"});
  auto idx2 = ts::device_put(std::vector<int>{0, 1}, {1, 2}, s);
  expect_error<ts::ShapeError>([&] { ts::scatter_add(x, idx2, u); }, "[scatter_add]", {"1-d", "(1, 2)"});
  auto scalar = ts::device_put(std::vector<float>{1}, {}, ts::NamedSharding(mesh, P()));
  expect_error<ts::ShapeError>([&] { ts::scatter_add(scalar, idx, u); }, "[scatter_add]", {"rank", "()"});
  expect_error<ts::ShardingError>([&] { ts::scatter_add(x, idx, u, {.out_sharding = P("nope")}); },
                                  "[scatter_add]", {"nope"});
  expect_error<ts::ShardingError>([&] { ts::scatter_add(x, idx, u, {.out_sharding = P("x", none, none)}); },
                                  "[scatter_add]", {"3 entries", "rank 2"});
  expect_error<ts::ShardingError>(
      [&] { ts::scatter_add(x, idx, u, {.out_sharding = ts::PartitionSpec({none}, {"x"})}); }, "[scatter_add]",
      {"unreduced", "not supported"});
  auto other = ts::device_put(ts::testing::iota_data<float>(6), {2, 3}, ts::NamedSharding(mesh1d(2), P()));
  expect_error<ts::ShardingError>([&] { ts::scatter_add(x, idx, other); }, "[scatter_add]", {"different meshes"});
  expect_error<ts::Error>([&] { ts::scatter_add(x, idx, ts::Array()); }, "[scatter_add]", {"updates"});
}

// Found by tessera_fuzz (under UBSan): integer accumulation overflowed
// (undefined in C++) instead of wrapping as XLA does.
TEST(ScatterAdd, IntegerSumsWrap) {
  constexpr std::int32_t mx = std::numeric_limits<std::int32_t>::max();
  ts::testing::for_each_layout(1, [&](const ts::NamedSharding& s) {
    auto x = ts::device_put(std::vector<std::int32_t>{mx, 0, 0}, {3}, s);
    auto idx = ts::device_put(std::vector<std::int32_t>{0, 0, 2}, {3}, s);
    auto upd = ts::device_put(std::vector<std::int32_t>{1, mx, 5}, {3}, s);
    EXPECT_EQ(ts::scatter_add(x, idx, upd).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-1, 0, 5})) << s.str();
    EXPECT_EQ(ts::segment_sum(upd, idx, 3).to_vector<std::int32_t>(),
              (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 0, 5}))
        << s.str();
  });
}

// ============================================================ segment_sum

TEST(SegmentSum, Golden) {
  ts::NamedSharding rep(mesh1d(1), P());
  auto d = ts::device_put(std::vector<int>{1, 2, 3, 4, 5}, {5}, rep);
  // -1 and 3 are outside [0, 3): dropped (negative ids do not wrap).
  auto out = ts::segment_sum(d, put_ints({0, 0, 2, -1, 3}, ts::i32, rep), 3);
  EXPECT_EQ(out.shape(), (ts::Shape{3}));
  EXPECT_EQ(out.to_vector<int>(), (std::vector<int>{3, 0, 3}));

  auto d2 = ts::device_put(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}, rep);
  auto o2 = ts::segment_sum(d2, put_ints({1, 1, 3}, ts::i64, rep), 4);
  EXPECT_EQ(o2.shape(), (ts::Shape{4, 2}));
  EXPECT_EQ(o2.to_vector<float>(), (std::vector<float>{0, 0, 4, 6, 0, 0, 5, 6}));

  auto z = ts::segment_sum(d2, put_ints({0, 0, 0}, ts::i32, rep), 0);
  EXPECT_EQ(z.shape(), (ts::Shape{0, 2}));
}

TEST(SegmentSum, SpmdProperty) {
  std::mt19937 rng(13);
  int cases = 0;
  for (std::int64_t cols : {1, 3}) {
    ts::testing::for_each_layout(2, [&](const ts::NamedSharding& ds) {
      const ts::Mesh& mesh = ds.mesh();
      for (std::int64_t n : {0, 3, 17}) {
        const ts::Shape dshape{n, cols};
        const auto dh = ts::testing::iota_data<std::int64_t>(prod(dshape), 2);
        auto d = ts::device_put(dh, dshape, ds);
        for (std::int64_t nseg : {0, 1, 6}) {
          auto ids = random_ints(rng, n, -2, nseg + 1);
          ts::NamedSharding is(mesh, ts::testing::random_spec(rng, mesh, 1));
          auto ia = put_ints(ids, (cases % 2) ? ts::i32 : ts::i64, is);
          const auto want = segment_sum_ref(dh, dshape, ids, nseg);
          for (int variant = 0; variant < 2; ++variant) {
            ts::OutOptions opt;
            if (variant == 1) opt.out_sharding = ts::testing::random_spec(rng, mesh, 2);
            auto out = ts::segment_sum(d, ia, nseg, opt);
            ++cases;
            const std::string where = "data " + ds.str() + " ids " + is.str() + " out " +
                                      (opt.out_sharding ? opt.out_sharding->str() : "default") + " nseg " +
                                      std::to_string(nseg);
            ASSERT_EQ(out.to_vector<std::int64_t>(), want) << where;
            EXPECT_EQ(out.shape(), (ts::Shape{nseg, cols}));
            ts::NamedSharding expect(mesh, P(none, ds.spec()[1]));  // replicated segments, data's columns
            if (opt.out_sharding) expect = ts::NamedSharding(mesh, *opt.out_sharding);
            EXPECT_EQ(out.sharding(), expect) << where;
          }
        }
      }
    });
  }
  EXPECT_GT(cases, 1000);
}

TEST(SegmentSum, AllReduceOrReduceScatter) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  ts::NamedSharding rows(mesh, P({"x", "y"}));
  std::mt19937 rng(17);
  auto ids = random_ints(rng, 50, -1, 7);
  const auto dh = ts::testing::iota_data<float>(50);
  auto d = ts::device_put(dh, {50}, rows);
  auto ia = put_ints(ids, ts::i32, rows);
  const auto want = segment_sum_ref(dh, {50}, ids, 7);
  ts::Array out;
  auto ex = ts::explain([&] { out = ts::segment_sum(d, ia, 7); });
  EXPECT_EQ(kinds(ex, "segment_sum"), (std::vector<std::string>{"all-reduce"})) << ex.str();
  EXPECT_EQ(ex.records.at(0).bytes_received.at(5), 7 * 7 * 4);
  EXPECT_TRUE(out.sharding().is_fully_replicated());
  EXPECT_EQ(out.to_vector<float>(), want);

  ex = ts::explain([&] { out = ts::segment_sum(d, ia, 7, {.out_sharding = P("y")}); });
  EXPECT_EQ(kinds(ex, "segment_sum"), (std::vector<std::string>{"reduce-scatter"})) << ex.str();
  EXPECT_EQ(out.sharding().spec(), P("y"));
  EXPECT_EQ(out.to_vector<float>(), want);

  // Rows not sharded: nothing to combine.
  auto dr = ts::device_put(dh, {50}, ts::NamedSharding(mesh, P()));
  auto ir = put_ints(ids, ts::i64, ts::NamedSharding(mesh, P()));
  ex = ts::explain([&] { out = ts::segment_sum(dr, ir, 7); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(out.to_vector<float>(), want);
  // Rows whole but ids sharded: each device gathers the ids it lacks (small);
  // no reduction.
  ex = ts::explain([&] { out = ts::segment_sum(dr, ia, 7); });
  EXPECT_EQ(kinds(ex, "segment_sum"), (std::vector<std::string>{"all-gather", "none"})) << ex.str();
  EXPECT_EQ(ex.bytes_moved(), 7 * 50 * 4) << ex.str();
  EXPECT_EQ(out.to_vector<float>(), want);
}

TEST(SegmentSum, ExplicitMode) {
  auto mesh = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  ts::NamedSharding s(mesh, P("X"));
  auto d = ts::device_put(ts::testing::iota_data<float>(20), {20}, s);
  std::vector<std::int64_t> ids(20);
  for (int i = 0; i < 20; ++i) ids[i] = i % 3;
  auto ia = put_ints(ids, ts::i32, s);
  EXPECT_EQ(ts::typeof(ts::segment_sum(d, ia, 3)), "f32[3]");
  auto o = ts::segment_sum(d, ia, 3, {.out_sharding = P("X")});
  EXPECT_EQ(ts::typeof(o), "f32[3@X]");
  EXPECT_EQ(o.to_vector<float>(), segment_sum_ref(ts::testing::iota_data<float>(20), {20}, ids, 3));
}

TEST(SegmentSum, FloatsMatchReference) {
  auto mesh = ts::make_mesh({8}, {"x"});
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  const std::int64_t n = 3000, cols = 3, nseg = 40;
  std::vector<float> dh(n * cols);
  for (auto& v : dh) v = nd(rng);
  auto ids = random_ints(rng, n, 0, nseg - 1);
  auto out = ts::segment_sum(ts::device_put(dh, {n, cols}, ts::NamedSharding(mesh, P("x"))),
                             put_ints(ids, ts::i32, ts::NamedSharding(mesh, P("x"))), nseg)
                 .to_vector<float>();
  std::vector<double> dd(dh.begin(), dh.end());
  auto ref = segment_sum_ref(dd, {n, cols}, ids, nseg);
  ASSERT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(out[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << i;
}

// Same program on the same mesh: bitwise the same result, every run.
TEST(Indexing, Deterministic) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> ud(-1, 1);
  const std::int64_t n = 5000, cols = 2, nseg = 13;
  std::vector<float> dh(n * cols);
  for (auto& v : dh) v = ud(rng) * 1e3f;
  auto ids = random_ints(rng, n, 0, nseg - 1);
  for (const ts::Mesh& mesh : {ts::make_mesh({8}, {"x"}), ts::make_mesh({2, 4}, {"x", "y"})}) {
    ts::NamedSharding rows(mesh, P(mesh.axis_names()));
    auto d = ts::device_put(dh, {n, cols}, rows);
    auto ia = put_ints(ids, ts::i64, rows);
    auto x = ts::device_put(std::vector<float>(nseg * cols, 0.25f), {nseg, cols}, ts::NamedSharding(mesh, P()));
    const auto first_seg = ts::segment_sum(d, ia, nseg).to_vector<float>();
    const auto first_sc = ts::scatter_add(x, ia, d, {.out_sharding = P(mesh.axis_names()[0])}).to_vector<float>();
    for (int run = 0; run < 4; ++run) {
      const auto seg = ts::segment_sum(d, ia, nseg).to_vector<float>();
      const auto sc = ts::scatter_add(x, ia, d, {.out_sharding = P(mesh.axis_names()[0])}).to_vector<float>();
      EXPECT_EQ(std::memcmp(seg.data(), first_seg.data(), seg.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(sc.data(), first_sc.data(), sc.size() * sizeof(float)), 0);
    }
  }
}

TEST(SegmentSum, Errors) {
  auto mesh = mesh1d(4);
  ts::NamedSharding s(mesh, P("x"));
  auto d = ts::device_put(ts::testing::iota_data<float>(10), {5, 2}, s);
  auto ids = put_ints({0, 1, 2, 0, 1}, ts::i32, s);
  auto short_ids = put_ints({0, 1, 2, 0}, ts::i32, s);
  expect_error<ts::ShapeError>([&] { ts::segment_sum(d, short_ids, 3); }, "[segment_sum]",
                               {"segment_ids", "(5, 2)", "(4,)"});
  expect_error<ts::ShapeError>([&] { ts::segment_sum(d, ids, -1); }, "[segment_sum]", {"num_segments", ">= 0", "-1"});
  auto fids = ts::device_put(std::vector<double>{0, 1, 2, 0, 1}, {5}, s);
  expect_error<ts::DTypeError>([&] { ts::segment_sum(d, fids, 3); }, "[segment_sum]", {"segment_ids", "f64"});
  auto ids2 = ts::device_put(std::vector<int>{0, 1, 2, 0, 1, 1}, {3, 2}, s);
  expect_error<ts::ShapeError>([&] { ts::segment_sum(d, ids2, 3); }, "[segment_sum]", {"1-d", "(3, 2)"});
  auto scalar = ts::device_put(std::vector<float>{1}, {}, ts::NamedSharding(mesh, P()));
  expect_error<ts::ShapeError>([&] { ts::segment_sum(scalar, ids, 3); }, "[segment_sum]", {"data", "rank"});
  expect_error<ts::ShardingError>([&] { ts::segment_sum(d, ids, 3, {.out_sharding = P("y")}); }, "[segment_sum]",
                                  {"y"});
  auto other = put_ints({0, 1, 2, 0, 1}, ts::i32, ts::NamedSharding(mesh1d(2), P()));
  expect_error<ts::ShardingError>([&] { ts::segment_sum(d, other, 3); }, "[segment_sum]", {"different meshes"});
  expect_error<ts::Error>([&] { ts::segment_sum(ts::Array(), ids, 3); }, "[segment_sum]", {"data"});
}

}  // namespace

// ============================================================== primitives

TEST(IndexingRule, GoldenText) {
  ts::NamedSharding rep(mesh1d(8), P());
  const auto x = ts::zeros({8, 6}, ts::f32, rep);
  const auto idx = put_ints({1, 0, 5, 2, 2}, ts::i32, rep);
  // take: the gathered dim whole on every device, the indices' dim in its place.
  auto r = rule_of([&] { ts::take(x, idx, 1); });
  EXPECT_EQ(r.first, "([i,j],[k])->([i,k]) {i=8,j=6,k=5} need_replication={j}");
  EXPECT_EQ(r.second, "take axis=1");
  // The scatters sum update rows into the rows the indices name.
  const auto upd = ts::zeros({5, 6}, ts::f32, rep);
  r = rule_of([&] { ts::scatter_add(x, idx, upd); });
  EXPECT_EQ(r.first, "([i,j],[k],[k,j])->([i,j]) {i=8,j=6,k=5} reduction={k}");
  EXPECT_EQ(r.second, "scatter_add ");
  r = rule_of([&] { ts::scatter_add(x, idx, upd, {.out_sharding = P(none, "x")}); });
  EXPECT_EQ(r.second, "scatter_add out_sharding=PartitionSpec(None, 'x')");
  r = rule_of([&] { ts::segment_sum(upd, idx, 4); });
  EXPECT_EQ(r.first, "([k,j],[k])->([i,j]) {i=4,j=6,k=5} reduction={k}");
  EXPECT_EQ(r.second, "segment_sum num_segments=4");
  r = rule_of([&] { ts::segment_sum(upd, idx, 3, {.out_sharding = P("x")}); });
  EXPECT_EQ(r.second, "segment_sum num_segments=3 out_sharding=PartitionSpec('x',)");
}

// ===================================================================== jit

// Every op under jit equals eager bitwise (values, dtype, sharding) on every
// test mesh, x in a spread of layouts (uneven blocks, dims smaller than the
// device count, empty), indices and updates in random layouts, with and
// without out_sharding.
TEST(IndexingJit, MatchesEagerOnEveryLayout) {
  std::mt19937 rng(23);
  const auto take_fn = [](ts::Array x, ts::Array i, int axis) { return ts::take(x, i, axis); };
  const auto scatter_fn = [](ts::Array x, ts::Array i, ts::Array u) { return ts::scatter_add(x, i, u); };
  const auto segment_fn = [](ts::Array d, ts::Array i, int n) { return ts::segment_sum(d, i, n); };
  auto jtake = ts::jit(take_fn);
  auto jscatter = ts::jit(scatter_fn);
  auto jsegment = ts::jit(segment_fn);
  int cases = 0;
  for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 9}, ts::Shape{0, 3}}) {
    const auto xh = ts::testing::iota_data<std::int32_t>(prod(shape), 2);
    ts::testing::for_each_layout(2, [&](const ts::NamedSharding& xs) {
      const ts::Mesh& mesh = xs.mesh();
      auto random_layout = [&](int rank) { return ts::NamedSharding(mesh, ts::testing::random_spec(rng, mesh, rank)); };
      const auto x = ts::device_put(xh, shape, xs);
      const std::string what = ts::typeof(x);
      const ts::DType it = cases % 2 ? ts::i32 : ts::i64;
      for (int axis : {0, 1}) {
        const std::int64_t n = shape[axis];
        for (std::int64_t len : {1, 6}) {
          const auto idx = put_ints(n == 0 ? std::vector<std::int64_t>{} : random_ints(rng, len, -n, n - 1), it,
                                    random_layout(1));
          expect_jit_matches(jtake, take_fn, "take", what, x, idx, axis);
        }
      }
      // Indices out of range (dropped) and negative (from the end).
      const std::int64_t m = 7;
      const auto idx = put_ints(random_ints(rng, m, -shape[0] - 2, shape[0] + 1), it, random_layout(1));
      const auto upd = ts::device_put(ts::testing::iota_data<float>(m * shape[1], 1), {m, shape[1]}, random_layout(2));
      expect_jit_matches(jscatter, scatter_fn, "scatter_add", what, x, idx, upd);
      const ts::NamedSharding out = random_layout(2);
      const auto scatter_out = [&](ts::Array xv, ts::Array i, ts::Array u) {
        return ts::scatter_add(xv, i, u, {.out_sharding = out.spec()});
      };
      auto jscatter_out = ts::jit(scatter_out);
      expect_jit_matches(jscatter_out, scatter_out, "scatter_add", what, x, idx, upd);
      // segment_sum over x's rows.
      const auto ids = put_ints(random_ints(rng, shape[0], -1, 4), it, random_layout(1));
      for (int segments : {0, 4}) expect_jit_matches(jsegment, segment_fn, "segment_sum", what, x, ids, segments);
      const auto segment_out = [&](ts::Array d, ts::Array i) {
        return ts::segment_sum(d, i, 3, {.out_sharding = out.spec()});
      };
      auto jsegment_out = ts::jit(segment_out);
      expect_jit_matches(jsegment_out, segment_out, "segment_sum", what, x, ids);
      ++cases;
    });
  }
  EXPECT_GT(cases, 100);
}

// Index values are read on the devices when the program runs: a bad index
// raises the same error under jit, and the same jitted function then runs
// on good indices.
TEST(IndexingJit, IndexErrorsAtRunTime) {
  auto mesh = mesh1d(4);
  ts::NamedSharding s(mesh, P("x"));
  auto x = ts::device_put(ts::testing::iota_data<float>(10), {10}, s);
  auto f = ts::jit([](ts::Array xv, ts::Array i) { return ts::take(xv, i, 0) * 2.0f; });
  expect_error<ts::ShapeError>([&] { f(x, put_ints({0, 1, 2, 3, 4, 5, 6, 10}, ts::i32, s)); }, "[take]",
                               {"[take] index 10 is out of range for axis 0 of size 10"});
  const auto good = put_ints({9, 0, 1, 2, 3, 4, 5, 6}, ts::i32, s);
  expect_same(f(x, good), ts::take(x, good, 0) * 2.0f, "after error");
  EXPECT_EQ(f.cache_size(), 1);
}

// The transposes of scatter_add and segment_sum: a row whose index names no
// row (out of range after wrapping, for scatter_add; any negative or too
// large id, for segment_sum) was dropped, so its update's gradient is zero.
// Against the gradient written by hand: d sum(w * f(u)) / d u[i] = w[idx[i]]
// for kept rows, on 1-d and 2-d meshes.
TEST(ScatterTranspose, DroppedRowsHaveZeroGradient) {
  const std::vector<std::int32_t> idx = {1, -1, 5, 0, -7, 2, 4};  // n = 5: -1 wraps to 4; 5 and -7 are dropped
  const std::int64_t n = 5, k = static_cast<std::int64_t>(idx.size());
  const std::vector<double> w = {0.5, -1.25, 2.0, 3.5, -0.75};
  for (const ts::Mesh& mesh : {ts::Mesh(ts::testing::first_devices(4), {4}, {"x"}),
                               ts::Mesh(ts::testing::first_devices(6), {2, 3}, {"x", "y"})}) {
    const auto ids = ts::device_put(idx, {k}, ts::NamedSharding(mesh, P("x")));
    const auto wts = ts::device_put(w, {n}, ts::NamedSharding(mesh, P()));
    std::vector<double> u0(static_cast<std::size_t>(k), 1.0);
    const auto u = ts::device_put(u0, {k}, ts::NamedSharding(mesh, P("x")));
    const auto base = ts::zeros({n}, ts::DType::f64, ts::NamedSharding(mesh, P()));

    const auto gs =
        ts::grad([&](ts::Array upd) { return ts::sum(wts * ts::scatter_add(base, ids, upd)); })(u).to_vector<double>();
    const auto gg =
        ts::grad([&](ts::Array upd) { return ts::sum(wts * ts::segment_sum(upd, ids, n)); })(u).to_vector<double>();
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t r = idx[static_cast<std::size_t>(i)];
      const std::int64_t wrapped = r < 0 ? r + n : r;
      const double want_scatter = wrapped >= 0 && wrapped < n ? w[static_cast<std::size_t>(wrapped)] : 0.0;
      const double want_segment = r >= 0 && r < n ? w[static_cast<std::size_t>(r)] : 0.0;
      EXPECT_EQ(gs[static_cast<std::size_t>(i)], want_scatter) << mesh.str() << " scatter_add row " << i;
      EXPECT_EQ(gg[static_cast<std::size_t>(i)], want_segment) << mesh.str() << " segment_sum row " << i;
    }
  }
}
