// The manual-mode collectives (psum, pmean, pmax, pmin, all_gather,
// psum_scatter, ppermute, all_to_all, axis_index, axis_size), each against a
// plain host reference: JAX's documented examples with their numbers, every
// collective on 1-d and 2-d meshes over every axis subset and dtype, uneven
// local shapes, bitwise determinism, the Group interface used directly from
// one task per device (every ReduceOp, the per-member reshard against the
// global one), and the no-hang guarantees (timeouts, failing bodies,
// mismatched collectives, the timeout setting).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tree.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "test_util.hpp"
#include "transforms/shard_map.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::numel;
using ts::testing::test_meshes;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Every test sets its own timeout (under ctest each test is its own process;
// run directly they share one), long enough never to fire by accident.
class Collectives : public ::testing::Test {
 protected:
  void SetUp() override { ts::config::set_collective_timeout(20.0); }
};

using ts::testing::within;
std::vector<ts::Device> first(int n) { return ts::testing::first_devices(n); }

// ------------------------------------------------------ host reference arrays

// A row-major host array of doubles (every value used here is exact in every dtype).
struct H {
  ts::Shape shape;
  std::vector<double> v;
};

std::int64_t prod(const ts::Shape& s, size_t b, size_t e) {
  std::int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

H slice(const H& a, int d, std::int64_t start, std::int64_t stop) {
  const std::int64_t outer = prod(a.shape, 0, d), inner = prod(a.shape, d + 1, a.shape.size()), len = a.shape[d];
  H o{a.shape, {}};
  o.shape[d] = stop - start;
  for (std::int64_t k = 0; k < outer; ++k)
    o.v.insert(o.v.end(), a.v.begin() + (k * len + start) * inner, a.v.begin() + (k * len + stop) * inner);
  return o;
}

// a[..., i, ...] with dim d removed.
H take(const H& a, int d, std::int64_t i) {
  H o = slice(a, d, i, i + 1);
  o.shape.erase(o.shape.begin() + d);
  return o;
}

H expand(H a, int d) {
  a.shape.insert(a.shape.begin() + d, 1);
  return a;
}

H concat(const std::vector<H>& xs, int d) {
  H o{xs.at(0).shape, {}};
  o.shape[d] = 0;
  for (const auto& x : xs) o.shape[d] += x.shape[d];
  const std::int64_t outer = prod(o.shape, 0, d), inner = prod(o.shape, d + 1, o.shape.size());
  for (std::int64_t k = 0; k < outer; ++k)
    for (const auto& x : xs) {
      const std::int64_t n = x.shape[d] * inner;
      o.v.insert(o.v.end(), x.v.begin() + k * n, x.v.begin() + (k + 1) * n);
    }
  return o;
}

H stack(const std::vector<H>& xs, int d) {
  std::vector<H> e;
  for (const auto& x : xs) e.push_back(expand(x, d));
  return concat(e, d);
}

template <class F>
H zip(H a, const H& b, F f) {
  for (size_t i = 0; i < a.v.size(); ++i) a.v[i] = f(a.v[i], b.v[i]);
  return a;
}

H zeros_like(H a) {
  std::fill(a.v.begin(), a.v.end(), 0.0);
  return a;
}

// Distinct small integers per device position (0/1 for bool).
std::vector<H> make_blocks(int n, const ts::Shape& local, ts::DType dt, int salt = 0) {
  std::vector<H> out;
  for (int p = 0; p < n; ++p) {
    H h{local, std::vector<double>(static_cast<size_t>(numel(local)))};
    for (size_t i = 0; i < h.v.size(); ++i) {
      const long long v = (p * 37 + static_cast<long long>(i) * 11 + salt * 5) % 23 - 11;
      h.v[i] = dt == ts::bool_ ? static_cast<double>((v + 11) % 3 == 0) : static_cast<double>(v);
    }
    out.push_back(std::move(h));
  }
  return out;
}

// ------------------------------------------------------------------ groups

// Positions of the members of pos's group for a collective over `axes`, in
// member order: the devices sharing pos's coordinates off those axes, ordered
// by the mixed-radix number of their coordinates on the axes in the order given
// (JAX's axis_index over a tuple of names).
std::vector<int> members(const ts::Mesh& m, const std::vector<std::string>& axes, int pos) {
  const auto me = m.coords(pos);
  std::vector<std::pair<int, int>> ms;
  for (int q = 0; q < m.size(); ++q) {
    const auto c = m.coords(q);
    bool same = true;
    for (int i = 0; i < m.ndim(); ++i)
      if (std::find(axes.begin(), axes.end(), m.axis_names()[i]) == axes.end() && c[i] != me[i]) same = false;
    if (!same) continue;
    int idx = 0;
    for (const auto& a : axes) idx = idx * m.axis_size(a) + c[m.axis_index(a)];
    ms.emplace_back(idx, q);
  }
  std::sort(ms.begin(), ms.end());
  std::vector<int> out;
  for (const auto& [idx, q] : ms) out.push_back(q);
  return out;
}

int rank_in(const std::vector<int>& ms, int pos) {
  return static_cast<int>(std::find(ms.begin(), ms.end(), pos) - ms.begin());
}

// Axis subsets to test on a mesh: each axis, and (2-d) both in both orders.
std::vector<std::vector<std::string>> axis_sets(const ts::Mesh& m) {
  std::vector<std::vector<std::string>> out;
  for (const auto& a : m.axis_names()) out.push_back({a});
  if (m.ndim() == 2) {
    out.push_back({m.axis_names()[0], m.axis_names()[1]});
    out.push_back({m.axis_names()[1], m.axis_names()[0]});
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

// typeof of a local value: "f32[3,4]{V:x,y}" (vma sorted; omitted when empty).
std::string type_str(ts::DType dt, const ts::Shape& s, std::vector<std::string> vma) {
  std::string t = ts::dtype_name(dt) + "[";
  for (size_t d = 0; d < s.size(); ++d) {
    if (d) t += ',';
    t += std::to_string(s[d]);
  }
  t += "]";
  std::sort(vma.begin(), vma.end());
  if (!vma.empty()) t += "{V:" + join(vma) + "}";
  return t;
}

std::vector<std::string> minus(std::vector<std::string> all, const std::vector<std::string>& drop) {
  all.erase(std::remove_if(all.begin(), all.end(),
                           [&](const std::string& a) { return std::find(drop.begin(), drop.end(), a) != drop.end(); }),
            all.end());
  return all;
}

// ---------------------------------------------------- running a collective

// What one device's body produced.
struct Got {
  ts::Shape shape;
  std::vector<double> v;
  std::string type;
  ts::DType dtype = ts::f32;
};

// This device's position in `m` (row-major coordinates), inside a body.
int my_pos(const ts::Mesh& m) {
  int p = 0;
  for (int i = 0; i < m.ndim(); ++i) p = p * m.shape()[i] + ts::axis_index(m.axis_names()[i]).item<std::int32_t>();
  return p;
}

ts::PartitionSpec all_axes(const ts::Mesh& m) { return ts::PartitionSpec({ts::PartitionSpec::Entry(m.axis_names())}); }

// Runs fn(local) on every device of `mesh`, where device p's local value is
// blocks[p] as dtype dt (varying over every mesh axis), and returns what each
// device's fn returned, by mesh position.
template <class Fn>
std::vector<Got> run_each(const ts::Mesh& mesh, const std::vector<H>& blocks, ts::DType dt, Fn fn) {
  const int n = mesh.size();
  ts::Shape gshape = blocks.at(0).shape;
  gshape.insert(gshape.begin(), n);
  std::vector<double> host;
  for (const auto& b : blocks) host.insert(host.end(), b.v.begin(), b.v.end());
  const ts::Array g = ts::astype(ts::device_put(host, gshape, ts::NamedSharding(mesh, all_axes(mesh))), dt);
  std::vector<Got> got(n);
  const std::string a0 = mesh.axis_names()[0];
  auto f = ts::shard_map(
      [&](ts::Array x) {
        const ts::Array r = fn(ts::squeeze(x, {0}));
        const int pos = my_pos(mesh);
        got[pos] = Got{r.shape(), r.to_vector<double>(), ts::typeof(r), r.dtype()};
        return ts::expand_dims(ts::axis_index(a0), 0);
      },
      mesh, {all_axes(mesh)}, all_axes(mesh));
  f(g);
  return got;
}

// Exact comparison (tol 0) or relative tolerance.
void expect_eq(const Got& g, const H& ref, double tol = 0) {
  ASSERT_EQ(g.shape, ref.shape) << g.type;
  ASSERT_EQ(g.v.size(), ref.v.size());
  for (size_t i = 0; i < ref.v.size(); ++i) {
    if (tol == 0)
      ASSERT_EQ(g.v[i], ref.v[i]) << "element " << i << " of " << g.type;
    else
      ASSERT_NEAR(g.v[i], ref.v[i], tol * (1 + std::abs(ref.v[i]))) << "element " << i << " of " << g.type;
  }
}

const std::vector<ts::DType> kDTypes = {ts::bool_, ts::i32, ts::i64, ts::f32, ts::f64};

bool is_float(ts::DType t) { return t == ts::f32 || t == ts::f64; }

ts::Mesh mesh1d(int n, const std::string& name = "i") { return ts::Mesh(first(n), {n}, {name}); }

}  // namespace

// =====================================================================
// JAX documentation, worked examples ("Manual parallelism with shard_map",
// section "Collectives tutorial", docs.jax.dev/en/latest/notebooks/shard_map.html;
// and the docstrings of jax.lax.psum / pmean / psum_scatter / all_gather).
// mesh1d = 4 devices on axis 'i' as in the tutorial.
// =====================================================================

// Tutorial, "psum", f1: x = [3,1,4,1,5,9,2,6,5,3,5,8,9,7,1,2] sharded P('i')
// over 4 devices, psum over 'i', out_specs P(None) -> [22 20 12 17].
TEST_F(Collectives, JaxDocPsumF1) {
  const auto m = mesh1d(4);
  const std::vector<std::int32_t> x = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2};
  auto a = ts::device_put(x, {16}, ts::NamedSharding(m, ts::P("i")));
  auto f1 = ts::shard_map([](ts::Array xb) { return ts::psum(xb, "i"); }, m, {ts::P("i")}, ts::P(ts::none));
  auto y = f1(a);
  EXPECT_EQ(y.dtype(), ts::i32);
  EXPECT_EQ(y.to_vector<std::int32_t>(), (std::vector<std::int32_t>{22, 20, 12, 17}));
  EXPECT_TRUE(y.sharding().is_fully_replicated());
}

// Found by tessera_fuzz (under UBSan): integer psum overflowed (undefined in
// C++) instead of wrapping as XLA does.
TEST_F(Collectives, IntegerPsumWraps) {
  const auto m = mesh1d(4);
  constexpr std::int32_t mx = std::numeric_limits<std::int32_t>::max();
  auto a = ts::device_put(std::vector<std::int32_t>(4, mx), {4}, ts::NamedSharding(m, ts::P("i")));
  auto f = ts::shard_map([](ts::Array xb) { return ts::psum(xb, "i"); }, m, {ts::P("i")}, ts::P(ts::none));
  EXPECT_EQ(f(a).item<std::int32_t>(), -4);  // 4 * mx mod 2^32
}

// Tutorial, "psum", f2 and f3 on mesh2d = (2, 2) ('i', 'j'), x = arange(16)
// reshaped (4, 4), in_specs P('i', 'j'): psum over 'i' with out_specs
// P(None, 'j') -> [[8 10 12 14] [16 18 20 22]]; psum over ('i', 'j') with
// out_specs P(None, None) -> [[20 24] [36 40]].
TEST_F(Collectives, JaxDocPsumF2F3TwoAxes) {
  const ts::Mesh m2(first(4), {2, 2}, {"i", "j"});
  std::vector<std::int32_t> x(16);
  for (int i = 0; i < 16; ++i) x[i] = i;
  auto a = ts::device_put(x, {4, 4}, ts::NamedSharding(m2, ts::P()));
  auto f2 = ts::shard_map([](ts::Array b) { return ts::psum(b, "i"); }, m2, {ts::P("i", "j")}, ts::P(ts::none, "j"));
  auto y2 = f2(a);
  EXPECT_EQ(y2.shape(), (ts::Shape{2, 4}));
  EXPECT_EQ(y2.to_vector<std::int32_t>(), (std::vector<std::int32_t>{8, 10, 12, 14, 16, 18, 20, 22}));
  auto f3 = ts::shard_map(
      [](ts::Array b) {
        return ts::psum(b, {"i", "j"});
      },
      m2, {ts::P("i", "j")}, ts::P(ts::none, ts::none));
  auto y3 = f3(a);
  EXPECT_EQ(y3.shape(), (ts::Shape{2, 2}));
  EXPECT_EQ(y3.to_vector<std::int32_t>(), (std::vector<std::int32_t>{20, 24, 36, 40}));
}

// Tutorial, "all_gather", f4 (tiled=True) and f5 (tiled=False) with
// x = [3, 9, 5, 2] over 4 devices and out_specs P('i'):
// f4 -> [3 9 5 2 3 9 5 2 3 9 5 2 3 9 5 2]; f5 stacks on a new axis, each
// device holds [[3] [9] [5] [2]], and the result is those blocks concatenated, shape (16, 1).
TEST_F(Collectives, JaxDocAllGatherF4F5) {
  const auto m = mesh1d(4);
  auto x = ts::device_put(std::vector<std::int32_t>{3, 9, 5, 2}, {4}, ts::NamedSharding(m, ts::P("i")));
  std::vector<std::string> types(4);
  auto f4 = ts::shard_map(
      [&](ts::Array b) {
        auto y = ts::all_gather(b, "i", 0, /*tiled=*/true);
        types[ts::axis_index("i").item<std::int32_t>()] = ts::typeof(y);
        return y;
      },
      m, {ts::P("i")}, ts::P("i"));
  const auto y4 = f4(x);
  EXPECT_EQ(y4.to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2}));
  for (const auto& t : types) EXPECT_EQ(t, "i32[4]");  // all_gather removes 'i' from the varying set
  auto f5 = ts::shard_map([](ts::Array b) { return ts::all_gather(b, "i", 0, /*tiled=*/false); }, m, {ts::P("i")},
                          ts::P("i"));
  const auto y5 = f5(x);
  EXPECT_EQ(y5.shape(), (ts::Shape{16, 1}));
  EXPECT_EQ(y5.to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2}));
}

