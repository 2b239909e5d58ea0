// Shape ops: host references and golden cases, the SPMD property (gathered
// sharded result == host reference, output sharding per the rules) over many
// meshes and layouts including uneven and tiny sizes, the communication
// (halo-only for slice/pad/roll/concatenate along a sharded dim, nothing for
// transpose/expand_dims/squeeze and layout-keeping reshapes), and errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>

#include "test_util.hpp"
#include "trace_util.hpp"
#include "tessera/tessera.hpp"
#include "transforms/trace.hpp"

namespace ts = tessera;
using ts::testing::numel;
using namespace tessera::testing;
using ts::P;

namespace {

using Idx = std::vector<std::int64_t>;

Idx unravel(std::int64_t f, const ts::Shape& s) {
  Idx i(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    i[d] = f % s[d];
    f /= s[d];
  }
  return i;
}

std::int64_t ravel(const Idx& i, const ts::Shape& s) {
  std::int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + i[d];
  return f;
}

// Host array of shape `out` with element i = f(multi-index of i).
template <class T, class F>
std::vector<T> build(const ts::Shape& out, F&& f) {
  std::vector<T> v(static_cast<size_t>(numel(out)));
  for (std::int64_t k = 0; k < numel(out); ++k) v[k] = f(unravel(k, out));
  return v;
}

// Sum over devices of the bytes of their output blocks.
std::int64_t block_bytes(const ts::Array& a) {
  std::int64_t b = 0;
  for (const auto& sh : a.addressable_shards()) {
    std::int64_t n = 1;
    for (const auto& s : sh.index) n *= s.size();
    b += n * static_cast<std::int64_t>(ts::itemsize(a.dtype()));
  }
  return b;
}

// The gathered array equals `ref`, and so does every device's block
// (to_vector reads one copy of each block; replicas must agree too).
template <class T>
void expect_array(const ts::Array& a, const std::vector<T>& ref, const std::string& where) {
  ASSERT_EQ(a.to_vector<T>(), ref) << where;
  for (const auto& sh : a.addressable_shards()) {
    ts::Shape bs;
    for (const auto& sl : sh.index) bs.push_back(sl.size());
    std::vector<T> want;
    for (std::int64_t k = 0; k < numel(bs); ++k) {
      Idx o = unravel(k, bs);
      for (size_t d = 0; d < o.size(); ++d) o[d] += sh.index[d].start;
      want.push_back(ref[ravel(o, a.shape())]);
    }
    ASSERT_EQ(sh.data.to_vector<T>(), want) << where << " block on device " << sh.device.id();
  }
}

ts::PartitionSpec spec_from(const std::vector<ts::PartitionSpec::Entry>& e) { return ts::PartitionSpec(e); }

std::vector<ts::PartitionSpec::Entry> entries(const ts::NamedSharding& s, int rank) {
  std::vector<ts::PartitionSpec::Entry> e(rank);
  for (int d = 0; d < rank; ++d) e[d] = s.spec()[d];
  return e;
}

std::string ctx(const ts::NamedSharding& s, const ts::Shape& shape) {
  return s.str() + " shape " + ts::shape_str(shape);
}

// Python slice.indices + range, written as a plain enumeration.
std::vector<std::int64_t> py_slice(std::int64_t n, const ts::SliceSpec& sp) {
  const std::int64_t step = sp.step;
  auto clamp = [&](std::int64_t i, bool is_start) {
    if (i < 0) i += n;
    if (step > 0) return std::clamp<std::int64_t>(i, 0, n);
    (void)is_start;
    return std::clamp<std::int64_t>(i, -1, n - 1);
  };
  std::int64_t start = sp.start ? clamp(*sp.start, true) : (step > 0 ? 0 : n - 1);
  std::int64_t stop = sp.stop ? clamp(*sp.stop, false) : (step > 0 ? n : -1);
  std::vector<std::int64_t> out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return out;
}

template <class T>
std::vector<T> ref_slice(const std::vector<T>& v, const ts::Shape& s, const std::vector<ts::SliceSpec>& sl,
                         ts::Shape& out) {
  std::vector<std::vector<std::int64_t>> sel(s.size());
  out = s;
  for (size_t d = 0; d < s.size(); ++d) {
    if (d < sl.size()) {
      sel[d] = py_slice(s[d], sl[d]);
    } else {
      for (std::int64_t i = 0; i < s[d]; ++i) sel[d].push_back(i);
    }
    out[d] = static_cast<std::int64_t>(sel[d].size());
  }
  return build<T>(out, [&](const Idx& o) {
    Idx i(o.size());
    for (size_t d = 0; d < o.size(); ++d) i[d] = sel[d][o[d]];
    return v[ravel(i, s)];
  });
}

}  // namespace

// ----------------------------------------------------------------- transpose

TEST(Transpose, Golden) {
  auto mesh = ts::make_mesh({8}, {"x"});
  std::vector<int> host{1, 2, 3, 4, 5, 6};
  auto a = ts::device_put(host, {2, 3}, ts::NamedSharding(mesh, P("x")));
  auto t = ts::transpose(a);
  EXPECT_EQ(t.shape(), (ts::Shape{3, 2}));
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(t.sharding().spec(), P(ts::none, "x"));
  auto s = ts::swapaxes(a, 0, -1);
  EXPECT_EQ(s.to_vector<int>(), (std::vector<int>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(ts::typeof(s), "i32[3,2@x]");
  // Identity and rank 0.
  EXPECT_EQ(ts::transpose(a, {0, 1}).to_vector<int>(), host);
  auto sc = ts::device_put(std::vector<float>{2.5f}, {}, ts::NamedSharding(mesh, P()));
  EXPECT_EQ(ts::transpose(sc).item<float>(), 2.5f);
}

TEST(Transpose, SpmdProperty) {
  const std::vector<ts::Shape> shapes{{5, 3, 2}, {1, 7, 4}, {9, 2, 1}, {2, 0, 3}};
  const std::vector<std::vector<int>> perms{{}, {1, 0, 2}, {2, 0, 1}, {0, 2, -2}};
  for (const auto& shape : shapes) {
    auto host = iota_data<std::int64_t>(numel(shape));
    for_each_layout(3, [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(host, shape, s);
      for (auto perm : perms) {
        std::vector<int> p = perm.empty() ? std::vector<int>{2, 1, 0} : perm;
        for (auto& v : p) v = v < 0 ? v + 3 : v;
        ts::Array t;
        auto ex = ts::explain([&] { t = ts::transpose(a, perm); });
        EXPECT_EQ(ex.bytes_moved(), 0) << ctx(s, shape);
        ts::Shape out{shape[p[0]], shape[p[1]], shape[p[2]]};
        ASSERT_EQ(t.shape(), out);
        auto ref = build<std::int64_t>(out, [&](const Idx& o) {
          Idx i(3);
          for (int j = 0; j < 3; ++j) i[p[j]] = o[j];
          return host[ravel(i, shape)];
        });
        expect_array(t, ref, ctx(s, shape));
        auto e = entries(s, 3);
        EXPECT_EQ(t.sharding().spec(), spec_from({e[p[0]], e[p[1]], e[p[2]]})) << ctx(s, shape);
      }
    });
  }
}

// --------------------------------------------------- expand_dims and squeeze

TEST(ExpandSqueeze, GoldenAndNoCommunication) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  auto host = iota_data<float>(30);
  auto a = ts::device_put(host, {5, 6}, ts::NamedSharding(mesh, P("x", "y")));
  ts::Array e, s;
  auto ex = ts::explain([&] {
    e = ts::expand_dims(a, 1);
    s = ts::squeeze(e);
  });
  EXPECT_EQ(ex.bytes_moved(), 0);
  EXPECT_EQ(ts::typeof(e), "f32[5@x,1,6@y]");
  EXPECT_EQ(e.to_vector<float>(), host);
  EXPECT_EQ(ts::typeof(ts::expand_dims(a, -1)), "f32[5@x,6@y,1]");
  EXPECT_EQ(ts::typeof(ts::expand_dims(a, 0)), "f32[1,5@x,6@y]");
  EXPECT_EQ(ts::typeof(s), "f32[5@x,6@y]");
  EXPECT_EQ(s.to_vector<float>(), host);
  auto e2 = ts::expand_dims(ts::expand_dims(a, 0), 3);  // (1, 5, 6, 1)
  EXPECT_EQ(ts::squeeze(e2, {0}).shape(), (ts::Shape{5, 6, 1}));
  EXPECT_EQ(ts::squeeze(e2, {-1, 0}).shape(), (ts::Shape{5, 6}));
  EXPECT_EQ(ts::squeeze(e2, {-1, 0}).to_vector<float>(), host);
}

TEST(ExpandSqueeze, SqueezeShardedSizeOneDim) {
  // A size-1 dim sharded over 4 parts: only part 0 holds the element; the
  // squeezed output is replicated over that axis, fetching one row.
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  auto host = iota_data<int>(5);
  auto a = ts::device_put(host, {1, 5}, ts::NamedSharding(mesh, P("y", "x")));
  ts::Array s;
  auto ex = ts::explain([&] { s = ts::squeeze(a); });
  EXPECT_EQ(ts::typeof(s), "i32[5@x]");
  EXPECT_EQ(s.to_vector<int>(), host);
  EXPECT_GT(ex.bytes_moved(), 0);
  EXPECT_LE(ex.bytes_moved(), 8 * 3 * 4);  // each device at most its 3-element block
  for (const auto& sh : s.addressable_shards()) {
    auto v = sh.data.to_vector<int>();
    EXPECT_EQ(v, std::vector<int>(host.begin() + sh.index[0].start, host.begin() + sh.index[0].stop));
  }
}

TEST(ExpandSqueeze, SpmdProperty) {
  const std::vector<ts::Shape> shapes{{1, 3, 1}, {1, 1, 1}, {4, 1, 7}};
  for (const auto& shape : shapes) {
    auto host = iota_data<int>(numel(shape));
    for_each_layout(3, [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(host, shape, s);
      for (int axis = -4; axis < 4; ++axis) {
        auto e = ts::expand_dims(a, axis);
        EXPECT_EQ(e.ndim(), 4);
        EXPECT_EQ(e.to_vector<int>(), host);
        const int na = axis < 0 ? axis + 4 : axis;
        EXPECT_EQ(e.shape()[na], 1);
        auto en = entries(s, 3);
        en.insert(en.begin() + na, ts::none);
        EXPECT_EQ(e.sharding().spec(), spec_from(en)) << ctx(s, shape);
      }
      auto q = ts::squeeze(a);
      ts::Shape expect;
      std::vector<ts::PartitionSpec::Entry> en;
      for (int d = 0; d < 3; ++d)
        if (shape[d] != 1) {
          expect.push_back(shape[d]);
          en.push_back(s.spec()[d]);
        }
      EXPECT_EQ(q.shape(), expect);
      EXPECT_EQ(q.to_vector<int>(), host) << ctx(s, shape);
      EXPECT_EQ(q.sharding().spec(), spec_from(en)) << ctx(s, shape);
      // Every device's block is right (checks the replicated copies too).
      for (const auto& sh : q.addressable_shards()) {
        auto v = sh.data.to_vector<int>();
        std::vector<int> ref;
        ts::Shape bs;
        for (auto& sl : sh.index) bs.push_back(sl.size());
        for (std::int64_t k = 0; k < numel(bs); ++k) {
          Idx o = unravel(k, bs);
          for (size_t d = 0; d < o.size(); ++d) o[d] += sh.index[d].start;
          ref.push_back(host[ravel(o, expect)]);
        }
        EXPECT_EQ(v, ref) << ctx(s, shape);
      }
    });
  }
}

// ------------------------------------------------------------- broadcast_to

TEST(BroadcastTo, GoldenAndSharding) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<int> host{1, 2, 3};
  auto a = ts::device_put(host, {3}, ts::NamedSharding(mesh, P("y")));
  auto b = ts::broadcast_to(a, {2, 3});
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(ts::typeof(b), "i32[2,3@y]");
  auto c = ts::device_put(host, {3, 1}, ts::NamedSharding(mesh, P("x")));
  auto d = ts::broadcast_to(c, {2, 3, 4});
  EXPECT_EQ(ts::typeof(d), "i32[2,3@x,4]");
  EXPECT_EQ(d.to_vector<int>(), build<int>({2, 3, 4}, [&](const Idx& i) { return host[i[1]]; }));
  // Same shape: unchanged.
  EXPECT_EQ(ts::broadcast_to(a, {3}).sharding(), a.sharding());
}

