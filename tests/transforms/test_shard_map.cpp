// shard_map semantics, each against a plain host reference: JAX's tutorial
// examples with their numbers, inputs resharded to in_specs (from any layout,
// from another mesh), outputs assembled per out_specs, uneven layouts,
// several inputs and outputs, captured constants, varying-axes tracking
// (typeof "{V:x}", check_vma), the errors, ops inside bodies, and concurrent
// callers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/array_impl.hpp"
#include "test_util.hpp"

namespace ts = tessera;

namespace sm_tree {
struct Body {
  ts::Array pos, vel;
  float dt = 1.0f;
};
}  // namespace sm_tree

TESSERA_TREE(sm_tree::Body, pos, vel, dt)

using ts::testing::expect_error;
using ts::testing::expect_same;
using ts::testing::for_each_layout;
using ts::testing::iota_data;
using ts::testing::numel;
using ts::testing::sub_block;
using ts::testing::test_meshes;

namespace {

class ShardMap : public ::testing::Test {
 protected:
  void SetUp() override { ts::config::set_collective_timeout(20.0); }
};

using ts::testing::within;
std::vector<ts::Device> first(int n) { return ts::testing::first_devices(n); }

// This device's position in `m` (row-major coordinates), inside a body.
int my_pos(const ts::Mesh& m) {
  int p = 0;
  for (int i = 0; i < m.ndim(); ++i) p = p * m.shape()[i] + ts::axis_index(m.axis_names()[i]).item<std::int32_t>();
  return p;
}

int me(const char* axis) { return ts::axis_index(axis).item<std::int32_t>(); }

std::vector<float> arange_f(int n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

// Row-major host matmul.
std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int n, int k, int m) {
  std::vector<float> c(static_cast<size_t>(n) * m, 0.0f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      double s = 0;
      for (int l = 0; l < k; ++l) s += static_cast<double>(a[i * k + l]) * b[l * m + j];
      c[i * m + j] = static_cast<float>(s);
    }
  return c;
}

}  // namespace

// =====================================================================
// JAX documentation: "Manual parallelism with shard_map"
// (docs.jax.dev/en/latest/notebooks/shard_map.html), reproduced with its
// meshes, specs and inputs.
// =====================================================================

// "So, let's see a shard_map!": matmul_basic on mesh (4, 2) ('x', 'y'),
// a = arange(8 * 16.).reshape(8, 16) at P('x', 'y'), b = arange(16 * 4.)
// .reshape(16, 4) at P('y', None); local dot, psum over 'y', out_specs
// P('x', None); the blocks are a f32[2,8], b f32[8,4], c f32[2,4]; c equals
// jnp.dot(a, b) sharded along its rows.
TEST_F(ShardMap, JaxDocMatmulBasic) {
  const ts::Mesh mesh(ts::devices(), {4, 2}, {"x", "y"});
  const auto ha = arange_f(8 * 16), hb = arange_f(16 * 4);
  auto a = ts::device_put(ha, {8, 16}, ts::NamedSharding(mesh, ts::P("x", "y")));
  auto b = ts::device_put(hb, {16, 4}, ts::NamedSharding(mesh, ts::P("y", ts::none)));
  std::vector<std::string> types(8);
  auto matmul_basic = ts::shard_map(
      [&](ts::Array a_block, ts::Array b_block) {
        ts::Array c_partialsum = ts::matmul(a_block, b_block);
        ts::Array c_block = ts::psum(c_partialsum, "y");
        types[my_pos(mesh)] = ts::typeof(a_block) + " " + ts::typeof(b_block) + " " + ts::typeof(c_partialsum) + " " +
                              ts::typeof(c_block);
        return c_block;
      },
      mesh, {ts::P("x", "y"), ts::P("y", ts::none)}, ts::P("x", ts::none));
  ts::Array c = matmul_basic(a, b);
  EXPECT_EQ(c.shape(), (ts::Shape{8, 4}));
  EXPECT_EQ(c.sharding(), ts::NamedSharding(mesh, ts::P("x", ts::none)));
  EXPECT_EQ(c.to_vector<float>(), host_matmul(ha, hb, 8, 16, 4));
  for (const auto& t : types) EXPECT_EQ(t, "f32[2,8]{V:x,y} f32[8,4]{V:y} f32[2,4]{V:x,y} f32[2,4]{V:x}");
}

// "Rank-reducing vs rank-preserving maps": check_shmap(lambda x: x.T @ x,
// jnp.arange(32).reshape(8, 4)) on a 4-device mesh ('i',): shard_map equals
// concatenating f over the 4 row blocks -> shape (16, 4).
TEST_F(ShardMap, JaxDocRankPreservingMap) {
  const ts::Mesh mesh(first(4), {4}, {"i"});
  const auto hx = arange_f(32);
  auto y = ts::device_put(hx, {8, 4}, ts::NamedSharding(mesh, ts::P()));
  auto f = [](const ts::Array& x) { return ts::matmul(ts::transpose(x), x); };
  auto ans = ts::shard_map(f, mesh, {ts::P("i")}, ts::P("i"))(y);
  EXPECT_EQ(ans.shape(), (ts::Shape{16, 4}));
  std::vector<float> expected;
  for (int blk = 0; blk < 4; ++blk) {
    std::vector<float> yb(hx.begin() + blk * 8, hx.begin() + (blk + 1) * 8), ybt(8);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) ybt[j * 2 + i] = yb[i * 4 + j];
    const auto r = host_matmul(ybt, yb, 4, 2, 4);
    expected.insert(expected.end(), r.begin(), r.end());
  }
  EXPECT_EQ(ans.to_vector<float>(), expected);
}

// "Controlling how each input is split": mesh (4, 2) ('i', 'j'),
// f1 with in_specs P('i', None) sees blocks of shape (3, 12) of
// x1 = arange(12 * 12).reshape(12, 12); out_specs P('i', 'j') concatenates
// the 'j' copies too, so y is (12, 24) = jnp.tile(x1, (1, 2)). f2 with
// in_specs P('i', 'j') sees (3, 6) blocks and gives x back.
TEST_F(ShardMap, JaxDocInSpecsSplitAndOutSpecsConcatenate) {
  const ts::Mesh mesh(ts::devices(), {4, 2}, {"i", "j"});
  std::vector<std::int32_t> hx(144);
  std::iota(hx.begin(), hx.end(), 0);
  auto x1 = ts::device_put(hx, {12, 12}, ts::NamedSharding(mesh, ts::P("i", ts::none)));
  std::vector<ts::Shape> shapes(8);
  auto f1 = ts::shard_map(
      [&](ts::Array x_block) {
        shapes[my_pos(mesh)] = x_block.shape();
        return x_block;
      },
      mesh, {ts::P("i", ts::none)}, ts::P("i", "j"));
  auto y = f1(x1);
  for (const auto& s : shapes) EXPECT_EQ(s, (ts::Shape{3, 12}));
  EXPECT_EQ(y.shape(), (ts::Shape{12, 24}));
  std::vector<std::int32_t> tiled;
  for (int r = 0; r < 12; ++r)
    for (int c = 0; c < 24; ++c) tiled.push_back(hx[r * 12 + c % 12]);
  EXPECT_EQ(y.to_vector<std::int32_t>(), tiled);
  auto f2 = ts::shard_map(
      [&](ts::Array x_block) {
        shapes[my_pos(mesh)] = x_block.shape();
        return x_block;
      },
      mesh, {ts::P("i", "j")}, ts::P("i", "j"));
  EXPECT_EQ(f2(x1).to_vector<std::int32_t>(), hx);
  for (const auto& s : shapes) EXPECT_EQ(s, (ts::Shape{3, 6}));
}

