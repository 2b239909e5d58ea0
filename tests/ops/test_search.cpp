// searchsorted and median.
// Host references in double (std::lower_bound / std::upper_bound with NaN
// last, std::nth_element), goldens (from numpy / jax), the SPMD property over
// many meshes and layouts (uneven, tiny and empty sizes included), median
// bitwise the same on every layout, the communication (no gather of the
// reduced data), every error path, the primitives' rules, jit == eager,
// vmap and jvp.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <type_traits>

#include "tessera/tessera.hpp"
#include "test_util.hpp"
#include "trace_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::expect_jit_matches;
using ts::testing::expect_same;
using ts::testing::first_devices;
using ts::testing::for_each_layout;
using ts::testing::numel;
using ts::testing::random_spec;
using ts::testing::rule_of;
using ts::testing::test_meshes;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

ts::NamedSharding single() { return ts::NamedSharding(ts::Mesh(first_devices(1), {1}, {"x"}), ts::P()); }
ts::Mesh line(int n, const char* axis = "x") { return ts::Mesh(first_devices(n), {n}, {axis}); }

template <class T>
std::vector<T> cast_vec(const std::vector<double>& v) {
  std::vector<T> out;
  for (double d : v) out.push_back(static_cast<T>(d));
  return out;
}

template <class T>
ts::Array put(const std::vector<double>& v, const ts::Shape& shape, const ts::NamedSharding& s) {
  return ts::device_put(cast_vec<T>(v), shape, s);
}

ts::Array put_mask(const std::vector<std::uint8_t>& m, const ts::Shape& shape, const ts::NamedSharding& s) {
  return ts::device_put(std::vector<bool>(m.begin(), m.end()), shape, s);
}

/// Bitwise equality of host values, NaN equal to NaN only as bits.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ============================================================ references

/// np.searchsorted with NaN last, in double.
std::int64_t ref_search(const std::vector<double>& a, double v, bool right) {
  const auto less = [](double p, double q) { return p < q || (!std::isnan(p) && std::isnan(q)); };
  return right ? std::upper_bound(a.begin(), a.end(), v, less) - a.begin()
               : std::lower_bound(a.begin(), a.end(), v, less) - a.begin();
}

/// The two middle elements of every output of a median of x (row-major,
/// `shape`) over `axes` (sorted), outputs in row-major order of the kept
/// dims: NaN where the selection is empty or holds a NaN.
struct Middle {
  std::vector<double> lo, hi;
};
Middle ref_middle(const std::vector<double>& x, const ts::Shape& shape, const std::vector<int>& axes,
                  const std::vector<std::uint8_t>* mask) {
  const int r = static_cast<int>(shape.size());
  std::vector<bool> red(r, false);
  for (int a : axes) red[a] = true;
  std::int64_t outputs = 1;
  for (int d = 0; d < r; ++d)
    if (!red[d]) outputs *= shape[d];
  std::vector<std::vector<double>> sel(static_cast<size_t>(outputs));
  std::vector<bool> nan(static_cast<size_t>(outputs), false);
  std::vector<std::int64_t> idx(r, 0);
  for (std::int64_t e = 0; e < static_cast<std::int64_t>(x.size()); ++e) {
    std::int64_t o = 0;
    for (int d = 0; d < r; ++d)
      if (!red[d]) o = o * shape[d] + idx[d];
    if (!mask || (*mask)[e]) {
      if (std::isnan(x[e]))
        nan[o] = true;
      else
        sel[o].push_back(x[e]);
    }
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  Middle m;
  for (std::int64_t o = 0; o < outputs; ++o) {
    auto& v = sel[o];
    if (nan[o] || v.empty()) {
      m.lo.push_back(kNaN);
      m.hi.push_back(kNaN);
      continue;
    }
    const auto c = static_cast<std::int64_t>(v.size());
    std::nth_element(v.begin(), v.begin() + (c - 1) / 2, v.end());
    const double lo = v[(c - 1) / 2];
    std::nth_element(v.begin(), v.begin() + c / 2, v.end());
    m.lo.push_back(lo);
    m.hi.push_back(v[c / 2]);
  }
  return m;
}

/// The median in dtype T from the two middle elements (the mean of two
/// finite values of moderate size rounds once in T either way).
template <class T>
std::vector<T> ref_median(const Middle& m) {
  std::vector<T> out;
  for (size_t i = 0; i < m.lo.size(); ++i)
    out.push_back(static_cast<T>(static_cast<T>(m.lo[i]) + static_cast<T>(m.hi[i])) * T(0.5));
  return out;
}

/// Values equal, NaN where NaN (0.0 and -0.0 equal: a reference sorting
/// doubles may pick either).
template <class T>
void expect_values(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": " << got[i];
    else
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
  }
}

