// The redistribution planner (plan_reshard) and its executor (reshard):
// property tests of the plan's invariants and of the moved data over random
// shapes, meshes, spec pairs and dtypes, then named cases with the expected
// collective form, explain(), and errors.
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/array_impl.hpp"
#include "tessera/array.hpp"
#include "tessera/device.hpp"
#include "tessera/explain.hpp"
#include "tessera/mesh.hpp"
#include "tessera/sharding.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::random_spec;

namespace {

using Box = std::vector<ts::Slice>;

std::int64_t volume(const Box& b) {
  std::int64_t v = 1;
  for (const auto& s : b) v *= std::max<std::int64_t>(0, s.size());
  return v;
}

Box intersect(const Box& a, const Box& b) {
  Box r(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    r[i].start = std::max(a[i].start, b[i].start);
    r[i].stop = std::max(r[i].start, std::min(a[i].stop, b[i].stop));
  }
  return r;
}

bool contains(const Box& outer, const Box& inner) {
  for (size_t i = 0; i < outer.size(); ++i)
    if (inner[i].start < outer[i].start || inner[i].stop > outer[i].stop) return false;
  return true;
}

std::string box_str(const Box& b) {
  std::string s = "[";
  for (size_t i = 0; i < b.size(); ++i)
    s += (i ? ", " : "") + std::to_string(b[i].start) + ":" + std::to_string(b[i].stop);
  return s + "]";
}

std::int64_t numel(const ts::Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
}

// Host data for dtype T: distinct values (mod 2 for bool).
template <class T>
std::vector<T> make_host(std::int64_t n, int salt) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>)
      v[i] = ((i * 7 + salt) % 3) == 0;
    else
      v[i] = static_cast<T>(i * 3 + salt);
  }
  return v;
}

// Elements of `box` of the row-major array `host` with shape `shape`.
template <class T>
std::vector<T> sub_box(const std::vector<T>& host, const ts::Shape& shape, const Box& box) {
  const int rank = static_cast<int>(shape.size());
  std::vector<T> out;
  const std::int64_t n = volume(box);
  std::vector<std::int64_t> idx(rank);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rem = i, g = 0;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = rem % box[d].size();
      rem /= box[d].size();
    }
    for (int d = 0; d < rank; ++d) g = g * shape[d] + box[d].start + idx[d];
    out.push_back(host[g]);
  }
  return out;
}