TEST(BroadcastTo, SpmdProperty) {
  const std::vector<std::pair<ts::Shape, ts::Shape>> cases{
      {{3, 1}, {2, 3, 5}}, {{1, 4}, {3, 4}}, {{1, 1}, {2, 1, 6}}, {{5, 2}, {1, 5, 2}}, {{1, 3}, {0, 3}}};
  for (const auto& [in, out] : cases) {
    auto host = iota_data<double>(numel(in), 3);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(host, in, s);
      ts::Array b;
      auto ex = ts::explain([&] { b = ts::broadcast_to(a, out); });
      ASSERT_EQ(b.shape(), out);
      const int lead = static_cast<int>(out.size() - in.size());
      auto ref = build<double>(out, [&](const Idx& o) {
        Idx i(in.size());
        for (size_t d = 0; d < in.size(); ++d) i[d] = in[d] == 1 ? 0 : o[d + lead];
        return host[ravel(i, in)];
      });
      expect_array(b, ref, ctx(s, in));
      std::vector<ts::PartitionSpec::Entry> e(out.size(), ts::none);
      for (size_t d = 0; d < in.size(); ++d)
        if (in[d] == out[d + lead]) e[d + lead] = s.spec()[d];
      EXPECT_EQ(b.sharding().spec(), spec_from(e)) << ctx(s, in);
      // Communication only for size-1 dims that were sharded (their element lives on part 0).
      bool sharded_one = false;
      for (size_t d = 0; d < in.size(); ++d) sharded_one = sharded_one || (in[d] == 1 && s.num_parts(d) > 1);
      if (!sharded_one) {
        EXPECT_EQ(ex.bytes_moved(), 0) << ctx(s, in);
      }
      EXPECT_LE(ex.bytes_moved(), std::int64_t{8} * numel(in) * 8) << ctx(s, in);
    });
  }
}

// ------------------------------------------------------------------ reshape

TEST(Reshape, GoldenLocalLayouts) {
  auto mesh = ts::make_mesh({8}, {"x"});
  auto host = iota_data<float>(48);
  auto a = ts::device_put(host, {8, 6}, ts::NamedSharding(mesh, P("x")));
  auto a16 = ts::device_put(host, {16, 3}, ts::NamedSharding(mesh, P("x")));
  ts::Array r1, r2, r3;
  auto ex = ts::explain([&] {
    r1 = ts::reshape(a, {8, 2, 3});     // splits an unsharded dim
    r2 = ts::reshape(a, {48});          // merges with the sharded dim major, blocks aligned
    r3 = ts::reshape(a16, {8, 2, -1});  // splits the sharded dim, blocks aligned
  });
  EXPECT_EQ(ex.bytes_moved(), 0);
  EXPECT_EQ(ts::typeof(r1), "f32[8@x,2,3]");
  EXPECT_EQ(ts::typeof(r2), "f32[48@x]");
  EXPECT_EQ(ts::typeof(r3), "f32[8@x,2,3]");
  // Splitting the sharded dim into (4, 2) cannot keep 8 blocks of one row: it moves.
  ts::Array r6;
  auto ex4 = ts::explain([&] { r6 = ts::reshape(a, {4, 2, 6}); });
  EXPECT_EQ(ts::typeof(r6), "f32[4@x,2,6]");
  EXPECT_EQ(r6.to_vector<float>(), host);
  EXPECT_GT(ex4.bytes_moved(), 0);
  for (auto* r : {&r1, &r2, &r3}) EXPECT_EQ(r->to_vector<float>(), host);
  // A sharded minor dim stays local when it is split off / kept whole.
  auto b = ts::device_put(host, {6, 8}, ts::NamedSharding(mesh, P(ts::none, "x")));
  ts::Array r4;
  auto ex2 = ts::explain([&] { r4 = ts::reshape(b, {2, 3, 8}); });
  EXPECT_EQ(ex2.bytes_moved(), 0);
  EXPECT_EQ(ts::typeof(r4), "f32[2,3,8@x]");
  EXPECT_EQ(r4.to_vector<float>(), host);
  // Size-1 dims around a sharded dim.
  auto c = ts::device_put(host, {1, 48}, ts::NamedSharding(mesh, P(ts::none, "x")));
  ts::Array r5;
  auto ex3 = ts::explain([&] { r5 = ts::reshape(c, {48, 1}); });
  EXPECT_EQ(ex3.bytes_moved(), 0);
  EXPECT_EQ(ts::typeof(r5), "f32[48@x,1]");
}