// Tutorial, "psum_scatter", f6: the 16 numbers above over 4 devices, i.e. the
// blocks (rows) [[3,1,4,1],[5,9,2,6],[5,3,5,8],[9,7,1,2]], psum_scatter with
// tiled=True and out_specs P('i') -> [22 20 12 17]; each device keeps one element.
TEST_F(Collectives, JaxDocPsumScatterF6) {
  const auto m = mesh1d(4);
  const std::vector<std::int32_t> x = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2};
  auto a = ts::device_put(x, {16}, ts::NamedSharding(m, ts::P("i")));
  std::vector<std::string> types(4);
  auto f6 = ts::shard_map(
      [&](ts::Array b) {
        auto y = ts::psum_scatter(b, "i", 0, /*tiled=*/true);
        types[ts::axis_index("i").item<std::int32_t>()] = ts::typeof(y);
        return y;
      },
      m, {ts::P("i")}, ts::P("i"));
  EXPECT_EQ(f6(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{22, 20, 12, 17}));
  for (const auto& t : types) EXPECT_EQ(t, "i32[1]{V:i}");
  // The same 4x4 matrix as a 2-d array, one row per device, scattered along dim 1.
  auto a2 = ts::device_put(x, {4, 4}, ts::NamedSharding(m, ts::P("i")));
  auto g = ts::shard_map([](ts::Array b) { return ts::psum_scatter(b, "i", 1, true); }, m, {ts::P("i")},
                         ts::P(ts::none, "i"));
  auto y = g(a2);
  EXPECT_EQ(y.shape(), (ts::Shape{1, 4}));
  EXPECT_EQ(y.to_vector<std::int32_t>(), (std::vector<std::int32_t>{22, 20, 12, 17}));
}

// Tutorial, "ppermute", f7: arange(8) over mesh1d, perm [(i, (i + 1) % sz)]
// with sz = axis_size('i'): each device gets its left neighbour's block
// -> [6 7 0 1 2 3 4 5].
TEST_F(Collectives, JaxDocPpermuteShiftF7) {
  const auto m = mesh1d(4);
  auto x = ts::arange(0, 8, 1, ts::i32, ts::NamedSharding(m, ts::P("i")));
  std::vector<std::string> types(4);
  auto f7 = ts::shard_map(
      [&](ts::Array b) {
        const int sz = ts::axis_size("i");
        std::vector<std::pair<int, int>> perm;
        for (int i = 0; i < sz; ++i) perm.emplace_back(i, (i + 1) % sz);
        auto y = ts::ppermute(b, "i", perm);
        types[ts::axis_index("i").item<std::int32_t>()] = ts::typeof(y);
        return y;
      },
      m, {ts::P("i")}, ts::P("i"));
  EXPECT_EQ(f7(x).to_vector<std::int32_t>(), (std::vector<std::int32_t>{6, 7, 0, 1, 2, 3, 4, 5}));
  for (const auto& t : types) EXPECT_EQ(t, "i32[2]{V:i}");  // ppermute keeps 'i'
}

// Tutorial, "ppermute", f8: psum_scatter written with ppermute and local adds
// (each step sends 'up' what it received and adds what arrives), on the same
// 16 numbers -> [22 20 12 17], equal to the built-in psum_scatter.
TEST_F(Collectives, JaxDocPsumScatterViaPpermuteF8) {
  const auto m = mesh1d(4);
  const std::vector<std::int32_t> x = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2};
  auto a = ts::device_put(x, {16}, ts::NamedSharding(m, ts::P("i")));
  auto ring_psum_scatter = [](const ts::Array& x0, const std::string& axis) {
    const int size = ts::axis_size(axis);
    const int idx = ts::axis_index(axis).item<std::int32_t>();
    const std::int64_t b = x0.shape()[0] / size;
    std::vector<ts::Array> xs;  // x.reshape(size, -1): one piece per block
    for (int k = 0; k < size; ++k) xs.push_back(ts::slice(x0, {ts::SliceSpec{k * b, (k + 1) * b}}));
    std::vector<std::pair<int, int>> perm;
    for (int i = 0; i < size; ++i) perm.emplace_back(i, (i - 1 + size) % size);
    for (int i = 1; i < size; ++i) {
      const ts::Array update = ts::ppermute(xs[(idx + i) % size], axis, perm);
      xs[(idx + i + 1) % size] = xs[(idx + i + 1) % size] + update;
    }
    return xs[idx];
  };
  auto f8 = ts::shard_map([&](ts::Array blk) { return ring_psum_scatter(blk, "i"); }, m, {ts::P("i")}, ts::P("i"));
  EXPECT_EQ(f8(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{22, 20, 12, 17}));
}

// Tutorial, "all_to_all", f9: the 16 numbers, split_axis=0, concat_axis=0,
// tiled=True, out_specs P('i'): device r receives element r of every block
// -> [3 5 5 9 1 9 3 7 4 2 5 1 1 6 8 2] (a block transpose).
TEST_F(Collectives, JaxDocAllToAllF9) {
  const auto m = mesh1d(4);
  const std::vector<std::int32_t> x = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2};
  auto a = ts::device_put(x, {16}, ts::NamedSharding(m, ts::P("i")));
  std::vector<std::string> types(4);
  auto f9 = ts::shard_map(
      [&](ts::Array b) {
        auto y = ts::all_to_all(b, "i", 0, 0, /*tiled=*/true);
        types[ts::axis_index("i").item<std::int32_t>()] = ts::typeof(y);
        return y;
      },
      m, {ts::P("i")}, ts::P("i"));
  EXPECT_EQ(f9(a).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2}));
  for (const auto& t : types) EXPECT_EQ(t, "i32[4]{V:i}");
  // The same with tiled=False: split_axis 0 has the group size (4) and a new
  // axis of that size appears at concat_axis 0; the values are the same.
  auto f9u =
      ts::shard_map([](ts::Array b) { return ts::all_to_all(b, "i", 0, 0, false); }, m, {ts::P("i")}, ts::P("i"));
  EXPECT_EQ(f9u(a).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2}));
}

