// Linear algebra: dot_general, matmul, dot, einsum. Host references (naive
// loops in double), golden cases, the SPMD property over many meshes and
// layouts (uneven sizes, sizes smaller than the shard count), the sharding
// rule (output layout, collectives seen by explain), Explicit mode, errors,
// and bitwise determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "trace_util.hpp"
#include "transforms/trace.hpp"

namespace ts = tessera;
using ts::testing::rule_of;
using ts::testing::numel;
using ts::testing::expect_error;
using ts::testing::iota_data;
using ts::testing::random_spec;
using ts::testing::test_meshes;

namespace {

// Host reference einsum on labelled operands: sums over every assignment of
// the labels (a label of one operand only and absent from the output is
// summed too).
std::vector<double> ref_einsum(const std::string& la, const ts::Shape& sa, const std::vector<double>& a,
                               const std::string& lb, const ts::Shape& sb, const std::vector<double>& b,
                               const std::string& lo) {
  std::map<char, std::int64_t> size;
  for (size_t i = 0; i < la.size(); ++i) size[la[i]] = sa[i];
  for (size_t i = 0; i < lb.size(); ++i) size[lb[i]] = sb[i];
  std::string labels;
  for (auto& [ch, n] : size) labels += ch;
  ts::Shape so;
  for (char ch : lo) so.push_back(size[ch]);
  std::vector<double> out(static_cast<size_t>(numel(so)), 0.0);
  std::map<char, std::int64_t> v;
  for (char ch : labels) v[ch] = 0;
  for (char ch : labels)
    if (size[ch] == 0) return out;
  auto flat = [&](const std::string& l, const ts::Shape& s) {
    std::int64_t f = 0;
    for (size_t i = 0; i < l.size(); ++i) f = f * s[i] + v[l[i]];
    return static_cast<size_t>(f);
  };
  for (;;) {
    out[flat(lo, so)] += a[flat(la, sa)] * b[flat(lb, sb)];
    int i = static_cast<int>(labels.size()) - 1;
    for (; i >= 0; --i) {
      if (++v[labels[i]] < size[labels[i]]) break;
      v[labels[i]] = 0;
    }
    if (i < 0) break;
  }
  return out;
}

// Host reference matmul with NumPy semantics (1-d operands, broadcast batch).
std::vector<double> ref_matmul(ts::Shape sa, const std::vector<double>& a, ts::Shape sb, const std::vector<double>& b,
                               ts::Shape* out_shape) {
  const bool va = sa.size() == 1, vb = sb.size() == 1;
  if (va) sa.insert(sa.begin(), 1);
  if (vb) sb.push_back(1);
  const std::int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  ts::Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t nb = std::max(ba.size(), bb.size());
  while (ba.size() < nb) ba.insert(ba.begin(), 1);
  while (bb.size() < nb) bb.insert(bb.begin(), 1);
  ts::Shape bo(nb);
  for (size_t i = 0; i < nb; ++i) bo[i] = std::max(ba[i], bb[i]);
  std::vector<double> out(static_cast<size_t>(numel(bo) * m * n), 0.0);
  std::vector<std::int64_t> idx(nb, 0);
  for (std::int64_t t = 0; t < numel(bo); ++t) {
    std::int64_t oa = 0, ob = 0;
    for (size_t i = 0; i < nb; ++i) {
      oa = oa * ba[i] + (ba[i] == 1 ? 0 : idx[i]);
      ob = ob * bb[i] + (bb[i] == 1 ? 0 : idx[i]);
    }
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += a[(oa * m + i) * k + p] * b[(ob * k + p) * n + j];
        out[(t * m + i) * n + j] = s;
      }
    for (int i = static_cast<int>(nb) - 1; i >= 0; --i) {
      if (++idx[i] < bo[i]) break;
      idx[i] = 0;
    }
  }
  *out_shape = bo;
  if (!va) out_shape->push_back(m);
  if (!vb) out_shape->push_back(n);
  return out;
}

std::vector<double> rand_data(std::int64_t n, unsigned seed) {
  return tessera::testing::uniform_doubles(n, seed, -1.0, 1.0);
}

// Puts host doubles as dtype `t`; returns the values the array actually holds.
ts::Array put(const std::vector<double>& host, const ts::Shape& shape, ts::DType t, const ts::NamedSharding& s,
              std::vector<double>* held = nullptr) {
  ts::Array a;
  switch (t) {
    case ts::f32: a = ts::device_put(std::vector<float>(host.begin(), host.end()), shape, s); break;
    case ts::f64: a = ts::device_put(host, shape, s); break;
    case ts::i32: a = ts::device_put(std::vector<std::int32_t>(host.begin(), host.end()), shape, s); break;
    case ts::i64: a = ts::device_put(std::vector<std::int64_t>(host.begin(), host.end()), shape, s); break;
    case ts::bool_: {
      std::vector<bool> v;
      for (double x : host) v.push_back(x != 0);
      a = ts::device_put(v, shape, s);
      break;
    }
    default: a = ts::astype(ts::device_put(host, shape, s), t); break;
  }
  if (held) *held = a.to_vector<double>();
  return a;
}

// Float results: relative to the magnitude of the terms; integers: exact.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, ts::DType t,
                  const std::string& ctx) {
  ASSERT_EQ(got.size(), want.size()) << ctx;
  const double tol = t == ts::f32 ? 1e-5 : 1e-12;
  for (size_t i = 0; i < got.size(); ++i) {
    if (t == ts::f32 || t == ts::f64) {
      ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i])) * 8) << ctx << " at " << i;
    } else {
      ASSERT_EQ(got[i], want[i]) << ctx << " at " << i;
    }
  }
}

// The specs for_each_layout uses, for one mesh.
std::vector<ts::PartitionSpec> layouts(const ts::Mesh& m, int rank) {
  std::vector<ts::PartitionSpec> specs{ts::P()};
  const auto& names = m.axis_names();
  for (int d = 0; d < rank; ++d) {
    for (const auto& a : names) {
      std::vector<ts::PartitionSpec::Entry> e(rank, ts::none);
      e[d] = a;
      specs.emplace_back(e);
    }
    if (names.size() == 2) {
      std::vector<ts::PartitionSpec::Entry> e(rank, ts::none);
      e[d] = std::vector<std::string>{names[0], names[1]};
      specs.emplace_back(e);
    }
  }
  if (names.size() == 2 && rank >= 2) {
    specs.push_back(ts::P(names[0], names[1]));
    specs.push_back(ts::P(names[1], names[0]));
  }
  return specs;
}

std::vector<std::string> axes_of(const ts::PartitionSpec& s, int d) { return s[d].axes(); }

// True when `part` is `full` with some entries left out.
bool is_subsequence(const std::vector<std::string>& part, const std::vector<std::string>& full) {
  size_t i = 0;
  for (const auto& a : full)
    if (i < part.size() && part[i] == a) ++i;
  return i == part.size();
}

ts::PartitionSpec spec2(std::vector<std::string> r, std::vector<std::string> c) {
  std::vector<ts::PartitionSpec::Entry> e;
  e.emplace_back(r.empty() ? ts::PartitionSpec::Entry(ts::none) : ts::PartitionSpec::Entry(r));
  e.emplace_back(c.empty() ? ts::PartitionSpec::Entry(ts::none) : ts::PartitionSpec::Entry(c));
  return ts::PartitionSpec(e);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const ts::Mesh& mesh8() {
  static ts::Mesh m = ts::make_mesh({8}, {"x"});
  return m;
}
const ts::Mesh& mesh24() {
  static ts::Mesh m = ts::make_mesh({2, 4}, {"x", "y"});
  return m;
}

}  // namespace