TEST(Reshape, GoldenMovingLayouts) {
  auto mesh = ts::make_mesh({8}, {"x"});
  auto host = iota_data<int>(48);
  // The sharded dim is minor in a merge: the output is sharded on its first
  // dim and each device receives at most its block.
  auto a = ts::device_put(host, {6, 8}, ts::NamedSharding(mesh, P(ts::none, "x")));
  ts::Array r;
  auto ex = ts::explain([&] { r = ts::reshape(a, {48}); });
  EXPECT_EQ(ts::typeof(r), "i32[48@x]");
  EXPECT_EQ(r.to_vector<int>(), host);
  EXPECT_GT(ex.bytes_moved(), 0);
  EXPECT_LE(ex.bytes_moved(), 48 * 4);
  // Uneven: 3 rows over 2 parts do not align with 12 elements over 2 parts.
  auto m2 = ts::make_mesh({2}, {"x"}, {}, {ts::devices()[0], ts::devices()[1]});
  auto u = ts::device_put(std::vector<int>(host.begin(), host.begin() + 12), {3, 4}, ts::NamedSharding(m2, P("x")));
  auto ru = ts::reshape(u, {12});
  EXPECT_EQ(ts::typeof(ru), "i32[12@x]");
  EXPECT_EQ(ru.to_vector<int>(), std::vector<int>(host.begin(), host.begin() + 12));
  // Moving anyway: the axes go to a dim with at least as many elements as parts.
  auto m4 = ts::make_mesh({4}, {"x"}, {}, {ts::devices()[0], ts::devices()[1], ts::devices()[2], ts::devices()[3]});
  auto e8 = ts::device_put(std::vector<int>(host.begin(), host.begin() + 8), {8}, ts::NamedSharding(m4, P("x")));
  auto r8 = ts::reshape(e8, {2, 4});
  EXPECT_EQ(ts::typeof(r8), "i32[2,4@x]");
  expect_array(r8, std::vector<int>(host.begin(), host.begin() + 8), "(8,) -> (2, 4)");
  // out_sharding on an inner dim of a split.
  auto v = ts::device_put(host, {48}, ts::NamedSharding(mesh, P("x")));
  ts::Array rv;
  auto exv = ts::explain([&] { rv = ts::reshape(v, {6, 8}, {.out_sharding = P(ts::none, "x")}); });
  EXPECT_EQ(ts::typeof(rv), "i32[6,8@x]");
  EXPECT_EQ(rv.to_vector<int>(), host);
  EXPECT_LE(exv.bytes_moved(), 2 * 48 * 4);
  // Large split with the inner dim sharded: goes through the natural layout.
  auto big_host = iota_data<int>(64 * 40);
  auto w = ts::device_put(big_host, {64 * 40}, ts::NamedSharding(mesh, P("x")));
  ts::Array rw;
  auto exw = ts::explain([&] { rw = ts::reshape(w, {64, 40}, {.out_sharding = P(ts::none, "x")}); });
  EXPECT_EQ(ts::typeof(rw), "i32[64,40@x]");
  EXPECT_EQ(rw.to_vector<int>(), big_host);
  EXPECT_LE(exw.bytes_moved(), 64 * 40 * 4);
}

TEST(Reshape, ExplicitMode) {
  auto emesh = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  auto host = iota_data<float>(48);
  auto a = ts::device_put(host, {8, 6}, ts::NamedSharding(emesh, P("X")));
  EXPECT_EQ(ts::typeof(ts::reshape(a, {48})), "f32[48@X]");
  EXPECT_EQ(ts::typeof(ts::reshape(a, {8, 3, 2})), "f32[8@X,3,2]");
  auto b = ts::device_put(std::vector<float>(host.begin(), host.begin() + 24), {6, 4},
                          ts::NamedSharding(emesh, P("X")));
  expect_error<ts::ShardingError>([&] { ts::reshape(b, {24}); }, "[reshape]", {"out_sharding", "f32[6@X,4]"});
  auto r = ts::reshape(b, {24}, {.out_sharding = P("X")});
  EXPECT_EQ(ts::typeof(r), "f32[24@X]");
  EXPECT_EQ(r.to_vector<float>(), std::vector<float>(host.begin(), host.begin() + 24));
  auto r2 = ts::reshape(b, {24}, {.out_sharding = P()});
  EXPECT_EQ(ts::typeof(r2), "f32[24]");
  EXPECT_EQ(r2.to_vector<float>(), std::vector<float>(host.begin(), host.begin() + 24));
}

TEST(Reshape, SpmdProperty) {
  const std::vector<std::pair<ts::Shape, ts::Shape>> cases{
      {{12}, {3, 4}},      {{3, 4}, {12}},       {{3, 4}, {4, 3}},    {{6, 4}, {2, 3, 4}}, {{6, 4}, {3, 8}},
      {{2, 3, 4}, {6, 4}}, {{2, 3, 4}, {4, 6}},  {{7, 3}, {21}},      {{1, 6}, {6, 1}},    {{2, 1, 3}, {3, 2}},
      {{5}, {1, 5, 1}},    {{0, 4}, {2, 0}},     {{}, {1, 1}},        {{1, 1}, {}},        {{4, 9}, {6, 6}},
      {{5, 2}, {2, 5}},    {{16, 3}, {4, 12}},   {{2, 2}, {-1}},      {{3, 5}, {5, -1}}};
  std::mt19937 rng(7);
  for (const auto& [in, shape] : cases) {
    ts::Shape out = shape;
    for (auto& v : out)
      if (v == -1) v = numel(in) / std::max<std::int64_t>(1, -numel(shape));
    auto host = iota_data<int>(numel(in), 1);
    const int rank = static_cast<int>(in.size());
    auto check = [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(host, in, s);
      ts::Array r;
      auto ex = ts::explain([&] { r = ts::reshape(a, shape); });
      ASSERT_EQ(r.shape(), out) << ctx(s, in);
      expect_array(r, host, ctx(s, in));
      EXPECT_LE(ex.bytes_moved(), block_bytes(r)) << ctx(s, in);
      if (s.is_fully_replicated()) {
        EXPECT_EQ(ex.bytes_moved(), 0) << ctx(s, in);
      }
      // A requested layout.
      auto spec = random_spec(rng, s.mesh(), static_cast<int>(out.size()));
      ts::Array q;
      auto exq = ts::explain([&] { q = ts::reshape(a, shape, {.out_sharding = spec}); });
      EXPECT_EQ(q.sharding(), ts::NamedSharding(s.mesh(), spec)) << ctx(s, in) << " -> " << spec.str();
      EXPECT_EQ(q.to_vector<int>(), host) << ctx(s, in) << " -> " << spec.str();
      EXPECT_LE(exq.bytes_moved(), 2 * block_bytes(q)) << ctx(s, in) << " -> " << spec.str();
      // Every device's block is right.
      for (const auto& sh : q.addressable_shards()) {
        ts::Shape bs;
        for (auto& sl : sh.index) bs.push_back(sl.size());
        std::vector<int> ref;
        for (std::int64_t k = 0; k < numel(bs); ++k) {
          Idx o = unravel(k, bs);
          for (size_t d = 0; d < o.size(); ++d) o[d] += sh.index[d].start;
          ref.push_back(host[ravel(o, out)]);
        }
        EXPECT_EQ(sh.data.to_vector<int>(), ref) << ctx(s, in) << " -> " << spec.str();
      }
    };
    if (rank == 0) {
      for (const auto& m : test_meshes()) check(ts::NamedSharding(m, P()));
    } else {
      for_each_layout(rank, check);
    }
  }
}

// -------------------------------------------------------------------- slice

