// The layout rule (DESIGN.md, "Layout rule"): balanced 1-d blocks, and how a
// NamedSharding combines them with mixed-radix part indices into the box each
// device holds. Checked against formulas written out independently here, on
// hand-picked cases and on several hundred random meshes, specs and shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/array_impl.hpp"
#include "tessera/array.hpp"
#include "tessera/device.hpp"
#include "tessera/mesh.hpp"
#include "tessera/sharding.hpp"
#include "test_util.hpp"

namespace ts = tessera;

namespace {

// ----------------------------------------------------------------- 1-d rule

// The rule as DESIGN.md writes it.
std::int64_t ref_size(std::int64_t n, std::int64_t k, std::int64_t c) { return n / k + (c < n % k ? 1 : 0); }
std::int64_t ref_start(std::int64_t n, std::int64_t k, std::int64_t c) { return c * (n / k) + std::min(c, n % k); }

TEST(BlockRule, MatchesFormulaForAllSmallSizes) {
  for (std::int64_t n = 0; n <= 40; ++n) {
    for (std::int64_t k = 1; k <= 9; ++k) {
      for (std::int64_t c = 0; c < k; ++c) {
        SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " c=" + std::to_string(c));
        EXPECT_EQ(ts::block_size(n, k, c), ref_size(n, k, c));
        EXPECT_EQ(ts::block_start(n, k, c), ref_start(n, k, c));
        ts::Slice s = ts::block_slice(n, k, c);
        EXPECT_EQ(s.start, ref_start(n, k, c));
        EXPECT_EQ(s.stop, ref_start(n, k, c) + ref_size(n, k, c));
        EXPECT_EQ(s.size(), ref_size(n, k, c));
      }
    }
  }
}

TEST(BlockRule, BlocksTileTheRangeInOrder) {
  for (std::int64_t n = 0; n <= 40; ++n) {
    for (std::int64_t k = 1; k <= 9; ++k) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
      std::int64_t next = 0;
      std::int64_t lo = n, hi = 0;
      for (std::int64_t c = 0; c < k; ++c) {
        ts::Slice s = ts::block_slice(n, k, c);
        EXPECT_EQ(s.start, next) << "block " << c << " does not start where block " << c - 1 << " stops";
        EXPECT_GE(s.stop, s.start);
        next = s.stop;
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
        // The first n % k blocks hold the extra element.
        EXPECT_EQ(s.size(), n / k + (c < n % k ? 1 : 0));
        // Fewer elements than parts: the trailing k - n parts are empty.
        if (n < k) {
          EXPECT_EQ(s.size(), c < n ? 1 : 0);
        }
      }
      EXPECT_EQ(next, n) << "blocks do not cover [0, n)";
      EXPECT_LE(hi - lo, 1) << "block sizes differ by more than one";
    }
  }
}

TEST(BlockRule, HandPickedExamples) {
  // 10 over 4: 3, 3, 2, 2.
  EXPECT_EQ(ts::block_slice(10, 4, 0), (ts::Slice{0, 3}));
  EXPECT_EQ(ts::block_slice(10, 4, 1), (ts::Slice{3, 6}));
  EXPECT_EQ(ts::block_slice(10, 4, 2), (ts::Slice{6, 8}));
  EXPECT_EQ(ts::block_slice(10, 4, 3), (ts::Slice{8, 10}));
  // 3 over 8: three single elements, then five empty blocks at 3.
  EXPECT_EQ(ts::block_slice(3, 8, 0), (ts::Slice{0, 1}));
  EXPECT_EQ(ts::block_slice(3, 8, 2), (ts::Slice{2, 3}));
  EXPECT_EQ(ts::block_slice(3, 8, 3), (ts::Slice{3, 3}));
  EXPECT_EQ(ts::block_slice(3, 8, 7), (ts::Slice{3, 3}));
  // 0 over anything: all empty at 0.
  EXPECT_EQ(ts::block_slice(0, 5, 4), (ts::Slice{0, 0}));
  // Even split.
  EXPECT_EQ(ts::block_slice(8, 4, 3), (ts::Slice{6, 8}));
  // k = 1: the whole range.
  EXPECT_EQ(ts::block_slice(7, 1, 0), (ts::Slice{0, 7}));
}