// Docstrings of jax.lax (pmap over x = np.arange(4) on 4 devices, one
// element per device; here shard_map with each block reshaped to a scalar):
//  psum:         [6 6 6 6]; x / psum(x) -> [0. 0.16666667 0.33333334 0.5]
//  pmean:        [1.5 1.5 1.5 1.5]; x / pmean(x) -> [0. 0.6666667 1.3333334 2.]
//  all_gather:   every device gets [0 1 2 3]
//  psum_scatter: x = arange(16).reshape(4, 4), one row per device -> [24 28 32 36];
//                tiled=True -> [[24] [28] [32] [36]]
TEST_F(Collectives, JaxDocLaxDocstrings) {
  const auto m = mesh1d(4);
  auto x = ts::arange(0, 4, 1, ts::i32, ts::NamedSharding(m, ts::P("i")));
  auto scalar = [](const ts::Array& b) { return ts::reshape(b, ts::Shape{}); };
  auto row = [](const ts::Array& v) { return ts::expand_dims(v, 0); };
  auto psum_f = ts::shard_map([&](ts::Array b) { return row(ts::psum(scalar(b), "i")); }, m, {ts::P("i")}, ts::P("i"));
  EXPECT_EQ(psum_f(x).to_vector<std::int32_t>(), (std::vector<std::int32_t>{6, 6, 6, 6}));
  auto norm = ts::shard_map([&](ts::Array b) { return row(scalar(b) / ts::psum(scalar(b), "i")); }, m, {ts::P("i")},
                            ts::P("i"));
  EXPECT_EQ(norm(x).to_vector<float>(), (std::vector<float>{0.f, 1.f / 6, 2.f / 6, 0.5f}));
  auto pmean_f =
      ts::shard_map([&](ts::Array b) { return row(ts::pmean(scalar(b), "i")); }, m, {ts::P("i")}, ts::P("i"));
  auto pm = pmean_f(x);
  EXPECT_EQ(pm.dtype(), ts::f32);
  EXPECT_EQ(pm.to_vector<float>(), (std::vector<float>{1.5f, 1.5f, 1.5f, 1.5f}));
  auto pnorm = ts::shard_map([&](ts::Array b) { return row(scalar(b) / ts::pmean(scalar(b), "i")); }, m, {ts::P("i")},
                             ts::P("i"));
  const auto pn = pnorm(x).to_vector<float>();
  const std::vector<float> pn_ref = {0.f, 0.6666667f, 1.3333334f, 2.f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(pn[i], pn_ref[i]);
  auto gather =
      ts::shard_map([&](ts::Array b) { return row(ts::all_gather(scalar(b), "i")); }, m, {ts::P("i")}, ts::P("i"));
  auto g = gather(x);
  EXPECT_EQ(g.shape(), (ts::Shape{4, 4}));
  EXPECT_EQ(g.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  std::vector<std::int32_t> h16(16);
  for (int i = 0; i < 16; ++i) h16[i] = i;
  auto x16 = ts::device_put(h16, {4, 4}, ts::NamedSharding(m, ts::P("i")));
  auto rs = ts::shard_map([&](ts::Array b) { return row(ts::psum_scatter(ts::squeeze(b, {0}), "i")); }, m, {ts::P("i")},
                          ts::P("i"));
  auto r = rs(x16);
  EXPECT_EQ(r.shape(), (ts::Shape{4}));
  EXPECT_EQ(r.to_vector<std::int32_t>(), (std::vector<std::int32_t>{24, 28, 32, 36}));
  auto rst = ts::shard_map([&](ts::Array b) { return row(ts::psum_scatter(ts::squeeze(b, {0}), "i", 0, true)); }, m,
                           {ts::P("i")}, ts::P("i"));
  auto rt = rst(x16);
  EXPECT_EQ(rt.shape(), (ts::Shape{4, 1}));
  EXPECT_EQ(rt.to_vector<std::int32_t>(), (std::vector<std::int32_t>{24, 28, 32, 36}));
}

// =====================================================================
// Every collective on 1-d and 2-d meshes, every axis subset, every dtype,
// against the host reference; results identical on every member.
// =====================================================================

TEST_F(Collectives, ReductionsEveryMeshAxisSubsetAndDtype) {
  int cases = 0;
  for (const auto& mesh : test_meshes())
    for (const auto& axes : axis_sets(mesh))
      for (ts::DType dt : kDTypes)
        for (const ts::Shape& local : {ts::Shape{3, 4}, ts::Shape{}}) {
          const auto blocks = make_blocks(mesh.size(), local, dt, cases);
          for (const std::string op : {"psum", "pmax", "pmin", "pmean"}) {
            SCOPED_TRACE(mesh.str() + " " + op + " over " + join(axes) + " " + ts::dtype_name(dt));
            const auto got = run_each(mesh, blocks, dt, [&](const ts::Array& x) {
              if (op == "psum") return ts::psum(x, axes);
              if (op == "pmax") return ts::pmax(x, axes);
              if (op == "pmin") return ts::pmin(x, axes);
              return ts::pmean(x, axes);
            });
            for (int pos = 0; pos < mesh.size(); ++pos) {
              const auto ms = members(mesh, axes, pos);
              H ref = blocks[ms[0]];
              for (size_t k = 1; k < ms.size(); ++k)
                ref = zip(ref, blocks[ms[k]], [&](double a, double b) {
                  return op == "pmax" ? std::max(a, b) : op == "pmin" ? std::min(a, b) : a + b;
                });
              ts::DType want = dt;
              if (op == "psum" && dt == ts::bool_) want = ts::i32;  // bool psum counts
              if (op == "pmean") {
                for (auto& v : ref.v) v /= static_cast<double>(ms.size());
                if (!is_float(dt)) want = ts::f32;
              }
              EXPECT_EQ(got[pos].dtype, want);
              EXPECT_EQ(got[pos].type, type_str(want, local, minus(mesh.axis_names(), axes)));
              expect_eq(got[pos], ref, op == "pmean" ? 1e-6 : 0);
              // Every member holds bitwise the same result.
              EXPECT_EQ(got[pos].v, got[ms[0]].v);
            }
            ++cases;
          }
        }
  EXPECT_GT(cases, 700);
}

TEST_F(Collectives, AllGatherTiledAndStackedEveryMeshAxisSubsetAndDtype) {
  const std::vector<std::pair<bool, int>> forms = {{true, 0}, {true, 1}, {false, 0}, {false, 1}, {false, 2}};
  for (const auto& mesh : test_meshes())
    for (const auto& axes : axis_sets(mesh))
      for (ts::DType dt : kDTypes) {
        const auto blocks = make_blocks(mesh.size(), {2, 3}, dt, 3);
        for (const auto& form : forms) {
          const bool tiled = form.first;
          const int axis = form.second;
          SCOPED_TRACE(mesh.str() + " all_gather over " + join(axes) + " " + ts::dtype_name(dt) +
                       (tiled ? " tiled axis " : " stacked axis ") + std::to_string(axis));
          const auto got =
              run_each(mesh, blocks, dt, [&](const ts::Array& x) { return ts::all_gather(x, axes, axis, tiled); });
          for (int pos = 0; pos < mesh.size(); ++pos) {
            std::vector<H> pieces;
            for (int q : members(mesh, axes, pos)) pieces.push_back(blocks[q]);
            const H ref = tiled ? concat(pieces, axis) : stack(pieces, axis);
            EXPECT_EQ(got[pos].type, type_str(dt, ref.shape, minus(mesh.axis_names(), axes)));
            expect_eq(got[pos], ref);
          }
        }
      }
}

TEST_F(Collectives, PsumScatterTiledAndUntiledEveryMeshAxisSubsetAndDtype) {
  for (const auto& mesh : test_meshes())
    for (const auto& axes : axis_sets(mesh))
      for (ts::DType dt : kDTypes) {
        const int g = static_cast<int>(members(mesh, axes, 0).size());
        struct Case {
          ts::Shape local;
          int dim;
          bool tiled;
        };
        // Tiled: divisible, and 5 rows in balanced blocks (some empty when g > 5).
        const std::vector<Case> cases = {{{2 * g, 3}, 0, true}, {{5, 3}, 0, true},  {{3, 5}, 1, true},
                                         {{g, 3}, 0, false},    {{3, g}, 1, false}, {{g}, 0, false}};
        for (const auto& c : cases) {
          SCOPED_TRACE(mesh.str() + " psum_scatter over " + join(axes) + " " + ts::dtype_name(dt) + " dim " +
                       std::to_string(c.dim) + (c.tiled ? " tiled" : " untiled") + " " + ts::shape_str(c.local));
          const auto blocks = make_blocks(mesh.size(), c.local, dt, 5);
          const auto got =
              run_each(mesh, blocks, dt, [&](const ts::Array& x) { return ts::psum_scatter(x, axes, c.dim, c.tiled); });
          const ts::DType want = dt == ts::bool_ ? ts::i32 : dt;
          for (int pos = 0; pos < mesh.size(); ++pos) {
            const auto ms = members(mesh, axes, pos);
            const int r = rank_in(ms, pos);
            H sum = blocks[ms[0]];
            for (size_t k = 1; k < ms.size(); ++k) sum = zip(sum, blocks[ms[k]], std::plus<double>());
            const auto part = ts::block_slice(c.local[c.dim], g, r);
            const H ref = c.tiled ? slice(sum, c.dim, part.start, part.stop) : take(sum, c.dim, r);
            EXPECT_EQ(got[pos].type, type_str(want, ref.shape, mesh.axis_names()));  // still varies
            expect_eq(got[pos], ref);
          }
        }
      }
}

TEST_F(Collectives, PpermuteEveryMeshAxisSubsetAndDtypeZerosWhereNothingArrives) {
  for (const auto& mesh : test_meshes())
    for (const auto& axes : axis_sets(mesh)) {
      const int g = static_cast<int>(members(mesh, axes, 0).size());
      std::vector<std::vector<std::pair<int, int>>> perms(5);
      for (int i = 0; i < g; ++i) {
        perms[0].emplace_back(i, (i + 1) % g);      // shift up (a ring)
        perms[1].emplace_back(i, (i - 1 + g) % g);  // shift down
        perms[2].emplace_back(i, g - 1 - i);        // reverse
      }
      perms[3] = {{0, g - 1}};  // one pair: everyone else gets zeros
      // perms[4] empty: zeros everywhere
      for (ts::DType dt : kDTypes) {
        const auto blocks = make_blocks(mesh.size(), {2, 3}, dt, 7);
        for (size_t p = 0; p < perms.size(); ++p) {
          SCOPED_TRACE(mesh.str() + " ppermute over " + join(axes) + " " + ts::dtype_name(dt) + " perm #" +
                       std::to_string(p));
          const auto got =
              run_each(mesh, blocks, dt, [&](const ts::Array& x) { return ts::ppermute(x, axes, perms[p]); });
          for (int pos = 0; pos < mesh.size(); ++pos) {
            const auto ms = members(mesh, axes, pos);
            const int r = rank_in(ms, pos);
            H ref = zeros_like(blocks[pos]);
            for (const auto& [src, dst] : perms[p])
              if (dst == r) ref = blocks[ms[src]];
            EXPECT_EQ(got[pos].type, type_str(dt, {2, 3}, mesh.axis_names()));  // keeps every axis
            expect_eq(got[pos], ref);
          }
        }
      }
    }
}

TEST_F(Collectives, AllToAllTiledAndUntiledEveryMeshAxisSubsetAndDtype) {
  for (const auto& mesh : test_meshes())
    for (const auto& axes : axis_sets(mesh)) {
      const int g = static_cast<int>(members(mesh, axes, 0).size());
      struct Case {
        ts::Shape local;
        int split, concat;
        bool tiled;
      };
      const std::vector<Case> cases = {
          {{2 * g, 3}, 0, 0, true}, {{2 * g, 3}, 0, 1, true}, {{3, 2 * g}, 1, 0, true}, {{3, 2 * g}, 1, 1, true},
          {{5, 2}, 0, 1, true},  // 5 rows in balanced blocks (Tessera; JAX needs divisibility)
          {{g, 3}, 0, 0, false},    {{g, 3}, 0, 1, false},    {{3, g}, 1, 0, false},    {{3, g}, 1, 1, false},
          {{g, 2, 3}, 0, 2, false}, {{2, 3, g}, 2, 0, false}, {{2, g, 3}, 1, 2, false},
      };
      for (ts::DType dt : kDTypes)
        for (const auto& c : cases) {
          SCOPED_TRACE(mesh.str() + " all_to_all over " + join(axes) + " " + ts::dtype_name(dt) + " " +
                       ts::shape_str(c.local) + " split " + std::to_string(c.split) + " concat " +
                       std::to_string(c.concat) + (c.tiled ? " tiled" : " untiled"));
          const auto blocks = make_blocks(mesh.size(), c.local, dt, 9);
          const auto got = run_each(mesh, blocks, dt, [&](const ts::Array& x) {
            return ts::all_to_all(x, axes, c.split, c.concat, c.tiled);
          });
          for (int pos = 0; pos < mesh.size(); ++pos) {
            const auto ms = members(mesh, axes, pos);
            const int r = rank_in(ms, pos);
            std::vector<H> pieces;
            for (int q : ms) {
              if (c.tiled) {
                const auto part = ts::block_slice(c.local[c.split], g, r);
                pieces.push_back(slice(blocks[q], c.split, part.start, part.stop));
              } else {
                pieces.push_back(take(blocks[q], c.split, r));
              }
            }
            const H ref = c.tiled ? concat(pieces, c.concat) : stack(pieces, c.concat);
            EXPECT_EQ(got[pos].type, type_str(dt, ref.shape, mesh.axis_names()));
            expect_eq(got[pos], ref);
          }
        }
    }
}

TEST_F(Collectives, AxisIndexAndAxisSizeOnEveryMesh) {
  for (const auto& mesh : test_meshes()) {
    const auto blocks = make_blocks(mesh.size(), {1}, ts::f32);
    for (int i = 0; i < mesh.ndim(); ++i) {
      const std::string a = mesh.axis_names()[i];
      std::vector<int> sizes(mesh.size(), -1);
      const auto got = run_each(mesh, blocks, ts::f32, [&](const ts::Array&) {
        sizes[my_pos(mesh)] = ts::axis_size(a);
        return ts::axis_index(a);
      });
      for (int pos = 0; pos < mesh.size(); ++pos) {
        EXPECT_EQ(got[pos].type, "i32[]{V:" + a + "}") << mesh.str();
        EXPECT_EQ(got[pos].v, (std::vector<double>{static_cast<double>(mesh.coords(pos)[i])})) << mesh.str();
        EXPECT_EQ(sizes[pos], mesh.shape()[i]);
      }
    }
  }
}

// A collective over several axes equals the same collectives applied one axis
// at a time (psum over {x, y} == psum over x then y), and pmean divides by the
// product of the axis sizes.
TEST_F(Collectives, SeveralAxesAtOnceEqualsOneAtATime) {
  const ts::Mesh m(ts::devices(), {2, 4}, {"x", "y"});
  const auto blocks = make_blocks(8, {3, 2}, ts::f64, 11);
  const auto both = run_each(m, blocks, ts::f64, [](const ts::Array& x) { return ts::psum(x, {"x", "y"}); });
  const auto seq = run_each(m, blocks, ts::f64, [](const ts::Array& x) { return ts::psum(ts::psum(x, "x"), "y"); });
  const auto mean = run_each(m, blocks, ts::f64, [](const ts::Array& x) { return ts::pmean(x, {"y", "x"}); });
  for (int p = 0; p < 8; ++p) {
    EXPECT_EQ(both[p].v, seq[p].v);
    EXPECT_EQ(both[p].type, "f64[3,2]");
    for (size_t i = 0; i < both[p].v.size(); ++i) EXPECT_DOUBLE_EQ(mean[p].v[i], both[p].v[i] / 8);
  }
}

// JAX's idiom psum(1, axis) is the axis size: a value that does not vary
// over the axis is summed once per member. pmax/pmin of it return it.
TEST_F(Collectives, ReductionsOfInvariantValues) {
  const ts::Mesh m(ts::devices(), {2, 4}, {"x", "y"});
  const ts::Array one = ts::device_put(std::vector<std::int32_t>{1}, {}, ts::NamedSharding(m, ts::P()));
  std::vector<std::string> seen(8);
  auto f = ts::shard_map(
      [&](ts::Array) {
        const ts::Array sy = ts::psum(one, "y"), sxy = ts::psum(one, {"x", "y"}), mx = ts::pmax(one, "x");
        seen[my_pos(m)] = ts::typeof(sy) + " " + std::to_string(sy.item<std::int32_t>()) + " " +
                          std::to_string(sxy.item<std::int32_t>()) + " " + std::to_string(mx.item<std::int32_t>());
        return sxy;
      },
      m, {ts::P()}, ts::P());
  EXPECT_EQ(f(one).item<std::int32_t>(), 8);
  for (const auto& s : seen) EXPECT_EQ(s, "i32[] 4 8 1");
}

// =====================================================================
// Uneven local shapes.
// =====================================================================

// all_gather(tiled) concatenates pieces of different sizes (10 rows over 4
// devices: 3, 3, 2, 2; 3 rows over 8: five empty pieces), along dim 0 or 1.
TEST_F(Collectives, AllGatherTiledConcatenatesUnequalPieces) {
  for (const auto& rn : std::vector<std::pair<int, int>>{{10, 4}, {3, 8}, {7, 3}, {0, 2}}) {
    const int rows = rn.first, n = rn.second;
    const ts::Mesh m(first(n), {n}, {"x"});
    std::vector<float> h(static_cast<size_t>(rows) * 3);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i) * 0.5f - 3;
    auto a = ts::device_put(h, {rows, 3}, ts::NamedSharding(m, ts::P("x")));
    std::vector<std::string> types(n);
    std::vector<std::vector<float>> vals(n);
    auto f = ts::shard_map(
        [&](ts::Array xl) {
          auto full = ts::all_gather(xl, "x", 0, true);
          const int me = ts::axis_index("x").item<std::int32_t>();
          types[me] = ts::typeof(full);
          vals[me] = full.to_vector<float>();
          return xl;
        },
        m, {ts::P("x")}, ts::P("x"));
    EXPECT_EQ(f(a).to_vector<float>(), h);
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(types[p], "f32[" + std::to_string(rows) + ",3]");
      EXPECT_EQ(vals[p], h);
    }
    // Along dim 1 (columns sharded unevenly).
    auto at = ts::device_put(h, {3, rows}, ts::NamedSharding(m, ts::P(ts::none, "x")));
    auto g = ts::shard_map([](ts::Array xl) { return ts::all_gather(xl, "x", 1, true); }, m, {ts::P(ts::none, "x")},
                           ts::P());
    EXPECT_EQ(g(at).to_vector<float>(), h);
  }
}