TEST(Slice, GoldenPythonSemantics) {
  auto mesh = ts::make_mesh({4}, {"x"}, {}, {ts::devices()[0], ts::devices()[1], ts::devices()[2], ts::devices()[3]});
  std::vector<int> host(10);
  for (int i = 0; i < 10; ++i) host[i] = i;
  auto a = ts::device_put(host, {10}, ts::NamedSharding(mesh, P("x")));
  using S = ts::SliceSpec;
  auto run = [&](S s) { return ts::slice(a, {s}).to_vector<int>(); };
  EXPECT_EQ(run(S{.step = -1}), (std::vector<int>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(run(S{.start = -3}), (std::vector<int>{7, 8, 9}));
  EXPECT_EQ(run(S{.start = 8, .stop = 2, .step = -2}), (std::vector<int>{8, 6, 4}));
  EXPECT_EQ(run(S{.start = 100, .stop = -100, .step = -3}), (std::vector<int>{9, 6, 3, 0}));
  EXPECT_EQ(run(S{.start = -100, .stop = 3}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(run(S{.start = 5, .stop = 5}), (std::vector<int>{}));
  EXPECT_EQ(run(S{.step = 3}), (std::vector<int>{0, 3, 6, 9}));
  EXPECT_EQ(run(S{.start = -1, .stop = -11, .step = -1}), (std::vector<int>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(run(S{.start = 3, .stop = -1, .step = -1}), (std::vector<int>{}));
  EXPECT_EQ(run(S{.start = 1, .stop = -1}), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(run(S{.stop = 100, .step = 4}), (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(run(S{.start = 2, .step = -5}), (std::vector<int>{2}));
  auto b = ts::slice(a, {S{.start = 1, .stop = -1}});
  EXPECT_EQ(ts::typeof(b), "i32[8@x]");
  // Whole slices give the array back.
  EXPECT_EQ(ts::slice(a, {}).to_vector<int>(), host);
  EXPECT_EQ(ts::slice(a, {S{}}).sharding(), a.sharding());
}

TEST(Slice, HaloOnlyCommunication) {
  auto mesh = ts::make_mesh({8}, {"x"});
  auto host = iota_data<float>(64 * 64);
  auto a = ts::device_put(host, {64, 64}, ts::NamedSharding(mesh, P("x", ts::none)));
  ts::Array b;
  auto ex = ts::explain([&] { b = ts::slice(a, {{.start = 1, .stop = -1}, {.start = 2}}); });
  ts::Shape out;
  EXPECT_EQ(b.to_vector<float>(), ref_slice(host, {64, 64}, {{.start = 1, .stop = -1}, {.start = 2}}, out));
  EXPECT_EQ(ts::typeof(b), "f32[62@x,62]");
  // Blocks of 62 rows vs 64 rows drift by at most 2 rows per device.
  EXPECT_GT(ex.bytes_moved(), 0);
  EXPECT_LE(ex.bytes_moved(), 8 * 2 * 64 * 4);
  // Along the unsharded dim: nothing moves.
  auto ex2 = ts::explain([&] { b = ts::slice(a, {{}, {.start = 3, .stop = 50, .step = 2}}); });
  EXPECT_EQ(ex2.bytes_moved(), 0);
  ASSERT_FALSE(ex2.records.empty());
  EXPECT_EQ(ex2.records[0].op, "slice");
}

TEST(Slice, SpmdProperty) {
  using S = ts::SliceSpec;
  const std::vector<ts::Shape> shapes{{9, 4}, {3, 5}, {1, 2}, {13, 1}};
  const std::vector<std::vector<S>> specs{
      {S{.start = 1, .stop = -1}},
      {S{.step = -1}, S{.start = 1}},
      {S{.start = -2, .stop = 0, .step = -2}, S{.step = 2}},
      {S{.start = 2, .stop = 7, .step = 3}, S{.start = -1}},
      {S{.start = 5, .stop = 2}},
      {S{}, S{.start = 3, .stop = 1, .step = -1}},
      {S{.start = 0, .stop = 1}},
  };
  for (const auto& shape : shapes) {
    auto host = iota_data<std::int32_t>(numel(shape), 2);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(host, shape, s);
      for (const auto& sp : specs) {
        ts::Shape out;
        auto ref = ref_slice(host, shape, sp, out);
        ts::Array b;
        auto ex = ts::explain([&] { b = ts::slice(a, sp); });
        ASSERT_EQ(b.shape(), out) << ctx(s, shape);
        expect_array(b, ref, ctx(s, shape));
        EXPECT_EQ(b.sharding(), s);
        // The fetched box spans the gaps of a strided slice.
        std::int64_t step = 1;
        for (const auto& x : sp) step *= std::abs(x.step);
        EXPECT_LE(ex.bytes_moved(), block_bytes(b) * step) << ctx(s, shape);
      }
    });
  }
}

// ---------------------------------------------------------------------- pad

TEST(Pad, GoldenAndDtypes) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<int> host{1, 2, 3, 4, 5, 6};
  auto a = ts::device_put(host, {2, 3}, ts::NamedSharding(mesh, P("x", "y")));
  auto p = ts::pad(a, {{1, 0}, {0, 2}}, 9);
  EXPECT_EQ(ts::typeof(p), "i32[3@x,5@y]");
  EXPECT_EQ(p.to_vector<int>(), (std::vector<int>{9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 4, 5, 6, 9, 9}));
  // One pair for every dim; default value 0.
  auto q = ts::pad(a, {{1, 1}});
  EXPECT_EQ(q.shape(), (ts::Shape{4, 5}));
  EXPECT_EQ(q.to_vector<int>()[6], 1);
  EXPECT_EQ(q.to_vector<int>()[0], 0);
  // Float value into an int array truncates; bool arrays take truthiness.
  EXPECT_EQ(ts::pad(a, {{0, 1}, {0, 0}}, 2.7).to_vector<int>().back(), 2);
  auto bo = ts::device_put(std::vector<bool>{false, true}, {2}, ts::NamedSharding(mesh, P("y")));
  EXPECT_EQ(ts::pad(bo, {{1, 1}}, true).to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  auto f = ts::device_put(std::vector<double>{1.5}, {1}, ts::NamedSharding(mesh, P("x")));
  EXPECT_EQ(ts::pad(f, {{2, 0}}, -0.25).to_vector<double>(), (std::vector<double>{-0.25, -0.25, 1.5}));
  EXPECT_EQ(ts::pad(a, {{0, 0}, {0, 0}}).sharding(), a.sharding());
}

TEST(Pad, HaloOnlyCommunication) {
  auto mesh = ts::make_mesh({8}, {"x"});
  auto host = iota_data<float>(64 * 64);
  auto a = ts::device_put(host, {64, 64}, ts::NamedSharding(mesh, P("x", ts::none)));
  for (std::int64_t w : {1, 2, 3}) {
    ts::Array p;
    auto ex = ts::explain([&] { p = ts::pad(a, {{w, w}, {0, 0}}, 1.0f); });
    EXPECT_EQ(ts::typeof(p), "f32[" + std::to_string(64 + 2 * w) + "@x,64]");
    EXPECT_LE(ex.bytes_moved(), 8 * w * 64 * 4 * 2) << ex.str();
    auto v = p.to_vector<float>();
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[w * 64], host[0]);
    EXPECT_EQ(v[(64 + w) * 64 - 1], host.back());
  }
}

TEST(Pad, SpmdProperty) {
  const std::vector<ts::Shape> shapes{{7, 3}, {2, 5}, {1, 1}, {0, 3}};
  const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> widths{
      {{1, 2}, {0, 0}}, {{0, 0}, {3, 1}}, {{2, 2}, {1, 1}}, {{5, 0}, {0, 4}}};
  for (const auto& shape : shapes) {
    auto host = iota_data<float>(numel(shape), 5);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(host, shape, s);
      for (const auto& w : widths) {
        ts::Shape out{shape[0] + w[0].first + w[0].second, shape[1] + w[1].first + w[1].second};
        ts::Array p;
        auto ex = ts::explain([&] { p = ts::pad(a, w, -7.5f); });
        ASSERT_EQ(p.shape(), out);
        auto ref = build<float>(out, [&](const Idx& o) {
          const std::int64_t i = o[0] - w[0].first, j = o[1] - w[1].first;
          if (i < 0 || j < 0 || i >= shape[0] || j >= shape[1]) return -7.5f;
          return host[i * shape[1] + j];
        });
        expect_array(p, ref, ctx(s, shape));
        EXPECT_EQ(p.sharding(), s);
        EXPECT_LE(ex.bytes_moved(), block_bytes(p)) << ctx(s, shape);
      }
    });
  }
}

// --------------------------------------------------------------- roll, flip

TEST(RollFlip, Golden) {
  auto mesh = ts::make_mesh({4}, {"x"}, {}, {ts::devices()[4], ts::devices()[5], ts::devices()[6], ts::devices()[7]});
  std::vector<std::int64_t> host{0, 1, 2, 3, 4};
  auto a = ts::device_put(host, {5}, ts::NamedSharding(mesh, P("x")));
  EXPECT_EQ(ts::roll(a, 2, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 4, 0, 1, 2}));
  EXPECT_EQ(ts::roll(a, -1, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3, 4, 0}));
  EXPECT_EQ(ts::roll(a, 12, -1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 4, 0, 1, 2}));
  EXPECT_EQ(ts::roll(a, 5, 0).sharding(), a.sharding());
  EXPECT_EQ(ts::flip(a, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(ts::typeof(ts::flip(a, 0)), "i64[5@x]");
}

TEST(RollFlip, RollHaloOnly) {
  auto mesh = ts::make_mesh({8}, {"x"});
  auto host = iota_data<float>(64 * 64);
  auto a = ts::device_put(host, {64, 64}, ts::NamedSharding(mesh, P("x", ts::none)));
  ts::Array r;
  auto ex = ts::explain([&] { r = ts::roll(a, 3, 0); });
  EXPECT_LE(ex.bytes_moved(), 8 * 3 * 64 * 4);
  EXPECT_GT(ex.bytes_moved(), 0);
  auto v = r.to_vector<float>();
  EXPECT_EQ(v[0], host[61 * 64]);
  EXPECT_EQ(v[3 * 64], host[0]);
  // Rolling an unsharded dim moves nothing.
  auto ex2 = ts::explain([&] { r = ts::roll(a, -5, 1); });
  EXPECT_EQ(ex2.bytes_moved(), 0);
}

TEST(RollFlip, SpmdProperty) {
  const std::vector<ts::Shape> shapes{{7, 3}, {3, 8}, {1, 2}, {2, 0}};
  for (const auto& shape : shapes) {
    auto host = iota_data<double>(numel(shape), 4);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto a = ts::device_put(host, shape, s);
      for (int axis : {0, 1, -1}) {
        const int ax = axis < 0 ? axis + 2 : axis;
        const std::int64_t n = shape[ax];
        for (std::int64_t shift : {1, -2, 4, 11}) {
          ts::Array r;
          auto ex = ts::explain([&] { r = ts::roll(a, shift, axis); });
          auto ref = build<double>(shape, [&](const Idx& o) {
            Idx i = o;
            i[ax] = ((o[ax] - shift) % n + n) % n;
            return host[ravel(i, shape)];
          });
          expect_array(r, ref, ctx(s, shape) + " shift " + std::to_string(shift));
          EXPECT_EQ(r.sharding(), s);
          EXPECT_LE(ex.bytes_moved(), block_bytes(r)) << ctx(s, shape);
        }
        auto f = ts::flip(a, axis);
        auto ref = build<double>(shape, [&](const Idx& o) {
          Idx i = o;
          i[ax] = n - 1 - o[ax];
          return host[ravel(i, shape)];
        });
        expect_array(f, ref, ctx(s, shape));
        EXPECT_EQ(f.sharding(), s);
      }
    });
  }
}

// ------------------------------------------------------- concatenate, stack

TEST(Concatenate, GoldenAndPromotion) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  auto a = ts::device_put(std::vector<int>{1, 2, 3, 4}, {2, 2}, ts::NamedSharding(mesh, P("x")));
  auto b = ts::device_put(std::vector<float>{5.5f, 6.5f}, {1, 2}, ts::NamedSharding(mesh, P(ts::none, "y")));
  auto c = ts::concatenate({a, b}, 0);
  EXPECT_EQ(ts::typeof(c), "f32[3@x,2]");
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5.5f, 6.5f}));
  auto d = ts::concatenate({a, a}, -1);
  EXPECT_EQ(d.to_vector<int>(), (std::vector<int>{1, 2, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(ts::typeof(d), "i32[2@x,4]");
  auto e = ts::concatenate({a}, 1);
  EXPECT_EQ(e.to_vector<int>(), (std::vector<int>{1, 2, 3, 4}));
  auto st = ts::stack({a, a, a}, 1);
  EXPECT_EQ(st.shape(), (ts::Shape{2, 3, 2}));
  EXPECT_EQ(ts::typeof(st), "i32[2@x,3,2]");
  EXPECT_EQ(st.to_vector<int>(), (std::vector<int>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  auto st2 = ts::stack({a, a}, -1);
  EXPECT_EQ(st2.shape(), (ts::Shape{2, 2, 2}));
  EXPECT_EQ(st2.to_vector<int>(), (std::vector<int>{1, 1, 2, 2, 3, 3, 4, 4}));
  // Zero-size operands.
  auto z = ts::device_put(std::vector<int>{}, {0, 2}, ts::NamedSharding(mesh, P("y")));
  EXPECT_EQ(ts::concatenate({z, a, z}, 0).to_vector<int>(), (std::vector<int>{1, 2, 3, 4}));
}

TEST(Concatenate, AppendRowMovesBoundaryOnly) {
  auto mesh = ts::make_mesh({8}, {"x"});
  auto host = iota_data<float>(64 * 64);
  auto a = ts::device_put(host, {64, 64}, ts::NamedSharding(mesh, P("x", ts::none)));
  auto row = ts::device_put(std::vector<float>(64, 3.0f), {1, 64}, ts::NamedSharding(mesh, P()));
  ts::Array c;
  auto ex = ts::explain([&] { c = ts::concatenate({row, a, row}, 0); });
  EXPECT_EQ(ts::typeof(c), "f32[66@x,64]");  // the largest operand's sharding
  EXPECT_LE(ex.bytes_moved(), 8 * 2 * 64 * 4) << ex.str();
  ts::Array d;
  auto ex2 = ts::explain([&] { d = ts::concatenate({a, row}, 0); });
  EXPECT_EQ(ts::typeof(d), "f32[65@x,64]");
  EXPECT_LE(ex2.bytes_moved(), 8 * 2 * 64 * 4) << ex2.str();
  auto v = d.to_vector<float>();
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 64 * 64), host);
  EXPECT_EQ(v.back(), 3.0f);
  EXPECT_EQ(c.to_vector<float>()[64], host[0]);
}

TEST(Concatenate, SpmdProperty) {
  const std::vector<std::vector<ts::Shape>> cases{
      {{3, 4}, {5, 4}}, {{1, 2}, {1, 2}, {6, 2}}, {{4, 2}, {0, 2}, {3, 2}}, {{2, 3}, {2, 1}}};
  std::mt19937 rng(11);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& shapes = cases[ci];
    const int axis = ci == 3 ? 1 : 0;
    std::vector<std::vector<int>> hosts;
    for (size_t k = 0; k < shapes.size(); ++k) hosts.push_back(iota_data<int>(numel(shapes[k]), int(k) * 13));
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      std::vector<ts::Array> xs;
      for (size_t k = 0; k < shapes.size(); ++k) {
        // The first operand takes the layout; the others a random one. The
        // output takes the largest operand's sharding (the first among equals).
        ts::NamedSharding sk = k == 0 ? s : ts::NamedSharding(s.mesh(), random_spec(rng, s.mesh(), 2));
        xs.push_back(ts::device_put(hosts[k], shapes[k], sk));
      }
      ts::Array c;
      auto ex = ts::explain([&] { c = ts::concatenate(xs, axis); });
      ts::Shape out = shapes[0];
      out[axis] = 0;
      for (const auto& sh : shapes) out[axis] += sh[axis];
      auto ref = build<int>(out, [&](const Idx& o) {
        std::int64_t i = o[axis];
        for (size_t k = 0; k < shapes.size(); ++k) {
          if (i < shapes[k][axis]) {
            Idx j = o;
            j[axis] = i;
            return hosts[k][ravel(j, shapes[k])];
          }
          i -= shapes[k][axis];
        }
        return -1000;
      });
      expect_array(c, ref, ctx(s, out));
      size_t big = 0;
      for (size_t k = 1; k < xs.size(); ++k)
        if (xs[k].size() > xs[big].size()) big = k;
      EXPECT_EQ(c.sharding(), xs[big].sharding());
      EXPECT_LE(ex.bytes_moved(), block_bytes(c)) << ctx(s, out);
      auto st = ts::stack(std::vector<ts::Array>{xs[0], xs[0]}, 1);
      auto ref2 = build<int>({shapes[0][0], 2, shapes[0][1]},
                             [&](const Idx& o) { return hosts[0][o[0] * shapes[0][1] + o[2]]; });
      expect_array(st, ref2, ctx(s, out));
      EXPECT_EQ(st.sharding().spec(), spec_from({s.spec()[0], ts::none, s.spec()[1]}));
    });
  }
}