// ------------------------------------------------------------- golden cases

TEST(Linalg, GoldenMatmul) {
  ts::NamedSharding rep(mesh8(), ts::P());
  auto a = ts::device_put(std::vector<float>{1, 2, 3, 4}, {2, 2}, rep);
  auto b = ts::device_put(std::vector<float>{5, 6, 7, 8}, {2, 2}, rep);
  EXPECT_EQ(ts::matmul(a, b).to_vector<float>(), (std::vector<float>{19, 22, 43, 50}));
  auto ai = ts::device_put(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, {2, 3}, rep);
  auto bi = ts::device_put(std::vector<std::int32_t>{1, 0, 0, 1, 1, 1}, {3, 2}, rep);
  auto ci = ts::matmul(ai, bi);
  EXPECT_EQ(ci.dtype(), ts::i32);
  EXPECT_EQ(ci.shape(), (ts::Shape{2, 2}));
  EXPECT_EQ(ci.to_vector<std::int32_t>(), (std::vector<std::int32_t>{4, 5, 10, 11}));
  // 1-d operands: matrix-vector, vector-matrix, inner product.
  auto v = ts::device_put(std::vector<float>{1, -1}, {2}, rep);
  EXPECT_EQ(ts::matmul(a, v).to_vector<float>(), (std::vector<float>{-1, -1}));
  EXPECT_EQ(ts::matmul(v, a).to_vector<float>(), (std::vector<float>{-2, -2}));
  auto s = ts::matmul(v, v);
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.item<float>(), 2.0f);
  // Integer matmul wraps like JAX's int32.
  auto big = ts::device_put(std::vector<std::int32_t>{1 << 30, 1 << 30}, {1, 2}, rep);
  auto two = ts::device_put(std::vector<std::int32_t>{2, 2}, {2, 1}, rep);
  EXPECT_EQ(ts::matmul(big, two).item<std::int32_t>(), 0);
}

TEST(Linalg, GoldenBoolAndPromotion) {
  ts::NamedSharding rep(mesh8(), ts::P());
  auto a = ts::device_put(std::vector<bool>{true, false, false, false}, {2, 2}, rep);
  auto b = ts::device_put(std::vector<bool>{true, true, false, true}, {2, 2}, rep);
  auto c = ts::matmul(a, b);
  EXPECT_EQ(c.dtype(), ts::bool_);
  EXPECT_EQ(c.to_vector<bool>(), (std::vector<bool>{true, true, false, false}));
  // bool with i32 -> i32; i32 with f32 -> f32; f32 with f64 -> f64.
  auto i = ts::device_put(std::vector<std::int32_t>{1, 2, 3, 4}, {2, 2}, rep);
  auto f = ts::device_put(std::vector<float>{0.5f, 0, 0, 0.5f}, {2, 2}, rep);
  auto d = ts::device_put(std::vector<double>{1, 0, 0, 1}, {2, 2}, rep);
  EXPECT_EQ(ts::matmul(a, i).dtype(), ts::i32);
  EXPECT_EQ(ts::matmul(a, i).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 0, 0}));
  auto fi = ts::matmul(i, f);
  EXPECT_EQ(fi.dtype(), ts::f32);
  EXPECT_EQ(fi.to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f, 2}));
  EXPECT_EQ(ts::matmul(f, d).dtype(), ts::f64);
  // A bool contraction sharded over the contracting dim reduces with OR.
  ts::NamedSharding cols(mesh8(), ts::P(ts::none, "x")), rows(mesh8(), ts::P("x"));
  std::vector<bool> ha(3 * 16, false), hb(16 * 2, false);
  ha[0 * 16 + 5] = true;
  ha[0 * 16 + 9] = true;
  ha[2 * 16 + 15] = true;
  hb[5 * 2 + 0] = true;
  hb[9 * 2 + 0] = true;
  hb[15 * 2 + 1] = true;
  auto g = ts::matmul(ts::device_put(ha, {3, 16}, cols), ts::device_put(hb, {16, 2}, rows), {.out_sharding = ts::P()});
  EXPECT_EQ(g.to_vector<bool>(), (std::vector<bool>{true, false, false, false, false, true}));
}