// ------------------------------------------------------- NamedSharding rule

TEST(ShardIndex, HandPicked2x4) {
  ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"}, {}, ts::devices());
  // (10, 6) over P("x", "y"): rows 5/5, cols 2,2,1,1.
  ts::NamedSharding s(mesh, ts::P("x", "y"));
  EXPECT_EQ(s.shard_index({10, 6}, 0), (std::vector<ts::Slice>{{0, 5}, {0, 2}}));
  EXPECT_EQ(s.shard_index({10, 6}, 3), (std::vector<ts::Slice>{{0, 5}, {5, 6}}));
  EXPECT_EQ(s.shard_index({10, 6}, 6), (std::vector<ts::Slice>{{5, 10}, {4, 5}}));
  // P(("y", "x")) on rows: part = y * 2 + x. Position 1 is (x=0, y=1) -> part 2.
  ts::NamedSharding yx(mesh, ts::P({"y", "x"}));
  EXPECT_EQ(yx.num_parts(0), 8);
  EXPECT_EQ(yx.part_index(0, 1), 2);
  EXPECT_EQ(yx.part_index(0, 4), 1);  // (x=1, y=0)
  // 10 over 8: sizes 2,2,1,1,1,1,1,1, so part 2 is [4, 5).
  EXPECT_EQ(yx.shard_index({10}, 1), (std::vector<ts::Slice>{{4, 5}}));
  // P(("x", "y")): part = x * 4 + y, i.e. the position itself.
  ts::NamedSharding xy(mesh, ts::P({"x", "y"}));
  for (int pos = 0; pos < 8; ++pos) EXPECT_EQ(xy.part_index(0, pos), pos);
  // Unnamed axes replicate: P("y") on (8,) — positions 1 and 5 share part 1.
  ts::NamedSharding y(mesh, ts::P("y"));
  EXPECT_EQ(y.shard_index({8}, 1), y.shard_index({8}, 5));
  EXPECT_EQ(y.shard_index({8}, 1), (std::vector<ts::Slice>{{2, 4}}));
  // Replicated: the whole array everywhere.
  ts::NamedSharding rep(mesh, ts::P());
  for (int pos = 0; pos < 8; ++pos) EXPECT_EQ(rep.shard_index({3, 0}, pos), (std::vector<ts::Slice>{{0, 3}, {0, 0}}));
  EXPECT_TRUE(rep.is_fully_replicated());
  EXPECT_FALSE(s.is_fully_replicated());
}

// A random case: a mesh over a random subset of the devices and a spec on it.
struct Case {
  ts::Mesh mesh;
  ts::PartitionSpec spec;
  ts::Shape shape;
  std::vector<std::vector<std::string>> dim_axes;  // axes per dim, major to minor
  std::string desc;
};

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