// "Controlling how each output is assembled": a body closing over
// x = jnp.array([[3.]]) with no inputs; out_specs P('i', 'j') gives
// jnp.tile(x, (4, 2)), P('i', None) jnp.tile(x, (4, 1)), P(None, None) x.
TEST_F(ShardMap, JaxDocCapturedConstantUntiledByOutSpecs) {
  const ts::Mesh mesh(ts::devices(), {4, 2}, {"i", "j"});
  const ts::Array x = ts::device_put(std::vector<float>{3.0f}, {1, 1}, ts::NamedSharding(mesh, ts::P()));
  auto body = [x] { return x; };
  auto z1 = ts::shard_map(body, mesh, {}, ts::P("i", "j"))();
  EXPECT_EQ(z1.shape(), (ts::Shape{4, 2}));
  EXPECT_EQ(z1.to_vector<float>(), std::vector<float>(8, 3.0f));
  auto z2 = ts::shard_map(body, mesh, {}, ts::P("i", ts::none))();
  EXPECT_EQ(z2.shape(), (ts::Shape{4, 1}));
  EXPECT_EQ(z2.to_vector<float>(), std::vector<float>(4, 3.0f));
  auto z3 = ts::shard_map(body, mesh, {}, ts::P(ts::none, ts::none))();
  EXPECT_EQ(z3.shape(), (ts::Shape{1, 1}));
  EXPECT_EQ(z3.to_vector<float>(), std::vector<float>{3.0f});
}

// Same section, f3, f4, f5 on x = arange(12 * 12).reshape(12, 12) at
// P('i', 'j'): psum over 'j' with out_specs P('i', None) -> shape (12, 6);
// psum over 'i' with P(None, 'j') -> (3, 12); psum over ('i', 'j') with
// P(None, None) -> (3, 6).
TEST_F(ShardMap, JaxDocPsumThenUntileAlongReducedAxes) {
  const ts::Mesh mesh(ts::devices(), {4, 2}, {"i", "j"});
  std::vector<std::int32_t> hx(144);
  std::iota(hx.begin(), hx.end(), 0);
  auto x = ts::device_put(hx, {12, 12}, ts::NamedSharding(mesh, ts::P("i", "j")));
  auto at = [&](int r, int c) { return hx[r * 12 + c]; };
  auto y3 =
      ts::shard_map([](ts::Array b) { return ts::psum(b, "j"); }, mesh, {ts::P("i", "j")}, ts::P("i", ts::none))(x);
  EXPECT_EQ(y3.shape(), (ts::Shape{12, 6}));
  std::vector<std::int32_t> r3;
  for (int r = 0; r < 12; ++r)
    for (int c = 0; c < 6; ++c) r3.push_back(at(r, c) + at(r, c + 6));
  EXPECT_EQ(y3.to_vector<std::int32_t>(), r3);
  auto y4 =
      ts::shard_map([](ts::Array b) { return ts::psum(b, "i"); }, mesh, {ts::P("i", "j")}, ts::P(ts::none, "j"))(x);
  EXPECT_EQ(y4.shape(), (ts::Shape{3, 12}));
  std::vector<std::int32_t> r4;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 12; ++c) r4.push_back(at(r, c) + at(r + 3, c) + at(r + 6, c) + at(r + 9, c));
  EXPECT_EQ(y4.to_vector<std::int32_t>(), r4);
  auto y5 = ts::shard_map(
      [](ts::Array b) {
        return ts::psum(b, {"i", "j"});
      },
      mesh, {ts::P("i", "j")}, ts::P(ts::none, ts::none))(x);
  EXPECT_EQ(y5.shape(), (ts::Shape{3, 6}));
  std::vector<std::int32_t> r5;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 6; ++c) {
      int s = 0;
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 2; ++l) s += at(r + 3 * k, c + 6 * l);
      r5.push_back(s);
    }
  EXPECT_EQ(y5.to_vector<std::int32_t>(), r5);
}

// "Tracking how values vary over manual mesh axes": on mesh (2,) ('i',),
// x = arange(6.) at P('i') has type f32[3]{i} inside (Tessera writes
// {V:i}), psum(x, 'i') has f32[3]; on mesh (4, 2) ('i', 'j') a P('i', 'j')
// block of arange(8 * 4.).reshape(8, 4) is f32[2,2]{i,j} and psum over 'j'
// leaves {i}; an input at P() is f32[6]; x * y of P('i') and P() varies over 'i'.
TEST_F(ShardMap, JaxDocVaryingManualAxesInTypeof) {
  const ts::Mesh m1(first(2), {2}, {"i"});
  std::vector<std::string> seen(2);
  auto x = ts::device_put(std::vector<double>{0, 1, 2, 3, 4, 5}, {6}, ts::NamedSharding(m1, ts::P("i")));
  auto f = ts::shard_map(
      [&](ts::Array xb) {
        ts::Array y = ts::psum(xb, "i");
        seen[me("i")] = ts::typeof(xb) + " " + ts::typeof(y);
        return y;
      },
      m1, {ts::P("i")}, ts::P());
  EXPECT_EQ(f(x).to_vector<double>(), (std::vector<double>{3, 5, 7}));
  for (const auto& s : seen) EXPECT_EQ(s, "f64[3]{V:i} f64[3]");

  auto g = ts::shard_map(
      [&](ts::Array xb) {
        seen[me("i")] = ts::typeof(xb);
        return ts::multiply(xb, 2.0);
      },
      m1, {ts::P()}, ts::P());
  EXPECT_EQ(g(x).to_vector<double>(), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  for (const auto& s : seen) EXPECT_EQ(s, "f64[6]");

  const ts::Mesh m2(ts::devices(), {4, 2}, {"i", "j"});
  std::vector<std::string> seen2(8);
  auto x2 = ts::device_put(arange_f(32), {8, 4}, ts::NamedSharding(m2, ts::P("i", "j")));
  auto h = ts::shard_map(
      [&](ts::Array xb) {
        ts::Array y = ts::psum(xb, "j");
        seen2[my_pos(m2)] = ts::typeof(xb) + " " + ts::typeof(y);
        return y;
      },
      m2, {ts::P("i", "j")}, ts::P("i"));
  auto y2 = h(x2);
  EXPECT_EQ(y2.shape(), (ts::Shape{8, 2}));
  for (const auto& s : seen2) EXPECT_EQ(s, "f32[2,2]{V:i,j} f32[2,2]{V:i}");

  // Binary ops take the union (JAX inserts pvary; here it is implicit).
  auto yv = ts::device_put(std::vector<double>{0, 1, 2}, {3}, ts::NamedSharding(m1, ts::P()));
  auto mul = ts::shard_map(
      [&](ts::Array a, ts::Array b) {
        ts::Array r = a * b;
        seen[me("i")] = ts::typeof(r);
        return r;
      },
      m1, {ts::P("i"), ts::P()}, ts::P("i"));
  EXPECT_EQ(mul(x, yv).to_vector<double>(), (std::vector<double>{0, 1, 4, 0, 4, 10}));
  for (const auto& s : seen) EXPECT_EQ(s, "f64[3]{V:i}");
}

// Same section: lambda x: x with in_specs P('i') and out_specs P() claims a
// varying value is replicated; check_vma (default) raises; with
// check_vma=false the call goes through and takes one replica (device 0's).
TEST_F(ShardMap, JaxDocOutSpecsBugCaughtByCheckVma) {
  const ts::Mesh m1(first(2), {2}, {"i"});
  auto x = ts::device_put(std::vector<double>{0, 1, 2, 3, 4, 5}, {6}, ts::NamedSharding(m1, ts::P("i")));
  auto identity = [](ts::Array v) { return v; };
  expect_error<ts::ShardingError>([&] { ts::shard_map(identity, m1, {ts::P("i")}, ts::P())(x); }, "[shard_map]",
                                  {"'i'", "out_specs", "varies", "check_vma"});
  auto y = ts::shard_map(identity, m1, {ts::P("i")}, ts::P(), {.check_vma = false})(x);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{0, 1, 2}));
}