// ------------------------------------------------------------------- errors

TEST(ShapeErrors, Messages) {
  auto mesh = ts::make_mesh({8}, {"x"});
  auto a = ts::device_put(iota_data<float>(12), {3, 4}, ts::NamedSharding(mesh, P("x")));
  using ts::ShapeError;
  expect_error<ShapeError>([&] { ts::transpose(a, {0, 0}); }, "[transpose]", {"(0, 0)", "permutation"});
  expect_error<ShapeError>([&] { ts::transpose(a, {0}); }, "[transpose]", {"rank 2"});
  expect_error<ShapeError>([&] { ts::transpose(a, {0, 2}); }, "[transpose]", {"permutation"});
  expect_error<ShapeError>([&] { ts::swapaxes(a, 0, 2); }, "[swapaxes]", {"axis 2"});
  expect_error<ShapeError>([&] { ts::reshape(a, {5, 2}); }, "[reshape]", {"(3, 4)", "(5, 2)", "12"});
  expect_error<ShapeError>([&] { ts::reshape(a, {-1, -1}); }, "[reshape]", {"-1"});
  expect_error<ShapeError>([&] { ts::reshape(a, {5, -1}); }, "[reshape]", {"infer"});
  expect_error<ShapeError>([&] { ts::reshape(a, {-2, -6}); }, "[reshape]", {">= 0"});
  expect_error<ts::ShardingError>([&] { ts::reshape(a, {12}, {.out_sharding = P("z")}); }, "[reshape]", {"'z'"});
  expect_error<ts::ShardingError>([&] { ts::reshape(a, {12}, {.out_sharding = P("x", ts::none)}); }, "[reshape]",
                                  {"rank 1"});
  expect_error<ShapeError>([&] { ts::broadcast_to(a, {3, 5}); }, "[broadcast_to]", {"(3, 4)", "(3, 5)"});
  expect_error<ShapeError>([&] { ts::broadcast_to(a, {4}); }, "[broadcast_to]", {"fewer dims"});
  expect_error<ShapeError>([&] { ts::expand_dims(a, 3); }, "[expand_dims]", {"axis 3"});
  expect_error<ShapeError>([&] { ts::expand_dims(a, -4); }, "[expand_dims]", {"axis -4"});
  expect_error<ShapeError>([&] { ts::squeeze(a, {0}); }, "[squeeze]", {"size 3", "size-1"});
  auto e = ts::expand_dims(a, 0);
  expect_error<ShapeError>([&] { ts::squeeze(e, {0, -3}); }, "[squeeze]", {"more than once"});
  expect_error<ShapeError>([&] { ts::squeeze(e, {5}); }, "[squeeze]", {"axis 5"});
  expect_error<ShapeError>([&] { ts::slice(a, {{.step = 0}}); }, "[slice]", {"step", "zero"});
  expect_error<ShapeError>([&] { ts::slice(a, {{}, {}, {}}); }, "[slice]", {"3 slices", "rank 2"});
  expect_error<ShapeError>([&] { ts::pad(a, {{-1, 0}, {0, 0}}); }, "[pad]", {">= 0", "(-1, 0)", "dim 0"});
  expect_error<ShapeError>([&] { ts::pad(a, {{0, 0}, {0, -2}}); }, "[pad]", {"dim 1"});
  expect_error<ShapeError>([&] { ts::pad(a, {{0, 0}, {0, 0}, {1, 1}}); }, "[pad]", {"expected 2", "got 3"});
  expect_error<ShapeError>([&] { ts::roll(a, 1, 2); }, "[roll]", {"axis 2"});
  expect_error<ShapeError>([&] { ts::flip(a, -3); }, "[flip]", {"axis -3"});
  auto b = ts::device_put(iota_data<float>(10), {2, 5}, ts::NamedSharding(mesh, P()));
  expect_error<ShapeError>([&] { ts::concatenate({a, b}, 0); }, "[concatenate]", {"(3, 4)", "(2, 5)", "axis 0"});
  expect_error<ShapeError>([&] { ts::concatenate({}, 0); }, "[concatenate]", {"at least one"});
  expect_error<ShapeError>([&] { ts::concatenate({a, ts::expand_dims(a, 0)}, 0); }, "[concatenate]", {"rank"});
  expect_error<ShapeError>([&] { ts::concatenate({a, a}, 2); }, "[concatenate]", {"axis 2"});
  auto sc = ts::device_put(std::vector<float>{1}, {}, ts::NamedSharding(mesh, P()));
  expect_error<ShapeError>([&] { ts::concatenate({sc, sc}, 0); }, "[concatenate]", {"zero-dimensional"});
  expect_error<ShapeError>([&] { ts::stack({a, b}, 0); }, "[stack]", {"same shape", "(3, 4)", "(2, 5)"});
  expect_error<ShapeError>([&] { ts::stack({}, 0); }, "[stack]", {"at least one"});
  expect_error<ShapeError>([&] { ts::stack({a, a}, 3); }, "[stack]", {"axis 3"});
  // Different meshes, Explicit disagreement, empty arrays.
  auto m2 = ts::make_mesh({2, 4}, {"x", "y"});
  auto c = ts::device_put(iota_data<float>(12), {3, 4}, ts::NamedSharding(m2, P("x")));
  expect_error<ts::ShardingError>([&] { ts::concatenate({a, c}, 0); }, "[concatenate]", {"different meshes"});
  auto em = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  auto ea = ts::device_put(iota_data<float>(12), {3, 4}, ts::NamedSharding(em, P("X")));
  auto eb = ts::device_put(iota_data<float>(12), {3, 4}, ts::NamedSharding(em, P(ts::none, "X")));
  expect_error<ts::ShardingError>([&] { ts::concatenate({ea, eb}, 0); }, "[concatenate]",
                                  {"f32[3@X,4]", "f32[3,4@X]", "reshard"});
  EXPECT_EQ(ts::typeof(ts::concatenate({ea, ea}, 0)), "f32[6@X,4]");
  ts::Array empty;
  expect_error<ts::Error>([&] { ts::transpose(empty); }, "[transpose]", {"empty", "default-constructed"});
  expect_error<ts::Error>([&] { ts::slice(empty, {}); }, "[slice]", {"empty", "default-constructed"});
  expect_error<ts::Error>([&] { ts::concatenate({a, empty}, 0); }, "[concatenate]", {"empty", "default-constructed"});
  expect_error<ts::Error>([&] { ts::reshape(empty, {1}); }, "[reshape]", {"empty", "default-constructed"});
}