/// Host data with many duplicates, negative values and signed zeros.
std::vector<double> dup_data(std::int64_t n, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = (i * 7 + salt * 3) % 23;
    v[i] = k == 5 ? -0.0 : static_cast<double>(k - 11) * 0.75;
  }
  return v;
}

std::vector<std::uint8_t> mask_data(std::int64_t n, int salt) {
  std::vector<std::uint8_t> m(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) m[i] = (i * 5 + salt) % 7 < 4;
  return m;
}

/// The natural layout of a median result: x's axes on the kept dims.
ts::PartitionSpec kept_spec(const ts::NamedSharding& s, int rank, const std::vector<int>& axes, bool keepdims) {
  std::vector<ts::PartitionSpec::Entry> e;
  for (int d = 0; d < rank; ++d) {
    const bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!red)
      e.push_back(s.spec()[d]);
    else if (keepdims)
      e.emplace_back(ts::none);
  }
  return ts::PartitionSpec(e);
}

// ============================================================ searchsorted

TEST(Searchsorted, Goldens) {
  auto s = single();
  auto a = ts::device_put(std::vector<double>{1, 2, 3, 4, 5}, {5}, s);
  auto v = ts::device_put(std::vector<double>{-10, 10, 2, 3, 2.5}, {5}, s);
  // np.searchsorted([1, 2, 3, 4, 5], [-10, 10, 2, 3, 2.5], side=...)
  auto l = ts::searchsorted(a, v);
  EXPECT_EQ(l.dtype(), ts::i32);
  EXPECT_EQ(l.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 5, 1, 2, 2}));
  auto r = ts::searchsorted(a, v, ts::Side::right, ts::i64);
  EXPECT_EQ(r.dtype(), ts::i64);
  EXPECT_EQ(r.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 5, 2, 3, 2}));
  // NaN last: np.searchsorted([0, 1, nan, nan], [nan, 0.5, 1, inf], side) ->
  // left [2, 1, 1, 2], right [4, 1, 2, 2].
  auto an = ts::device_put(std::vector<float>{0, 1, NAN, NAN}, {4}, s);
  auto vn = ts::device_put(std::vector<float>{NAN, 0.5f, 1, INFINITY}, {4}, s);
  EXPECT_EQ(ts::searchsorted(an, vn).to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 1, 1, 2}));
  EXPECT_EQ(ts::searchsorted(an, vn, ts::Side::right).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{4, 1, 2, 2}));
  // -0.0 == 0.0.
  auto az = ts::device_put(std::vector<double>{-1, 0.0, 1}, {3}, s);
  auto vz = ts::device_put(std::vector<double>{-0.0}, {}, s);
  EXPECT_EQ(ts::searchsorted(az, vz).item<int>(), 1);
  EXPECT_EQ(ts::searchsorted(az, vz, ts::Side::right).item<int>(), 2);
  EXPECT_EQ(ts::searchsorted(az, vz).shape(), ts::Shape{});
  // An empty sequence: every value goes at 0.
  auto empty = ts::device_put(std::vector<float>{}, {0}, s);
  EXPECT_EQ(ts::searchsorted(empty, vn, ts::Side::right).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>(4, 0)));
  // Duplicates: left before the run, right after it.
  auto ad = ts::device_put(std::vector<std::int32_t>{1, 2, 2, 2, 3}, {5}, s);
  auto vd = ts::device_put(std::vector<std::int32_t>{2}, {1}, s);
  EXPECT_EQ(ts::searchsorted(ad, vd).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1}));
  EXPECT_EQ(ts::searchsorted(ad, vd, ts::Side::right).to_vector<std::int32_t>(), (std::vector<std::int32_t>{4}));
}

TEST(Searchsorted, ComparesInThePromotedDtype) {
  auto s = single();
  // i32 sequence, f32 values: compared as f32.
  auto a = ts::device_put(std::vector<std::int32_t>{1, 2, 3}, {3}, s);
  auto v = ts::device_put(std::vector<float>{1.5f, 2, 3.5f}, {3}, s);
  EXPECT_EQ(ts::searchsorted(a, v).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1, 3}));
  EXPECT_EQ(ts::searchsorted(a, v, ts::Side::right).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 3}));
  // u8 with i8 meet in i32: -1 goes first, not at 255.
  auto au = ts::device_put(std::vector<std::uint8_t>{0, 200}, {2}, s);
  auto vi = ts::device_put(std::vector<std::int8_t>{-1, 100}, {2}, s);
  EXPECT_EQ(ts::searchsorted(au, vi).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1}));
  // i64 stays i64: 2^53 + 1 is not rounded to 2^53.
  const std::int64_t big = std::int64_t{1} << 53;
  auto ab = ts::device_put(std::vector<std::int64_t>{big, big + 1}, {2}, s);
  auto vb = ts::device_put(std::vector<std::int64_t>{big + 1}, {1}, s);
  EXPECT_EQ(ts::searchsorted(ab, vb).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1}));
  EXPECT_EQ(ts::searchsorted(ab, vb, ts::Side::right).to_vector<std::int32_t>(), (std::vector<std::int32_t>{2}));
  // bool: false < true.
  auto ab2 = ts::device_put(std::vector<bool>{false, true}, {2}, s);
  auto vb2 = ts::device_put(std::vector<bool>{true, false}, {2}, s);
  EXPECT_EQ(ts::searchsorted(ab2, vb2).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(ts::searchsorted(ab2, vb2, ts::Side::right).to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 1}));
  // f32 sequence, f64 values: compared as f64 (0.1 as f32 is above 0.1).
  auto af = ts::device_put(std::vector<float>{0.1f}, {1}, s);
  auto vf = ts::device_put(std::vector<double>{0.1}, {1}, s);
  EXPECT_EQ(ts::searchsorted(af, vf, ts::Side::right).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0}));
}