// =====================================================================
// Varying manual axes (check_vma).
// =====================================================================

// Inputs vary over the axes their spec names; ops take the union of their
// operands'; captured replicated constants vary over nothing; collectives
// update the set: psum/pmean/pmax/pmin and all_gather remove their axes,
// ppermute keeps the input's, psum_scatter, all_to_all and axis_index vary.
TEST_F(ShardMap, VaryingAxesThroughOpsAndCollectives) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  auto a = ts::device_put(arange_f(32), {8, 4}, ts::NamedSharding(mesh, ts::P("x")));            // {x}
  auto b = ts::device_put(arange_f(32), {8, 4}, ts::NamedSharding(mesh, ts::P(ts::none, "y")));  // {y}
  auto c = ts::device_put(arange_f(4), {4}, ts::NamedSharding(mesh, ts::P()));                   // captured
  std::vector<std::vector<std::string>> types(8);
  auto f = ts::shard_map(
      [&](ts::Array xa, ts::Array xb) {
        std::vector<std::string> t;
        t.push_back(ts::typeof(xa));
        t.push_back(ts::typeof(xb));
        t.push_back(ts::typeof(c + 1.0f));                                   // captured: {}
        t.push_back(ts::typeof(xa + c));                                     // {x}
        t.push_back(ts::typeof(ts::sum(xa) + ts::sum(xb)));                  // {x,y}
        t.push_back(ts::typeof(ts::matmul(ts::transpose(xa), xa)));          // {x}
        t.push_back(ts::typeof(ts::psum(xa, "x")));                          // {}
        t.push_back(ts::typeof(ts::psum(xa, "y")));                          // {x}: y was not there
        t.push_back(ts::typeof(ts::pmean(xb, {"x", "y"})));                  // {}
        t.push_back(ts::typeof(ts::pmax(ts::sum(xa) * ts::sum(xb), "y")));   // {x}
        t.push_back(ts::typeof(ts::all_gather(xa, "x", 0, true)));           // {}
        t.push_back(ts::typeof(ts::ppermute(xa, "x", {{0, 1}, {1, 0}})));    // {x}
        t.push_back(ts::typeof(ts::psum_scatter(c, "y", 0, true)));          // {y}
        t.push_back(ts::typeof(ts::all_to_all(xa, "y", 0, 0, true)));        // {x,y}
        t.push_back(ts::typeof(ts::axis_index("y")));                        // {y}
        t.push_back(ts::typeof(ts::reshape(ts::axis_index("x"), {1}) + c));  // {x}
        types[my_pos(mesh)] = t;
        return ts::psum(ts::sum(xa) + ts::sum(xb), {"x", "y"});
      },
      mesh, {ts::P("x"), ts::P(ts::none, "y")}, ts::P());
  auto r = f(a, b);
  EXPECT_EQ(r.shape(), ts::Shape{});
  EXPECT_EQ(r.item<float>(), 4 * 496.0f + 2 * 496.0f);  // each x block is on 4 devices, each y block on 2
  const std::vector<std::string> want = {"f32[4,4]{V:x}", "f32[8,1]{V:y}",   "f32[4]",     "f32[4,4]{V:x}",
                                         "f32[]{V:x,y}",  "f32[4,4]{V:x}",   "f32[4,4]",   "f32[4,4]{V:x}",
                                         "f32[8,1]",      "f32[]{V:x}",      "f32[8,4]",   "f32[4,4]{V:x}",
                                         "f32[1]{V:y}",   "f32[4,4]{V:x,y}", "i32[]{V:y}", "f32[4]{V:x}"};
  for (int p = 0; p < 8; ++p) EXPECT_EQ(types[p], want) << "position " << p;
}

// ppermute over an axis the value does not vary over can still make it vary
// (devices that receive nothing get zeros), so the result must vary over
// that axis, as in JAX (ppermute is Varying -> Varying; an invariant operand
// is pvary'd first). Otherwise check_vma accepts an out_specs that silently
// drops data.
TEST_F(ShardMap, PpermuteOverAnInvariantAxisVaries) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  auto a = ts::device_put(arange_f(8), {8}, ts::NamedSharding(mesh, ts::P("x")));
  std::vector<std::string> types(8);
  auto f = ts::shard_map(
      [&](ts::Array xa) {
        ts::Array r = ts::ppermute(xa, "y", {{0, 1}});  // only y=1 receives; the rest get zeros
        types[my_pos(mesh)] = ts::typeof(r);
        return r;
      },
      mesh, {ts::P("x")}, ts::P("x"));
  expect_error<ts::ShardingError>([&] { f(a); }, "[shard_map]", {"'y'"});
  for (const auto& t : types) EXPECT_EQ(t, "f32[4]{V:x,y}");
}

// out_specs that claim replication over a varying axis raise ShardingError
// naming the axis and the output; naming the axis, reducing over it, or
// check_vma=false are accepted.
TEST_F(ShardMap, CheckVmaErrorsNameTheAxis) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  auto a = ts::device_put(arange_f(32), {8, 4}, ts::NamedSharding(mesh, ts::P("x", "y")));
  auto psum_x = [](ts::Array v) { return ts::psum(v, "x"); };
  expect_error<ts::ShardingError>([&] { ts::shard_map(psum_x, mesh, {ts::P("x", "y")}, ts::P())(a); }, "[shard_map]",
                                  {"'y'", "output 0", "PartitionSpec()", "{V:y}"});
  auto ok = ts::shard_map(psum_x, mesh, {ts::P("x", "y")}, ts::P(ts::none, "y"))(a);
  EXPECT_EQ(ok.shape(), (ts::Shape{4, 4}));
  // Second output of two.
  auto two = [](ts::Array v) { return std::make_tuple(ts::psum(v, {"x", "y"}), ts::psum(v, "y")); };
  expect_error<ts::ShardingError>(
      [&] {
        ts::shard_map(two, mesh, {ts::P("x", "y")}, {ts::P(), ts::P()})(a);
      },
      "[shard_map]", {"output 1", "'x'"});
  auto [s, t] = ts::shard_map(two, mesh, {ts::P("x", "y")}, {ts::P(), ts::P("x")})(a);
  EXPECT_EQ(s.shape(), (ts::Shape{4, 1}));
  EXPECT_EQ(t.shape(), (ts::Shape{8, 1}));
  // check_vma=false accepts it and takes the replica at coordinate 0 of 'y'.
  auto unchecked = ts::shard_map(psum_x, mesh, {ts::P("x", "y")}, ts::P(), {.check_vma = false})(a);
  const auto h = arange_f(32);
  std::vector<float> want;
  for (int r = 0; r < 4; ++r) want.push_back(h[r * 4] + h[(r + 4) * 4]);
  EXPECT_EQ(unchecked.to_vector<float>(), want);
}