Case random_case(std::mt19937& rng) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<ts::Device> all = ts::devices();
  // Devices: a random subset, in random order.
  std::shuffle(all.begin(), all.end(), rng);
  const int ndev = uni(1, static_cast<int>(all.size()));
  std::vector<ts::Device> devs(all.begin(), all.begin() + ndev);
  // Mesh shape: 1-d, 2-d or 3-d factorisation of ndev.
  const int mdim = uni(1, 3);
  std::vector<int> mshape;
  if (mdim == 1) {
    mshape = {ndev};
  } else {
    auto d1 = divisors(ndev);
    int a = d1[uni(0, static_cast<int>(d1.size()) - 1)];
    if (mdim == 2) {
      mshape = {a, ndev / a};
    } else {
      auto d2 = divisors(ndev / a);
      int b = d2[uni(0, static_cast<int>(d2.size()) - 1)];
      mshape = {a, b, ndev / a / b};
    }
  }
  std::vector<std::string> pool = {"x", "y", "z", "data", "model"};
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<std::string> names(pool.begin(), pool.begin() + mdim);
  ts::Mesh mesh(devs, mshape, names);

  const int rank = uni(1, 3);
  // Each axis goes to one dim or to none; the order within a dim is random.
  std::vector<std::vector<std::string>> dim_axes(rank);
  std::vector<std::string> axes = names;
  std::shuffle(axes.begin(), axes.end(), rng);
  for (const auto& a : axes) {
    int d = uni(-1, rank - 1);
    if (d >= 0) dim_axes[d].push_back(a);
  }
  int last = 0;  // number of entries needed
  for (int d = 0; d < rank; ++d)
    if (!dim_axes[d].empty()) last = d + 1;
  const int nentries = uni(last, rank);  // trailing none entries may be omitted
  std::vector<ts::PartitionSpec::Entry> entries;
  for (int d = 0; d < nentries; ++d) {
    if (dim_axes[d].empty())
      entries.emplace_back(ts::none);
    else if (dim_axes[d].size() == 1 && uni(0, 1) == 0)
      entries.emplace_back(dim_axes[d][0]);  // "x"
    else
      entries.emplace_back(dim_axes[d]);  // {"x"} or {"x", "y"}
  }
  ts::PartitionSpec spec(entries);

  ts::Shape shape(rank);
  for (int d = 0; d < rank; ++d) {
    int k = 1;
    for (const auto& a : dim_axes[d]) k *= mesh.axis_size(a);
    switch (uni(0, 5)) {
      case 0: shape[d] = 0; break;
      case 1: shape[d] = 1; break;
      case 2: shape[d] = uni(0, std::max(0, k - 1)); break;  // fewer than the parts
      case 3: shape[d] = k * uni(1, 3); break;               // even
      default: shape[d] = uni(0, 13); break;                 // anything, mostly uneven
    }
  }
  std::string desc = "mesh " + mesh.str() + " devices [";
  for (int i = 0; i < ndev; ++i) {
    if (i) desc += ',';
    desc += std::to_string(devs[i].id());
  }
  desc += "] spec " + spec.str() + " shape " + ts::shape_str(shape);
  return Case{mesh, spec, shape, dim_axes, desc};
}

// Row-major mesh coordinates, computed here from the mesh shape.
std::vector<int> ref_coords(const std::vector<int>& mshape, int pos) {
  std::vector<int> c(mshape.size());
  for (int i = static_cast<int>(mshape.size()) - 1; i >= 0; --i) {
    c[i] = pos % mshape[i];
    pos /= mshape[i];
  }
  return c;
}

int axis_pos(const ts::Mesh& mesh, const std::string& name) {
  const auto& n = mesh.axis_names();
  return static_cast<int>(std::find(n.begin(), n.end(), name) - n.begin());
}

// The box the layout rule gives position `pos`, from first principles.
std::vector<ts::Slice> ref_box(const Case& c, int pos) {
  const auto coords = ref_coords(c.mesh.shape(), pos);
  std::vector<ts::Slice> box;
  for (size_t d = 0; d < c.shape.size(); ++d) {
    std::int64_t k = 1, part = 0;
    for (const auto& a : c.dim_axes[d]) {
      int ai = axis_pos(c.mesh, a);
      k *= c.mesh.shape()[ai];
      part = part * c.mesh.shape()[ai] + coords[ai];
    }
    std::int64_t n = c.shape[d];
    std::int64_t start = part * (n / k) + std::min(part, n % k);
    box.push_back({start, start + n / k + (part < n % k ? 1 : 0)});
  }
  return box;
}

TEST(ShardIndex, RandomMeshesSpecsShapesMatchTheRule) {
  std::mt19937 rng(20240611u);
  for (int iter = 0; iter < 2000; ++iter) {
    Case c = random_case(rng);
    SCOPED_TRACE("case " + std::to_string(iter) + ": " + c.desc);
    ts::NamedSharding s(c.mesh, c.spec);
    const int rank = static_cast<int>(c.shape.size());
    for (int pos = 0; pos < c.mesh.size(); ++pos) {
      const auto coords = c.mesh.coords(pos);
      ASSERT_EQ(coords, ref_coords(c.mesh.shape(), pos));
      std::vector<ts::Slice> expect(rank);
      for (int d = 0; d < rank; ++d) {
        // Mixed-radix part index of the coordinates on the dim's axes, major to minor.
        int k = 1, part = 0;
        for (const auto& a : c.dim_axes[d]) {
          int ai = axis_pos(c.mesh, a);
          k *= c.mesh.shape()[ai];
          part = part * c.mesh.shape()[ai] + coords[ai];
        }
        ASSERT_EQ(s.num_parts(d), k) << "dim " << d;
        ASSERT_EQ(s.part_index(d, pos), part) << "dim " << d << " pos " << pos;
        expect[d] = ts::block_slice(c.shape[d], k, part);
      }
      ASSERT_EQ(s.shard_index(c.shape, pos), expect) << "pos " << pos;
      ASSERT_EQ(s.shard_index(c.shape, pos), ref_box(c, pos)) << "pos " << pos;
      ts::Shape sshape(rank);
      for (int d = 0; d < rank; ++d) sshape[d] = expect[d].size();
      ASSERT_EQ(s.shard_shape(c.shape, pos), sshape) << "pos " << pos;
    }
  }
}