// Every layout of the values, the sequence in random layouts, both sides,
// both index dtypes: the host reference, and the values' sharding kept.
TEST(Searchsorted, SpmdMatchesReference) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-3, 13);
  std::vector<double> edges{-1, 0, 0, 0.5, 1, 2, 2, 2, 3.25, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, kNaN};
  int cases = 0;
  for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{2, 3}, ts::Shape{0, 4}, ts::Shape{1, 9}}) {
    std::vector<double> xv(static_cast<size_t>(numel(shape)));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = i % 4 == 0 ? edges[i % edges.size()] : u(rng);
    if (xv.size() > 6) xv[1] = kNaN, xv[2] = kInf, xv[3] = -kInf;
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      const ts::NamedSharding es(s.mesh(), random_spec(rng, s.mesh(), 1));
      const auto a = put<double>(edges, {static_cast<std::int64_t>(edges.size())}, es);
      const auto af = put<float>(edges, {static_cast<std::int64_t>(edges.size())}, es);
      const auto x = put<float>(xv, shape, s);
      for (bool right : {false, true}) {
        const ts::Side side = right ? ts::Side::right : ts::Side::left;
        // f32 values in an f64 sequence (compared in f64) and in an f32 one.
        for (const ts::Array& seq : {a, af}) {
          const ts::DType dt = cases % 2 ? ts::i64 : ts::i32;
          const auto r = ts::searchsorted(seq, x, side, dt);
          ASSERT_EQ(r.sharding(), s) << s.str();
          ASSERT_EQ(r.dtype(), dt);
          ASSERT_EQ(r.shape(), shape);
          const auto got = r.to_vector<std::int64_t>();
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], ref_search(edges, static_cast<float>(xv[i]), right))
                << s.str() << " right=" << right << " x=" << xv[i] << " at " << i;
          ++cases;
        }
      }
    });
  }
  EXPECT_GT(cases, 400);
}

// The pipeline's digitize: x sharded over "data", the edges replicated;
// nothing moves.
TEST(Searchsorted, DigitizeIsPurelyLocal) {
  const ts::Mesh mesh = line(8, "data");
  const std::int64_t n = 100003;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 26);
  std::vector<double> xv(static_cast<size_t>(n));
  for (auto& v : xv) v = u(rng);
  std::vector<double> edges;
  for (int i = 0; i <= 25; ++i) edges.push_back(i);
  const auto x = put<float>(xv, {n}, ts::NamedSharding(mesh, ts::P("data")));
  const auto e = put<float>(edges, {26}, ts::NamedSharding(mesh, ts::P()));
  ts::Array ix;
  auto ex = ts::explain([&] { ix = ts::clip(ts::searchsorted(e, x, ts::Side::right) - 1, 0, 24); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(ix.sharding(), x.sharding());
  const auto got = ix.to_vector<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto want = std::clamp<std::int64_t>(ref_search(edges, static_cast<float>(xv[i]), true) - 1, 0, 24);
    ASSERT_EQ(got[i], want) << "at " << i << " x=" << xv[i];
  }
}