TEST(Linalg, GoldenDotAndEinsum) {
  ts::NamedSharding rep(mesh24(), ts::P());
  auto a = ts::device_put(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, rep);
  auto b = ts::device_put(std::vector<double>{1, 2, 3}, {3}, rep);
  EXPECT_EQ(ts::dot(a, b).to_vector<double>(), (std::vector<double>{14, 32}));
  EXPECT_EQ(ts::dot(b, b).item<double>(), 14.0);
  auto sc = ts::device_put(std::vector<double>{2}, {}, rep);
  auto ds = ts::dot(sc, a);
  EXPECT_EQ(ds.shape(), (ts::Shape{2, 3}));
  EXPECT_EQ(ds.to_vector<double>(), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(ts::dot(a, sc).to_vector<double>(), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(ts::einsum("ij,j->i", a, b).to_vector<double>(), (std::vector<double>{14, 32}));
  EXPECT_EQ(ts::einsum("ij,ij->", a, a).item<double>(), 91.0);
  EXPECT_EQ(ts::einsum("ij,ij", a, a).item<double>(), 91.0);
  EXPECT_EQ(ts::einsum("ij,k->j", a, b).to_vector<double>(), (std::vector<double>{30, 42, 54}));
  auto outer = ts::einsum("i,j->ji", b, b);
  EXPECT_EQ(outer.shape(), (ts::Shape{3, 3}));
  EXPECT_EQ(outer.to_vector<double>(), (std::vector<double>{1, 2, 3, 2, 4, 6, 3, 6, 9}));
  auto t = ts::einsum("ij,kj->ki", a, a);  // a a^T, written with k first
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{14, 32, 32, 77}));
  auto dg = ts::dot_general(a, a, {.lhs_contracting = {0}, .rhs_contracting = {0}});
  EXPECT_EQ(dg.shape(), (ts::Shape{3, 3}));
  EXPECT_EQ(dg.to_vector<double>(), (std::vector<double>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
}

// ------------------------------------------------------------ sharding rule

TEST(LinalgRule, GoldenText) {
  ts::NamedSharding rep(mesh8(), ts::P());
  // Operands from host data: zeros would itself bind a primitive.
  auto z = [&](ts::Shape s) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    return ts::device_put(std::vector<float>(static_cast<size_t>(n), 0.0f), s, rep);
  };
  // Factors: batch pairs, lhs free, rhs free, then contracting pairs and
  // summed dims (reductions); result dims in output order.
  auto r = rule_of([&] { ts::matmul(z({8, 16}), z({16, 4})); });
  EXPECT_EQ(r.first, "([i,k],[k,j])->([i,j]) {i=8,j=4,k=16} reduction={k}");
  EXPECT_EQ(r.second, "matmul dimension_numbers=(([1], [0]), ([], []))");
  // Batched, the lhs batch dim broadcast from size 1: it maps to no factor.
  r = rule_of([&] { ts::matmul(z({1, 4, 5}), z({3, 5, 2})); });
  EXPECT_EQ(r.first, "([1,j,l],[i,l,k])->([i,j,k]) {i=3,j=4,k=2,l=5} reduction={l}");
  EXPECT_EQ(r.second, "matmul dimension_numbers=(([2], [1]), ([0], [0]))");
  // The lhs lacks the batch dim altogether.
  r = rule_of([&] { ts::matmul(z({4, 5}), z({3, 5, 2})); });
  EXPECT_EQ(r.first, "([j,l],[i,l,k])->([i,j,k]) {i=3,j=4,k=2,l=5} reduction={l}");
  EXPECT_EQ(r.second, "matmul dimension_numbers=(([1], [1]), ([-], [0]))");
  r = rule_of([&] { ts::dot(z({9}), z({9})); });
  EXPECT_EQ(r.first, "([i],[i])->([]) {i=9} reduction={i}");
  EXPECT_EQ(r.second, "dot dimension_numbers=(([0], [0]), ([], []))");
  // Labels in one operand only and not in the output are summed: reductions
  // of that operand alone.
  r = rule_of([&] { ts::einsum("ij,k->j", z({2, 3}), z({4})); });
  EXPECT_EQ(r.first, "([j,i],[k])->([i]) {i=3,j=2,k=4} reduction={j,k}");
  EXPECT_EQ(r.second, "einsum dimension_numbers=(([], []), ([], [])) summed=([0], [0])");
  // An output order other than (batch, lhs free, rhs free).
  r = rule_of([&] { ts::einsum("bij,jk->kbi", z({2, 3, 4}), z({4, 5})); });
  EXPECT_EQ(r.first, "([i,j,l],[l,k])->([k,i,j]) {i=2,j=3,k=5,l=4} reduction={l}");
  EXPECT_EQ(r.second, "einsum dimension_numbers=(([2], [0]), ([], [])) out_perm=[2, 0, 1]");
  r = rule_of([&] { ts::dot_general(z({5, 3, 4}), z({2, 3, 5}), {{0}, {2}, {1}, {1}}, {.out_sharding = ts::P("x")}); });
  EXPECT_EQ(r.first, "([l,i,j],[k,i,l])->([i,j,k]) {i=3,j=4,k=2,l=5} reduction={l}");
  EXPECT_EQ(r.second, "dot_general dimension_numbers=(([0], [2]), ([1], [1])) out_sharding=PartitionSpec('x',)");
}

// ---------------------------------------------------------- SPMD property

// Every pair of layouts of x (m, k) and w (k, n) on every test mesh: the
// gathered result equals the reference. When the layouts do not conflict (no
// mesh axis on two of x's rows, the contracting dim and w's columns, and the
// contracting dim sharded alike or on one side only) the output keeps x's row
// axes and w's column axes. When they conflict, the cost model chooses which
// side gives way (LinalgComm pins such choices with their byte counts); each
// output dim then keeps some of its operand dim's axes, in order, and no other.
TEST(LinalgSpmd, MatmulAllLayoutPairs) {
  struct Case {
    std::int64_t m, k, n;
    ts::DType t;
  };
  const std::vector<Case> cases = {{8, 16, 4, ts::f32}, {7, 5, 3, ts::f64}, {3, 2, 5, ts::i32}, {1, 3, 2, ts::i64}};
  int count = 0;
  for (const auto& cs : cases) {
    const ts::Shape sx{cs.m, cs.k}, sw{cs.k, cs.n};
    const bool fl = cs.t == ts::f32 || cs.t == ts::f64;
    const auto hx = fl ? rand_data(numel(sx), 1) : iota_data<double>(numel(sx), 1);
    const auto hw = fl ? rand_data(numel(sw), 2) : iota_data<double>(numel(sw), 5);
    std::vector<double> want;
    for (const ts::Mesh& mesh : test_meshes()) {
      for (const auto& px : layouts(mesh, 2)) {
        for (const auto& pw : layouts(mesh, 2)) {
          std::vector<double> xh, wh;
          auto x = put(hx, sx, cs.t, ts::NamedSharding(mesh, px), &xh);
          auto w = put(hw, sw, cs.t, ts::NamedSharding(mesh, pw), &wh);
          if (want.empty()) want = ref_einsum("ij", sx, xh, "jk", sw, wh, "ik");
          const std::string ctx = mesh.str() + " x " + px.str() + " w " + pw.str();
          auto y = ts::matmul(x, w);
          ASSERT_EQ(y.shape(), (ts::Shape{cs.m, cs.n})) << ctx;
          ASSERT_EQ(y.dtype(), cs.t) << ctx;
          expect_close(y.to_vector<double>(), want, cs.t, ctx);
          const auto rows = axes_of(px, 0), cols = axes_of(pw, 1), kx = axes_of(px, 1), kw = axes_of(pw, 0);
          auto shares = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
            for (const auto& x : a)
              if (std::find(b.begin(), b.end(), x) != b.end()) return true;
            return false;
          };
          const bool conflict = shares(rows, cols) || shares(rows, kx) || shares(rows, kw) || shares(cols, kx) ||
                                shares(cols, kw) || (!kx.empty() && !kw.empty() && kx != kw);
          if (!conflict) {
            EXPECT_EQ(y.sharding().spec(), spec2(rows, cols)) << ctx << " got " << y.sharding().str();
          } else {
            EXPECT_TRUE(is_subsequence(axes_of(y.sharding().spec(), 0), rows)) << ctx << " got " << y.sharding().str();
            EXPECT_TRUE(is_subsequence(axes_of(y.sharding().spec(), 1), cols)) << ctx << " got " << y.sharding().str();
          }
          ++count;
        }
      }
    }
  }
  EXPECT_GT(count, 1000);
}

// Random layouts of rank-3 operands with batch dims (dot_general with batch
// dims not leading), on every mesh; random out_sharding half of the time.
TEST(LinalgSpmd, DotGeneralRandomLayouts) {
  std::mt19937 rng(7);
  // lhs (k, b, m), rhs (n, b, k): batch 1/1, contracting 0/2 -> (b, m, n).
  const ts::Shape sa{5, 3, 4}, sb{2, 3, 5};
  const auto ha = rand_data(numel(sa), 3), hb = rand_data(numel(sb), 4);
  const auto want = ref_einsum("kbm", sa, ha, "nbk", sb, hb, "bmn");
  for (const ts::Mesh& mesh : test_meshes()) {
    for (int rep = 0; rep < 12; ++rep) {
      auto pa = random_spec(rng, mesh, 3), pb = random_spec(rng, mesh, 3);
      std::optional<ts::PartitionSpec> po;
      if (rep % 2) po = random_spec(rng, mesh, 3);
      auto a = ts::device_put(ha, sa, ts::NamedSharding(mesh, pa));
      auto b = ts::device_put(hb, sb, ts::NamedSharding(mesh, pb));
      const std::string ctx = mesh.str() + " a " + pa.str() + " b " + pb.str() + (po ? " out " + po->str() : "");
      auto y = ts::dot_general(a, b, {{0}, {2}, {1}, {1}}, {.out_sharding = po});
      ASSERT_EQ(y.shape(), (ts::Shape{3, 4, 2})) << ctx;
      expect_close(y.to_vector<double>(), want, ts::f64, ctx);
      if (po) {
        EXPECT_EQ(y.sharding(), ts::NamedSharding(mesh, *po)) << ctx;
      }
    }
  }
}