TEST(DevicePut, RandomLayoutsEveryElementHeldByExactlyTheRightDevices) {
  std::mt19937 rng(777u);
  for (int iter = 0; iter < 800; ++iter) {
    Case c = random_case(rng);
    SCOPED_TRACE("case " + std::to_string(iter) + ": " + c.desc);
    ts::NamedSharding s(c.mesh, c.spec);
    const int rank = static_cast<int>(c.shape.size());
    const std::int64_t n = std::accumulate(c.shape.begin(), c.shape.end(), std::int64_t{1}, std::multiplies<>());
    std::vector<std::int64_t> host(static_cast<std::size_t>(n));
    std::iota(host.begin(), host.end(), std::int64_t{1000});
    ts::Array a = ts::device_put(host, c.shape, s);
    ASSERT_EQ(a.shape(), c.shape);
    ASSERT_EQ(a.sharding(), s);
    ASSERT_EQ(a.to_vector<std::int64_t>(), host);

    // Holders per element must be mesh size / product of the used axis sizes.
    int used = 1;
    for (const auto& axes : c.dim_axes)
      for (const auto& ax : axes) used *= c.mesh.axis_size(ax);
    const int expected_holders = c.mesh.size() / used;

    std::vector<int> holders(static_cast<std::size_t>(n), 0);
    std::vector<std::vector<int>> held_by(static_cast<std::size_t>(n));
    auto shards = a.addressable_shards();
    ASSERT_EQ(static_cast<int>(shards.size()), c.mesh.size());
    std::map<std::vector<std::int64_t>, int> copies;  // block -> copies seen so far
    for (int pos = 0; pos < c.mesh.size(); ++pos) {
      const ts::Shard& sh = shards[pos];
      ASSERT_EQ(sh.device, c.mesh.devices()[pos]);
      const auto box = ref_box(c, pos);
      ASSERT_EQ(sh.index, box) << "pos " << pos;
      std::vector<std::int64_t> key;
      for (auto& sl : box) key.insert(key.end(), {sl.start, sl.stop});
      EXPECT_EQ(sh.replica_id, copies[key]++) << "pos " << pos;
      // The buffer lives on that device.
      ASSERT_EQ(a.impl()->buffers[pos].device_id(), c.mesh.devices()[pos].id());
      // The local data is exactly the global elements of the box, row-major.
      ts::Shape bshape(rank);
      for (int d = 0; d < rank; ++d) bshape[d] = box[d].size();
      ASSERT_EQ(sh.data.shape(), bshape);
      std::vector<std::int64_t> local = sh.data.to_vector<std::int64_t>();
      std::int64_t bn = std::accumulate(bshape.begin(), bshape.end(), std::int64_t{1}, std::multiplies<>());
      ASSERT_EQ(static_cast<std::int64_t>(local.size()), bn);
      std::vector<std::int64_t> idx(rank, 0);
      for (std::int64_t i = 0; i < bn; ++i) {
        // Global linear index of local element i.
        std::int64_t rem = i, g = 0;
        for (int d = rank - 1; d >= 0; --d) {
          idx[d] = rem % bshape[d];
          rem /= bshape[d];
        }
        for (int d = 0; d < rank; ++d) g = g * c.shape[d] + box[d].start + idx[d];
        ASSERT_EQ(local[i], host[g]) << "pos " << pos << " local element " << i;
        ++holders[g];
        held_by[g].push_back(pos);
      }
    }
    for (std::int64_t g = 0; g < n; ++g) {
      ASSERT_GE(holders[g], 1) << "element " << g << " is held by no device";
      ASSERT_EQ(holders[g], expected_holders) << "element " << g;
    }
  }
}