// ------------------------------------------------------------------ dtypes

template <class T>
void dtype_sweep() {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  const ts::Shape shape{5, 3};
  auto host = iota_data<T>(15, 3);
  if constexpr (std::is_same_v<T, bool>) {
    // Both values, so a kernel that moves nothing or fills a constant fails.
    const auto trues = std::count(host.begin(), host.end(), true);
    ASSERT_GT(trues, 3);
    ASSERT_LT(trues, 12);
  }
  auto a = ts::device_put(host, shape, ts::NamedSharding(mesh, P("y", "x")));
  const std::string name = ts::dtype_name(ts::dtype_of<T>());
  auto at = [&](std::int64_t i, std::int64_t j) -> T { return host[i * 3 + j]; };
  expect_array(ts::transpose(a), build<T>({3, 5}, [&](const Idx& o) { return at(o[1], o[0]); }), name + " transpose");
  expect_array(ts::slice(a, {{.step = -2}}), build<T>({3, 3}, [&](const Idx& o) { return at(4 - 2 * o[0], o[1]); }),
               name + " slice");
  expect_array(ts::pad(a, {{1, 0}, {0, 1}}, 1), build<T>({6, 4}, [&](const Idx& o) {
                 return o[0] == 0 || o[1] == 3 ? static_cast<T>(1) : at(o[0] - 1, o[1]);
               }),
               name + " pad");
  expect_array(ts::roll(a, 2, 0), build<T>(shape, [&](const Idx& o) { return at((o[0] + 3) % 5, o[1]); }),
               name + " roll");
  expect_array(ts::flip(a, 1), build<T>(shape, [&](const Idx& o) { return at(o[0], 2 - o[1]); }), name + " flip");
  expect_array(ts::concatenate({a, a}, 1), build<T>({5, 6}, [&](const Idx& o) { return at(o[0], o[1] % 3); }),
               name + " concatenate");
  expect_array(ts::broadcast_to(ts::expand_dims(a, 1), {5, 2, 3}),
               build<T>({5, 2, 3}, [&](const Idx& o) { return at(o[0], o[2]); }), name + " broadcast_to");
  expect_array(ts::reshape(a, {15}), host, name + " reshape");
  expect_array(ts::reshape(a, {3, 5}, {.out_sharding = P(ts::none, {"x", "y"})}), host, name + " reshape out");
  EXPECT_EQ(ts::slice(a, {{.step = -2}}).dtype(), ts::dtype_of<T>());
}

TEST(ShapeDtypes, EveryDtype) {
  dtype_sweep<bool>();
  dtype_sweep<std::int32_t>();
  dtype_sweep<std::int64_t>();
  dtype_sweep<float>();
  dtype_sweep<double>();
}

// -------------------------------------------------------------------- fuzz