// The plan invariants documented in reshard_plan.cpp and DESIGN.md.
void check_plan(const ts::ReshardPlan& plan, const ts::Shape& shape, ts::DType dtype, const ts::NamedSharding& src,
                const ts::NamedSharding& dst) {
  const ts::Mesh& mesh = src.mesh();
  const int n = mesh.size();
  const auto isz = static_cast<std::int64_t>(ts::itemsize(dtype));
  ASSERT_EQ(plan.shape, shape);
  ASSERT_EQ(plan.dtype, dtype);
  ASSERT_EQ(plan.source, src);
  ASSERT_EQ(plan.target, dst);
  ASSERT_EQ(static_cast<int>(plan.bytes_received.size()), n);
  ASSERT_EQ(static_cast<int>(plan.bytes_sent.size()), n);
  ASSERT_EQ(static_cast<int>(plan.bytes_local.size()), n);

  // Pieces are grouped by destination, in mesh order.
  for (size_t i = 1; i < plan.pieces.size(); ++i)
    ASSERT_LE(plan.pieces[i - 1].dst, plan.pieces[i].dst) << "pieces not grouped by destination";

  std::vector<std::int64_t> sent(n, 0);
  for (int t = 0; t < n; ++t) {
    SCOPED_TRACE("destination " + std::to_string(t));
    const Box tbox = dst.shard_index(shape, t);
    const Box sbox = src.shard_index(shape, t);
    std::vector<const ts::TransferPiece*> mine;
    for (const auto& p : plan.pieces)
      if (p.dst == t) mine.push_back(&p);
    if (tbox == sbox || volume(tbox) == 0) {
      EXPECT_TRUE(mine.empty()) << "t keeps its buffer (or holds nothing) but has " << mine.size() << " pieces";
      EXPECT_EQ(plan.bytes_received[t], 0);
      EXPECT_EQ(plan.bytes_local[t], 0);
      continue;
    }
    ASSERT_FALSE(mine.empty()) << "target box " << box_str(tbox) << " gets no pieces";
    std::int64_t total = 0, recv = 0, local = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      const ts::TransferPiece& p = *mine[i];
      ASSERT_EQ(p.box.size(), shape.size());
      ASSERT_GE(p.src, 0);
      ASSERT_LT(p.src, n);
      const std::int64_t v = volume(p.box);
      EXPECT_EQ(p.bytes, v * isz) << "piece " << box_str(p.box);
      EXPECT_TRUE(contains(tbox, p.box)) << "piece " << box_str(p.box) << " outside target " << box_str(tbox);
      const Box held = src.shard_index(shape, p.src);
      EXPECT_TRUE(contains(held, p.box)) << "piece " << box_str(p.box) << " not held by its source " << p.src << " "
                                         << box_str(held);
      if (p.src != p.dst) {
        // Remote only if t does not already hold that data.
        EXPECT_EQ(volume(intersect(p.box, sbox)), 0)
            << "remote piece " << box_str(p.box) << " from " << p.src << " overlaps t's own block " << box_str(sbox);
        recv += v * isz;
        sent[p.src] += v * isz;
      } else {
        local += v * isz;
      }
      total += v;
      for (size_t j = 0; j < i; ++j)
        EXPECT_EQ(volume(intersect(p.box, mine[j]->box)), 0)
            << "pieces " << box_str(p.box) << " and " << box_str(mine[j]->box) << " overlap";
    }
    // Disjoint pieces inside T whose volumes sum to |T|: they tile T exactly.
    EXPECT_EQ(total, volume(tbox)) << "pieces do not cover target box " << box_str(tbox);
    // Minimal traffic: t receives exactly what it lacks.
    const std::int64_t lacks = (volume(tbox) - volume(intersect(tbox, sbox))) * isz;
    EXPECT_EQ(plan.bytes_received[t], lacks);
    EXPECT_EQ(recv, lacks);
    EXPECT_EQ(plan.bytes_local[t], local);
  }
  EXPECT_EQ(plan.bytes_sent, sent);
  const std::int64_t rsum = std::accumulate(plan.bytes_received.begin(), plan.bytes_received.end(), std::int64_t{0});
  const std::int64_t ssum = std::accumulate(plan.bytes_sent.begin(), plan.bytes_sent.end(), std::int64_t{0});
  EXPECT_EQ(rsum, ssum);
  EXPECT_EQ(plan.bytes_moved(), rsum);
  EXPECT_EQ(plan.remote_pieces(), std::count_if(plan.pieces.begin(), plan.pieces.end(),
                                                [](const ts::TransferPiece& p) { return p.src != p.dst; }));
  // The reported form agrees with the data flow at the extremes.
  const std::vector<std::string> kinds = {"none", "local slice", "all-gather", "all-to-all", "permute",
                                          "point-to-point"};
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), plan.kind), kinds.end()) << plan.kind;
  EXPECT_EQ(plan.kind == "none", plan.pieces.empty()) << plan.kind;
  if (!plan.pieces.empty()) {
    EXPECT_EQ(plan.kind == "local slice", plan.bytes_moved() == 0) << plan.kind;
  }
}