// Collectives that need equal shapes name the collective, the axis, and the
// devices whose shapes differ (with the shapes): 10 rows over 4 devices are
// 3, 3, 2, 2.
TEST_F(Collectives, UnequalShapesAreAMismatchNamingTheDevices) {
  const ts::Mesh m(first(4), {4}, {"x"});
  std::vector<float> h(30, 1.0f);
  auto a = ts::device_put(h, {10, 3}, ts::NamedSharding(m, ts::P("x")));
  auto run = [&](auto body) {
    auto f = ts::shard_map(body, m, {ts::P("x")}, ts::P("x"));
    within(10, [&] { f(a); });
  };
  auto expect_mismatch = [&](const char* prefix, auto body, std::initializer_list<std::string> words) {
    expect_error<ts::CollectiveError>([&] { run(body); }, prefix, words);
  };
  const std::initializer_list<std::string> named = {"same shape", "axis 'x'", ts::detail::device_label(0), "(3, 3)",
                                                    ts::detail::device_label(2), "(2, 3)"};
  expect_mismatch(
      "[psum]", [](ts::Array x) { return ts::psum(x, "x"); }, named);
  expect_mismatch(
      "[pmax]", [](ts::Array x) { return ts::pmax(x, "x"); }, named);
  expect_mismatch(
      "[ppermute]",
      [](ts::Array x) {
        return ts::ppermute(x, "x", {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
      },
      named);
  expect_mismatch(
      "[all_to_all]", [](ts::Array x) { return ts::all_to_all(x, "x", 0, 0, true); }, named);
  expect_mismatch(
      "[psum_scatter]", [](ts::Array x) { return ts::psum_scatter(x, "x", 1, true); }, named);
  expect_mismatch(
      "[all_gather]", [](ts::Array x) { return ts::all_gather(x, "x", 0, false); }, named);
  // Tiled gathering allows unequal sizes only along the gathered axis.
  expect_mismatch(
      "[all_gather]", [](ts::Array x) { return ts::all_gather(x, "x", 1, true); }, named);
  // The runtime works afterwards.
  auto ok = ts::shard_map([](ts::Array x) { return ts::psum(ts::sum(x, {0}), "x"); }, m, {ts::P("x")}, ts::P());
  EXPECT_EQ(ok(a).to_vector<float>(), (std::vector<float>{10, 10, 10}));
}

// Bad parameters are caught before anyone communicates.
TEST_F(Collectives, BadParameters) {
  const ts::Mesh m(first(4), {4}, {"x"});
  auto a = ts::device_put(std::vector<float>(12, 1.0f), {4, 3}, ts::NamedSharding(m, ts::P(ts::none)));
  auto run = [&](auto body) {
    auto f = ts::shard_map(body, m, {ts::P()}, ts::P(), {.check_vma = false});
    within(10, [&] { f(a); });
  };
  expect_error<ts::ShardingError>([&] { run([](ts::Array x) {
                                          return ts::ppermute(x, "x", {{0, 4}});
                                        }); },
                                  "[ppermute]", {"(0, 4)", "out of range", "4 devices"});
  expect_error<ts::ShardingError>([&] { run([](ts::Array x) {
                                          return ts::ppermute(x, "x", {{0, 1}, {0, 2}});
                                        }); },
                                  "[ppermute]", {"(0, 2)", "repeats"});
  expect_error<ts::ShardingError>([&] { run([](ts::Array x) {
                                          return ts::ppermute(x, "x", {{1, 2}, {3, 2}});
                                        }); },
                                  "[ppermute]", {"(3, 2)"});
  expect_error<ts::ShapeError>([&] { run([](ts::Array x) { return ts::psum_scatter(x, "x", 1, false); }); },
                               "[psum_scatter]", {"(4)", "(4, 3)"});
  expect_error<ts::ShapeError>([&] { run([](ts::Array x) { return ts::all_to_all(x, "x", 1, 0, false); }); },
                               "[all_to_all]", {"(4)", "(4, 3)"});
  expect_error<ts::ShapeError>([&] { run([](ts::Array x) { return ts::all_gather(ts::sum(x), "x", 0, true); }); },
                               "[all_gather]");
  expect_error<ts::ShapeError>([&] { run([](ts::Array x) { return ts::all_gather(x, "x", 3, false); }); },
                               "[all_gather]", {"axis 3"});
  expect_error<ts::ShardingError>([&] { run([](ts::Array x) { return ts::psum(x, "z"); }); }, "[psum]",
                                  {"'z'", "Mesh('x': 4)"});
  expect_error<ts::ShardingError>([&] { run([](ts::Array x) {
                                          return ts::psum(x, {"x", "x"});
                                        }); }, "[psum]",
                                  {"'x'", "twice"});
  expect_error<ts::ShardingError>([&] { run([](ts::Array x) { return ts::pmean(x, "q"); }); }, "[pmean]", {"'q'"});
  expect_error<ts::ShardingError>([&] { run([](ts::Array) { return ts::axis_index("q"); }); }, "[axis_index]", {"'q'"});
  expect_error<ts::ShardingError>(
      [&] {
        run([](ts::Array x) {
          (void)ts::axis_size("q");
          return x;
        });
      },
      "[axis_size]", {"'q'"});
}

// Outside a shard_map body there is no group to talk to.
TEST_F(Collectives, OutsideABodyIsACollectiveError) {
  const ts::Mesh m(first(2), {2}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2}, {2}, ts::NamedSharding(m, ts::P("x")));
  expect_error<ts::CollectiveError>([&] { ts::psum(a, "x"); }, "[psum]", {"shard_map"});
  expect_error<ts::CollectiveError>([&] { ts::pmean(a, "x"); }, "[pmean]", {"shard_map"});
  expect_error<ts::CollectiveError>([&] { ts::all_gather(a, "x"); }, "[all_gather]", {"shard_map"});
  expect_error<ts::CollectiveError>([&] { ts::psum_scatter(a, "x", 0, true); }, "[psum_scatter]", {"shard_map"});
  expect_error<ts::CollectiveError>([&] { ts::ppermute(a, "x", {{0, 1}}); }, "[ppermute]", {"shard_map"});
  expect_error<ts::CollectiveError>([&] { ts::all_to_all(a, "x", 0, 0, true); }, "[all_to_all]", {"shard_map"});
  expect_error<ts::CollectiveError>([&] { ts::axis_index("x"); }, "[axis_index]", {"shard_map"});
  expect_error<ts::CollectiveError>([&] { ts::axis_size("x"); }, "[axis_size]", {"shard_map"});
}

// =====================================================================
// Determinism: reductions combine members as a fixed tree over member rank
// ((0+1)+(2+3), split at the largest power of two below the count), so
// results are bitwise the same every run, on every member and on every
// layout of the members over processes, and equal that tree's sum computed
// in the array's own precision.
// =====================================================================

template <class T>
void check_deterministic_psum(const ts::Mesh& mesh, const std::vector<std::string>& axes, std::int64_t len) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<T> uni(-1, 1);
  std::vector<H> blocks;
  for (int p = 0; p < mesh.size(); ++p) {
    H h{{len}, {}};
    for (std::int64_t i = 0; i < len; ++i) h.v.push_back(static_cast<double>(uni(rng) * static_cast<T>(1 << (i % 20))));
    blocks.push_back(h);
  }
  const ts::DType dt = ts::dtype_of<T>();
  std::vector<std::vector<Got>> runs;
  for (int run = 0; run < 3; ++run) {
    runs.push_back(run_each(mesh, blocks, dt, [&](const ts::Array& x) { return ts::psum(x, axes); }));
    runs.push_back(run_each(mesh, blocks, dt, [&](const ts::Array& x) { return ts::psum_scatter(x, axes, 0, true); }));
  }
  for (int pos = 0; pos < mesh.size(); ++pos) {
    const auto ms = members(mesh, axes, pos);
    std::vector<T> ref(static_cast<size_t>(len));
    for (std::int64_t i = 0; i < len; ++i) {
      std::function<T(int, int)> node = [&](int lo, int hi) -> T {
        if (hi - lo == 1) return static_cast<T>(blocks[ms[lo]].v[i]);
        int p = 1;
        while (p * 2 < hi - lo) p *= 2;
        return static_cast<T>(node(lo, lo + p) + node(lo + p, hi));
      };
      ref[i] = node(0, static_cast<int>(ms.size()));
    }
    const auto part = ts::block_slice(len, static_cast<std::int64_t>(ms.size()), rank_in(ms, pos));
    for (size_t r = 0; r < runs.size(); ++r) {
      const auto& v = runs[r][pos].v;
      const bool scattered = r % 2 == 1;
      ASSERT_EQ(static_cast<std::int64_t>(v.size()), scattered ? part.size() : len);
      for (size_t i = 0; i < v.size(); ++i) {
        const double want = static_cast<double>(ref[(scattered ? part.start : 0) + i]);
        ASSERT_EQ(std::memcmp(&v[i], &want, sizeof(double)), 0)
            << "element " << i << " on position " << pos << " run " << r << ": " << v[i] << " vs " << want;
      }
      EXPECT_EQ(std::memcmp(v.data(), runs[r % 2][pos].v.data(), v.size() * sizeof(double)), 0);
    }
  }
}