// Batched and broadcast matmul, 1-d operands, on random layouts.
TEST(LinalgSpmd, MatmulBatchedAndBroadcast) {
  std::mt19937 rng(11);
  const std::vector<std::pair<ts::Shape, ts::Shape>> shapes = {
      {{3, 4, 5}, {3, 5, 2}},  {{4, 5}, {3, 5, 2}},     {{3, 4, 5}, {5, 2}},   {{1, 4, 5}, {3, 5, 2}},
      {{2, 1, 4, 5}, {3, 5, 2}}, {{5}, {3, 5, 2}},      {{3, 4, 5}, {5}},      {{5}, {5, 6}},
      {{6, 5}, {5}},           {{9}, {9}},              {{2, 3, 0, 4}, {4, 3}}, {{2, 0}, {0, 3}},
  };
  for (const auto& [sa, sb] : shapes) {
    const auto ha = rand_data(numel(sa), 5), hb = rand_data(numel(sb), 6);
    ts::Shape so;
    const auto want = ref_matmul(sa, ha, sb, hb, &so);
    for (const ts::Mesh& mesh : test_meshes()) {
      for (int rep = 0; rep < 4; ++rep) {
        auto pa = random_spec(rng, mesh, static_cast<int>(sa.size()));
        auto pb = random_spec(rng, mesh, static_cast<int>(sb.size()));
        auto a = ts::device_put(ha, sa, ts::NamedSharding(mesh, pa));
        auto b = ts::device_put(hb, sb, ts::NamedSharding(mesh, pb));
        const std::string ctx = ts::shape_str(sa) + " @ " + ts::shape_str(sb) + " on " + mesh.str() + " a " +
                                pa.str() + " b " + pb.str();
        auto y = ts::matmul(a, b);
        ASSERT_EQ(y.shape(), so) << ctx;
        expect_close(y.to_vector<double>(), want, ts::f64, ctx);
      }
    }
  }
}

TEST(LinalgSpmd, DotForms) {
  std::mt19937 rng(13);
  struct Case {
    ts::Shape sa, sb;
    std::string la, lb, lo;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {5, 4, 6}, "abk", "ckd", "abcd"}, {{3, 4}, {4, 2}, "ik", "kj", "ij"},
      {{7}, {7}, "k", "k", ""},                     {{2, 3, 4}, {4}, "abk", "k", "ab"},
      {{4}, {2, 4, 3}, "k", "bkn", "bn"},           {{}, {3, 2}, "", "ij", "ij"},
  };
  for (const auto& cs : cases) {
    const auto ha = rand_data(numel(cs.sa), 8), hb = rand_data(numel(cs.sb), 9);
    const auto want = ref_einsum(cs.la, cs.sa, ha, cs.lb, cs.sb, hb, cs.lo);
    for (const ts::Mesh& mesh : test_meshes()) {
      for (int rep = 0; rep < 3; ++rep) {
        auto pa = random_spec(rng, mesh, static_cast<int>(cs.sa.size()));
        auto pb = random_spec(rng, mesh, static_cast<int>(cs.sb.size()));
        auto a = ts::device_put(ha, cs.sa, ts::NamedSharding(mesh, pa));
        auto b = ts::device_put(hb, cs.sb, ts::NamedSharding(mesh, pb));
        const std::string ctx = cs.la + "," + cs.lb + " on " + mesh.str() + " a " + pa.str() + " b " + pb.str();
        auto y = ts::dot(a, b);
        expect_close(y.to_vector<double>(), want, ts::f64, ctx);
      }
    }
  }
}

TEST(LinalgSpmd, EinsumForms) {
  std::mt19937 rng(17);
  struct Case {
    std::string subs, la, lb, lo;
    ts::Shape sa, sb;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", "ij", "jk", "ik", {6, 5}, {5, 3}},
      {"bij,bjk->bik", "bij", "bjk", "bik", {3, 4, 5}, {3, 5, 2}},
      {"ij,jk", "ij", "jk", "ik", {4, 5}, {5, 3}},
      {"ij,kj->ik", "ij", "kj", "ik", {4, 5}, {3, 5}},
      {"ji,jk->ik", "ji", "jk", "ik", {5, 4}, {5, 3}},
      {"ij,jk->ki", "ij", "jk", "ki", {4, 5}, {5, 3}},
      {"ij,ij->", "ij", "ij", "", {4, 5}, {4, 5}},
      {"ij,ij->ji", "ij", "ij", "ji", {4, 5}, {4, 5}},
      {"i,j->ij", "i", "j", "ij", {5}, {3}},
      {"ijk,jl->il", "ijk", "jl", "il", {3, 4, 2}, {4, 5}},
      {"bij,jk->kbi", "bij", "jk", "kbi", {2, 3, 4}, {4, 5}},
      {"bij , bkj -> bki", "bij", "bkj", "bki", {3, 2, 5}, {3, 4, 5}},
      {"Ab,bc->cA", "Ab", "bc", "cA", {3, 4}, {4, 2}},
  };
  for (const auto& cs : cases) {
    const auto ha = rand_data(numel(cs.sa), 10), hb = rand_data(numel(cs.sb), 11);
    const auto want = ref_einsum(cs.la, cs.sa, ha, cs.lb, cs.sb, hb, cs.lo);
    for (const ts::Mesh& mesh : test_meshes()) {
      for (int rep = 0; rep < 4; ++rep) {
        auto pa = random_spec(rng, mesh, static_cast<int>(cs.sa.size()));
        auto pb = random_spec(rng, mesh, static_cast<int>(cs.sb.size()));
        auto a = ts::device_put(std::vector<float>(ha.begin(), ha.end()), cs.sa, ts::NamedSharding(mesh, pa));
        auto b = ts::device_put(std::vector<float>(hb.begin(), hb.end()), cs.sb, ts::NamedSharding(mesh, pb));
        const std::string ctx = cs.subs + " on " + mesh.str() + " a " + pa.str() + " b " + pb.str();
        auto y = ts::einsum(cs.subs, a, b);
        expect_close(y.to_vector<double>(), want, ts::f32, ctx);
      }
    }
  }
}

// out_sharding is honoured for every requested layout, in Auto mode.
TEST(LinalgSpmd, OutShardingHonoured) {
  const ts::Shape sx{9, 6}, sw{6, 5};
  const auto hx = rand_data(numel(sx), 12), hw = rand_data(numel(sw), 13);
  const auto want = ref_einsum("ij", sx, hx, "jk", sw, hw, "ik");
  for (const ts::Mesh& mesh : test_meshes()) {
    const auto specs = layouts(mesh, 2);
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& px = specs[i];
      const auto& pw = specs[(i * 3 + 1) % specs.size()];
      for (const auto& po : specs) {
        auto x = ts::device_put(hx, sx, ts::NamedSharding(mesh, px));
        auto w = ts::device_put(hw, sw, ts::NamedSharding(mesh, pw));
        auto y = ts::matmul(x, w, {.out_sharding = po});
        const std::string ctx = mesh.str() + " x " + px.str() + " w " + pw.str() + " out " + po.str();
        EXPECT_EQ(y.sharding(), ts::NamedSharding(mesh, po)) << ctx;
        expect_close(y.to_vector<double>(), want, ts::f64, ctx);
      }
    }
  }
}

// ------------------------------------------------------- communication

TEST(LinalgComm, AllReduceWhenContractingShardedAlike) {
  const ts::Mesh& m = mesh8();
  auto x = ts::device_put(rand_data(16 * 64, 1), {16, 64}, ts::NamedSharding(m, ts::P(ts::none, "x")));
  auto w = ts::device_put(rand_data(64 * 8, 2), {64, 8}, ts::NamedSharding(m, ts::P("x", ts::none)));
  ts::Array y;
  auto ex = ts::explain([&] { y = ts::matmul(x, w); });
  ASSERT_EQ(ex.records.size(), 1u) << ex.str();
  EXPECT_EQ(ex.records[0].op, "matmul");
  EXPECT_EQ(ex.records[0].kind, "all-reduce");
  EXPECT_TRUE(y.sharding().is_fully_replicated());
  // Each device receives the 7 other partial (16 x 8) f64 blocks.
  EXPECT_EQ(ex.records[0].bytes_received[0], 7 * 16 * 8 * 8);
  // Requested rows sharded over the contracting axis: reduce-scatter.
  auto ex2 = ts::explain([&] { y = ts::matmul(x, w, {.out_sharding = ts::P("x")}); });
  ASSERT_EQ(ex2.records.size(), 1u) << ex2.str();
  EXPECT_EQ(ex2.records[0].kind, "reduce-scatter");
  EXPECT_EQ(ex2.records[0].bytes_received[0], 7 * 2 * 8 * 8);
  EXPECT_EQ(y.sharding().spec(), ts::P("x"));
}