// Executes the reshard and checks the result against the host data.
template <class T>
void check_reshard(const ts::Shape& shape, const ts::NamedSharding& src, const ts::NamedSharding& dst, int salt) {
  const ts::DType dtype = ts::dtype_of<T>();
  const std::vector<T> host = make_host<T>(numel(shape), salt);
  ts::Array a = ts::device_put(host, shape, src);
  const ts::ReshardPlan plan = ts::plan_reshard(a, dst);
  {
    SCOPED_TRACE("plan: " + plan.str());
    check_plan(plan, shape, dtype, src, dst);
  }
  ts::Array b;
  ts::Explanation ex = ts::explain([&] { b = ts::reshard(a, dst); });
  ASSERT_EQ(ex.records.size(), 1u);
  EXPECT_EQ(ex.records[0].op, "reshard");
  EXPECT_EQ(ex.records[0].kind, plan.kind);
  EXPECT_EQ(ex.records[0].bytes_received, plan.bytes_received);
  EXPECT_EQ(ex.records[0].bytes_local, plan.bytes_local);
  EXPECT_EQ(ex.records[0].pieces, plan.remote_pieces());
  EXPECT_EQ(ex.bytes_moved(), plan.bytes_moved());

  ASSERT_EQ(b.sharding(), dst);
  ASSERT_EQ(b.shape(), shape);
  ASSERT_EQ(b.dtype(), dtype);
  EXPECT_EQ(b.to_vector<T>(), host);
  // The source is untouched.
  EXPECT_EQ(a.to_vector<T>(), host);
  auto shards = b.addressable_shards();
  const ts::Mesh& mesh = dst.mesh();
  ASSERT_EQ(static_cast<int>(shards.size()), mesh.size());
  for (int t = 0; t < mesh.size(); ++t) {
    const Box tbox = dst.shard_index(shape, t);
    ASSERT_EQ(shards[t].device, mesh.devices()[t]);
    ASSERT_EQ(shards[t].index, tbox);
    EXPECT_EQ(shards[t].data.to_vector<T>(), sub_box(host, shape, tbox)) << "shard " << t << " " << box_str(tbox);
    if (volume(tbox) > 0) {
      EXPECT_EQ(b.impl()->buffers[t].device_id(), mesh.devices()[t].id()) << "shard " << t;
      EXPECT_GE(b.impl()->buffers[t].nbytes(), static_cast<std::size_t>(volume(tbox)) * ts::itemsize(dtype));
      // A device whose block does not change keeps its buffer.
      if (tbox == src.shard_index(shape, t)) {
        EXPECT_EQ(b.impl()->buffers[t].device_data(), a.impl()->buffers[t].device_data()) << "shard " << t;
      }
    }
  }
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}


TEST(ReshardProperty, RandomShapesMeshesSpecsAndDtypes) {
  std::mt19937 rng(12345u);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<ts::Device> all = ts::devices();
  ASSERT_EQ(all.size(), 8u) << "run with TESSERA_NUM_CPU_DEVICES=8";
  std::map<std::string, int> kinds_seen;
  for (int iter = 0; iter < 1500; ++iter) {
    std::vector<ts::Device> devs = all;
    std::shuffle(devs.begin(), devs.end(), rng);
    const int ndev = uni(1, 8);
    devs.resize(ndev);
    if (uni(0, 1)) std::sort(devs.begin(), devs.end());
    std::vector<int> mshape;
    std::vector<std::string> names;
    if (uni(0, 1)) {
      mshape = {ndev};
      names = {"x"};
    } else {
      auto dv = divisors(ndev);
      int a = dv[uni(0, static_cast<int>(dv.size()) - 1)];
      mshape = {a, ndev / a};
      names = {"x", "y"};
    }
    ts::Mesh mesh(devs, mshape, names);
    const int rank = uni(1, 3);
    ts::Shape shape(rank);
    for (int d = 0; d < rank; ++d) {
      switch (uni(0, 6)) {
        case 0: shape[d] = 0; break;
        case 1: shape[d] = 1; break;
        case 2: shape[d] = uni(1, ndev); break;   // near or below the shard count
        case 3: shape[d] = 8 * uni(1, 2); break;  // even on most meshes
        default: shape[d] = uni(2, 11); break;
      }
    }
    ts::PartitionSpec sspec = random_spec(rng, mesh, rank);
    ts::PartitionSpec tspec = uni(0, 9) == 0 ? sspec : random_spec(rng, mesh, rank);
    ts::NamedSharding src(mesh, sspec), dst(mesh, tspec);
    const int which = uni(0, 9);  // mostly f32, every dtype sometimes
    SCOPED_TRACE("case " + std::to_string(iter) + ": mesh " + mesh.str() + " shape " + ts::shape_str(shape) + " " +
                 sspec.str() + " -> " + tspec.str() + " dtype #" + std::to_string(which));
    switch (which) {
      case 0: check_reshard<bool>(shape, src, dst, iter); break;
      case 1: check_reshard<std::int32_t>(shape, src, dst, iter); break;
      case 2: check_reshard<std::int64_t>(shape, src, dst, iter); break;
      case 3: check_reshard<double>(shape, src, dst, iter); break;
      default: check_reshard<float>(shape, src, dst, iter); break;
    }
    if (HasFatalFailure()) return;
    kinds_seen[ts::plan_reshard(shape, ts::f32, src, dst).kind]++;
  }
  // The random cases exercise more than one form.
  EXPECT_GE(kinds_seen.size(), 4u);
}