TEST(DevicePut, SizesSmallerThanShardCountGiveEmptyShards) {
  ts::Mesh mesh = ts::make_mesh({8}, {"x"}, {}, ts::devices());
  std::vector<float> host = {1.f, 2.f, 3.f};
  ts::Array a = ts::device_put(host, {3}, ts::NamedSharding(mesh, ts::P("x")));
  auto shards = a.addressable_shards();
  ASSERT_EQ(shards.size(), 8u);
  for (int pos = 0; pos < 8; ++pos) {
    if (pos < 3) {
      EXPECT_EQ(shards[pos].index[0], (ts::Slice{pos, pos + 1}));
      EXPECT_EQ(shards[pos].data.to_vector<float>(), std::vector<float>{host[pos]});
    } else {
      EXPECT_EQ(shards[pos].index[0], (ts::Slice{3, 3}));
      EXPECT_EQ(shards[pos].data.size(), 0);
    }
  }
  EXPECT_EQ(a.to_vector<float>(), host);
}

// ------------------------------------------------------- argument checks

TEST(BlockRule, RejectsArgumentsOutsideTheRule) {
  using ts::testing::expect_error;
  expect_error<ts::ShardingError>([] { ts::block_size(10, 0, 0); }, "[block_size]", {"k >= 1", "k=0"});
  expect_error<ts::ShardingError>([] { ts::block_size(10, -3, 0); }, "[block_size]", {"k >= 1", "k=-3"});
  expect_error<ts::ShardingError>([] { ts::block_start(10, -2, 1); }, "[block_start]", {"k >= 1", "k=-2"});
  expect_error<ts::ShardingError>([] { ts::block_start(10, 4, 7); }, "[block_start]", {"[0, 4)", "c=7"});
  expect_error<ts::ShardingError>([] { ts::block_start(10, 4, -1); }, "[block_start]", {"[0, 4)", "c=-1"});
  expect_error<ts::ShapeError>([] { ts::block_slice(-5, 4, 1); }, "[block_slice]", {"n >= 0", "n=-5"});
  // The extremes of the valid range still follow the rule.
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(ts::block_start(big, 1, 0), 0);
  EXPECT_EQ(ts::block_size(big, 1, 0), big);
  EXPECT_EQ(ts::block_slice(big, 2, 1).stop, big);
  EXPECT_EQ(ts::block_size(0, 7, 6), 0);
}

TEST(ShardIndex, RejectsPositionsDimsAndRanksThatDoNotExist) {
  using ts::testing::expect_error;
  auto d = ts::devices();
  ts::Mesh mesh(std::vector<ts::Device>(d.begin(), d.begin() + 4), {2, 2}, {"x", "y"});
  ts::NamedSharding s(mesh, ts::P("x", "y"));
  expect_error<ts::ShardingError>([&] { s.shard_index({4, 4}, 4); }, "[shard_index]", {"[0, 4)", "got 4"});
  expect_error<ts::ShardingError>([&] { s.shard_index({4, 4}, -1); }, "[shard_index]", {"got -1"});
  expect_error<ts::ShardingError>([&] { s.shard_shape({4, 4}, 9); }, "[shard_shape]", {"got 9"});
  expect_error<ts::ShardingError>([&] { s.part_index(0, 4); }, "[part_index]", {"mesh position", "got 4"});
  expect_error<ts::ShardingError>([&] { s.part_index(-1, 0); }, "[part_index]", {"dimension >= 0", "got -1"});
  expect_error<ts::ShardingError>([&] { s.num_parts(-2); }, "[num_parts]", {"got -2"});
  expect_error<ts::ShardingError>([&] { s.shard_index({4}, 0); }, "[shard_index]", {"rank 1", "2 entries"});
  expect_error<ts::ShapeError>([&] { s.shard_shape({4, -1}, 0); }, "[shard_shape]", {"(4, -1)"});
  // Valid queries are unchanged; dims past the spec are unsharded.
  EXPECT_EQ(s.shard_shape({5, 3, 2}, 3), (ts::Shape{2, 1, 2}));
  EXPECT_EQ(s.part_index(5, 3), 0);
  EXPECT_EQ(s.num_parts(5), 1);
}

}  // namespace