TEST(Searchsorted, Errors) {
  auto s = single();
  auto v = ts::device_put(std::vector<float>{1, 2}, {2}, s);
  expect_error<ts::ShapeError>(
      [&] { ts::searchsorted(ts::zeros({3, 4}, ts::f32, s), v); }, "[searchsorted]",
      {"sorted_sequence must be 1-d", "(3, 4)"});
  expect_error<ts::ShapeError>([&] { ts::searchsorted(ts::zeros({}, ts::f32, s), v); }, "[searchsorted]",
                               {"1-d", "()"});
  expect_error<ts::DTypeError>([&] { ts::searchsorted(v, v, ts::Side::left, ts::f32); }, "[searchsorted]",
                               {"dtype must be i32 or i64", "f32"});
  expect_error<ts::DTypeError>([&] { ts::searchsorted(v, v, ts::Side::right, ts::u32); }, "[searchsorted]",
                               {"i32 or i64", "u32"});
  expect_error<ts::Error>([&] { ts::searchsorted(ts::Array{}, v); }, "[searchsorted]", {"sorted_sequence"});
  expect_error<ts::Error>([&] { ts::searchsorted(v, ts::Array{}); }, "[searchsorted]", {"values"});
  auto other = ts::device_put(std::vector<float>{1, 2}, {2}, ts::NamedSharding(test_meshes()[1], ts::P()));
  expect_error<ts::ShardingError>([&] { ts::searchsorted(other, v); }, "[searchsorted]", {"different meshes"});
}

TEST(Searchsorted, Rule) {
  ts::NamedSharding rep(ts::make_mesh({8}, {"x"}), ts::P());
  const auto a = ts::zeros({7}, ts::f32, rep), v = ts::zeros({5, 3}, ts::f64, rep);
  auto r = rule_of([&] { ts::searchsorted(a, v, ts::Side::right, ts::i64); });
  EXPECT_EQ(r.first, "([i],[j,k])->([j,k]) {i=7,j=5,k=3} need_replication={i}");
  EXPECT_EQ(r.second, "searchsorted side=right dtype=i64");
}

// jit == eager bitwise on every layout (the sequence in random layouts).
TEST(Searchsorted, JitMatchesEager) {
  std::mt19937 rng(9);
  const auto left = [](ts::Array a, ts::Array v) { return ts::searchsorted(a, v); };
  const auto right = [](ts::Array a, ts::Array v) { return ts::searchsorted(a, v, ts::Side::right, ts::i64); };
  auto jleft = ts::jit(left);
  auto jright = ts::jit(right);
  const std::vector<double> edges{-4, -1, 0, 0, 3, 7, 20};
  int cases = 0;
  for (const ts::Shape& shape : {ts::Shape{9, 4}, ts::Shape{1, 3}, ts::Shape{0, 2}}) {
    const auto xv = dup_data(numel(shape), 2);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      const auto a = put<std::int32_t>(edges, {7}, ts::NamedSharding(s.mesh(), random_spec(rng, s.mesh(), 1)));
      const auto x = put<float>(xv, shape, s);
      expect_jit_matches(jleft, left, "searchsorted", ts::typeof(x), a, x);
      expect_jit_matches(jright, right, "searchsorted", ts::typeof(x), a, x);
      ++cases;
    });
  }
  EXPECT_GT(cases, 100);
}

TEST(Searchsorted, VmapAndJvp) {
  const ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  const auto x = put<double>(dup_data(24, 1), {4, 6}, ts::NamedSharding(mesh, ts::P("y", "x")));
  const auto a = put<double>({-5, -1, 0, 2, 4}, {5}, ts::NamedSharding(mesh, ts::P()));
  // Only the values batched: elementwise, the same as one call.
  const auto f = [](ts::Array seq, ts::Array v) { return ts::searchsorted(seq, v, ts::Side::right); };
  auto got = ts::vmap(f, {.in_axes = {ts::not_mapped, 1}})(a, x);
  EXPECT_EQ(got.to_vector<std::int32_t>(), ts::transpose(f(a, x)).to_vector<std::int32_t>());
  // A sequence per example: each example searches its own.
  const auto seqs = put<double>({-1, 0, 1, 2, -9, -8, 5, 6}, {2, 4}, ts::NamedSharding(mesh, ts::P("x")));
  const auto vals = put<double>({0.5, 5, -8.5, 5.5}, {2, 2}, ts::NamedSharding(mesh, ts::P()));
  auto per = ts::vmap(f)(seqs, vals);
  EXPECT_EQ(per.to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 4, 1, 3}));
  // Integer results carry no tangent: a function using them differentiates
  // through the other path only.
  const auto g = [&](ts::Array v) { return v * ts::astype(ts::searchsorted(a, v), ts::f64); };
  const auto v0 = put<double>({-2, 1, 3}, {3}, ts::NamedSharding(mesh, ts::P()));
  auto [y, dy] = ts::jvp(g, {v0}, {ts::ones({3}, ts::f64, v0.sharding())});
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{-2, 3, 12}));
  EXPECT_EQ(dy.to_vector<double>(), (std::vector<double>{1, 3, 4}));
}

// ================================================================== median