// The tree combined from the nodes each process holds (owner_frontier), for
// every way of giving 1 to 3 processes the members of a group of up to 9:
// the same bits as the tree over the members themselves. (A right subtree
// reaching deeper than its left one, whose value was given, once read a
// freed scratch tile.)
TEST(ReductionTree, FrontierNodesGiveTheSameBitsAsTheMembers) {
  using tessera::detail::TreeNode;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  for (int n = 1; n <= 9; ++n) {
    std::vector<std::vector<double>> member(n, std::vector<double>(5));
    for (auto& m : member)
      for (double& v : m) v = uni(rng) * std::pow(10.0, uni(rng) * 8);
    auto leaf = [&](int lo, int hi) -> const unsigned char* {
      return hi - lo == 1 ? reinterpret_cast<const unsigned char*>(member[lo].data()) : nullptr;
    };
    std::vector<double> want(5);
    tessera::detail::tree_combine(tessera::detail::ReduceOp::Sum, tessera::DType::f64, 0, n, leaf,
                                  reinterpret_cast<unsigned char*>(want.data()), 5);
    int layouts = 1;
    for (int i = 0; i < n; ++i) layouts *= 3;
    for (int code = 0; code < layouts; ++code) {
      std::vector<int> owner(n);
      for (int i = 0, c = code; i < n; ++i, c /= 3) owner[i] = c % 3;
      const std::vector<TreeNode> frontier = tessera::detail::owner_frontier(owner);
      std::vector<std::vector<double>> node(frontier.size(), std::vector<double>(5));
      for (size_t k = 0; k < frontier.size(); ++k)
        tessera::detail::tree_combine(tessera::detail::ReduceOp::Sum, tessera::DType::f64, frontier[k].lo,
                                      frontier[k].hi, leaf, reinterpret_cast<unsigned char*>(node[k].data()), 5);
      std::vector<double> got(5);
      tessera::detail::tree_combine(tessera::detail::ReduceOp::Sum, tessera::DType::f64, 0, n,
                                    [&](int lo, int hi) -> const unsigned char* {
                                      for (size_t k = 0; k < frontier.size(); ++k)
                                        if (frontier[k].lo == lo && frontier[k].hi == hi)
                                          return reinterpret_cast<const unsigned char*>(node[k].data());
                                      return nullptr;
                                    },
                                    reinterpret_cast<unsigned char*>(got.data()), 5);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(double) * 5), 0) << "n=" << n << " layout " << code;
    }
  }
}

TEST_F(Collectives, FloatReductionsAreBitwiseReproducibleAndInMemberOrder) {
  const ts::Mesh m1(ts::devices(), {8}, {"x"});
  const ts::Mesh m2(ts::devices(), {2, 4}, {"x", "y"});
  const ts::Mesh m3({ts::devices()[5], ts::devices()[2], ts::devices()[7]}, {3}, {"x"});
  check_deterministic_psum<float>(m1, {"x"}, 10007);
  check_deterministic_psum<double>(m1, {"x"}, 4099);
  check_deterministic_psum<float>(m2, {"y"}, 1001);
  check_deterministic_psum<float>(m2, {"y", "x"}, 1001);
  check_deterministic_psum<double>(m2, {"x", "y"}, 777);
  check_deterministic_psum<float>(m3, {"x"}, 333);
}

// =====================================================================
// The Group interface itself, as an executor with one task per device uses
// it: every ReduceOp, one group object for many collectives, the barrier,
// and the per-member reshard (exchange) against the global one.
// =====================================================================