// Plans only (no data) over bigger meshes: the invariants hold for any layout.
TEST(ReshardProperty, PlanInvariantsOnFullMeshes) {
  std::mt19937 rng(99u);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::vector<int>> shapes = {{8}, {2, 4}, {4, 2}, {2, 2, 2}, {1, 8}};
  for (int iter = 0; iter < 1500; ++iter) {
    const auto& ms = shapes[uni(0, static_cast<int>(shapes.size()) - 1)];
    std::vector<std::string> names = {"a", "b", "c"};
    names.resize(ms.size());
    ts::Mesh mesh = ts::make_mesh(ms, names);
    const int rank = uni(1, 3);
    ts::Shape shape(rank);
    for (auto& s : shape) s = uni(0, 17);
    ts::NamedSharding src(mesh, random_spec(rng, mesh, rank)), dst(mesh, random_spec(rng, mesh, rank));
    const ts::DType dt = std::vector<ts::DType>{ts::bool_, ts::i32, ts::i64, ts::f32, ts::f64}[uni(0, 4)];
    SCOPED_TRACE("case " + std::to_string(iter) + ": mesh " + mesh.str() + " shape " + ts::shape_str(shape) + " " +
                 src.spec().str() + " -> " + dst.spec().str());
    check_plan(ts::plan_reshard(shape, dt, src, dst), shape, dt, src, dst);
    if (HasFatalFailure()) return;
  }
}

// ------------------------------------------------------------- named cases

ts::Mesh mesh8() { return ts::make_mesh({8}, {"x"}); }
ts::Mesh mesh2x4() { return ts::make_mesh({2, 4}, {"x", "y"}); }