TEST(Median, Goldens) {
  auto s = single();
  auto f64 = [&](std::vector<double> v) { return ts::device_put(v, {static_cast<std::int64_t>(v.size())}, s); };
  EXPECT_EQ(ts::median(f64({3, 1, 2})).item<double>(), 2);
  EXPECT_EQ(ts::median(f64({4, 1, 3, 2})).item<double>(), 2.5);
  EXPECT_EQ(ts::median(f64({5})).item<double>(), 5);
  EXPECT_EQ(ts::median(f64({7, 7, 1, 7})).item<double>(), 7);
  EXPECT_TRUE(std::isnan(ts::median(f64({1, kNaN, 2})).item<double>()));
  EXPECT_TRUE(std::isnan(ts::median(f64({})).item<double>()));  // jnp.median of nothing: nan
  // Infinities: jnp.median([-inf, inf]) is nan, [1, inf] inf, [inf, inf] inf.
  EXPECT_TRUE(std::isnan(ts::median(f64({-kInf, kInf})).item<double>()));
  EXPECT_EQ(ts::median(f64({1, kInf})).item<double>(), kInf);
  EXPECT_EQ(ts::median(f64({kInf, kInf, -kInf})).item<double>(), kInf);
  // The mean of two huge values does not overflow.
  const double big = std::numeric_limits<double>::max();
  EXPECT_EQ(ts::median(f64({big, big})).item<double>(), big);
  EXPECT_EQ(ts::median(f64({big, big * 0.5, -1})).item<double>(), big * 0.5);
  auto f32 = ts::device_put(std::vector<float>{3e38f, 3.2e38f}, {2}, s);
  EXPECT_EQ(ts::median(f32).item<float>(), 3.1e38f);
  // Signed zeros order as -0.0 < 0.0 (as a sort does): the middle of
  // [0.0, -0.0, -0.0] is -0.0, bit for bit.
  EXPECT_TRUE(std::signbit(ts::median(f64({0.0, -0.0, -0.0})).item<double>()));
  EXPECT_FALSE(std::signbit(ts::median(f64({0.0, -0.0, 0.0})).item<double>()));
  // Integers give f32, as jnp.median: median([1, 2]) = 1.5.
  auto i = ts::device_put(std::vector<std::int32_t>{1, 2}, {2}, s);
  EXPECT_EQ(ts::median(i).dtype(), ts::f32);
  EXPECT_EQ(ts::median(i).item<float>(), 1.5f);
  EXPECT_EQ(ts::median(ts::device_put(std::vector<bool>{true, false, true}, {3}, s)).item<float>(), 1.0f);
  // Large integers round to f32 first, as jnp does (16777217 -> 16777216).
  auto big_i = ts::device_put(std::vector<std::int64_t>{16777217}, {1}, s);
  EXPECT_EQ(ts::median(big_i).item<float>(), 16777216.0f);
  // Axes, keepdims: jnp.median([[1, 5, 3], [4, 2, 6]], axis=...)
  auto m = ts::device_put(std::vector<double>{1, 5, 3, 4, 2, 6}, {2, 3}, s);
  EXPECT_EQ(ts::median(m, 0).to_vector<double>(), (std::vector<double>{2.5, 3.5, 4.5}));
  EXPECT_EQ(ts::median(m, 1).to_vector<double>(), (std::vector<double>{3, 4}));
  EXPECT_EQ(ts::median(m, -1, {.keepdims = true}).shape(), (ts::Shape{2, 1}));
  EXPECT_EQ(ts::median(m, {}, {.keepdims = true}).shape(), (ts::Shape{1, 1}));
  EXPECT_EQ(ts::median(m).to_vector<double>(), (std::vector<double>{3.5}));
  EXPECT_EQ(ts::median(m).shape(), ts::Shape{});
  // No axes: each element its own selection.
  EXPECT_EQ(ts::median(m, std::vector<int>{}).to_vector<double>(), (std::vector<double>{1, 5, 3, 4, 2, 6}));
  // where: only the selected elements count; none selected gives NaN.
  auto w = ts::device_put(std::vector<bool>{true, false, false, true, true, false}, {2, 3}, s);
  auto r = ts::median(m, 0, {.where = w}).to_vector<double>();
  EXPECT_EQ(r[0], 2.5);
  EXPECT_EQ(r[1], 2);
  EXPECT_TRUE(std::isnan(r[2]));
  // A mask row broadcast along the reduced dim.
  auto wr = ts::device_put(std::vector<bool>{true, true, false}, {3}, s);
  EXPECT_EQ(ts::median(m, 1, {.where = wr}).to_vector<double>(), (std::vector<double>{3, 3}));
}