// =====================================================================
// Inputs and outputs.
// =====================================================================

// Inputs in any layout (on any of the test meshes, hence also on other
// meshes than the shard_map's) are resharded to in_specs: every device sees
// exactly its block under the layout rule, varying over the spec's axes;
// out_specs equal to in_specs give the input back, laid out per the spec.
TEST_F(ShardMap, InputsAreReshardedToInSpecsFromAnyLayoutOrMesh) {
  const ts::Shape shape = {10, 7};
  const auto host = iota_data<float>(numel(shape), 3);
  const std::vector<ts::Mesh> targets = {ts::Mesh(ts::devices(), {2, 4}, {"x", "y"}),
                                         test_meshes().back()};  // devices 7, 5, 3, 1 as (4, 1)
  const std::vector<ts::PartitionSpec> in_specs = {ts::P("x"), ts::P(ts::none, "y"), ts::P({"y", "x"}), ts::P("y", "x"),
                                                   ts::P()};
  int calls = 0;
  for_each_layout(2, [&](const ts::NamedSharding& src) {
    const ts::Array in = ts::device_put(host, shape, src);
    for (const auto& target : targets)
      for (const auto& spec : in_specs) {
        SCOPED_TRACE(src.str() + " -> " + target.str() + " " + spec.str());
        const ts::NamedSharding want(target, spec);
        std::vector<std::vector<float>> seen(target.size());
        std::vector<std::string> types(target.size());
        auto f = ts::shard_map(
            [&](ts::Array xl) {
              const int p = my_pos(target);
              seen[p] = xl.to_vector<float>();
              types[p] = ts::typeof(xl);
              return xl;
            },
            target, {spec}, spec);
        const ts::Array out = f(in);
        ++calls;
        for (int p = 0; p < target.size(); ++p) {
          const auto box = want.shard_index(shape, p);
          EXPECT_EQ(seen[p], sub_block(host, shape, box)) << "position " << p;
          std::vector<std::string> vma;
          for (int d = 0; d < 2; ++d)
            for (const auto& ax : spec[d].axes()) vma.push_back(ax);
          std::sort(vma.begin(), vma.end());
          std::string t = "f32[" + std::to_string(box[0].size()) + "," + std::to_string(box[1].size()) + "]";
          if (!vma.empty()) {
            t += "{V:" + vma[0];
            for (size_t i = 1; i < vma.size(); ++i) t += "," + vma[i];
            t += "}";
          }
          EXPECT_EQ(types[p], t);
        }
        EXPECT_EQ(out.sharding(), want);
        EXPECT_EQ(out.shape(), shape);
        EXPECT_EQ(out.to_vector<float>(), host);
        for (const auto& sh : out.addressable_shards())
          EXPECT_EQ(sh.data.to_vector<float>(), sub_block(host, shape, sh.index));
      }
  });
  EXPECT_GT(calls, 400);
}

// Outputs: dims named in out_specs are concatenated in the spec's axis order
// (major to minor); mesh axes it leaves out take the replica at coordinate 0.
TEST_F(ShardMap, OutputsAssembledPerOutSpecs) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  // Each device returns [10 * x + y] (check_vma off: the value varies).
  auto body = [](ts::Array) { return ts::expand_dims(ts::axis_index("x") * 10 + ts::axis_index("y"), 0); };
  auto dummy = ts::device_put(std::vector<float>{0}, {1}, ts::NamedSharding(mesh, ts::P()));
  auto out = [&](const ts::PartitionSpec& spec) {
    auto r = ts::shard_map(body, mesh, {ts::P()}, spec, {.check_vma = false})(dummy);
    EXPECT_EQ(r.sharding(), ts::NamedSharding(mesh, spec));
    return r.to_vector<std::int32_t>();
  };
  using V = std::vector<std::int32_t>;
  EXPECT_EQ(out(ts::P("x")), (V{0, 10}));
  EXPECT_EQ(out(ts::P("y")), (V{0, 1, 2, 3}));
  EXPECT_EQ(out(ts::P({"x", "y"})), (V{0, 1, 2, 3, 10, 11, 12, 13}));
  EXPECT_EQ(out(ts::P({"y", "x"})), (V{0, 10, 1, 11, 2, 12, 3, 13}));
  EXPECT_EQ(out(ts::P()), (V{0}));
  auto body2 = [](ts::Array) { return ts::reshape(ts::axis_index("x") * 10 + ts::axis_index("y"), ts::Shape{1, 1}); };
  auto out2 = [&](const ts::PartitionSpec& spec) {
    return ts::shard_map(body2, mesh, {ts::P()}, spec, {.check_vma = false})(dummy);
  };
  auto xy = out2(ts::P("x", "y"));
  EXPECT_EQ(xy.shape(), (ts::Shape{2, 4}));
  EXPECT_EQ(xy.to_vector<std::int32_t>(), (V{0, 1, 2, 3, 10, 11, 12, 13}));
  auto yx = out2(ts::P("y", "x"));
  EXPECT_EQ(yx.shape(), (ts::Shape{4, 2}));
  EXPECT_EQ(yx.to_vector<std::int32_t>(), (V{0, 10, 1, 11, 2, 12, 3, 13}));
  auto y_only = out2(ts::P(ts::none, "y"));
  EXPECT_EQ(y_only.shape(), (ts::Shape{1, 4}));
  EXPECT_EQ(y_only.to_vector<std::int32_t>(), (V{0, 1, 2, 3}));
  // On a mesh whose devices are not in id order.
  const ts::Mesh perm({ts::devices()[6], ts::devices()[1], ts::devices()[4]}, {3}, {"x"});
  auto dummy3 = ts::device_put(std::vector<float>{0}, {1}, ts::NamedSharding(perm, ts::P()));
  auto r3 = ts::shard_map([](ts::Array) { return ts::expand_dims(ts::axis_index("x"), 0); }, perm, {ts::P()},
                          ts::P("x"), {.check_vma = false})(dummy3);
  EXPECT_EQ(r3.to_vector<std::int32_t>(), (V{0, 1, 2}));
  EXPECT_EQ(r3.addressable_shards()[1].device, ts::devices()[1]);
}

// Assembly is zero-copy: an input already laid out per in_specs reaches the
// body as the device's own buffer, and the output's buffers are the ones the
// bodies returned (here the same memory end to end).
TEST_F(ShardMap, IdentityIsZeroCopy) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  auto a = ts::device_put(arange_f(40), {10, 4}, ts::NamedSharding(mesh, ts::P("x", "y")));
  auto out = ts::shard_map([](ts::Array v) { return v; }, mesh, {ts::P("x", "y")}, ts::P("x", "y"))(a);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(out.impl()->buffers[p].device_data(), a.impl()->buffers[p].device_data()) << "position " << p;
  EXPECT_EQ(out.to_vector<float>(), arange_f(40));
}