std::vector<float> iota_f(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

TEST(ReshardNamed, IdenticalShardingIsNoneAndKeepsBuffers) {
  ts::Mesh mesh = mesh2x4();
  ts::NamedSharding s(mesh, ts::P("x", "y"));
  auto host = iota_f(10 * 7);
  ts::Array a = ts::device_put(host, {10, 7}, s);
  auto plan = ts::plan_reshard(a, s);
  EXPECT_EQ(plan.kind, "none");
  EXPECT_TRUE(plan.pieces.empty());
  EXPECT_EQ(plan.bytes_moved(), 0);
  ts::Array b;
  auto ex = ts::explain([&] { b = ts::reshard(a, s); });
  ASSERT_EQ(ex.records.size(), 1u);
  EXPECT_EQ(ex.records[0].op, "reshard");
  EXPECT_EQ(ex.records[0].kind, "none");
  EXPECT_EQ(ex.bytes_moved(), 0);
  EXPECT_EQ(b.sharding(), s);
  ASSERT_EQ(b.impl()->buffers.size(), a.impl()->buffers.size());
  for (size_t i = 0; i < a.impl()->buffers.size(); ++i)
    EXPECT_EQ(b.impl()->buffers[i].device_data(), a.impl()->buffers[i].device_data()) << "buffer " << i;
  EXPECT_EQ(b.to_vector<float>(), host);
  // P("x", "y") and P("x", "y", none)-style trailing nones are the same sharding.
  ts::Array c = ts::reshard(a, ts::P("x", "y"));
  for (size_t i = 0; i < a.impl()->buffers.size(); ++i)
    EXPECT_EQ(c.impl()->buffers[i].device_data(), a.impl()->buffers[i].device_data()) << "buffer " << i;
}

TEST(ReshardNamed, DifferentSpecSameLayoutIsNoneWithNewSharding) {
  // Axis "y" has size 1, so P("x") and P("x", "y") place every element alike.
  ts::Mesh mesh(std::vector<ts::Device>{ts::devices()[0], ts::devices()[1], ts::devices()[2], ts::devices()[3]},
                {4, 1}, {"x", "y"});
  ts::NamedSharding s(mesh, ts::P("x")), t(mesh, ts::P("x", "y"));
  ASSERT_FALSE(s == t);
  auto host = iota_f(6 * 5);
  ts::Array a = ts::device_put(host, {6, 5}, s);
  auto plan = ts::plan_reshard(a, t);
  EXPECT_EQ(plan.kind, "none");
  ts::Array b = ts::reshard(a, t);
  EXPECT_EQ(b.sharding(), t);
  for (size_t i = 0; i < a.impl()->buffers.size(); ++i)
    EXPECT_EQ(b.impl()->buffers[i].device_data(), a.impl()->buffers[i].device_data()) << "buffer " << i;
  EXPECT_EQ(b.to_vector<float>(), host);
}

TEST(ReshardNamed, ReplicatedToShardedIsLocalSlice) {
  ts::Mesh mesh = mesh2x4();
  auto host = iota_f(9 * 6);
  ts::Array a = ts::device_put(host, {9, 6}, ts::NamedSharding(mesh, ts::P()));
  ts::NamedSharding t(mesh, ts::P("y", "x"));
  auto plan = ts::plan_reshard(a, t);
  EXPECT_EQ(plan.kind, "local slice");
  EXPECT_EQ(plan.bytes_moved(), 0);
  EXPECT_EQ(plan.remote_pieces(), 0);
  std::int64_t local = std::accumulate(plan.bytes_local.begin(), plan.bytes_local.end(), std::int64_t{0});
  EXPECT_EQ(local, 9 * 6 * 4);  // every device copies its own block, each element once overall
  check_reshard<float>({9, 6}, ts::NamedSharding(mesh, ts::P()), t, 0);
}

// Rows of a replicated matrix are contiguous in its buffer: the local slice
// shares that memory instead of copying it (eagerly and inside a jitted
// call). Column blocks are not contiguous and are copied.
TEST(ReshardNamed, ContiguousLocalSlicesAreViews) {
  ts::Mesh mesh = ts::make_mesh({8}, {"x"});
  auto host = iota_f(13 * 6);
  ts::Array a = ts::device_put(host, {13, 6}, ts::NamedSharding(mesh, ts::P()));
  auto inside = [&](const ts::Array& b, int pos) {
    const auto* base = static_cast<const unsigned char*>(a.impl()->buffers[pos].device_data());
    const auto* p = static_cast<const unsigned char*>(b.impl()->buffers[pos].device_data());
    return p >= base && p < base + 13 * 6 * 4;
  };
  ts::Array rows = ts::reshard(a, ts::P("x"));
  EXPECT_EQ(rows.to_vector<float>(), host);
  for (int pos = 0; pos < 8; ++pos)
    if (rows.sharding().shard_shape(rows.shape(), pos)[0] > 0) {
      EXPECT_TRUE(inside(rows, pos)) << pos;
    }
  ts::Array cols = ts::reshard(a, ts::P(ts::none, "x"));
  EXPECT_EQ(cols.to_vector<float>(), host);
  for (int pos = 0; pos < 6; ++pos) EXPECT_FALSE(inside(cols, pos)) << pos;
  auto f = ts::jit([](ts::Array v) { return ts::with_sharding_constraint(v, ts::P("x")); });
  ts::Array j = f(a);
  EXPECT_EQ(j.to_vector<float>(), host);
  for (int pos = 0; pos < 8; ++pos)
    if (j.sharding().shard_shape(j.shape(), pos)[0] > 0) {
      EXPECT_TRUE(inside(j, pos)) << pos;
    }
}

TEST(ReshardNamed, ShardedToReplicatedIsAllGather) {
  ts::Mesh mesh = mesh8();
  ts::NamedSharding s(mesh, ts::P("x")), rep(mesh, ts::P());
  auto host = iota_f(16 * 3);
  ts::Array a = ts::device_put(host, {16, 3}, s);
  auto plan = ts::plan_reshard(a, rep);
  EXPECT_EQ(plan.kind, "all-gather");
  // Each device receives the 7 blocks it lacks.
  for (int t = 0; t < 8; ++t) EXPECT_EQ(plan.bytes_received[t], 14 * 3 * 4) << t;
  EXPECT_EQ(plan.bytes_moved(), 8 * 14 * 3 * 4);
  check_reshard<float>({16, 3}, s, rep, 0);
  // Uneven and 2-d mesh too.
  ts::Mesh m2 = mesh2x4();
  EXPECT_EQ(ts::plan_reshard({11, 5}, ts::f64, ts::NamedSharding(m2, ts::P("x", "y")), ts::NamedSharding(m2, ts::P()))
                .kind,
            "all-gather");
  check_reshard<double>({11, 5}, ts::NamedSharding(m2, ts::P("x", "y")), ts::NamedSharding(m2, ts::P()), 0);
}

TEST(ReshardNamed, RowsToColumnsIsAllToAll) {
  std::vector<ts::Device> d = ts::devices();
  ts::Mesh mesh(std::vector<ts::Device>(d.begin(), d.begin() + 4), {4}, {"x"});
  ts::NamedSharding rows(mesh, ts::P("x")), cols(mesh, ts::P(ts::none, "x"));
  auto host = iota_f(8 * 8);
  ts::Array a = ts::device_put(host, {8, 8}, rows);
  auto plan = ts::plan_reshard(a, cols);
  EXPECT_TRUE(plan.kind == "all-to-all" || plan.kind == "permute") << plan.kind;
  const std::int64_t total = 8 * 8 * 4;
  EXPECT_EQ(plan.bytes_moved(), total * 3 / 4);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(plan.bytes_received[t], total / 4 * 3 / 4) << t;
    EXPECT_EQ(plan.bytes_sent[t], total / 4 * 3 / 4) << t;
    EXPECT_EQ(plan.bytes_local[t], total / 16) << t;
  }
  EXPECT_EQ(plan.remote_pieces(), 12);
  ts::Array b;
  auto ex = ts::explain([&] { b = ts::reshard(a, cols); });
  ASSERT_EQ(ex.records.size(), 1u);
  EXPECT_EQ(ex.records[0].op, "reshard");
  EXPECT_EQ(ex.records[0].kind, plan.kind);
  EXPECT_EQ(ex.records[0].bytes_received, plan.bytes_received);
  EXPECT_EQ(ex.bytes_moved(), plan.bytes_moved());
  EXPECT_EQ(b.sharding(), cols);
  EXPECT_EQ(b.to_vector<float>(), host);
  auto shards = b.addressable_shards();
  for (int t = 0; t < 4; ++t) {
    std::vector<float> expect;
    for (int r = 0; r < 8; ++r)
      for (int c = 2 * t; c < 2 * t + 2; ++c) expect.push_back(host[r * 8 + c]);
    EXPECT_EQ(shards[t].data.to_vector<float>(), expect) << t;
  }
}