// The SPMD property: every layout of x (and of the mask) gives the host
// reference, in the natural layout, bitwise the same as on one device.
template <class In, class T>
void check_layouts(const ts::Shape& shape, const std::vector<int>& axes, bool masked, bool keepdims, int salt,
                   int& cases) {
  std::mt19937 rng(static_cast<unsigned>(salt));
  const int rank = static_cast<int>(shape.size());
  auto xv = dup_data(numel(shape), salt);
  for (auto& v : xv) v = static_cast<double>(static_cast<In>(v));
  if (salt % 3 == 0 && xv.size() > 4) xv[xv.size() / 2] = kNaN;  // one selection holds a NaN
  const auto mv = mask_data(numel(shape), salt);
  const auto ref = ref_median<T>(ref_middle(xv, shape, axes, masked ? &mv : nullptr));
  std::optional<std::vector<T>> first;
  for_each_layout(rank, [&](const ts::NamedSharding& s) {
    const ts::Array x = put<In>(xv, shape, s);
    ts::MedianOptions opt{.keepdims = keepdims};
    if (masked) opt.where = put_mask(mv, shape, cases % 2 ? s : ts::NamedSharding(s.mesh(), random_spec(rng, s.mesh(), rank)));
    const auto r = ts::median(x, axes, opt);
    const std::string what = ts::typeof(x) + " axes " + std::to_string(axes.size()) + (masked ? " masked" : "");
    ASSERT_EQ(r.dtype(), ts::dtype_of<T>()) << what;
    ASSERT_EQ(r.sharding(), ts::NamedSharding(s.mesh(), kept_spec(s, rank, axes, keepdims))) << what;
    const auto got = r.to_vector<T>();
    expect_values(got, ref, what);
    if (!first) first = got;
    EXPECT_TRUE(same_bits(got, *first)) << what << ": not bitwise the same as on the first layout";
    ++cases;
  });
}

TEST(Median, SpmdMatchesReference) {
  int cases = 0;
  int salt = 0;
  for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{2, 3}, ts::Shape{0, 4}, ts::Shape{3, 0}, ts::Shape{1, 9}}) {
    for (const std::vector<int>& axes : {std::vector<int>{0}, std::vector<int>{1}, std::vector<int>{0, 1}}) {
      ++salt;
      check_layouts<float, float>(shape, axes, salt % 2 == 0, salt % 4 == 1, salt, cases);
      check_layouts<double, double>(shape, axes, salt % 2 == 1, salt % 4 == 2, salt + 7, cases);
    }
    check_layouts<std::int32_t, float>(shape, {0}, true, false, ++salt, cases);
  }
  EXPECT_GT(cases, 1000);
}

TEST(Median, SpmdThreeDims) {
  int cases = 0;
  check_layouts<float, float>({4, 3, 5}, {0, 2}, true, true, 4, cases);
  check_layouts<double, double>({4, 3, 5}, {1}, false, false, 5, cases);
  EXPECT_GT(cases, 100);
}

// A reduced dim sharded over many outputs with short lines: narrower digits
// and more passes (1-, 2-, 4- and 8-bit digits), f32 and f64; one
// all-reduce of digit counts per pass.
TEST(Median, EveryDigitWidth) {
  std::mt19937 rng(21);
  std::normal_distribution<double> nd(0, 1e3);
  const std::vector<std::pair<ts::Shape, int>> cases{
      {{3, 3000}, 1}, {{8, 2000}, 2}, {{40, 500}, 4}, {{5000, 2}, 8}};
  for (const auto& [shape, bits] : cases) {
    std::vector<double> xv(static_cast<size_t>(numel(shape)));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = i % 5 == 0 ? std::round(nd(rng) / 500) : nd(rng);
    std::vector<double> xf;
    for (double v : xv) xf.push_back(static_cast<float>(v));
    const auto ref64 = ref_median<double>(ref_middle(xv, shape, {0}, nullptr));
    const auto ref32 = ref_median<float>(ref_middle(xf, shape, {0}, nullptr));
    for (int n : {3, 8}) {
      const ts::NamedSharding s(line(n), ts::P("x"));
      const auto x32 = put<float>(xv, shape, s);
      const auto x64 = put<double>(xv, shape, s);
      ts::Array r32, r64;
      const auto ex32 = ts::explain([&] { r32 = ts::median(x32, 0); });
      const auto ex64 = ts::explain([&] { r64 = ts::median(x64, 0); });
      EXPECT_EQ(ex32.records.size(), static_cast<size_t>(32 / bits)) << ex32.str();
      EXPECT_EQ(ex64.records.size(), static_cast<size_t>(64 / bits)) << ex64.str();
      expect_values(r32.to_vector<float>(), ref32, "f32 " + ts::typeof(r32));
      expect_values(r64.to_vector<double>(), ref64, "f64 " + ts::typeof(r64));
    }
  }
}