// Random shapes (with zeros and ones), meshes, layouts and arguments; every
// result checked block by block against the host reference.
TEST(ShapeFuzz, RandomOps) {
  const char* seed_env = std::getenv("TESSERA_FUZZ_SEED");
  const char* iters_env = std::getenv("TESSERA_FUZZ_ITERS");
  std::mt19937 rng(seed_env ? std::atoi(seed_env) : 2024);
  const int iters = iters_env ? std::atoi(iters_env) : 600;
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto meshes = test_meshes();
  for (int it = 0; it < iters; ++it) {
    const ts::Mesh& m = meshes[uni(0, static_cast<int>(meshes.size()) - 1)];
    const int rank = uni(1, 3);
    ts::Shape shape(rank);
    for (auto& d : shape) d = uni(0, 11) == 0 ? 0 : uni(1, 7);
    ts::NamedSharding s(m, random_spec(rng, m, rank));
    auto host = iota_data<int>(numel(shape), it);
    auto a = ts::device_put(host, shape, s);
    const std::string where = "it " + std::to_string(it) + " " + ctx(s, shape);
    switch (uni(0, 7)) {
      case 0: {  // slice
        std::vector<ts::SliceSpec> sp(uni(0, rank));
        for (auto& x : sp) {
          if (uni(0, 2)) x.start = uni(-9, 9);
          if (uni(0, 2)) x.stop = uni(-9, 9);
          x.step = uni(0, 1) ? uni(1, 3) : -uni(1, 3);
        }
        ts::Shape out;
        auto ref = ref_slice(host, shape, sp, out);
        ts::Array b;
        auto ex = ts::explain([&] { b = ts::slice(a, sp); });
        ASSERT_EQ(b.shape(), out) << where;
        std::int64_t steps = 1;
        for (const auto& x : sp) steps *= std::abs(x.step);
        EXPECT_LE(ex.bytes_moved(), steps * block_bytes(b)) << where;
        expect_array(b, ref, where + " slice");
        EXPECT_EQ(b.sharding(), s);
        break;
      }
      case 1: {  // pad
        std::vector<std::pair<std::int64_t, std::int64_t>> w(rank);
        ts::Shape out = shape;
        for (int d = 0; d < rank; ++d) {
          w[d] = {uni(0, 3), uni(0, 3)};
          out[d] += w[d].first + w[d].second;
        }
        const int v = uni(-5, 5);
        auto ref = build<int>(out, [&](const Idx& o) {
          Idx i(rank);
          for (int d = 0; d < rank; ++d) {
            i[d] = o[d] - w[d].first;
            if (i[d] < 0 || i[d] >= shape[d]) return v;
          }
          return host[ravel(i, shape)];
        });
        ts::Array p;
        auto ex = ts::explain([&] { p = ts::pad(a, w, v); });
        expect_array(p, ref, where + " pad");
        EXPECT_LE(ex.bytes_moved(), block_bytes(p)) << where;
        break;
      }
      case 2: {  // roll
        const int ax = uni(0, rank - 1);
        const std::int64_t shift = uni(-10, 10), n = shape[ax];
        auto ref = n == 0 ? host : build<int>(shape, [&](const Idx& o) {
          Idx i = o;
          i[ax] = ((o[ax] - shift) % n + n) % n;
          return host[ravel(i, shape)];
        });
        ts::Array r;
        auto ex = ts::explain([&] { r = ts::roll(a, shift, ax); });
        expect_array(r, ref, where + " roll " + std::to_string(shift));
        EXPECT_LE(ex.bytes_moved(), block_bytes(r)) << where;
        break;
      }
      case 3: {  // flip
        const int ax = uni(0, rank - 1);
        auto ref = build<int>(shape, [&](const Idx& o) {
          Idx i = o;
          i[ax] = shape[ax] - 1 - o[ax];
          return host[ravel(i, shape)];
        });
        expect_array(ts::flip(a, ax), ref, where + " flip");
        break;
      }
      case 4: {  // transpose
        std::vector<int> perm(rank);
        for (int d = 0; d < rank; ++d) perm[d] = d;
        std::shuffle(perm.begin(), perm.end(), rng);
        ts::Shape out(rank);
        for (int j = 0; j < rank; ++j) out[j] = shape[perm[j]];
        auto ref = build<int>(out, [&](const Idx& o) {
          Idx i(rank);
          for (int j = 0; j < rank; ++j) i[perm[j]] = o[j];
          return host[ravel(i, shape)];
        });
        expect_array(ts::transpose(a, perm), ref, where + " transpose");
        break;
      }
      case 5: {  // reshape, sometimes with a requested layout
        const std::int64_t total = numel(shape);
        ts::Shape out(uni(0, 4), 1);
        if (total == 0) {
          if (out.empty()) out.push_back(1);
          out[uni(0, static_cast<int>(out.size()) - 1)] = 0;
        } else {
          if (out.empty() && total > 1) out.push_back(1);
          std::int64_t n = total;
          for (std::int64_t p = 2; n > 1; ++p)
            while (n % p == 0) {
              out[uni(0, static_cast<int>(out.size()) - 1)] *= p;
              n /= p;
            }
        }
        std::optional<ts::PartitionSpec> want;
        if (uni(0, 1)) want = random_spec(rng, m, static_cast<int>(out.size()));
        ts::Array r;
        auto ex = ts::explain([&] { r = ts::reshape(a, out, {.out_sharding = want}); });
        ASSERT_EQ(r.shape(), out) << where;
        EXPECT_LE(ex.bytes_moved(), 2 * block_bytes(r)) << where;
        if (want) {
          EXPECT_EQ(r.sharding(), ts::NamedSharding(m, *want)) << where;
        }
        expect_array(r, host, where + " reshape to " + ts::shape_str(out));
        break;
      }
      case 6: {  // concatenate with another operand
        const int ax = uni(0, rank - 1);
        ts::Shape other = shape;
        other[ax] = uni(0, 5);
        auto host2 = iota_data<int>(numel(other), it + 50);
        auto b = ts::device_put(host2, other, ts::NamedSharding(m, random_spec(rng, m, rank)));
        ts::Shape out = shape;
        out[ax] += other[ax];
        auto ref = build<int>(out, [&](const Idx& o) {
          Idx i = o;
          if (o[ax] < shape[ax]) return host[ravel(i, shape)];
          i[ax] -= shape[ax];
          return host2[ravel(i, other)];
        });
        ts::Array c;
        auto ex = ts::explain([&] { c = ts::concatenate({a, b}, ax); });
        expect_array(c, ref, where + " concatenate");
        EXPECT_LE(ex.bytes_moved(), block_bytes(c)) << where;
        EXPECT_EQ(c.sharding(), b.size() > a.size() ? b.sharding() : a.sharding()) << where;
        break;
      }
      case 7: {  // broadcast_to
        ts::Shape out;
        const int lead = uni(0, 2);
        for (int j = 0; j < lead; ++j) out.push_back(uni(0, 3));
        for (auto d : shape) out.push_back(d == 1 ? uni(0, 4) : d);
        auto ref = build<int>(out, [&](const Idx& o) {
          Idx i(rank);
          for (int d = 0; d < rank; ++d) i[d] = shape[d] == 1 ? 0 : o[d + lead];
          return host[ravel(i, shape)];
        });
        ts::Array bc;
        auto ex = ts::explain([&] { bc = ts::broadcast_to(a, out); });
        expect_array(bc, ref, where + " broadcast_to " + ts::shape_str(out));
        EXPECT_LE(ex.bytes_moved(), block_bytes(bc)) << where;
        break;
      }
    }
  }
}

// Larger reshapes: layouts that need many boxes per device go through the
// natural layout; traffic stays within twice the output blocks.
TEST(ShapeFuzz, LargerReshapes) {
  const char* seed_env = std::getenv("TESSERA_FUZZ_SEED");
  std::mt19937 rng(seed_env ? std::atoi(seed_env) : 99);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto meshes = test_meshes();
  const std::vector<int> primes{2, 2, 2, 3, 3, 5, 7};
  for (int it = 0; it < 80; ++it) {
    const ts::Mesh& m = meshes[uni(0, static_cast<int>(meshes.size()) - 1)];
    // A product of a few small primes, split two random ways.
    std::vector<int> f;
    for (int k = uni(3, 9); k > 0; --k) f.push_back(primes[uni(0, static_cast<int>(primes.size()) - 1)]);
    auto split = [&] {
      ts::Shape s(uni(1, 4), 1);
      for (int p : f) s[uni(0, static_cast<int>(s.size()) - 1)] *= p;
      return s;
    };
    const ts::Shape in = split(), out = split();
    ts::NamedSharding s(m, random_spec(rng, m, static_cast<int>(in.size())));
    auto host = iota_data<float>(numel(in), it);
    auto a = ts::device_put(host, in, s);
    const std::string where = "it " + std::to_string(it) + " " + ctx(s, in) + " -> " + ts::shape_str(out);
    ts::Array r;
    auto ex = ts::explain([&] { r = ts::reshape(a, out); });
    expect_array(r, host, where);
    EXPECT_LE(ex.bytes_moved(), block_bytes(r)) << where;
    auto spec = random_spec(rng, m, static_cast<int>(out.size()));
    ts::Array q;
    auto exq = ts::explain([&] { q = ts::reshape(a, out, {.out_sharding = spec}); });
    expect_array(q, host, where + " out " + spec.str());
    EXPECT_EQ(q.sharding(), ts::NamedSharding(m, spec));
    EXPECT_LE(exq.bytes_moved(), 2 * block_bytes(q)) << where << " out " << spec.str();
  }
}