TEST(ReshardNamed, RefiningAnUnevenSplitIsPermute) {
  // 10 rows over y (3,3,2,2) -> over (y, x) (2,2,1,1,1,1,1,1): each new block
  // overlaps at most two old ones, and only part of one of them moves.
  ts::Mesh mesh = mesh2x4();
  ts::NamedSharding s(mesh, ts::P("y")), t(mesh, ts::P({"y", "x"}));
  auto plan = ts::plan_reshard({10}, ts::f32, s, t);
  EXPECT_EQ(plan.kind, "permute") << plan.str();
  // Only position 4 (x=1, y=0: rows [2,4)) lacks a row: row 3, from y=1.
  EXPECT_EQ(plan.bytes_moved(), 4);
  EXPECT_EQ(plan.bytes_received[4], 4);
  check_reshard<float>({10}, s, t, 0);
}

TEST(ReshardNamed, ConvenienceSpecForm) {
  ts::Mesh mesh = mesh2x4();
  auto host = iota_f(5 * 9);
  ts::Array a = ts::device_put(host, {5, 9}, ts::NamedSharding(mesh, ts::P("x", "y")));
  ts::Array b = ts::reshard(a, ts::P(ts::none, {"y", "x"}));
  EXPECT_EQ(b.sharding(), ts::NamedSharding(mesh, ts::P(ts::none, {"y", "x"})));
  EXPECT_EQ(b.to_vector<float>(), host);
  for (const ts::Shard& sh : b.addressable_shards())
    EXPECT_EQ(sh.data.to_vector<float>(), sub_box(host, {5, 9}, sh.index));
  // device_put(array, sharding) on the same mesh is reshard too.
  ts::Array c = ts::device_put(a, ts::NamedSharding(mesh, ts::P("y")));
  EXPECT_EQ(c.sharding(), ts::NamedSharding(mesh, ts::P("y")));
  EXPECT_EQ(c.to_vector<float>(), host);
}