// The use case: velocities (n, 3), rows sharded over the devices, a radius
// mask broadcast to (n, 3). Only digit counts cross devices: the traffic
// does not grow with n, and nothing is gathered.
TEST(Median, ShardedRowsMoveOnlyCounts) {
  const ts::Mesh mesh = line(8, "data");
  const auto velocity_median = [&](std::int64_t n, std::vector<float>* got, std::vector<float>* want) {
    std::mt19937 rng(static_cast<unsigned>(n));
    std::normal_distribution<double> vel(0, 200), rad(0, 12);
    std::vector<double> vv(static_cast<size_t>(3 * n)), rv(static_cast<size_t>(n));
    for (auto& v : vv) v = static_cast<float>(vel(rng));
    for (auto& r : rv) r = static_cast<float>(rad(rng));
    const auto v = put<float>(vv, {n, 3}, ts::NamedSharding(mesh, ts::P("data")));
    const auto r = put<float>(rv, {n}, ts::NamedSharding(mesh, ts::P("data")));
    ts::Array vc;
    auto ex = ts::explain([&] {
      const auto inside = ts::broadcast_to(ts::expand_dims(ts::abs(r) < 10.0f, 1), {n, 3});
      vc = ts::median(v, 0, {.where = inside});
    });
    for (const auto& rec : ex.records) {
      if (rec.bytes_moved() > 0) {
        EXPECT_EQ(rec.op + " " + rec.kind, "median all-reduce") << ex.str();
      }
    }
    EXPECT_EQ(vc.shape(), ts::Shape{3});
    EXPECT_EQ(vc.sharding(), ts::NamedSharding(mesh, ts::P()));
    std::vector<std::uint8_t> mv(static_cast<size_t>(3 * n));
    for (std::int64_t i = 0; i < 3 * n; ++i) mv[i] = std::abs(rv[i / 3]) < 10.0;
    *got = vc.to_vector<float>();
    *want = ref_median<float>(ref_middle(vv, {n, 3}, {0}, &mv));
    // The same bits with the rows whole on one device.
    const auto whole = ts::median(put<float>(vv, {n, 3}, single()), 0, {.where = put_mask(mv, {n, 3}, single())});
    EXPECT_TRUE(same_bits(whole.to_vector<float>(), *got));
    return ex.bytes_moved();
  };
  std::vector<float> got, want;
  const std::int64_t small = velocity_median(3001, &got, &want);
  expect_values(got, want, "velocity medians, n = 3001");
  const std::int64_t large = velocity_median(60001, &got, &want);
  expect_values(got, want, "velocity medians, n = 60001");
  EXPECT_GT(small, 0);
  EXPECT_EQ(small, large);
  // 4 all-reduces of i64 digit counts, each device receiving its 7 peers'
  // counts for the 3 columns: 257 (digits and NaNs) in pass 0, then 2 x 256
  // (the two middle elements) in passes 1 to 3.
  EXPECT_EQ(large, std::int64_t{8} * 7 * 3 * 8 * (257 + 3 * 512)) << "bytes moved";
}

TEST(Median, Errors) {
  auto s = single();
  auto x = ts::zeros({5, 3}, ts::f32, s);
  expect_error<ts::ShapeError>([&] { ts::median(x, 2); }, "[median]", {"axis 2", "out of range", "rank 2"});
  expect_error<ts::ShapeError>([&] { ts::median(x, {0, -2}); }, "[median]", {"axis 0", "more than once"});
  expect_error<ts::DTypeError>([&] { ts::median(x, 0, {.where = ts::ones({5, 3}, ts::i32, s)}); }, "[median]",
                               {"where must be a bool array", "i32[5,3]"});
  expect_error<ts::ShapeError>([&] { ts::median(x, 0, {.where = ts::ones({5}, ts::bool_, s)}); }, "[median]",
                               {"where of shape (5,)", "does not broadcast", "(5, 3)"});
  expect_error<ts::ShapeError>([&] { ts::median(x, 0, {.where = ts::ones({2, 5, 3}, ts::bool_, s)}); }, "[median]",
                               {"(2, 5, 3)", "(5, 3)"});
  expect_error<ts::Error>([&] { ts::median(ts::Array{}); }, "[median]", {"x"});
  expect_error<ts::Error>([&] { ts::median(x, 0, {.where = ts::Array{}}); }, "[median]", {"where"});
  auto other = ts::ones({5, 3}, ts::bool_, ts::NamedSharding(test_meshes()[1], ts::P()));
  expect_error<ts::ShardingError>([&] { ts::median(x, 0, {.where = other}); }, "[median]", {"different meshes"});
}

TEST(Median, Rule) {
  ts::NamedSharding rep(ts::make_mesh({8}, {"x"}), ts::P());
  const auto x = ts::zeros({10, 3}, ts::f32, rep);
  const auto w = ts::ones({10, 3}, ts::bool_, rep);
  auto r = rule_of([&] { ts::median(x, 0, {.where = w}); }, false);
  EXPECT_EQ(r.first, "([i,j],[i,j])->([j],[j]) {i=10,j=3} reduction={i}");
  EXPECT_EQ(r.second, "median axes=[0] where=true");
  r = rule_of([&] { ts::median(x, {}, {.keepdims = true}); }, false);
  EXPECT_EQ(r.second, "median axes=[0, 1] keepdims=true");
}