// An output that every device computed itself keeps each device's buffer
// on that device. (By design, replicated outputs share the replica's buffer,
// and psum/all_gather/ppermute results share one buffer among members.)
TEST_F(ShardMap, ShardedOutputBuffersLiveOnTheirDevices) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  auto a = ts::device_put(arange_f(32), {8, 4}, ts::NamedSharding(mesh, ts::P("x", "y")));
  auto out = ts::shard_map([](ts::Array v) { return v * 2.0f; }, mesh, {ts::P("x", "y")}, ts::P("x", "y"))(a);
  for (int p = 0; p < mesh.size(); ++p) EXPECT_EQ(out.impl()->buffers[p].device_id(), mesh.devices()[p].id());
}

// Uneven layouts: 10 rows over 4 devices are blocks of 3, 3, 2, 2; 3 rows over
// 8 devices leave five blocks empty; the outputs are reassembled.
TEST_F(ShardMap, UnevenLayoutsInAndOut) {
  for (const auto& rn : std::vector<std::pair<int, int>>{{10, 4}, {3, 8}, {5, 3}, {0, 2}}) {
    const int rows = rn.first, n = rn.second;
    SCOPED_TRACE(std::to_string(rows) + " rows over " + std::to_string(n));
    const ts::Mesh mesh(first(n), {n}, {"x"});
    const auto host = iota_data<double>(rows * 2, 1);
    auto a = ts::device_put(host, {rows, 2}, ts::NamedSharding(mesh, ts::P()));  // resharded by the call
    std::vector<std::int64_t> sizes(n, -1);
    auto f = ts::shard_map(
        [&](ts::Array xl) {
          sizes[me("x")] = xl.shape()[0];
          return std::make_tuple(xl * 2.0 + 1.0, ts::psum(ts::sum(xl, {0}), "x"), ts::all_gather(xl, "x", 0, true));
        },
        mesh, {ts::P("x")}, {ts::P("x"), ts::P(), ts::P()});
    auto [y, total, full] = f(a);
    for (int p = 0; p < n; ++p) EXPECT_EQ(sizes[p], ts::block_size(rows, n, p));
    std::vector<double> want(host.size()), colsum(2, 0.0);
    for (size_t i = 0; i < host.size(); ++i) {
      want[i] = host[i] * 2 + 1;
      colsum[i % 2] += host[i];
    }
    EXPECT_EQ(y.shape(), (ts::Shape{rows, 2}));
    EXPECT_EQ(y.to_vector<double>(), want);
    EXPECT_EQ(total.to_vector<double>(), colsum);
    EXPECT_EQ(full.to_vector<double>(), host);
  }
}

// Output local sizes must form the balanced layout of their total, be equal
// along unsharded dims, and agree in rank and dtype: ShapeError otherwise.
TEST_F(ShardMap, OutputsThatDoNotFormALayoutAreShapeErrors) {
  const ts::Mesh mesh(first(4), {4}, {"x"});
  auto a = ts::device_put(arange_f(16), {8, 2}, ts::NamedSharding(mesh, ts::P("x")));
  // Device 3 returns 3 rows: sizes 2, 2, 2, 3 are not the balanced layout of 9.
  auto grow_last = [](ts::Array xl) { return me("x") == 3 ? ts::concatenate({xl, ts::slice(xl, {{0, 1}})}, 0) : xl; };
  expect_error<ts::ShapeError>([&] { ts::shard_map(grow_last, mesh, {ts::P("x")}, ts::P("x"))(a); }, "[shard_map]",
                               {"[2, 2, 2, 3]", "balanced", "9"});
  // Device 0 returning 3 rows is the balanced layout of 9: accepted.
  auto grow_first = [](ts::Array xl) { return me("x") == 0 ? ts::concatenate({xl, ts::slice(xl, {{0, 1}})}, 0) : xl; };
  auto ok = ts::shard_map(grow_first, mesh, {ts::P("x")}, ts::P("x"))(a);
  EXPECT_EQ(ok.shape(), (ts::Shape{9, 2}));
  const auto h = arange_f(16);
  std::vector<float> want(h.begin(), h.begin() + 4);
  want.insert(want.end(), h.begin(), h.begin() + 2);
  want.insert(want.end(), h.begin() + 4, h.end());
  EXPECT_EQ(ok.to_vector<float>(), want);
  // Unequal sizes along a replicated dim.
  auto wide = [](ts::Array xl) { return me("x") == 1 ? ts::concatenate({xl, xl}, 1) : xl; };
  expect_error<ts::ShapeError>([&] { ts::shard_map(wide, mesh, {ts::P("x")}, ts::P("x"))(a); }, "[shard_map]",
                               {"dim 1"});
  // Rank or dtype differing between devices.
  auto rank = [](ts::Array xl) { return me("x") == 2 ? ts::sum(xl, {0}) : xl; };
  expect_error<ts::ShapeError>([&] { ts::shard_map(rank, mesh, {ts::P("x")}, ts::P("x"))(a); }, "[shard_map]",
                               {"differs between devices"});
  auto dtype = [](ts::Array xl) { return me("x") == 2 ? ts::astype(xl, ts::f64) : xl; };
  expect_error<ts::ShapeError>([&] { ts::shard_map(dtype, mesh, {ts::P("x")}, ts::P("x"))(a); }, "[shard_map]",
                               {"differs between devices"});
  // Devices holding the same block (same x, different y) disagree in size.
  const ts::Mesh m2(ts::devices(), {2, 4}, {"x", "y"});
  auto b = ts::device_put(arange_f(16), {8, 2}, ts::NamedSharding(m2, ts::P("x")));
  auto y_dep = [](ts::Array xl) { return me("y") == 2 ? ts::slice(xl, {{0, 1}}) : xl; };
  expect_error<ts::ShapeError>([&] { ts::shard_map(y_dep, m2, {ts::P("x")}, ts::P("x"), {.check_vma = false})(b); },
                               "[shard_map]", {"same block"});
}