TEST(ReshardNamed, ZeroSizeAndTinyArrays) {
  ts::Mesh mesh = mesh2x4();
  check_reshard<float>({0, 5}, ts::NamedSharding(mesh, ts::P("x", "y")), ts::NamedSharding(mesh, ts::P()), 0);
  check_reshard<float>({0}, ts::NamedSharding(mesh, ts::P()), ts::NamedSharding(mesh, ts::P({"x", "y"})), 0);
  check_reshard<std::int32_t>({1}, ts::NamedSharding(mesh, ts::P({"x", "y"})), ts::NamedSharding(mesh, ts::P("y")),
                              0);
  check_reshard<bool>({3, 1}, ts::NamedSharding(mesh, ts::P({"y", "x"})), ts::NamedSharding(mesh, ts::P("x", "y")),
                      0);
}

// ----------------------------------------------------------------- errors

TEST(ReshardErrors, DifferentMesh) {
  ts::Array a = ts::device_put(iota_f(8), {8}, ts::NamedSharding(mesh8(), ts::P("x")));
  // Other axis names.
  ts::Mesh other = ts::make_mesh({8}, {"y"});
  expect_error<ts::ShardingError>([&] { ts::reshard(a, ts::NamedSharding(other, ts::P("y"))); }, "[reshard]",
                                  {"same mesh", "Mesh('x': 8)", "Mesh('y': 8)", "device_put"});
  // Same names, other devices.
  std::vector<ts::Device> d = ts::devices();
  ts::Mesh rev(std::vector<ts::Device>(d.rbegin(), d.rend()), {8}, {"x"});
  expect_error<ts::ShardingError>([&] { ts::reshard(a, ts::NamedSharding(rev, ts::P("x"))); }, "[reshard]",
                                  {"same mesh", "device_put"});
  expect_error<ts::ShardingError>([&] { ts::plan_reshard(a, ts::NamedSharding(rev, ts::P())); }, "[reshard]",
                                  {"same mesh", "device_put"});
}

TEST(ReshardErrors, UnknownAxis) {
  ts::Array a = ts::device_put(iota_f(8), {8}, ts::NamedSharding(mesh2x4(), ts::P("x")));
  expect_error<ts::ShardingError>([&] { ts::reshard(a, ts::P("z")); }, "[reshard]", {"'z'"});
  expect_error<ts::ShardingError>([&] { ts::reshard(a, ts::P({"y", "model"})); }, "[reshard]", {"'model'"});
}

TEST(ReshardErrors, SpecLongerThanRank) {
  ts::Mesh mesh = mesh2x4();
  ts::Array a = ts::device_put(iota_f(8), {8}, ts::NamedSharding(mesh, ts::P("x")));
  expect_error<ts::ShardingError>([&] { ts::reshard(a, ts::P("x", "y")); }, "[reshard]", {"2 entries", "rank 1"});
  expect_error<ts::ShardingError>([&] { ts::reshard(a, ts::NamedSharding(mesh, ts::P(ts::none, "y"))); },
                                  "[reshard]", {"2 entries", "rank 1"});
  expect_error<ts::ShardingError>([&] { ts::plan_reshard({4, 4}, ts::f32, ts::NamedSharding(mesh, ts::P("x")),
                                                         ts::NamedSharding(mesh, ts::P("x", ts::none, "y"))); },
                                  "[reshard]", {"3 entries", "rank 2"});
}

// ---------------------------------------------------- device_put across meshes