// jit == eager bitwise, on layouts with and without a sharded reduced dim.
TEST(Median, JitMatchesEager) {
  const auto f = [](ts::Array x, ts::Array w) { return ts::median(x, 0, {.where = w}); };
  const auto g = [](ts::Array x) { return ts::median(x, {0, 1}, {.keepdims = true}) * 2.0f; };
  auto jf = ts::jit(f);
  auto jg = ts::jit(g);
  const ts::Shape shape{11, 3};
  const auto xv = dup_data(33, 4);
  const auto mv = mask_data(33, 1);
  int cases = 0;
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    if (cases++ % 3 != 0) return;  // a third of the layouts keeps this quick
    const auto x = put<float>(xv, shape, s);
    const auto w = put_mask(mv, shape, s);
    expect_jit_matches(jf, f, "median", ts::typeof(x), x, w);
    expect_jit_matches(jg, g, "median", ts::typeof(x), x);
  });
}

TEST(Median, Vmap) {
  const ts::Mesh mesh = ts::make_mesh({2, 4}, {"x", "y"});
  const ts::Shape shape{4, 9, 3};
  const auto xv = dup_data(numel(shape), 3);
  const auto mv = mask_data(numel(shape), 2);
  const auto x = put<double>(xv, shape, ts::NamedSharding(mesh, ts::P("x", "y")));
  const auto w = put_mask(mv, shape, ts::NamedSharding(mesh, ts::P()));
  // Examples along dim 2; each example's median over its dim 1 (x's dim 1).
  const auto f = [](ts::Array a, ts::Array m) { return ts::median(a, 1, {.where = m}); };
  const auto got = ts::vmap(f, {.in_axes = {2, 2}})(x, w);
  ASSERT_EQ(got.shape(), (ts::Shape{3, 4}));
  const auto want = ts::transpose(ts::median(x, 1, {.where = w}));
  EXPECT_TRUE(same_bits(got.to_vector<double>(), want.to_vector<double>()));
  // Only the mask batched.
  const auto x0 = put<double>(dup_data(36, 5), {4, 9}, ts::NamedSharding(mesh, ts::P(ts::none, "y")));
  const auto masks = put_mask(mask_data(72, 3), {2, 4, 9}, ts::NamedSharding(mesh, ts::P("x")));
  const auto by_mask = ts::vmap(f, {.in_axes = {ts::not_mapped, 0}})(x0, masks);
  for (int b = 0; b < 2; ++b) {
    const auto one = f(x0, ts::squeeze(ts::slice(masks, {{b, b + 1}}), {0}));
    EXPECT_TRUE(same_bits(ts::squeeze(ts::slice(by_mask, {{b, b + 1}}), {0}).to_vector<double>(),
                          one.to_vector<double>()));
  }
}

TEST(Median, Jvp) {
  const ts::NamedSharding s(line(4), ts::P("x"));
  auto vec = [&](std::vector<double> v) { return ts::device_put(v, {static_cast<std::int64_t>(v.size())}, s); };
  const auto med = [](ts::Array a) { return ts::median(a); };
  // Odd: the middle element's tangent.
  auto [y1, d1] = ts::jvp(med, {vec({3, 1, 2})}, {vec({10, 20, 30})});
  EXPECT_EQ(y1.item<double>(), 2);
  EXPECT_EQ(d1.item<double>(), 30);
  // Even: the mean of the two middle elements' tangents.
  auto [y2, d2] = ts::jvp(med, {vec({4, 1, 3, 2})}, {vec({1, 2, 3, 4})});
  EXPECT_EQ(y2.item<double>(), 2.5);
  EXPECT_EQ(d2.item<double>(), 3.5);
  // Ties share: the middle value 2 is held twice.
  auto [y3, d3] = ts::jvp(med, {vec({1, 2, 2, 3, 5})}, {vec({0, 4, 8, 0, 0})});
  EXPECT_EQ(y3.item<double>(), 2);
  EXPECT_EQ(d3.item<double>(), 6);
  // Reverse mode through the same rule: the gradient of the median of each
  // column of a row-sharded matrix.
  const auto m = ts::device_put(std::vector<double>{1, 9, 5, 3, 4, 7, 2, 8}, {4, 2}, s);
  auto grad = ts::grad([](ts::Array a) { return ts::sum(ts::median(a, 0)); })(m);
  EXPECT_EQ(grad.to_vector<double>(), (std::vector<double>{0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5}));
}

}  // namespace