namespace {

namespace td = ts::detail;

// Runs fn(pos, group) on every device's worker, each with its own Group over
// `axes` in one session, as an executor with one task per device does. A
// failing task aborts the session so that the others stop waiting for it;
// the first error that is not such an echo (PeerFailed) is rethrown.
template <class Fn>
void run_members(const ts::Mesh& mesh, const std::vector<std::string>& axes, const std::string& op, Fn fn) {
  td::Communicator& comm = td::communicator_for(mesh);
  auto session = comm.open_session(mesh, ts::config::collective_timeout());
  std::vector<std::exception_ptr> errors(mesh.size());
  std::vector<char> echo(mesh.size(), 0);
  within(60, [&] {
    td::run_on_devices(mesh.devices(), [&](int pos) {
      try {
        std::unique_ptr<td::Group> g = comm.group(*session, mesh, axes, pos, op);
        fn(pos, *g);
      } catch (const td::PeerFailed&) {
        errors[pos] = std::current_exception();
        echo[pos] = 1;
      } catch (const std::exception& e) {
        errors[pos] = std::current_exception();
        session->abort(mesh.devices()[pos].id(), e.what());
      }
    });
  });
  for (int pos = 0; pos < mesh.size(); ++pos)
    if (errors[pos] && !echo[pos]) std::rethrow_exception(errors[pos]);
  for (int pos = 0; pos < mesh.size(); ++pos)
    if (errors[pos]) std::rethrow_exception(errors[pos]);
}

td::Local local_f32(int device_id, const std::vector<float>& v) {
  td::Buffer b(device_id, v.size() * sizeof(float));
  td::write_buffer(b, v.data(), v.size() * sizeof(float), "test");  // host or GPU memory
  return {b, {static_cast<std::int64_t>(v.size())}, ts::f32};
}

std::vector<float> values_f32(const td::Local& l) {
  std::vector<float> v(static_cast<std::size_t>(numel(l.shape)));
  td::read_buffer(l.data, v.data(), v.size() * sizeof(float), "test");
  return v;
}

// Runs the per-member exchange of `plan` on every device and checks each
// position's result against the global executor's (`want`): a kept buffer is
// the very same buffer, a new one holds the same bytes on the same device.
void expect_exchange_matches(const ts::ReshardPlan& plan, const std::vector<td::Buffer>& src,
                             const std::vector<td::Buffer>& want) {
  const ts::Mesh& mesh = plan.target.mesh();
  std::vector<td::Buffer> got(mesh.size());
  run_members(mesh, mesh.axis_names(), "reshard",
              [&](int pos, td::Group& g) { got[pos] = g.exchange(plan, pos, src[pos]); });
  for (int t = 0; t < mesh.size(); ++t) {
    SCOPED_TRACE("position " + std::to_string(t));
    if (want[t].device_data() == src[t].device_data()) {
      EXPECT_EQ(got[t].device_data(), src[t].device_data());  // kept (or both empty)
      continue;
    }
    EXPECT_NE(got[t].device_data(), src[t].device_data());
    ASSERT_EQ(got[t].nbytes(), want[t].nbytes());
    EXPECT_EQ(got[t].device_id(), want[t].device_id());
    if (want[t].nbytes() > 0) {
      std::vector<unsigned char> g(want[t].nbytes()), w(want[t].nbytes());
      td::read_buffer(got[t], g.data(), g.size(), "test");
      td::read_buffer(want[t], w.data(), w.size(), "test");
      EXPECT_EQ(g, w);
    }
  }
}

template <class T>
void check_exchange(const ts::Shape& shape, const ts::NamedSharding& src, const ts::NamedSharding& dst) {
  SCOPED_TRACE(ts::dtype_name(ts::dtype_of<T>()) + ts::shape_str(shape) + " " + src.str() + " -> " + dst.str());
  const auto host = ts::testing::iota_data<T>(numel(shape), 3);
  const ts::Array a = ts::device_put(host, shape, src);
  const ts::ReshardPlan plan = ts::plan_reshard(a, dst);
  const ts::Array want = ts::reshard(a, dst);
  expect_exchange_matches(plan, a.impl()->buffers, want.impl()->buffers);
}

}  // namespace

TEST_F(Collectives, EveryReduceOpThroughPreduce) {
  using Op = td::ReduceOp;
  int cases = 0;
  for (const auto& mesh : test_meshes())
    for (const auto& axes : axis_sets(mesh))
      for (ts::DType dt : kDTypes)
        for (Op op : {Op::Prod, Op::Any, Op::All, Op::Max, Op::Min}) {
          SCOPED_TRACE(mesh.str() + " " + td::name(op) + " over " + join(axes) + " " + ts::dtype_name(dt));
          const ts::Shape local{2, 3};
          const auto blocks = make_blocks(mesh.size(), local, dt, cases);
          const auto got =
              run_each(mesh, blocks, dt, [&](const ts::Array& x) { return td::preduce(x, axes, op, "preduce"); });
          const bool logical = op == Op::Any || op == Op::All;
          for (int pos = 0; pos < mesh.size(); ++pos) {
            const auto ms = members(mesh, axes, pos);
            H ref = blocks[ms[0]];
            if (logical)
              for (auto& v : ref.v) v = v != 0;
            for (size_t k = 1; k < ms.size(); ++k)
              ref = zip(ref, blocks[ms[k]], [&](double a, double b) {
                switch (op) {
                  case Op::Prod: return a * b;
                  case Op::Any: return static_cast<double>(a != 0 || b != 0);
                  case Op::All: return static_cast<double>(a != 0 && b != 0);
                  case Op::Max: return std::max(a, b);
                  default: return std::min(a, b);
                }
              });
            ts::DType want = dt;
            if (op == Op::Prod && dt == ts::bool_) want = ts::i32;  // as psum
            if (logical) want = ts::bool_;
            EXPECT_EQ(got[pos].dtype, want);
            EXPECT_EQ(got[pos].type, type_str(want, local, minus(mesh.axis_names(), axes)));
            // Products of up to 8 values below 12 are exact in i32, f64 and
            // (to 1e-6) f32.
            expect_eq(got[pos], ref, op == Op::Prod && dt == ts::f32 ? 1e-6 : 0);
            EXPECT_EQ(got[pos].v, got[ms[0]].v);
          }
          ++cases;
        }
  EXPECT_GT(cases, 300);
}

TEST_F(Collectives, ReduceOpCombineIsOneRulePerKind) {
  using Op = td::ReduceOp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto f32 = [](Op op, std::vector<float> acc, const std::vector<float>& in) {
    td::combine(op, ts::f32, acc.data(), in.data(), static_cast<std::int64_t>(acc.size()));
    return acc;
  };
  // NaN wins on either side; equal values keep the running one (its sign).
  for (Op op : {Op::Max, Op::Min}) {
    const auto r = f32(op, {nan, 1.0f, -0.0f, 2.0f}, {1.0f, nan, 0.0f, 3.0f});
    EXPECT_TRUE(std::isnan(r[0]) && std::isnan(r[1])) << td::name(op);
    EXPECT_TRUE(r[2] == 0.0f && std::signbit(r[2])) << td::name(op);
    EXPECT_EQ(r[3], op == Op::Max ? 3.0f : 2.0f);
  }
  // Any and All read nonzero (NaN included) as true.
  EXPECT_EQ(f32(Op::Any, {0.0f, 0.0f, nan}, {0.0f, -2.0f, 0.0f}), (std::vector<float>{0, 1, 1}));
  EXPECT_EQ(f32(Op::All, {1.0f, 0.0f, nan}, {5.0f, 1.0f, -1.0f}), (std::vector<float>{1, 0, 1}));
  // Integers wrap.
  std::vector<std::int32_t> acc{std::numeric_limits<std::int32_t>::max(), 1 << 20}, in{1, 1 << 12};
  td::combine(Op::Sum, ts::i32, acc.data(), in.data(), 1);
  td::combine(Op::Prod, ts::i32, acc.data() + 1, in.data() + 1, 1);
  EXPECT_EQ(acc, (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 0}));
  // On bool a sum is a logical or, a product a logical and.
  bool b[4] = {false, true, true, false};
  const bool c[4] = {true, true, false, false};
  td::combine(Op::Sum, ts::bool_, b, c, 2);
  td::combine(Op::Prod, ts::bool_, b + 2, c + 2, 2);
  EXPECT_EQ(std::vector<bool>(b, b + 4), (std::vector<bool>{true, true, false, false}));
  EXPECT_STREQ(td::name(Op::Sum), "sum");
  EXPECT_STREQ(td::name(Op::All), "all");
}