TEST(DevicePutAcrossMeshes, MovesDataToTheOtherMesh) {
  std::vector<ts::Device> d = ts::devices();
  ts::Mesh m1(std::vector<ts::Device>(d.begin(), d.begin() + 4), {4}, {"x"});
  ts::Mesh m2(std::vector<ts::Device>{d[7], d[5], d[6], d[4]}, {2, 2}, {"a", "b"});
  ts::Mesh m3 = mesh2x4();
  const ts::Shape shape = {7, 5};
  std::vector<double> host(35);
  for (int i = 0; i < 35; ++i) host[i] = 0.5 * i - 3;
  ts::Array a = ts::device_put(host, shape, ts::NamedSharding(m1, ts::P("x")));
  for (const ts::NamedSharding& t : {ts::NamedSharding(m2, ts::P("b", "a")), ts::NamedSharding(m2, ts::P()),
                                     ts::NamedSharding(m3, ts::P(ts::none, {"y", "x"})),
                                     ts::NamedSharding(m3, ts::P("y"))}) {
    SCOPED_TRACE(t.str());
    ts::Array b = ts::device_put(a, t);
    ASSERT_EQ(b.sharding(), t);
    EXPECT_EQ(b.dtype(), ts::f64);
    EXPECT_EQ(b.to_vector<double>(), host);
    auto shards = b.addressable_shards();
    ASSERT_EQ(static_cast<int>(shards.size()), t.mesh().size());
    for (int pos = 0; pos < t.mesh().size(); ++pos) {
      EXPECT_EQ(shards[pos].device, t.mesh().devices()[pos]);
      EXPECT_EQ(shards[pos].index, t.shard_index(shape, pos));
      EXPECT_EQ(shards[pos].data.to_vector<double>(), sub_box(host, shape, shards[pos].index)) << pos;
      if (volume(shards[pos].index) > 0) {
        EXPECT_EQ(b.impl()->buffers[pos].device_id(), t.mesh().devices()[pos].id()) << pos;
      }
    }
    // And back.
    ts::Array c = ts::device_put(b, a.sharding());
    EXPECT_EQ(c.sharding(), a.sharding());
    EXPECT_EQ(c.to_vector<double>(), host);
  }
  // Rank mismatch on the other mesh is reported.
  expect_error<ts::ShardingError>([&] { ts::device_put(a, ts::NamedSharding(m2, ts::P("a", "b", ts::none))); },
                                  "[device_put]", {"3 entries", "rank 2"});
}

}  // namespace

TEST(WithShardingConstraint, MovesLikeReshardAndChecksItsInput) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<float> h(12 * 10);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i);
  ts::Array a = ts::device_put(h, {12, 10}, ts::NamedSharding(mesh, ts::P("x", "y")));
  ts::Array b;
  auto ex = ts::explain([&] { b = ts::with_sharding_constraint(a, ts::P(ts::none, {"x", "y"})); });
  EXPECT_EQ(ts::typeof(b), "f32[12,10@(x,y)]");
  EXPECT_EQ(b.to_vector<float>(), h);
  ASSERT_EQ(ex.records.size(), 1u);
  EXPECT_EQ(ex.records[0].op, "with_sharding_constraint");
  EXPECT_EQ(ex.bytes_moved(), ts::plan_reshard(a, b.sharding()).bytes_moved());
  // Already laid out: the same buffers, nothing moved.
  ts::Array c = ts::with_sharding_constraint(b, b.sharding());
  EXPECT_EQ(c.impl(), b.impl());
  ts::Mesh other = ts::make_mesh({8}, {"x"});
  ts::testing::expect_error<ts::ShardingError>(
      [&] { ts::with_sharding_constraint(a, ts::NamedSharding(other, ts::P("x"))); }, "[with_sharding_constraint]",
      {"Mesh('x': 8)"});
  ts::testing::expect_error<ts::ShardingError>([&] { ts::with_sharding_constraint(a, ts::P("q")); },
                                               "[with_sharding_constraint]", {"'q'"});
  ts::testing::expect_error<ts::ShardingError>([&] { ts::with_sharding_constraint(a, ts::P("x", "y", ts::none)); },
                                               "[with_sharding_constraint]", {"rank 2"});
}