TEST(LinalgComm, NoGatherOfTheBigOperand) {
  const ts::Mesh& m = mesh8();
  // Rows of x sharded, w replicated: purely local.
  auto x = ts::device_put(rand_data(64 * 16, 1), {64, 16}, ts::NamedSharding(m, ts::P("x")));
  auto w = ts::device_put(rand_data(16 * 4, 2), {16, 4}, ts::NamedSharding(m, ts::P()));
  ts::Array y;
  auto ex = ts::explain([&] { y = ts::matmul(x, w); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(y.sharding().spec(), ts::P("x"));
  // 2-d mesh, x rows over x, w cols over y: local, output P('x', 'y').
  const ts::Mesh& m2 = mesh24();
  auto x2 = ts::device_put(rand_data(64 * 16, 1), {64, 16}, ts::NamedSharding(m2, ts::P("x")));
  auto w2 = ts::device_put(rand_data(16 * 8, 2), {16, 8}, ts::NamedSharding(m2, ts::P(ts::none, "y")));
  auto ex2 = ts::explain([&] { y = ts::matmul(x2, w2); });
  EXPECT_EQ(ex2.bytes_moved(), 0) << ex2.str();
  EXPECT_EQ(y.sharding().spec(), ts::P("x", "y"));
  // Contracting sharded on w only: w's contracting dim is gathered, x untouched.
  auto w3 = ts::device_put(rand_data(16 * 4, 2), {16, 4}, ts::NamedSharding(m, ts::P("x")));
  auto ex3 = ts::explain([&] { y = ts::matmul(x, w3); });
  ASSERT_EQ(ex3.records.size(), 1u) << ex3.str();
  EXPECT_EQ(ex3.records[0].op, "matmul");
  EXPECT_EQ(ex3.records[0].kind, "all-gather");
  EXPECT_EQ(ex3.bytes_moved(), 8 * 14 * 4 * 8);  // each device receives 14 of w's 16 rows
  // Both free dims on the same axis (Auto): w's cols are gathered, x stays.
  auto w4 = ts::device_put(rand_data(16 * 8, 2), {16, 8}, ts::NamedSharding(m, ts::P(ts::none, "x")));
  auto ex4 = ts::explain([&] { y = ts::matmul(x, w4); });
  ASSERT_EQ(ex4.records.size(), 1u) << ex4.str();
  EXPECT_EQ(ex4.bytes_moved(), 8 * 16 * 7 * 8);
  EXPECT_EQ(y.sharding().spec(), ts::P("x"));
  // The same conflict with the lhs the smaller operand: its rows are
  // gathered (each device receives at most 4 rows of 16 f64, 512 B) and w's
  // columns stay, where the old lhs-first rule gathered 7/8 of w (7 KiB).
  auto x5 = ts::device_put(rand_data(4 * 16, 1), {4, 16}, ts::NamedSharding(m, ts::P("x")));
  auto w5 = ts::device_put(rand_data(16 * 64, 2), {16, 64}, ts::NamedSharding(m, ts::P(ts::none, "x")));
  auto ex5 = ts::explain([&] { y = ts::matmul(x5, w5); });
  ASSERT_EQ(ex5.records.size(), 1u) << ex5.str();
  EXPECT_EQ(ex5.records[0].kind, "all-gather");
  EXPECT_EQ(ex5.bytes_moved(), (4 * 3 + 4 * 4) * 16 * 8);  // devices holding a row receive 3, the others 4
  EXPECT_EQ(y.sharding().spec(), ts::P(ts::none, "x"));
  expect_close(y.to_vector<double>(),
               ref_einsum("ij", {4, 16}, rand_data(4 * 16, 1), "jk", {16, 64}, rand_data(16 * 64, 2), "ik"), ts::f64,
               "small lhs");
}

// The case that motivates the cost model: x (16384,) sharded, w (16384, 512)
// replicated. Each device slices its rows of w locally (no bytes) and the
// 512 partial sums are all-reduced: (n - 1) x 2 KiB received per device,
// where gathering x would receive (n - 1)/n x 64 KiB per device and compute
// the whole product on every device. Meshes of 2 and 8 devices; then
// sigmoid(x @ w + b) end to end against a host reference, and the same in
// Explicit mode (accepted, replicated f32[512], as in JAX).
TEST(LinalgComm, ShardedVectorTimesReplicatedMatrix) {
  const std::int64_t k = 16384, n = 512;
  const auto hx = rand_data(k, 31), hw = rand_data(k * n, 32), hb = rand_data(n, 33);
  const std::vector<float> fx(hx.begin(), hx.end()), fb(hb.begin(), hb.end());
  std::vector<float> fw(hw.size());
  for (size_t i = 0; i < hw.size(); ++i) fw[i] = static_cast<float>(hw[i] * 0.01);
  std::vector<double> want(static_cast<size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (std::int64_t i = 0; i < k; ++i) s += double(fx[i]) * double(fw[i * n + j]);
    want[j] = 1.0 / (1.0 + std::exp(-(s + fb[j])));
  }
  const auto all = ts::devices();
  for (int nd : {2, 8}) {
    const std::vector<ts::Device> devs(all.begin(), all.begin() + nd);
    for (auto type : {ts::AxisType::Auto, ts::AxisType::Explicit}) {
      ts::Mesh m(devs, {nd}, {"x"}, {type});
      const std::string ctx = m.str();
      auto x = ts::device_put(fx, {k}, ts::NamedSharding(m, ts::P("x")));
      auto w = ts::device_put(fw, {k, n}, ts::NamedSharding(m, ts::P()));
      auto b = ts::device_put(fb, {n}, ts::NamedSharding(m, ts::P()));
      ts::Array h, y;
      auto ex = ts::explain([&] { h = ts::matmul(x, w); });
      EXPECT_EQ(ts::typeof(h), "f32[512]") << ctx;
      bool reduced = false;
      for (const auto& r : ex.records) {
        EXPECT_EQ(r.op, "matmul") << ctx;
        if (r.kind == "all-reduce") {
          reduced = true;
          for (auto got : r.bytes_received) EXPECT_EQ(got, (nd - 1) * n * 4) << ctx;
        } else {
          EXPECT_EQ(r.bytes_moved(), 0) << ctx << ": " << r.str();  // w sliced locally
        }
      }
      EXPECT_TRUE(reduced) << ctx << ": " << ex.str();
      EXPECT_EQ(ex.bytes_moved(), std::int64_t{nd} * (nd - 1) * n * 4) << ctx;
      auto ex2 = ts::explain([&] { y = ts::sigmoid(ts::matmul(x, w) + b); });
      EXPECT_EQ(ex2.bytes_moved(), ex.bytes_moved()) << ctx << ": " << ex2.str();
      EXPECT_EQ(ts::typeof(y), "f32[512]") << ctx;
      const auto got = y.to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < want.size(); ++j) ASSERT_NEAR(got[j], want[j], 1e-5) << ctx << " at " << j;
    }
  }
}

// Batch dims sharded alike, broadcast batch, and output transposes stay local.
TEST(LinalgComm, BatchAndTransposesStayLocal) {
  const ts::Mesh& m = mesh8();
  ts::NamedSharding b3(m, ts::P("x")), rep(m, ts::P());
  auto a = ts::device_put(rand_data(16 * 4 * 5, 1), {16, 4, 5}, b3);
  auto b = ts::device_put(rand_data(16 * 5 * 3, 2), {16, 5, 3}, b3);
  auto w = ts::device_put(rand_data(5 * 3, 3), {5, 3}, rep);
  ts::Array y;
  auto ex = ts::explain([&] { y = ts::einsum("bij,bjk->bik", a, b); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(y.sharding().spec(), ts::P("x"));
  ex = ts::explain([&] { y = ts::matmul(a, w); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(y.sharding().spec(), ts::P("x"));
  ex = ts::explain([&] { y = ts::einsum("bij,jk->kbi", a, w); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(y.sharding().spec(), ts::P(ts::none, "x"));
  expect_close(y.to_vector<double>(),
               ref_einsum("bij", {16, 4, 5}, rand_data(16 * 4 * 5, 1), "jk", {5, 3}, rand_data(5 * 3, 3), "kbi"),
               ts::f64, "kbi");
  auto x = ts::device_put(rand_data(16 * 5, 4), {16, 5}, b3);
  ex = ts::explain([&] { y = ts::einsum("ij,jk->ki", x, w); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(y.sharding().spec(), ts::P(ts::none, "x"));
}

TEST(LinalgComm, BitwiseDeterministic) {
  const ts::Mesh& m = mesh24();
  auto hx = rand_data(33 * 70, 21), hw = rand_data(70 * 19, 22);
  auto x = ts::device_put(std::vector<float>(hx.begin(), hx.end()), {33, 70},
                          ts::NamedSharding(m, ts::P("y", "x")));
  auto w = ts::device_put(std::vector<float>(hw.begin(), hw.end()), {70, 19}, ts::NamedSharding(m, ts::P("x")));
  auto r1 = ts::matmul(x, w).to_vector<float>();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(r1, ts::matmul(x, w).to_vector<float>()));
  auto r2 = ts::matmul(x, w, {.out_sharding = ts::P("x", "y")}).to_vector<float>();
  EXPECT_TRUE(bitwise_equal(r2, ts::matmul(x, w, {.out_sharding = ts::P("x", "y")}).to_vector<float>()));
}

// Concurrent ops from several host threads share the BLAS safely.
TEST(LinalgComm, ConcurrentCallers) {
  const ts::Mesh& m = mesh8();
  auto hx = rand_data(40 * 30, 1), hw = rand_data(30 * 20, 2);
  auto x = ts::device_put(hx, {40, 30}, ts::NamedSharding(m, ts::P("x")));
  auto w = ts::device_put(hw, {30, 20}, ts::NamedSharding(m, ts::P()));
  const auto want = ts::matmul(x, w).to_vector<double>();
  std::vector<std::thread> th;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      bool good = true;
      for (int i = 0; i < 5; ++i) good = good && ts::matmul(x, w).to_vector<double>() == want;
      ok[t] = good;
    });
  for (auto& t : th) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]);
}

// ------------------------------------------------------------ explicit mode

TEST(LinalgExplicit, FreeDimsDetermineTheType) {
  ts::Mesh em = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  auto x = ts::device_put(rand_data(16 * 6, 1), {16, 6}, ts::NamedSharding(em, ts::P("X")));
  auto w = ts::device_put(rand_data(6 * 4, 2), {6, 4}, ts::NamedSharding(em, ts::P()));
  auto y = ts::matmul(x, w);
  EXPECT_EQ(ts::typeof(y), "f64[16@X,4]");
  expect_close(y.to_vector<double>(), ref_einsum("ij", {16, 6}, rand_data(16 * 6, 1), "jk", {6, 4},
                                                 rand_data(6 * 4, 2), "ik"),
               ts::f64, "explicit");
}

// Contracting dims sharded alike on both sides: accepted as in JAX, each
// device's partial product is all-reduced and the result is replicated over
// the contracting axes; out_sharding picks another layout.
TEST(LinalgExplicit, ContractingShardedAlikeIsAllReduced) {
  ts::Mesh em = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  const auto hx = rand_data(8 * 16, 1), hw = rand_data(16 * 4, 2);
  const auto want = ref_einsum("ij", {8, 16}, hx, "jk", {16, 4}, hw, "ik");
  auto x = ts::device_put(hx, {8, 16}, ts::NamedSharding(em, ts::P(ts::none, "X")));
  auto w = ts::device_put(hw, {16, 4}, ts::NamedSharding(em, ts::P("X")));
  ts::Array y;
  auto ex0 = ts::explain([&] { y = ts::matmul(x, w); });
  ASSERT_EQ(ex0.records.size(), 1u) << ex0.str();
  EXPECT_EQ(ex0.records[0].kind, "all-reduce");
  EXPECT_EQ(ex0.records[0].bytes_received[0], 7 * 8 * 4 * 8);  // 7 partial (8 x 4) f64 blocks
  EXPECT_EQ(ts::typeof(y), "f64[8,4]");
  expect_close(y.to_vector<double>(), want, ts::f64, "all-reduce");
  auto ex = ts::explain([&] { y = ts::matmul(x, w, {.out_sharding = ts::P("X")}); });
  ASSERT_EQ(ex.records.size(), 1u);
  EXPECT_EQ(ex.records[0].kind, "reduce-scatter");
  EXPECT_EQ(ts::typeof(y), "f64[8@X,4]");
  expect_close(y.to_vector<double>(), want, ts::f64, "reduce-scatter");
  // Asked for P() explicitly, the cost model gathers the contracting dim of
  // both operands instead: 7/8 of x (896 B) and of w (448 B) is 1344 B per
  // device, fewer than the 1792 B of the all-reduce, for the price of every
  // device computing the whole (small) product.
  auto ex2 = ts::explain([&] { y = ts::matmul(x, w, {.out_sharding = ts::P()}); });
  ASSERT_EQ(ex2.records.size(), 2u) << ex2.str();
  EXPECT_EQ(ex2.records[0].kind, "all-gather");
  EXPECT_EQ(ex2.records[1].kind, "all-gather");
  EXPECT_EQ(ex2.records[0].bytes_received[0] + ex2.records[1].bytes_received[0], 896 + 448);
  EXPECT_EQ(ts::typeof(y), "f64[8,4]");
  expect_close(y.to_vector<double>(), want, ts::f64, "out P()");
  y = ts::matmul(x, w, {.out_sharding = ts::P(ts::none, "X")});
  EXPECT_EQ(ts::typeof(y), "f64[8,4@X]");
  expect_close(y.to_vector<double>(), want, ts::f64, "reduce-scatter cols");
  y = ts::einsum("ij,jk->ik", x, w);
  EXPECT_EQ(ts::typeof(y), "f64[8,4]");
  expect_close(y.to_vector<double>(), want, ts::f64, "einsum");
  y = ts::dot(x, w);
  EXPECT_EQ(ts::typeof(y), "f64[8,4]");
  expect_close(y.to_vector<double>(), want, ts::f64, "dot");
}

// Contracting dim sharded on one side only, the other side replicated: the
// replicated operand is sliced locally (no bytes) and the partial products
// all-reduced; the result is replicated (JAX accepts x @ w here too).
TEST(LinalgExplicit, ContractingShardedOnOneSideIsAccepted) {
  ts::Mesh em = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  const auto hx = rand_data(8 * 16, 1), hw = rand_data(16 * 8, 2);
  auto x = ts::device_put(hx, {8, 16}, ts::NamedSharding(em, ts::P(ts::none, "X")));
  auto w = ts::device_put(hw, {16, 8}, ts::NamedSharding(em, ts::P()));
  ts::Array y;
  auto ex = ts::explain([&] { y = ts::matmul(x, w); });
  EXPECT_EQ(ts::typeof(y), "f64[8,8]");
  EXPECT_EQ(ex.bytes_moved(), 8 * 7 * 8 * 8 * 8) << ex.str();  // the all-reduce of (8 x 8) f64 partials only
  expect_close(y.to_vector<double>(), ref_einsum("ij", {8, 16}, hx, "jk", {16, 8}, hw, "ik"), ts::f64, "one side");
  // A vector times a matrix, the motivating case of the cost model.
  auto v = ts::device_put(rand_data(16, 3), {16}, ts::NamedSharding(em, ts::P("X")));
  auto yv = ts::matmul(v, w);
  EXPECT_EQ(ts::typeof(yv), "f64[8]");
  expect_close(yv.to_vector<double>(), ref_einsum("j", {16}, rand_data(16, 3), "jk", {16, 8}, hw, "k"), ts::f64,
               "vector");
  // Batch dim sharded on one side only: the other side slices locally.
  auto a = ts::device_put(rand_data(8 * 2 * 3, 3), {8, 2, 3}, ts::NamedSharding(em, ts::P("X")));
  auto b = ts::device_put(rand_data(8 * 3 * 2, 4), {8, 3, 2}, ts::NamedSharding(em, ts::P()));
  ts::Array yb;
  auto exb = ts::explain([&] { yb = ts::matmul(a, b); });
  EXPECT_EQ(exb.bytes_moved(), 0) << exb.str();
  EXPECT_EQ(ts::typeof(yb), "f64[8@X,2,2]");
  expect_close(yb.to_vector<double>(),
               ref_einsum("bij", {8, 2, 3}, rand_data(8 * 2 * 3, 3), "bjk", {8, 3, 2}, rand_data(8 * 3 * 2, 4), "bik"),
               ts::f64, "batch");
}

TEST(LinalgExplicit, AmbiguousLayoutsRaise) {
  ts::Mesh em = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  const auto hx = rand_data(8 * 16, 1), hw = rand_data(16 * 8, 2);
  const auto want = ref_einsum("ij", {8, 16}, hx, "jk", {16, 8}, hw, "ik");
  ts::NamedSharding rows(em, ts::P("X")), cols(em, ts::P(ts::none, "X")), rep(em, ts::P());
  // Both free dims over X.
  auto xr = ts::device_put(hx, {8, 16}, rows);
  auto wc = ts::device_put(hw, {16, 8}, cols);
  expect_error<ts::ShardingError>([&] { ts::matmul(xr, wc); }, "[matmul]",
                                  {"'X'", "two dims", "lhs dim 0", "rhs dim 1", "out_sharding"});
  auto y = ts::matmul(xr, wc, {.out_sharding = ts::P(ts::none, "X")});
  EXPECT_EQ(ts::typeof(y), "f64[8,8@X]");
  expect_close(y.to_vector<double>(), want, ts::f64, "free conflict");
  // Contracting dim sharded on one side only while the other operand uses
  // the same axis for its free dim.
  auto xc = ts::device_put(hx, {8, 16}, cols);
  expect_error<ts::ShardingError>([&] { ts::matmul(xc, wc); }, "[matmul]",
                                  {"contracting dimension", "one side only", "rhs dim 1", "out_sharding"});
  y = ts::matmul(xc, wc, {.out_sharding = ts::P("X")});
  EXPECT_EQ(ts::typeof(y), "f64[8@X,8]");
  expect_close(y.to_vector<double>(), want, ts::f64, "one side");
  // Contracting sharded differently (2-d explicit mesh).
  ts::Mesh em2 = ts::make_mesh({2, 4}, {"X", "Y"}, {ts::AxisType::Explicit, ts::AxisType::Explicit});
  auto x2 = ts::device_put(hx, {8, 16}, ts::NamedSharding(em2, ts::P(ts::none, "X")));
  auto w2 = ts::device_put(hw, {16, 8}, ts::NamedSharding(em2, ts::P("Y")));
  expect_error<ts::ShardingError>([&] { ts::matmul(x2, w2); }, "[matmul]",
                                  {"sharded on both sides differently", "'X'", "'Y'", "out_sharding"});
  y = ts::matmul(x2, w2, {.out_sharding = ts::P("X", "Y")});
  expect_close(y.to_vector<double>(), want, ts::f64, "differently");
  // Batch dims sharded differently.
  auto a = ts::device_put(rand_data(8 * 2 * 3, 3), {8, 2, 3}, ts::NamedSharding(em2, ts::P("X")));
  auto b = ts::device_put(rand_data(8 * 3 * 2, 4), {8, 3, 2}, ts::NamedSharding(em2, ts::P("Y")));
  expect_error<ts::ShardingError>([&] { ts::matmul(a, b); }, "[matmul]", {"batch dim 0", "'X'", "'Y'"});
  auto yb = ts::matmul(a, b, {.out_sharding = ts::P("X")});
  EXPECT_EQ(ts::typeof(yb), "f64[8@X,2,2]");
  // One axis on two contracting dims, and on a summed dim and an output dim.
  auto s0 = ts::device_put(hx, {8, 16}, rows);
  auto s1 = ts::device_put(hx, {8, 16}, cols);
  expect_error<ts::ShardingError>([&] { ts::dot_general(s0, s1, {{0, 1}, {0, 1}}); }, "[dot_general]",
                                  {"'X'", "two different contracting dims", "lhs dim 0", "rhs dim 1"});
  expect_error<ts::ShardingError>([&] { ts::einsum("ij,kl->jl", s0, s1); }, "[einsum]",
                                  {"'X'", "lhs dim 0, summed away", "rhs dim 1 of the output", "out_sharding"});
  auto ys = ts::einsum("ij,kl->jl", s0, s1, {.out_sharding = ts::P(ts::none, "X")});
  EXPECT_EQ(ts::typeof(ys), "f64[16,16@X]");
  expect_close(ys.to_vector<double>(), ref_einsum("ij", {8, 16}, hx, "kl", {8, 16}, hx, "jl"), ts::f64, "summed");
  // Auto mesh, same layouts: no error. Gathering w's columns or x's rows
  // moves the same bytes (both hold 128 values); ties keep the lhs as it is.
  ts::NamedSharding arows(mesh8(), ts::P("x")), acols(mesh8(), ts::P(ts::none, "x"));
  auto ya = ts::matmul(ts::device_put(hx, {8, 16}, arows), ts::device_put(hw, {16, 8}, acols));
  EXPECT_EQ(ya.sharding().spec(), ts::P("x"));
  expect_close(ya.to_vector<double>(), want, ts::f64, "auto");
}

// ------------------------------------------------------------------ errors

TEST(LinalgErrors, Shapes) {
  ts::NamedSharding rep(mesh8(), ts::P());
  auto a = ts::device_put(std::vector<float>(8 * 16), {8, 16}, rep);
  auto b = ts::device_put(std::vector<float>(12 * 4), {12, 4}, rep);
  try {
    ts::matmul(a, b);
    ADD_FAILURE() << "no error";
  } catch (const ts::ShapeError& e) {
    EXPECT_STREQ(e.what(), "[matmul] contracting dims differ: lhs (8, 16) vs rhs (12, 4)");
  }
  auto s = ts::device_put(std::vector<float>{1}, {}, rep);
  expect_error<ts::ShapeError>([&] { ts::matmul(s, b); }, "[matmul]", {"rank >= 1", "()"});
  expect_error<ts::ShapeError>([&] { ts::matmul(b, s); }, "[matmul]", {"rank >= 1"});
  auto b3 = ts::device_put(std::vector<float>(2 * 8 * 16), {2, 8, 16}, rep);
  auto c3 = ts::device_put(std::vector<float>(3 * 16 * 4), {3, 16, 4}, rep);
  expect_error<ts::ShapeError>([&] { ts::matmul(b3, c3); }, "[matmul]",
                               {"batch dims cannot broadcast", "(2, 8, 16)", "(3, 16, 4)"});
  expect_error<ts::ShapeError>([&] { ts::dot(a, b); }, "[dot]", {"contracting dims differ", "(8, 16)", "(12, 4)"});
  expect_error<ts::ShapeError>([&] { ts::dot_general(a, b, {{1}, {0}}); }, "[dot_general]",
                               {"contracting dims differ", "lhs dim 1 has 16", "rhs dim 0 has 12"});
  expect_error<ts::ShapeError>([&] { ts::dot_general(a, b, {{1}, {}}); }, "[dot_general]",
                               {"1 contracting dims", "rhs has 0"});
  expect_error<ts::ShapeError>([&] { ts::dot_general(a, b, {{2}, {0}}); }, "[dot_general]", {"axis 2"});
  expect_error<ts::ShapeError>([&] { ts::dot_general(a, a, {{1, 1}, {1, 0}}); }, "[dot_general]", {"twice"});
  expect_error<ts::ShapeError>([&] { ts::dot_general(a, a, {{1}, {1}, {1}, {1}}); }, "[dot_general]",
                               {"both a batch and a contracting dim"});
  expect_error<ts::ShapeError>([&] { ts::dot_general(b3, c3, {{2}, {1}, {0}, {0}}); }, "[dot_general]",
                               {"batch dims differ", "lhs dim 0 has 2", "rhs dim 0 has 3"});
  expect_error<ts::ShapeError>([&] { ts::dot_general(b3, c3, {{2}, {1}, {0}, {}}); }, "[dot_general]",
                               {"1 batch dims", "rhs has 0"});
}

TEST(LinalgErrors, Einsum) {
  ts::NamedSharding rep(mesh8(), ts::P());
  auto a = ts::device_put(std::vector<float>(8 * 16), {8, 16}, rep);
  auto b = ts::device_put(std::vector<float>(12 * 4), {12, 4}, rep);
  expect_error<ts::ShapeError>([&] { ts::einsum("ij,jk->ik", a, b); }, "[einsum]",
                               {"label 'j'", "16", "12"});
  expect_error<ts::ShapeError>([&] { ts::einsum("ij->ij", a, b); }, "[einsum]", {"two operands"});
  expect_error<ts::ShapeError>([&] { ts::einsum("ij,jk,kl->il", a, b); }, "[einsum]", {"two operands"});
  expect_error<ts::ShapeError>([&] { ts::einsum("ijk,jk->i", a, b); }, "[einsum]", {"(8, 16)"});
  expect_error<ts::ShapeError>([&] { ts::einsum("ii,jk->ik", a, b); }, "[einsum]", {"repeats", "not supported"});
  expect_error<ts::ShapeError>([&] { ts::einsum("i1,jk->ik", a, b); }, "[einsum]", {"invalid character '1'"});
  expect_error<ts::ShapeError>([&] { ts::einsum("ij,kl->iz", a, b); }, "[einsum]", {"'z'", "no operand"});
  expect_error<ts::ShapeError>([&] { ts::einsum("ij,kl->ii", a, b); }, "[einsum]", {"repeats"});
  expect_error<ts::ShapeError>([&] { ts::einsum("...j,kl->l", a, b); }, "[einsum]", {"ellipsis"});
}

TEST(LinalgErrors, MeshesShardingsAndEmptyArrays) {
  auto a = ts::device_put(std::vector<float>(8 * 4), {8, 4}, ts::NamedSharding(mesh8(), ts::P()));
  auto b = ts::device_put(std::vector<float>(4 * 2), {4, 2}, ts::NamedSharding(mesh24(), ts::P()));
  expect_error<ts::ShardingError>([&] { ts::matmul(a, b); }, "[matmul]", {"different meshes"});
  expect_error<ts::ShardingError>([&] { ts::einsum("ij,jk->ik", a, b); }, "[einsum]", {"different meshes"});
  auto c = ts::device_put(std::vector<float>(4 * 2), {4, 2}, ts::NamedSharding(mesh8(), ts::P()));
  expect_error<ts::ShardingError>([&] { ts::matmul(a, c, {.out_sharding = ts::P("q")}); }, "[matmul]", {"'q'"});
  expect_error<ts::ShardingError>([&] { ts::matmul(a, c, {.out_sharding = ts::P("x", ts::none, ts::none)}); },
                                  "[matmul]", {"3 entries", "rank 2"});
  expect_error<ts::ShardingError>(
      [&] { ts::matmul(a, c, {.out_sharding = ts::PartitionSpec({ts::none}, {"x"})}); }, "[matmul]",
      {"unreduced", "not supported yet"});
  expect_error<ts::Error>([&] { ts::matmul(ts::Array(), c); }, "[matmul]", {"lhs"});
  expect_error<ts::Error>([&] { ts::dot(a, ts::Array()); }, "[dot]", {"rhs"});
}

// Empty contractions and empty outputs on sharded meshes.
TEST(LinalgSpmd, ZeroSizes) {
  for (const ts::Mesh& mesh : test_meshes()) {
    for (const auto& p : layouts(mesh, 2)) {
      auto x = ts::device_put(std::vector<float>{}, {3, 0}, ts::NamedSharding(mesh, p));
      auto w = ts::device_put(std::vector<float>{}, {0, 2}, ts::NamedSharding(mesh, p));
      auto y = ts::matmul(x, w);
      EXPECT_EQ(y.shape(), (ts::Shape{3, 2}));
      EXPECT_EQ(y.to_vector<float>(), std::vector<float>(6, 0.0f));
      auto z = ts::matmul(w, ts::device_put(std::vector<float>(6, 1.0f), {2, 3}, ts::NamedSharding(mesh, p)));
      EXPECT_EQ(z.shape(), (ts::Shape{0, 3}));
    }
  }
}

// On a mesh with Explicit and Auto axes, a contracting dim sharded over an
// Explicit axis on one side and over Auto axes only on the other is
// accepted (the Auto side makes no claim), as one-sided Explicit sharding
// of a contracting dim is; the Auto axes are reconciled by the cost model.
// Against the product in double.
TEST(LinalgExplicit, OneSidedExplicitContractionNextToAutoAxes) {
  const auto ex = tessera::AxisType::Explicit, au = tessera::AxisType::Auto;
  const tessera::Mesh mesh(tessera::testing::first_devices(8), {2, 2, 2}, {"x", "y", "z"}, {ex, au, au});
  std::vector<double> a(14 * 9), b(9 * 14);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25 * static_cast<double>(i % 11) - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5 - 0.125 * static_cast<double>(i % 7);
  const auto A =
      tessera::device_put(a, {14, 9}, tessera::NamedSharding(mesh, tessera::P(std::vector<std::string>{"z", "y"})));
  const auto B = tessera::device_put(
      b, {9, 14}, tessera::NamedSharding(mesh, tessera::P(tessera::none, std::vector<std::string>{"x", "y"})));
  // Contract both dims: A's dim 0 (z, y: Auto) with B's dim 1 (x: Explicit, y).
  const auto got =
      tessera::dot_general(A, B, {.lhs_contracting = {0, 1}, .rhs_contracting = {1, 0}}).to_vector<double>();
  double want = 0;
  for (int i = 0; i < 14; ++i)
    for (int j = 0; j < 9; ++j) want += a[static_cast<size_t>(i * 9 + j)] * b[static_cast<size_t>(j * 14 + i)];
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0], want, 1e-12 * (1 + std::abs(want)));
}