TEST_F(Collectives, OneGroupObjectServesManyCollectives) {
  // 2x4 mesh, groups along 'y': member r of row x is position 4x + r.
  const ts::Mesh mesh(ts::devices(), {2, 4}, {"x", "y"});
  std::vector<std::vector<std::vector<float>>> got(mesh.size());
  run_members(mesh, {"y"}, "test", [&](int pos, td::Group& g) {
    EXPECT_EQ(g.size(), 4);
    EXPECT_EQ(g.rank(), pos % 4);
    const int dev = mesh.devices()[pos].id();
    const td::Local in = local_f32(dev, {pos * 10.0f, pos * 10.0f + 1, pos * 10.0f + 2, pos * 10.0f + 3});
    const td::Local mx = g.all_reduce(in, td::ReduceOp::Max);
    g.barrier();
    const td::Local mn = g.reduce_scatter(in, 0, true, td::ReduceOp::Min);
    const td::Local sh = g.permute(in, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    const td::Local ga = g.all_gather(in, 0, true);
    const td::Local tr = g.all_to_all(in, 0, 0);
    got[pos] = {values_f32(mx), values_f32(mn), values_f32(sh), values_f32(ga), values_f32(tr)};
  });
  for (int pos = 0; pos < mesh.size(); ++pos) {
    const float row = static_cast<float>(pos / 4 * 4), r = static_cast<float>(pos % 4);
    const float from = row + static_cast<float>((pos % 4 + 3) % 4);
    EXPECT_EQ(got[pos][0],
              (std::vector<float>{(row + 3) * 10, (row + 3) * 10 + 1, (row + 3) * 10 + 2, (row + 3) * 10 + 3}));
    EXPECT_EQ(got[pos][1], (std::vector<float>{row * 10 + r}));
    EXPECT_EQ(got[pos][2], (std::vector<float>{from * 10, from * 10 + 1, from * 10 + 2, from * 10 + 3}));
    std::vector<float> all, col;
    for (int m = 0; m < 4; ++m) {
      for (int i = 0; i < 4; ++i) all.push_back((row + m) * 10 + i);
      col.push_back((row + m) * 10 + r);
    }
    EXPECT_EQ(got[pos][3], all);
    EXPECT_EQ(got[pos][4], col);
  }
}

TEST_F(Collectives, GroupReduceScatterTakesAReduceOp) {
  const ts::Mesh mesh(first(3), {3}, {"x"});
  std::vector<std::vector<float>> got(3);
  run_members(mesh, {"x"}, "test", [&](int pos, td::Group& g) {
    // Member p holds p+1 in every element; blocks of 7 over 3: 3, 2, 2.
    const td::Local in = local_f32(mesh.devices()[pos].id(), std::vector<float>(7, pos + 1.0f));
    const td::Local out = g.reduce_scatter(in, 0, true, td::ReduceOp::Prod);
    got[pos] = values_f32(out);
  });
  EXPECT_EQ(got[0], std::vector<float>(3, 6.0f));
  EXPECT_EQ(got[1], std::vector<float>(2, 6.0f));
  EXPECT_EQ(got[2], std::vector<float>(2, 6.0f));
}

TEST_F(Collectives, GroupBarrierMismatchIsReported) {
  const ts::Mesh mesh(first(2), {2}, {"x"});
  expect_error<ts::CollectiveError>(
      [&] {
        run_members(mesh, {"x"}, "test", [&](int pos, td::Group& g) {
          if (pos == 0)
            g.barrier();
          else
            g.all_reduce(local_f32(mesh.devices()[pos].id(), {1.0f}), td::ReduceOp::Sum);
        });
      },
      "[barrier]", {"mismatched collectives on axis 'x'", td::device_label(0) + " called barrier()", "test(f32[1], reduce=sum)"});
}

TEST_F(Collectives, PerDeviceExchangeEqualsGlobalReshard) {
  using E = ts::PartitionSpec::Entry;
  const auto d = ts::devices();
  std::vector<ts::Mesh> meshes;
  for (int n = 1; n <= 8; ++n) meshes.emplace_back(first(n), std::vector<int>{n}, std::vector<std::string>{"x"});
  meshes.push_back(ts::Mesh({d[7], d[5], d[3], d[1]}, {4}, {"x"}));  // ids not in mesh order
  meshes.push_back(ts::Mesh(first(8), {2, 4}, {"x", "y"}));
  int cases = 0;
  for (const auto& mesh : meshes) {
    std::vector<ts::PartitionSpec> specs{ts::P(), ts::P("x"), ts::PartitionSpec({E(ts::none), E("x")})};
    if (mesh.ndim() == 2) {
      const std::vector<std::string> xy{"x", "y"}, yx{"y", "x"};
      specs = {ts::P(),
               ts::P("x"),
               ts::PartitionSpec({E(ts::none), E("y")}),
               ts::P("x", "y"),
               ts::P("y", "x"),
               ts::PartitionSpec({E(xy)}),
               ts::PartitionSpec({E(ts::none), E(yx)})};
    }
    for (const auto& from : specs)
      for (const auto& to : specs) {
        const ts::NamedSharding src(mesh, from), dst(mesh, to);
        for (const ts::Shape& shape : {ts::Shape{7, 5}, ts::Shape{3, 10}, ts::Shape{0, 4}}) {
          check_exchange<float>(shape, src, dst);
          ++cases;
        }
        check_exchange<std::int8_t>({5, 9}, src, dst);
        check_exchange<bool>({9, 2}, src, dst);
        check_exchange<double>({1, 1}, src, dst);
      }
  }
  EXPECT_EQ(cases, 390);
}

TEST_F(Collectives, PerDeviceExchangeServesBoxPlans) {
  // Blocks widened by a halo of one row (a stencil's plan), as gather_boxes
  // serves them globally.
  for (const auto& mesh : {mesh1d(1, "x"), mesh1d(3, "x"), mesh1d(8, "x"), ts::Mesh(first(8), {2, 4}, {"x", "y"})}) {
    SCOPED_TRACE(mesh.str());
    const ts::Shape shape{13, 3};
    const ts::NamedSharding src(mesh, ts::P("x"));
    const ts::Array a = ts::device_put(ts::testing::iota_data<float>(numel(shape)), shape, src);
    std::vector<std::vector<ts::Slice>> boxes(mesh.size());
    for (int t = 0; t < mesh.size(); ++t) {
      boxes[t] = src.shard_index(shape, t);
      boxes[t][0] = {std::max<std::int64_t>(0, boxes[t][0].start - 1),
                     std::min<std::int64_t>(13, boxes[t][0].stop + 1)};
    }
    const ts::ReshardPlan plan = ts::plan_boxes(shape, ts::f32, src, boxes);
    expect_exchange_matches(plan, a.impl()->buffers, td::gather_boxes(td::ExecContext::whole(), a, boxes, "halo"));
  }
}

TEST_F(Collectives, PerDeviceExchangeNeedsTheWholeMeshInOrder) {
  const ts::Mesh mesh(first(8), {2, 4}, {"x", "y"});
  const ts::NamedSharding src(mesh, ts::P("x")), dst(mesh, ts::P("y"));
  const ts::Array a = ts::device_put(std::vector<float>(16, 1.0f), {8, 2}, src);
  const ts::ReshardPlan plan = ts::plan_reshard(a, dst);
  for (const std::vector<std::string>& axes : {std::vector<std::string>{"y", "x"}, std::vector<std::string>{"y"}})
    expect_error<ts::CollectiveError>(
        [&] {
          run_members(mesh, axes, "reshard",
                      [&](int pos, td::Group& g) { g.exchange(plan, pos, a.impl()->buffers[pos]); });
        },
        "[reshard]", {"exchange needs the group of every device of", "in mesh order"});
}

// =====================================================================
// No hangs.
// =====================================================================

// (a) A device that skips a collective: every waiting device raises
// CollectiveError after the timeout, naming the collective, the axis, and
// the devices that arrived and those that did not.
TEST_F(Collectives, SkippedCollectiveTimesOutNamingWhoArrived) {
  ts::config::set_collective_timeout(0.5);
  const ts::Mesh m(first(4), {4}, {"x"});
  auto a = ts::device_put(std::vector<float>(8, 1.0f), {8}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::shard_map(
      [](ts::Array x) {
        if (ts::axis_index("x").item<std::int32_t>() == 2) return x;  // skips the psum
        return ts::psum(x, "x");
      },
      m, {ts::P("x")}, ts::P("x"), {.check_vma = false});
  const auto t0 = Clock::now();
  within(10, [&] {
    expect_error<ts::CollectiveError>([&] { f(a); }, "[psum] timed out after 0.5 s",
                                      {"axis 'x'", "arrived " + td::device_labels({0, 1, 3}), "missing " + td::device_labels({2})});
  });
  const double dt = seconds_since(t0);
  EXPECT_GE(dt, 0.45);
  EXPECT_LT(dt, 3.0);
  // Two devices missing an all_gather.
  auto g = ts::shard_map(
      [](ts::Array x) {
        if (ts::axis_index("x").item<std::int32_t>() % 2 == 1) return x;
        return ts::all_gather(x, "x", 0, true);
      },
      m, {ts::P("x")}, ts::P(), {.check_vma = false});
  within(10, [&] {
    expect_error<ts::CollectiveError>([&] { g(a); }, "[all_gather] timed out",
                                      {"axis 'x'", "arrived " + td::device_labels({0, 2}), "missing " + td::device_labels({1, 3})});
  });
  ts::config::set_collective_timeout(20);
}

// On a 2-d mesh only the group with the missing device times out; the
// message names the group's axes (one or several) and its devices by id.
TEST_F(Collectives, SkippedCollectiveOnTwoDMeshNamesTheGroup) {
  ts::config::set_collective_timeout(0.5);
  const ts::Mesh m(ts::devices(), {2, 4}, {"x", "y"});
  auto a = ts::device_put(std::vector<float>(8, 1.0f), {2, 4}, ts::NamedSharding(m, ts::P("x", "y")));
  auto f = ts::shard_map(
      [](ts::Array x) {
        if (ts::axis_index("x").item<std::int32_t>() == 1 && ts::axis_index("y").item<std::int32_t>() == 2) return x;
        return ts::psum(x, "y");
      },
      m, {ts::P("x", "y")}, ts::P("x", "y"), {.check_vma = false});
  within(10, [&] {
    expect_error<ts::CollectiveError>([&] { f(a); }, "[psum] timed out",
                                      {"axis 'y'", "arrived " + td::device_labels({4, 5, 7}), "missing " + td::device_labels({6})});
  });
  auto g = ts::shard_map(
      [](ts::Array x) {
        if (ts::axis_index("x").item<std::int32_t>() == 0 && ts::axis_index("y").item<std::int32_t>() == 0) return x;
        return ts::pmax(x, {"x", "y"});
      },
      m, {ts::P("x", "y")}, ts::P("x", "y"), {.check_vma = false});
  within(10, [&] {
    expect_error<ts::CollectiveError>([&] { g(a); }, "[pmax] timed out",
                                      {"axis ('x', 'y')", "arrived " + td::device_labels({1, 2, 3, 4, 5, 6, 7}), "missing " + td::device_labels({0})});
  });
  ts::config::set_collective_timeout(20);
}

struct NotATesseraError : std::logic_error {
  using std::logic_error::logic_error;
};

// (b) An exception in one body reaches the caller with its own type and
// message, long before the timeout: the others, blocked in a collective, are
// released at once.
TEST_F(Collectives, ExceptionInOneBodyReachesCallerAtOnce) {
  ts::config::set_collective_timeout(30);
  const ts::Mesh m(ts::devices(), {2, 4}, {"x", "y"});
  auto a = ts::device_put(std::vector<float>(16, 1.0f), {4, 4}, ts::NamedSharding(m, ts::P("x", "y")));
  auto failing = [&](int bad_pos, int when) {
    return ts::shard_map(
        [=](ts::Array x) {
          const int me = ts::axis_index("x").item<std::int32_t>() * 4 + ts::axis_index("y").item<std::int32_t>();
          ts::Array y = x;
          for (int step = 0; step < 3; ++step) {
            if (me == bad_pos && step == when)
              throw ts::ShapeError("[my_op] expected rows of 3, got " + std::to_string(me));
            y = step % 2 ? ts::psum(y, "y") : ts::all_gather(y, "x", 0, true);
          }
          return y;
        },
        m, {ts::P("x", "y")}, ts::P(), {.check_vma = false});
  };
  for (int bad : {0, 5, 7})
    for (int when : {0, 1, 2}) {
      auto f = failing(bad, when);
      const auto t0 = Clock::now();
      within(20, [&] {
        expect_error<ts::ShapeError>([&] { f(a); }, "[my_op] expected rows of 3, got " + std::to_string(bad));
      });
      EXPECT_LT(seconds_since(t0), 5.0) << "device " << bad << " step " << when;
    }
  // A non-Tessera exception keeps its type.
  auto g = ts::shard_map(
      [](ts::Array x) {
        if (ts::axis_index("y").item<std::int32_t>() == 3) throw NotATesseraError("custom failure");
        return ts::psum(x, {"x", "y"});
      },
      m, {ts::P("x", "y")}, ts::P(), {.check_vma = false});
  const auto t0 = Clock::now();
  within(20, [&] {
    try {
      g(a);
      ADD_FAILURE() << "nothing thrown";
    } catch (const NotATesseraError& e) {
      EXPECT_STREQ(e.what(), "custom failure");
    }
  });
  EXPECT_LT(seconds_since(t0), 5.0);
  // An op's own error on one device (matmul of mismatched shapes).
  auto h = ts::shard_map(
      [](ts::Array x) {
        if (ts::axis_index("x").item<std::int32_t>() == 1) (void)ts::matmul(x, ts::concatenate({x, x}, 0));
        return ts::psum(x, "x");
      },
      m, {ts::P("x", "y")}, ts::P(ts::none, "y"));
  within(20, [&] { expect_error<ts::ShapeError>([&] { h(a); }, "[matmul]"); });
  ts::config::set_collective_timeout(20);
}

// (c) The runtime stays usable: 100 failing calls in a row (a different
// device fails each time, the others blocked in collectives), then good calls.
TEST_F(Collectives, HundredFailingCallsThenAGoodOne) {
  ts::config::set_collective_timeout(30);
  const ts::Mesh m(ts::devices(), {8}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {8}, ts::NamedSharding(m, ts::P("x")));
  int call = 0;
  auto f = ts::shard_map(
      [&call](ts::Array x) {
        const int me = ts::axis_index("x").item<std::int32_t>();
        ts::Array s = ts::psum(x, "x");
        if (me == call % 8) throw ts::DTypeError("[fail] expected success, got call " + std::to_string(call));
        return ts::all_gather(s + x, "x", 0, true);
      },
      m, {ts::P("x")}, ts::P(), {.check_vma = false});
  const auto t0 = Clock::now();
  within(60, [&] {
    for (call = 0; call < 100; ++call)
      expect_error<ts::DTypeError>([&] { f(a); }, "[fail] expected success, got call " + std::to_string(call));
  });
  EXPECT_LT(seconds_since(t0), 25.0);
  auto good = ts::shard_map([](ts::Array x) { return ts::all_gather(ts::psum(x, "x") + x, "x", 0, true); }, m,
                            {ts::P("x")}, ts::P());
  within(10, [&] { EXPECT_EQ(good(a).to_vector<float>(), (std::vector<float>{37, 38, 39, 40, 41, 42, 43, 44})); });
  // And after timeouts and mismatches too.
  ts::config::set_collective_timeout(0.2);
  auto skip =
      ts::shard_map([](ts::Array x) { return ts::axis_index("x").item<std::int32_t>() == 3 ? x : ts::psum(x, "x"); }, m,
                    {ts::P("x")}, ts::P("x"), {.check_vma = false});
  auto mismatch = ts::shard_map(
      [](ts::Array x) { return ts::axis_index("x").item<std::int32_t>() == 3 ? ts::pmax(x, "x") : ts::psum(x, "x"); },
      m, {ts::P("x")}, ts::P("x"), {.check_vma = false});
  within(20, [&] {
    for (int i = 0; i < 3; ++i) {
      EXPECT_THROW(skip(a), ts::CollectiveError);
      EXPECT_THROW(mismatch(a), ts::CollectiveError);
    }
    EXPECT_EQ(good(a).to_vector<float>(), (std::vector<float>{37, 38, 39, 40, 41, 42, 43, 44}));
  });
  ts::config::set_collective_timeout(20);
}

// Catches a CollectiveError (exactly, not PeerFailed or another subclass)
// and returns its message.
template <class F>
std::string collective_error_of(F f) {
  try {
    f();
  } catch (const ts::CollectiveError& e) {
    EXPECT_EQ(typeid(e), typeid(ts::CollectiveError)) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "nothing thrown";
  return "";
}

// (d) Mismatched collectives on the same axis are reported (both calls
// named), never combined; so are differing parameters and dtypes.
TEST_F(Collectives, MismatchedCollectivesAreReportedNotCombined) {
  ts::config::set_collective_timeout(30);
  const ts::Mesh m(first(2), {2}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2, 3, 4}, {4}, ts::NamedSharding(m, ts::P("x")));
  auto run = [&](auto body) {
    auto f = ts::shard_map(body, m, {ts::P("x")}, ts::P("x"), {.check_vma = false});
    std::string msg;
    const auto t0 = Clock::now();
    within(10, [&] { msg = collective_error_of([&] { f(a); }); });
    EXPECT_LT(seconds_since(t0), 5.0);  // detected on arrival, not by the timeout
    return msg;
  };
  auto me = [] { return ts::axis_index("x").item<std::int32_t>(); };
  // Device 0 psum, device 1 all_gather. The message names both calls and
  // starts with member 0's op, so every member (and every run) reports the same.
  std::string msg = run([&](ts::Array x) { return me() == 0 ? ts::psum(x, "x") : ts::all_gather(x, "x", 0, true); });
  EXPECT_EQ(msg.rfind("[psum] ", 0), 0u) << msg;
  for (const std::string& w : {std::string("mismatched collectives on axis 'x'"), td::device_label(0) + " called psum(f32[2]",
                               td::device_label(1) + " called all_gather("})
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing in: " << msg;
  // psum vs pmax (same shapes and dtype).
  msg = run([&](ts::Array x) { return me() == 0 ? ts::psum(x, "x") : ts::pmax(x, "x"); });
  for (const std::string& w : {std::string("mismatched collectives"), td::device_label(0) + " called psum(f32[2], reduce=sum)",
                               td::device_label(1) + " called pmax(f32[2], reduce=max)"})
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing in: " << msg;
  // The same collective on different dtypes.
  msg = run([&](ts::Array x) {
    return me() == 0 ? ts::psum(x, "x") : ts::astype(ts::psum(ts::astype(x, ts::i32), "x"), ts::f32);
  });
  for (const char* w : {"mismatched collectives", "psum(f32[2]", "psum(i32[2]"})
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing in: " << msg;
  // Different parameters.
  msg = run([&](ts::Array x) { return ts::all_gather(x, "x", 0, me() == 0); });
  for (const char* w : {"mismatched collectives", "tiled=true", "tiled=false"})
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing in: " << msg;
  msg = run([&](ts::Array x) {
    return ts::ppermute(
        x, "x", me() == 0 ? std::vector<std::pair<int, int>>{{0, 1}} : std::vector<std::pair<int, int>>{{1, 0}});
  });
  for (const char* w : {"mismatched collectives", "perm=[(0, 1)]", "perm=[(1, 0)]"})
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing in: " << msg;
  // Out-of-order sequences: device 0 psum then all_gather, device 1 the reverse.
  msg = run([&](ts::Array x) {
    if (me() == 0) return ts::all_gather(ts::psum(x, "x"), "x", 0, true);
    return ts::psum(ts::all_gather(x, "x", 0, true), "x");
  });
  EXPECT_NE(msg.find("mismatched collectives"), std::string::npos) << msg;
  ts::config::set_collective_timeout(20);
}

// (e) The timeout setting.
TEST_F(Collectives, CollectiveTimeoutSetting) {
  ts::config::set_collective_timeout(2.5);
  EXPECT_EQ(ts::config::collective_timeout(), 2.5);
  expect_error<ts::CollectiveError>([] { ts::config::set_collective_timeout(0); }, "[set_collective_timeout]",
                                    {"positive"});
  expect_error<ts::CollectiveError>([] { ts::config::set_collective_timeout(-1); }, "[set_collective_timeout]",
                                    {"positive", "-1"});
  expect_error<ts::CollectiveError>(
      [] { ts::config::set_collective_timeout(std::numeric_limits<double>::quiet_NaN()); }, "[set_collective_timeout]",
      {"positive"});
  EXPECT_EQ(ts::config::collective_timeout(), 2.5);  // unchanged by the rejected values
  // The timeout in force when a call starts is the one it uses.
  ts::config::set_collective_timeout(0.3);
  const ts::Mesh m(first(2), {2}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2}, {2}, ts::NamedSharding(m, ts::P("x")));
  auto f =
      ts::shard_map([](ts::Array x) { return ts::axis_index("x").item<std::int32_t>() == 0 ? x : ts::psum(x, "x"); }, m,
                    {ts::P("x")}, ts::P("x"), {.check_vma = false});
  const auto t0 = Clock::now();
  within(10, [&] {
    expect_error<ts::CollectiveError>([&] { f(a); }, "[psum] timed out after 0.3 s",
                                      {"arrived " + td::device_labels({1}), "missing " + td::device_labels({0})});
  });
  EXPECT_GE(seconds_since(t0), 0.25);
  EXPECT_LT(seconds_since(t0), 3.0);
  ts::config::set_collective_timeout(20);
}

// TESSERA_COLLECTIVE_TIMEOUT is read when the timeout is first needed, so it
// is tested in fresh processes (threadsafe death tests re-run this binary and
// run only the statement). Each check prints "env-check <code>" and exits
// with the code, 0 on success.
namespace {

[[noreturn]] void finish_env_check(int code) {
  std::fprintf(stderr, "env-check %d\n", code);
  std::fflush(stderr);
  std::_Exit(code);
}

// A valid value is used as the timeout.
[[noreturn]] void env_valid_value() {
  setenv("TESSERA_COLLECTIVE_TIMEOUT", "0.25", 1);
  int code = 0;
  if (ts::config::collective_timeout() != 0.25) code = 2;
  const ts::Mesh m(first(2), {2}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2}, {2}, ts::NamedSharding(m, ts::P("x")));
  auto f =
      ts::shard_map([](ts::Array x) { return ts::axis_index("x").item<std::int32_t>() == 0 ? x : ts::psum(x, "x"); }, m,
                    {ts::P("x")}, ts::P("x"), {.check_vma = false});
  const auto t0 = Clock::now();
  try {
    f(a);
    code = 3;
  } catch (const ts::CollectiveError& e) {
    if (std::string(e.what()).find("timed out after 0.25 s") == std::string::npos) code = 4;
  }
  if (seconds_since(t0) > 3) code = 5;
  finish_env_check(code);
}

// Bad values raise CollectiveError (from the setting and from a shard_map
// call); unset, the timeout is 60 s.
[[noreturn]] void env_bad_values() {
  int code = 0;
  for (const char* bad : {"abc", "0", "-2", "", "5s"}) {
    setenv("TESSERA_COLLECTIVE_TIMEOUT", bad, 1);
    try {
      (void)ts::config::collective_timeout();
      code = 10;
    } catch (const ts::CollectiveError& e) {
      const std::string w = e.what();
      if (w.find("TESSERA_COLLECTIVE_TIMEOUT must be a positive number") == std::string::npos ||
          w.find(std::string("'") + bad + "'") == std::string::npos)
        code = 11;
    }
  }
  const ts::Mesh m(first(2), {2}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2}, {2}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::shard_map([](ts::Array x) { return ts::psum(x, "x"); }, m, {ts::P("x")}, ts::P());
  try {
    f(a);
    code = 12;
  } catch (const ts::CollectiveError& e) {
    if (std::string(e.what()).rfind("[shard_map] TESSERA_COLLECTIVE_TIMEOUT", 0) != 0) code = 13;
  }
  unsetenv("TESSERA_COLLECTIVE_TIMEOUT");
  if (ts::config::collective_timeout() != 60.0) code = 14;
  if (f(a).to_vector<float>() != std::vector<float>{3}) code = 15;
  finish_env_check(code);
}

}  // namespace

TEST(CollectiveTimeoutEnv, ValidValueIsUsed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(env_valid_value(), ::testing::ExitedWithCode(0), "env-check 0");
}

TEST(CollectiveTimeoutEnv, BadValuesAreErrorsAndDefaultIsSixty) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(env_bad_values(), ::testing::ExitedWithCode(0), "env-check 0");
}