// Several inputs and outputs: std::tuple and std::vector returns, inputs of
// different dtypes and specs, and the error when the body returns a
// different number of outputs than there are out_specs.
TEST_F(ShardMap, SeveralInputsAndOutputs) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  const auto hx = iota_data<float>(8 * 6, 1);
  const auto hw = iota_data<double>(6 * 4, 2);
  std::vector<std::int32_t> hi(8);
  std::iota(hi.begin(), hi.end(), 0);
  auto x = ts::device_put(hx, {8, 6}, ts::NamedSharding(mesh, ts::P("x")));
  auto w = ts::device_put(hw, {6, 4}, ts::NamedSharding(mesh, ts::P(ts::none, "y")));
  auto ids = ts::device_put(hi, {8}, ts::NamedSharding(mesh, ts::P({"x", "y"})));
  // Tuple of three outputs with three specs.
  auto f = ts::shard_map(
      [](ts::Array xl, ts::Array wl, ts::Array il) {
        return std::make_tuple(ts::matmul(ts::astype(xl, ts::f64), wl), ts::psum(il, {"x", "y"}), il * 2);
      },
      mesh, {ts::P("x"), ts::P(ts::none, "y"), ts::P({"x", "y"})}, {ts::P("x", "y"), ts::P(), ts::P({"x", "y"})});
  auto [xw, isum, i2] = f(x, w, ids);
  std::vector<double> ref(8 * 4, 0.0);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 6; ++k) ref[i * 4 + j] += static_cast<double>(hx[i * 6 + k]) * hw[k * 4 + j];
  const auto got = xw.to_vector<double>();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-9 * (1 + std::abs(ref[i])));
  EXPECT_EQ(xw.dtype(), ts::f64);
  EXPECT_EQ(isum.to_vector<std::int32_t>(), (std::vector<std::int32_t>{28}));
  EXPECT_EQ(i2.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 2, 4, 6, 8, 10, 12, 14}));
  // A std::vector of outputs, as many as out_specs.
  auto g = ts::shard_map(
      [](ts::Array xl) {
        return std::vector<ts::Array>{xl, ts::psum(xl, "x"), ts::all_gather(xl, "x", 0, true)};
      },
      mesh, {ts::P("x")}, std::vector<ts::PartitionSpec>{ts::P("x"), ts::P(), ts::P()});
  std::vector<ts::Array> outs = g(x);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].to_vector<float>(), hx);
  EXPECT_EQ(outs[1].shape(), (ts::Shape{4, 6}));
  EXPECT_EQ(outs[2].to_vector<float>(), hx);
  // One out spec stands for every output (JAX's prefix rule).
  auto [o1, o2] = ts::shard_map([](ts::Array xl) { return std::make_tuple(xl, xl * 2.0f); }, mesh, {ts::P("x")},
                                ts::P("x"))(x);
  EXPECT_EQ(o1.sharding(), x.sharding());
  EXPECT_EQ(o2.sharding(), x.sharding());
  EXPECT_EQ(o2.to_vector<float>(), (x * 2.0f).to_vector<float>());
  // Output count differs from out_specs.
  expect_error<ts::ShardingError>(
      [&] {
        ts::shard_map([](ts::Array xl) { return std::make_tuple(xl, xl, xl); }, mesh, {ts::P("x")},
                      std::vector<ts::PartitionSpec>{ts::P("x"), ts::P("x")})(x);
      },
      "[shard_map]", {"3 outputs", "2 out_specs", "one for all"});
  expect_error<ts::ShardingError>(
      [&] {
        ts::shard_map([](ts::Array xl) { return std::vector<ts::Array>{xl}; }, mesh, {ts::P("x")},
                      std::vector<ts::PartitionSpec>{ts::P("x"), ts::P("x")})(x);
      },
      "[shard_map]", {"1 outputs", "2 out_specs"});
}

// Pytree arguments and results: an argument's in_spec lays out all its
// arrays; results have one out spec per array in tree_leaves order.
TEST_F(ShardMap, PytreeArgumentsAndResults) {
  const ts::Mesh mesh(first(4), {4}, {"x"});
  const std::int64_t n = 10;  // uneven over 4
  auto x = ts::device_put(arange_f(n), {n}, ts::NamedSharding(mesh, ts::P("x")));
  auto y = ts::device_put(arange_f(n), {n}, ts::NamedSharding(mesh, ts::P("x"))) * 3.0f;
  auto w = ts::device_put(arange_f(2), {2}, ts::NamedSharding(mesh, ts::P()));
  sm_tree::Body b{x, y, 2.0f};
  std::map<std::string, ts::Array> params{{"w", w}};
  auto g = ts::shard_map(
      [](const sm_tree::Body& bl, const std::map<std::string, ts::Array>& p) {
        sm_tree::Body out = bl;
        out.pos = bl.pos + bl.vel * bl.dt * ts::sum(p.at("w"));
        return std::make_tuple(out, ts::psum(ts::sum(bl.vel), "x"));
      },
      mesh, {ts::P("x"), ts::P()}, std::vector<ts::PartitionSpec>{ts::P("x"), ts::P("x"), ts::P()});
  auto [moved, total] = g(b, params);
  expect_same(moved.pos, x + y * 2.0f * ts::sum(w), "pos");
  expect_same(moved.vel, y, "vel");
  EXPECT_EQ(moved.dt, 2.0f);
  EXPECT_EQ(total.to_vector<float>(), ts::sum(y).to_vector<float>());
  // Under jit too.
  auto jg = ts::jit([&](const sm_tree::Body& bb, const std::map<std::string, ts::Array>& p) { return g(bb, p); });
  auto [m2, t2] = jg(b, params);
  expect_same(m2.pos, moved.pos, "pos under jit");
  expect_same(t2, total, "psum under jit");
  // One out spec for every array of the result.
  sm_tree::Body same = ts::shard_map([](const sm_tree::Body& bl) { return bl; }, mesh, {ts::P("x")}, ts::P("x"))(b);
  expect_same(same.pos, b.pos, "one out spec for all: pos");
  expect_same(same.vel, b.vel, "one out spec for all: vel");
}

// Wrong numbers of arguments.
TEST_F(ShardMap, WrongNumberOfArgumentsIsAShardingError) {
  const ts::Mesh mesh(first(4), {4}, {"x"});
  auto x = ts::device_put(arange_f(8), {8}, ts::NamedSharding(mesh, ts::P("x")));
  expect_error<ts::ShardingError>(
      [&] {
        ts::shard_map([](ts::Array a) { return a; }, mesh, {ts::P("x"), ts::P()}, ts::P("x"))(x);
      },
      "[shard_map]", {"expected 2 arguments", "got 1"});
  expect_error<ts::ShardingError>(
      [&] { ts::shard_map([](ts::Array a, ts::Array) { return a; }, mesh, {ts::P("x")}, ts::P("x"))(x, x); },
      "[shard_map]", {"expected 1 arguments", "got 2"});
}