// ------------------------------------------------------- primitives and jit

TEST(ShapeRule, GoldenText) {
  auto mesh = ts::make_mesh({8}, {"x"});
  ts::NamedSharding rep(mesh, P());
  auto a = ts::zeros({8, 6}, ts::f32, rep);
  auto b = ts::zeros({2, 6}, ts::i32, rep);
  auto t3 = ts::zeros({1, 5, 1}, ts::f32, rep);
  using S = ts::SliceSpec;
  const std::vector<std::tuple<std::string, std::string, std::function<void()>>> cases{
      {"([i,j])->([j,i]) {i=8,j=6}", "transpose permutation=(1, 0)", [&] { ts::transpose(a); }},
      {"([i,j])->([j,i]) {i=8,j=6}", "swapaxes permutation=(1, 0)", [&] { ts::swapaxes(a, 0, 1); }},
      {"([i,j])->([i,1,j]) {i=8,j=6}", "expand_dims axis=1", [&] { ts::expand_dims(a, 1); }},
      {"([1,i,1])->([i]) {i=5}", "squeeze dimensions=(0, 2)", [&] { ts::squeeze(t3); }},
      {"([1,i,j])->([i,j]) {i=5,j=1}", "squeeze dimensions=(0,)", [&] { ts::squeeze(t3, {0}); }},
      {"([1,j,1])->([i,j,k]) {i=4,j=5,k=3}", "broadcast_to shape=(4, 5, 3)", [&] { ts::broadcast_to(t3, {4, 5, 3}); }},
      {"([i,j])->([k]) {i=8,j=6,k=48} need_replication={i,j}", "reshape shape=(48,)", [&] { ts::reshape(a, {48}); }},
      {"([i,j])->([i,k,l]) {i=8,j=6,k=2,l=3} need_replication={j}", "reshape shape=(8, 2, 3)",
       [&] { ts::reshape(a, {8, 2, 3}); }},
      {"([i,j])->([k]) {i=8,j=6,k=48} need_replication={i,j}", "reshape shape=(48,) out_sharding=PartitionSpec('x',)",
       [&] { ts::reshape(a, {48}, {.out_sharding = P("x")}); }},
      {"([i,k])->([j,l]) {i=8,j=6,k=6,l=3} need_replication={i,k}", "slice start=(1, 0) step=(1, 2) size=(6, 3)",
       [&] { ts::slice(a, {S{.start = 1, .stop = -1}, S{.step = 2}}); }},
      {"([i,k])->([j,k]) {i=8,j=11,k=6} need_replication={i}", "pad widths=((1, 2), (0, 0)) value=1.5",
       [&] { ts::pad(a, {{1, 2}, {0, 0}}, 1.5); }},
      {"([i,j])->([i,j]) {i=8,j=6} permutation={i}", "roll shift=5 axis=0", [&] { ts::roll(a, -3, 0); }},
      {"([i,j])->([i,j]) {i=8,j=6} permutation={j}", "flip axis=1", [&] { ts::flip(a, -1); }},
      {"([j,i],[k,i],[l,i])->([m,i]) {i=6,j=8,k=2,l=8,m=18} need_replication={j,k,l}", "concatenate axis=0 dtype=f32",
       [&] { ts::concatenate({a, b, a}, 0); }},
      {"([i,j],[i,j])->([i,j,k]) {i=8,j=6,k=2}", "stack axis=2 dtype=f32", [&] { ts::stack({a, a}, -1); }},
  };
  for (const auto& [rule, params, f] : cases) {
    auto [r, p] = rule_of(f);
    EXPECT_EQ(r, rule) << params;
    EXPECT_EQ(p, params);
  }
}

// Every shape op under jit equals the eager op bitwise (values, dtype and
// sharding) on every test mesh, over a spread of layouts including uneven
// sizes and sizes smaller than the device count; the program names the
// primitive.
TEST(ShapeJit, MatchesEager) {
  using S = ts::SliceSpec;
  using Fn = std::function<ts::Array(ts::Array)>;
  const std::vector<std::tuple<std::string, ts::Shape, Fn>> ops{
      {"transpose", {5, 3, 2}, [](ts::Array x) { return ts::transpose(x, {2, 0, 1}); }},
      {"swapaxes", {2, 7, 3}, [](ts::Array x) { return ts::swapaxes(x, 0, -1); }},
      {"expand_dims", {3, 1, 5}, [](ts::Array x) { return ts::expand_dims(x, 2); }},
      {"squeeze", {1, 5, 1}, [](ts::Array x) { return ts::squeeze(x); }},
      {"broadcast_to", {1, 3, 1}, [](ts::Array x) { return ts::broadcast_to(x, {2, 4, 3, 5}); }},
      {"broadcast_to", {3, 2, 1}, [](ts::Array x) { return ts::broadcast_to(x, {1, 3, 2, 1}); }},
      {"reshape", {6, 4, 3}, [](ts::Array x) { return ts::reshape(x, {4, 18}); }},
      {"reshape", {9, 2, 1}, [](ts::Array x) { return ts::reshape(x, {3, 6}, {.out_sharding = P(ts::none, "x")}); }},
      {"slice", {7, 5, 3}, [](ts::Array x) { return ts::slice(x, {S{.start = 1, .stop = -1}, S{.step = -2}}); }},
      {"pad", {5, 2, 3}, [](ts::Array x) { return ts::pad(x, {{1, 2}, {0, 3}, {2, 0}}, -2.5); }},
      {"roll", {7, 3, 2}, [](ts::Array x) { return ts::roll(x, 3, 0); }},
      {"flip", {3, 7, 2}, [](ts::Array x) { return ts::flip(x, 1); }},
      {"concatenate", {5, 3, 2},
       [](ts::Array x) { return ts::concatenate({x, ts::slice(x, {S{.stop = 2}}), ts::astype(x, ts::i32)}, 0); }},
      {"stack", {2, 3, 5}, [](ts::Array x) { return ts::stack({x, ts::flip(x, 2)}, 1); }},
  };
  std::mt19937 rng(5);
  for (const auto& [name, shape, fn] : ops) {
    auto host = iota_data<float>(numel(shape), 1);
    for_each_layout(3, [&](const ts::NamedSharding& s) {
      // random_spec gives mixed forms and uneven splits; the layout loop
      // covers every dim on every axis.
      for (const ts::NamedSharding& l : {s, ts::NamedSharding(s.mesh(), random_spec(rng, s.mesh(), 3))}) {
        auto x = ts::device_put(host, shape, l);
        const std::string what = name + " " + ts::typeof(x);
        ts::Array eager;
        try {
          eager = fn(x);
        } catch (const ts::ShardingError&) {
          continue;  // an out_sharding naming an axis the mesh lacks
        }
        auto f = ts::jit(fn);
        expect_same(f(x), eager, what);
        const std::string text = f.lower(x).as_text();
        EXPECT_NE(text.find(" = " + name + "["), std::string::npos) << what << "\n" << text;
      }
    });
  }
}

// A function chaining shape ops with elementwise ops compiles into kernel
// steps for the factor-rule primitives and global steps for the others, and
// matches eager execution, communication included.
TEST(ShapeJit, ChainMatchesEagerWithSameCommunication) {
  auto f = [](ts::Array x) {
    auto y = ts::transpose(ts::roll(x, 2, 0) * 2.0f);
    auto z = ts::reshape(ts::pad(y, {{1, 1}, {0, 0}}), {-1});
    return ts::concatenate({z, ts::flip(z, 0)}, 0) + 1.0f;
  };
  for (const ts::Mesh& m : test_meshes()) {
    for (auto spec : {P("x"), P(ts::none, "x"), P()}) {
      auto x = ts::device_put(iota_data<float>(35), {7, 5}, ts::NamedSharding(m, spec));
      ts::Array eager, jitted;
      auto ee = ts::explain([&] { eager = f(x); });
      auto jf = ts::jit(f);
      jf(x);  // compile outside the explain
      auto ej = ts::explain([&] { jitted = jf(x); });
      expect_same(jitted, eager, m.str() + " " + spec.str());
      EXPECT_EQ(ej.bytes_moved(), ee.bytes_moved()) << m.str() << " " << spec.str();
      const std::string text = jf.lower(x).as_text();
      EXPECT_NE(text.find("kernel %"), std::string::npos) << text;
      EXPECT_NE(text.find("global %"), std::string::npos) << text;
    }
  }
}