// Bodies may capture replicated arrays (read as this device's copy), also
// from another mesh over the same devices or over a superset of them;
// capturing a sharded array, or one not on the shard_map's devices, is a
// ShardingError naming its layout.
TEST_F(ShardMap, CapturedArrays) {
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  auto x = ts::device_put(arange_f(16), {8, 2}, ts::NamedSharding(mesh, ts::P("x", "y")));
  const ts::Array bias = ts::device_put(std::vector<float>{100, 200}, {2}, ts::NamedSharding(mesh, ts::P()));
  const ts::Mesh flat(ts::devices(), {8}, {"d"});
  const ts::Array scale = ts::device_put(std::vector<float>{2}, {}, ts::NamedSharding(flat, ts::P()));
  std::vector<std::string> types(8);
  auto f = ts::shard_map(
      [&](ts::Array xl) {
        ts::Array r = xl * scale + ts::slice(bias, {{0, 1}});
        types[my_pos(mesh)] = ts::typeof(bias) + " " + ts::typeof(scale);
        return r;
      },
      mesh, {ts::P("x", "y")}, ts::P("x", "y"));
  auto y = f(x);
  std::vector<float> want;
  for (float v : arange_f(16)) want.push_back(v * 2 + 100);
  EXPECT_EQ(y.to_vector<float>(), want);
  for (const auto& t : types) EXPECT_EQ(t, "f32[2] f32[]");
  // A replicated array on all 8 devices captured by a shard_map over 4 of them.
  const ts::Mesh four(first(4), {4}, {"x"});
  auto x4 = ts::device_put(arange_f(4), {4}, ts::NamedSharding(four, ts::P("x")));
  auto g = ts::shard_map([&](ts::Array xl) { return xl + scale; }, four, {ts::P("x")}, ts::P("x"));
  EXPECT_EQ(g(x4).to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  // A 1-device mesh: its replicated arrays are captures like any other.
  const ts::Mesh one(first(1), {1}, {"data"});
  const ts::Array c1 = ts::device_put(std::vector<float>{10}, {1}, ts::NamedSharding(one, ts::P()));
  auto x1 = ts::device_put(arange_f(3), {3}, ts::NamedSharding(one, ts::P("data")));
  auto h = ts::shard_map([&](ts::Array xl) { return xl - c1; }, one, {ts::P("data")}, ts::P("data"));
  EXPECT_EQ(h(x1).to_vector<float>(), (std::vector<float>{-10, -9, -8}));
  // Captures seen through transformations inside the body (jit, grad, vmap:
  // as a function's constant and as an argument), and a draw from a captured
  // key, which lies on the body's device as a draw from any key there does.
  auto nested = ts::shard_map(
      [&](ts::Array xl) {
        ts::Array j = ts::jit([&](ts::Array v, ts::Array s) { return v * s + ts::sum(bias); })(xl, scale);
        ts::Array g = ts::grad([&](ts::Array v) { return ts::sum(v * scale); })(xl);
        ts::Array v = ts::vmap([&](ts::Array e) { return e + ts::sum(bias); })(xl);
        return j + g + v;
      },
      four, {ts::P("x")}, ts::P("x"));
  EXPECT_EQ(nested(x4).to_vector<float>(), (std::vector<float>{602, 605, 608, 611}));
  const ts::Array key = ts::random::key_data(ts::Key{1u, 2u}, ts::NamedSharding(mesh, ts::P()));
  auto draw = ts::shard_map([&](ts::Array xl) { return xl * 0.0f + ts::random::normal(key, {1}); }, four,
                            {ts::P("x")}, ts::P("x"));
  const float drawn = ts::random::normal(key, {1}).to_vector<float>()[0];
  EXPECT_EQ(draw(x4).to_vector<float>(), std::vector<float>(4, drawn));
  // Sharded captures.
  auto sharded = ts::device_put(arange_f(8), {8}, ts::NamedSharding(mesh, ts::P("x")));
  expect_error<ts::ShardingError>(
      [&] {
        ts::shard_map([&](ts::Array xl) { return xl + ts::sum(sharded); }, mesh, {ts::P("x", "y")}, ts::P("x", "y"))(x);
      },
      "[shard_map]", {"not one of its inputs", "NamedSharding(", "in_spec"});
  // Replicated, but not on this shard_map's devices.
  const ts::Mesh others({ts::devices()[4], ts::devices()[5]}, {2}, {"z"});
  const ts::Array elsewhere = ts::device_put(std::vector<float>{1}, {1}, ts::NamedSharding(others, ts::P()));
  expect_error<ts::ShardingError>(
      [&] { ts::shard_map([&](ts::Array xl) { return xl + elsewhere; }, four, {ts::P("x")}, ts::P("x"))(x4); },
      "[shard_map]", {"not one of its inputs"});
}

// Nested shard_map, unknown axis names in specs, and an empty argument.
TEST_F(ShardMap, SpecAndNestingErrors) {
  const ts::Mesh mesh(first(4), {2, 2}, {"x", "y"});
  auto x = ts::device_put(arange_f(8), {4, 2}, ts::NamedSharding(mesh, ts::P("x")));
  auto inner = [&](ts::Array xl) { return ts::shard_map([](ts::Array v) { return v; }, mesh, {ts::P()}, ts::P())(xl); };
  within(10, [&] {
    expect_error<ts::ShardingError>([&] { ts::shard_map(inner, mesh, {ts::P("x")}, ts::P("x"))(x); }, "[shard_map]",
                                    {"inside a shard_map body"});
  });
  auto id = [](ts::Array v) { return v; };
  expect_error<ts::ShardingError>([&] { ts::shard_map(id, mesh, {ts::P("z")}, ts::P("x"))(x); }, "[shard_map]",
                                  {"'z'"});
  expect_error<ts::ShardingError>([&] { ts::shard_map(id, mesh, {ts::P("x")}, ts::P("x", "q"))(x); }, "[shard_map]",
                                  {"'q'"});
  expect_error<ts::ShardingError>([&] { ts::shard_map(id, mesh, {ts::P("x", "x")}, ts::P("x"))(x); }, "[shard_map]",
                                  {"'x'"});
  expect_error<ts::ShardingError>([&] { ts::shard_map(id, mesh, {ts::P("x", "y", ts::none)}, ts::P("x"))(x); },
                                  "[shard_map]");
  EXPECT_THROW(ts::shard_map(id, mesh, {ts::P()}, ts::P())(ts::Array()), ts::Error);
  // A body returning an empty (default-constructed) Array.
  EXPECT_THROW(ts::shard_map([](ts::Array) { return ts::Array(); }, mesh, {ts::P()}, ts::P())(x), ts::Error);
  // The runtime works afterwards.
  EXPECT_EQ(ts::shard_map(id, mesh, {ts::P("x")}, ts::P("x"))(x).to_vector<float>(), arange_f(8));
}

// =====================================================================
// Ops inside bodies run on local arrays: SPMD algorithms written with
// collectives equal the global reference.
// =====================================================================

// cumsum: local scan plus the sum of the earlier blocks' totals (all_gather
// of the totals), on even and uneven layouts.
TEST_F(ShardMap, CumsumFromLocalScansAndGatheredTotals) {
  for (const auto& rn : std::vector<std::pair<int, int>>{{16, 4}, {10, 4}, {13, 8}, {5, 3}}) {
    const int len = rn.first, n = rn.second;
    const ts::Mesh mesh(first(n), {n}, {"x"});
    const auto host = iota_data<double>(len, 5);
    auto a = ts::device_put(host, {len}, ts::NamedSharding(mesh, ts::P("x")));
    auto f = ts::shard_map(
        [](ts::Array xl) {
          const ts::Array totals = ts::all_gather(ts::sum(xl), "x");  // (n,)
          const int i = me("x");
          const ts::Array before = ts::sum(ts::slice(totals, {{0, i}}));
          return ts::cumsum(xl, 0) + before;
        },
        mesh, {ts::P("x")}, ts::P("x"));
    std::vector<double> want(host.size());
    std::partial_sum(host.begin(), host.end(), want.begin());
    EXPECT_EQ(f(a).to_vector<double>(), want) << len << " over " << n;
  }
}

// Finite differences with a halo exchange: each device fetches its right
// neighbour's first element with ppermute (the last device gets zeros and
// drops its last difference), as in examples/finite_difference.
TEST_F(ShardMap, DiffWithPpermuteHaloExchange) {
  const int n = 4, len = 16;
  const ts::Mesh mesh(first(n), {n}, {"x"});
  std::vector<double> host(len);
  for (int i = 0; i < len; ++i) host[i] = 0.25 * i * i;
  auto a = ts::device_put(host, {len}, ts::NamedSharding(mesh, ts::P("x")));
  auto f = ts::shard_map(
      [](ts::Array xl) {
        const int size = ts::axis_size("x"), i = me("x");
        std::vector<std::pair<int, int>> left;
        for (int k = 1; k < size; ++k) left.emplace_back(k, k - 1);
        const ts::Array halo = ts::ppermute(ts::slice(xl, {{0, 1}}), "x", left);
        ts::Array d = ts::diff(ts::concatenate({xl, halo}, 0));
        if (i == size - 1) d = ts::slice(d, {{0, xl.shape()[0] - 1}});
        return d;
      },
      mesh, {ts::P("x")}, ts::P("x"));
  std::vector<double> want;
  for (int i = 0; i + 1 < len; ++i) want.push_back(host[i + 1] - host[i]);
  auto d = f(a);
  EXPECT_EQ(d.shape(), (ts::Shape{len - 1}));
  EXPECT_EQ(d.to_vector<double>(), want);
  EXPECT_EQ(d.to_vector<double>(), ts::diff(a).to_vector<double>());
}

// =====================================================================
// Concurrency.
// =====================================================================

// Host threads calling shard_map functions at the same time on overlapping
// meshes (and global-view ops alongside) all complete with correct results,
// also when some of the calls fail.
TEST_F(ShardMap, ConcurrentCallersOnOverlappingMeshes) {
  const auto d = ts::devices();
  const ts::Mesh ma(std::vector<ts::Device>(d.begin(), d.begin() + 6), {2, 3}, {"x", "y"});
  const ts::Mesh mb({d[7], d[6], d[5], d[4], d[3], d[2]}, {6}, {"x"});
  const ts::Mesh mc(d, {8}, {"x"});
  std::vector<double> ha(60);
  std::iota(ha.begin(), ha.end(), 0.0);
  auto a = ts::device_put(ha, {60}, ts::NamedSharding(ma, ts::P({"x", "y"})));
  auto b = ts::device_put(ha, {12, 5}, ts::NamedSharding(mb, ts::P("x")));
  auto c = ts::device_put(ha, {60}, ts::NamedSharding(mc, ts::P("x")));
  auto fa = ts::shard_map(
      [](ts::Array xl) {
        return ts::psum(ts::sum(xl), {"x", "y"});
      },
      ma, {ts::P({"x", "y"})}, ts::P());
  auto fb = ts::shard_map(
      [](ts::Array xl) {
        const int s = ts::axis_size("x");
        std::vector<std::pair<int, int>> ring;
        for (int i = 0; i < s; ++i) ring.emplace_back(i, (i + 1) % s);
        return ts::all_gather(ts::ppermute(xl, "x", ring), "x", 0, true);
      },
      mb, {ts::P("x")}, ts::P());
  auto fail = ts::shard_map(
      [](ts::Array xl) {
        if (me("x") == 1) throw ts::ShapeError("[boom] expected nothing, got a failure");
        return ts::psum(xl, "x");
      },
      mb, {ts::P("x")}, ts::P(), {.check_vma = false});
  std::vector<double> rolled(ha.end() - 10, ha.end());
  rolled.insert(rolled.end(), ha.begin(), ha.end() - 10);
  std::atomic<int> wrong{0};
  const int iters = 40;
  within(120, [&] {
    std::thread t1([&] {
      for (int i = 0; i < iters; ++i)
        if (fa(a).to_vector<double>() != std::vector<double>{1770}) ++wrong;
    });
    std::thread t2([&] {
      for (int i = 0; i < iters; ++i) {
        if (fb(b).to_vector<double>() != rolled) ++wrong;
        if (i % 4 == 0) {
          try {
            fail(b);
            ++wrong;
          } catch (const ts::ShapeError&) {
          }
        }
      }
    });
    std::thread t3([&] {
      for (int i = 0; i < iters; ++i)
        if (ts::sum(c).item<double>() != 1770) ++wrong;
    });
    t1.join();
    t2.join();
    t3.join();
  });
  EXPECT_EQ(wrong.load(), 0);
}

// in_specs as trees: a PartitionSpec per field of a map argument.
TEST_F(ShardMap, SpecTrees) {
  const ts::Mesh mesh(first(4), {4}, {"x"});
  const std::int64_t n = 10;
  auto x = ts::device_put(arange_f(n), {n}, ts::NamedSharding(mesh, ts::P("x")));
  auto w = ts::device_put(arange_f(2), {2}, ts::NamedSharding(mesh, ts::P()));
  std::map<std::string, ts::Array> arg{{"data", x}, {"scale", w}};
  std::map<std::string, ts::PartitionSpec> specs{{"data", ts::P("x")}, {"scale", ts::P()}};
  auto f = ts::shard_map([](const std::map<std::string, ts::Array>& t) { return t.at("data") * ts::sum(t.at("scale")); },
                         mesh, {ts::SpecTree(specs)}, ts::P("x"));
  EXPECT_EQ(f(arg).to_vector<float>(), (x * 1.0f).to_vector<float>());
  std::map<std::string, ts::PartitionSpec> wrong{{"data", ts::P("x")}};
  auto g = ts::shard_map([](const std::map<std::string, ts::Array>& t) { return t.at("data"); }, mesh,
                         {ts::SpecTree(wrong)}, ts::P("x"));
  expect_error<ts::ShapeError>([&] { g(arg); }, "[shard_map]", {"tree structure mismatch", "in_specs entry 0", "scale"});
}

// A body runs on one device's worker: an array made over the whole mesh
// inside it (what global-view code does in a chunked vmap over a sharded
// batch) would wait for workers busy with their own bodies. It raises,
// naming the op, instead of hanging; the same program made outside works.
TEST(ShardMapBody, ArrayOverTheMeshMadeInsideRaises) {
  const ts::Mesh mesh(ts::testing::first_devices(4), {4}, {"x"});
  const auto x = ts::device_put(std::vector<float>(8, 1.0f), {8}, ts::NamedSharding(mesh, ts::P("x")));
  for (const ts::PartitionSpec& made : {ts::P(), ts::P("x")}) {
    auto body = [&](ts::Array xl) { return xl + ts::ones({2}, ts::DType::f32, ts::NamedSharding(mesh, made)); };
    expect_error<ts::ShardingError>([&] { ts::shard_map(body, mesh, {ts::P("x")}, ts::P("x"))(x).block_until_ready(); },
                                    "[ones]", {"inside a shard_map body", "over other devices", "pass it in"});
  }
  // Chunked vmap over a batch sharded over 'x' runs the function per device.
  const auto xs = ts::device_put(std::vector<float>(8 * 3, 1.0f), {8, 3}, ts::NamedSharding(mesh, ts::P("x")));
  auto f = [&](ts::Array r) { return r * ts::ones({3}, ts::DType::f32, ts::NamedSharding(mesh, ts::P())); };
  expect_error<ts::ShardingError>([&] { ts::vmap(f, {.chunk_size = 1})(xs).block_until_ready(); }, "[ones]",
                                  {"chunked vmap over a sharded batch"});
  EXPECT_EQ(ts::vmap(f)(xs).to_vector<float>(), std::vector<float>(24, 1.0f));
}
