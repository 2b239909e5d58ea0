// resample_accumulate, exact_limbs, exact_total: a plain double reference,
// a hand-computed case, the SPMD property (rows sharded over every test
// mesh: bitwise the single-device accumulator), order and chunk
// independence, exactness under cancellation, dropped ids, jit == eager and
// every error path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "test_util.hpp"

namespace ts = tessera;
using ts::P;
using ts::testing::expect_error;
using ts::testing::test_meshes;

namespace {

ts::NamedSharding single() { return ts::NamedSharding(test_meshes()[0], P()); }

// The documented formulas, row by row, summed in double.
std::vector<double> reference(const std::vector<double>& flux, const std::vector<double>& wave, bool per_row,
                              const std::vector<double>& scale, const std::vector<double>& weights,
                              const std::vector<double>& target, const std::vector<int>& seg, std::int64_t S) {
  const std::int64_t T = static_cast<std::int64_t>(target.size());
  const std::int64_t n = static_cast<std::int64_t>(seg.size());
  const std::int64_t K = static_cast<std::int64_t>(flux.size()) / std::max<std::int64_t>(n, 1);
  std::vector<double> out(static_cast<std::size_t>(S * T), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    if (seg[i] < 0 || seg[i] >= S) continue;
    std::vector<double> w(K), s(K), p(T);
    for (std::int64_t k = 0; k < K; ++k) {
      w[k] = (per_row ? wave[i * K + k] : wave[k]) * (scale.empty() ? 1.0 : scale[i]);
      s[k] = flux[i * K + k];
    }
    double lin = 0;
    for (std::int64_t k = 1; k < K; ++k)
      if (w[k] >= target[0] && w[k] <= target[T - 1]) lin += s[k] * (w[k] - w[k - 1]);
    for (std::int64_t j = 0; j < T; ++j) {
      const double t = target[j];
      if (t < w[0]) {
        p[j] = s[0];
      } else if (t > w[K - 1]) {
        p[j] = s[K - 1];
      } else {
        std::int64_t c = std::upper_bound(w.begin(), w.end(), t) - w.begin();
        c = std::clamp<std::int64_t>(c, 1, K - 1);
        p[j] = s[c - 1] + (t - w[c - 1]) / (w[c] - w[c - 1]) * (s[c] - s[c - 1]);
      }
    }
    double lout = 0;
    for (std::int64_t j = 1; j < T; ++j) lout += p[j] * (target[j] - target[j - 1]);
    double ratio = lout == 0 ? 0 : lin / lout;
    if (std::isnan(ratio)) ratio = 0;
    const double f = ratio * (weights.empty() ? 1.0 : weights[i]);
    for (std::int64_t j = 0; j < T; ++j) out[seg[i] * T + j] += p[j] * f;
  }
  return out;
}

struct Case {
  std::int64_t n = 37, K = 23, T = 41, S = 5;
  std::vector<double> flux, wave, scale, weights, target;
  std::vector<int> seg;
  explicit Case(unsigned seed, std::int64_t rows = 37) : n(rows) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    flux.resize(n * K);
    for (auto& v : flux) v = u(rng) * 3.0;
    double w = 90.0;
    for (std::int64_t k = 0; k < K; ++k) wave.push_back(w += 1.0 + 9.0 * u(rng));  // non-uniform steps
    for (std::int64_t i = 0; i < n; ++i) scale.push_back(std::exp((u(rng) - 0.5) * 0.2));
    for (std::int64_t i = 0; i < n; ++i) weights.push_back(1.0 + 1e4 * u(rng));
    for (std::int64_t j = 0; j < T; ++j) target.push_back(120.0 + 2.5 * static_cast<double>(j));
    for (std::int64_t i = 0; i < n; ++i) seg.push_back(static_cast<int>(rng() % (S + 1)) - (i % 11 == 0 ? 1 : 0));
  }
};

ts::Array run(const Case& c, const ts::NamedSharding& rows, const ts::NamedSharding& rep, double max_abs = 1e6) {
  const auto flux = ts::device_put(c.flux, {c.n, c.K}, rows);
  const auto wave = ts::device_put(c.wave, {c.K}, rep);
  const auto target = ts::device_put(c.target, {c.T}, rep);
  const auto seg = ts::device_put(c.seg, {c.n}, rows);
  ts::ResampleOptions o;
  o.weights = ts::device_put(c.weights, {c.n}, rows);
  o.wave_scale = ts::device_put(c.scale, {c.n}, rows);
  return ts::resample_accumulate(flux, wave, target, seg, c.S, max_abs, o);
}

TEST(ResampleAccumulate, HandComputed) {
  // Flux 1 on wavelengths 1, 2, 3; target 1.5, 2.5: p = (1, 1), L_in = 1 (only
  // w = 2 is inside [1.5, 2.5]), L_out = 1, weight 2: out = (2, 2).
  auto s = single();
  auto acc = ts::resample_accumulate(ts::device_put(std::vector<float>{1, 1, 1}, {1, 3}, s),
                                     ts::device_put(std::vector<float>{1, 2, 3}, {3}, s),
                                     ts::device_put(std::vector<float>{1.5f, 2.5f}, {2}, s),
                                     ts::device_put(std::vector<int>{0}, {1}, s), 1, 10.0,
                                     {.weights = ts::device_put(std::vector<float>{2}, {1}, s), .wave_scale = {}});
  EXPECT_EQ(acc.shape(), (ts::Shape{3, 1, 2}));
  EXPECT_EQ(acc.dtype(), ts::DType::f64);
  EXPECT_EQ(ts::exact_total(acc, ts::DType::f64).to_vector<double>(), (std::vector<double>{2.0, 2.0}));
}

TEST(ResampleAccumulate, MatchesReferenceSharedAndPerRowWave) {
  Case c(1);
  const auto ref = reference(c.flux, c.wave, false, c.scale, c.weights, c.target, c.seg, c.S);
  auto got = ts::exact_total(run(c, single(), single()), ts::DType::f64).to_vector<double>();
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t e = 0; e < ref.size(); ++e) worst = std::max(worst, std::abs(got[e] - ref[e]) / (std::abs(ref[e]) + 1e-300));
  EXPECT_LT(worst, 1e-12);

  // Per-row wavelengths (each row's own grid), no scale, no weights.
  std::vector<double> per(c.n * c.K);
  for (std::int64_t i = 0; i < c.n; ++i)
    for (std::int64_t k = 0; k < c.K; ++k) per[i * c.K + k] = c.wave[k] * c.scale[i];
  auto s = single();
  auto acc = ts::resample_accumulate(ts::device_put(c.flux, {c.n, c.K}, s), ts::device_put(per, {c.n, c.K}, s),
                                     ts::device_put(c.target, {c.T}, s), ts::device_put(c.seg, {c.n}, s), c.S, 1e6);
  const auto ref2 = reference(c.flux, per, true, {}, {}, c.target, c.seg, c.S);
  auto got2 = ts::exact_total(acc, ts::DType::f64).to_vector<double>();
  for (size_t e = 0; e < ref2.size(); ++e) EXPECT_NEAR(got2[e], ref2[e], 1e-12 * (std::abs(ref2[e]) + 1e-30)) << e;
}

TEST(ResampleAccumulate, EveryMeshGivesBitwiseTheSameAccumulator) {
  for (std::int64_t rows : {37, 5, 0, 1}) {  // uneven, fewer rows than devices, none, one
    Case c(2, rows);
    const auto want = run(c, single(), single()).to_vector<double>();
    for (const auto& m : test_meshes()) {
      for (const auto& axes : std::vector<std::vector<std::string>>{{m.axis_names()[0]}, m.axis_names()}) {
        ts::NamedSharding rowsh(m, P(axes));
        ts::NamedSharding rep(m, P());
        auto acc = run(c, rowsh, rep);
        EXPECT_EQ(acc.to_vector<double>(), want) << "rows " << rows << " on " << rowsh.str();
      }
    }
  }
}

TEST(ResampleAccumulate, OrderAndChunksDoNotChangeBits) {
  Case c(3, 64);
  auto s = single();
  const auto whole = run(c, s, s);
  // Rows reversed.
  Case r = c;
  for (std::int64_t i = 0; i < c.n; ++i) {
    const std::int64_t j = c.n - 1 - i;
    std::copy_n(c.flux.begin() + j * c.K, c.K, r.flux.begin() + i * c.K);
    r.scale[i] = c.scale[j], r.weights[i] = c.weights[j], r.seg[i] = c.seg[j];
  }
  EXPECT_EQ(run(r, s, s).to_vector<double>(), whole.to_vector<double>());
  // Three chunks of uneven size, accumulators added.
  ts::Array sum;
  for (auto [lo, hi] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 13}, {13, 14}, {14, 64}}) {
    Case part = c;
    part.n = hi - lo;
    part.flux.assign(c.flux.begin() + lo * c.K, c.flux.begin() + hi * c.K);
    part.scale.assign(c.scale.begin() + lo, c.scale.begin() + hi);
    part.weights.assign(c.weights.begin() + lo, c.weights.begin() + hi);
    part.seg.assign(c.seg.begin() + lo, c.seg.begin() + hi);
    auto acc = run(part, s, s);
    sum = sum.valid() ? ts::add(sum, acc) : acc;
  }
  EXPECT_EQ(sum.to_vector<double>(), whole.to_vector<double>());
  // The same chunks, each added into the accumulator in its pass (init).
  ts::Array acc;
  for (auto [lo, hi] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 40}, {40, 41}, {41, 64}}) {
    auto rows = [&](const std::vector<double>& v, std::int64_t w) {
      return std::vector<double>(v.begin() + lo * w, v.begin() + hi * w);
    };
    ts::ResampleOptions o{.weights = ts::device_put(rows(c.weights, 1), {hi - lo}, s),
                          .wave_scale = ts::device_put(rows(c.scale, 1), {hi - lo}, s)};
    if (acc.valid()) o.init = acc;
    acc = ts::resample_accumulate(ts::device_put(rows(c.flux, c.K), {hi - lo, c.K}, s), ts::device_put(c.wave, {c.K}, s),
                                  ts::device_put(c.target, {c.T}, s),
                                  ts::device_put(std::vector<int>(c.seg.begin() + lo, c.seg.begin() + hi), {hi - lo}, s),
                                  c.S, 1e6, o);
  }
  EXPECT_EQ(acc.to_vector<double>(), whole.to_vector<double>());
}

TEST(ResampleAccumulate, InitInsideShardMapBodies) {
  // Each device adds its rows into an accumulator chunk by chunk, then one
  // psum: bitwise the single-device result.
  Case c(5, 50);
  const auto want = run(c, single(), single()).to_vector<double>();
  const ts::Mesh m = test_meshes()[4];  // 8 devices
  const ts::NamedSharding rows(m, P("x")), rep(m, P());
  auto wave = ts::device_put(c.wave, {c.K}, rep);
  auto target = ts::device_put(c.target, {c.T}, rep);
  auto body = [&](const ts::Array& flux, const ts::Array& seg, const ts::Array& w, const ts::Array& sc) {
    const std::int64_t n = flux.shape()[0];
    ts::Array acc;
    for (std::int64_t lo = 0; lo < n || lo == 0; lo += 2) {
      const std::int64_t hi = std::min(n, lo + 2);
      auto r = [&](const ts::Array& a) { return ts::slice(a, {ts::SliceSpec{lo, hi}}); };
      ts::ResampleOptions o{.weights = r(w), .wave_scale = r(sc)};
      if (acc.valid()) o.init = acc;
      acc = ts::resample_accumulate(r(flux), wave, target, r(seg), c.S, 1e6, o);
      if (n == 0) break;
    }
    return ts::psum(acc, "x");
  };
  auto got = ts::shard_map(body, m, std::vector<ts::PartitionSpec>{P("x"), P("x"), P("x"), P("x")}, P())(
      ts::device_put(c.flux, {c.n, c.K}, rows), ts::device_put(c.seg, {c.n}, rows),
      ts::device_put(c.weights, {c.n}, rows), ts::device_put(c.scale, {c.n}, rows));
  EXPECT_EQ(got.to_vector<double>(), want);
}

TEST(ExactLimbs, SumsAreExactUnderCancellation) {
  // In float64, (1e17 + 1) - 1e17 is 0 and 1 + (1e17 - 1e17) is 1: the order
  // decides. The limbs' sums give 1 + 2^-10 for every order (the finest quantum is 2^(58-70)) and every mesh.
  const std::vector<double> terms{1e17, 1.0, -1e17, 0x1p-10};
  std::vector<int> idx{0, 1, 2, 3};
  do {
    std::vector<double> v;
    for (int i : idx) v.push_back(terms[i]);
    for (const auto& m : test_meshes()) {
      auto x = ts::device_put(v, {4}, ts::NamedSharding(m, P(m.axis_names()[0])));
      auto total = ts::exact_total(ts::sum(ts::exact_limbs(x, 2e17), {1}), ts::DType::f64);
      EXPECT_EQ(total.item<double>(), 1.0 + 0x1p-10);
    }
  } while (std::next_permutation(idx.begin(), idx.end()));
}

TEST(ExactLimbs, KeepsSmallTermsToTheFinestQuantum) {
  // max_abs 1: quanta 2^-22, 2^-46, 2^-70; 3 * 2^-60 survives exactly.
  auto s = single();
  auto limbs = ts::exact_limbs(ts::device_put(std::vector<double>{0.75, 3 * 0x1p-60, -0.5}, {3}, s), 1.0);
  EXPECT_EQ(limbs.shape(), (ts::Shape{3, 3}));
  EXPECT_EQ(ts::exact_total(limbs, ts::DType::f64).to_vector<double>(), (std::vector<double>{0.75, 3 * 0x1p-60, -0.5}));
}

TEST(ResampleAccumulate, JitMatchesEager) {
  Case c(4);
  auto s = single();
  auto eager = run(c, s, s).to_vector<double>();
  auto f = ts::jit([&](const ts::Array& flux, const ts::Array& seg) {
    return ts::resample_accumulate(flux, ts::device_put(c.wave, {c.K}, s), ts::device_put(c.target, {c.T}, s), seg,
                                   c.S, 1e6,
                                   {.weights = ts::device_put(c.weights, {c.n}, s),
                                    .wave_scale = ts::device_put(c.scale, {c.n}, s)});
  });
  auto got = f(ts::device_put(c.flux, {c.n, c.K}, s), ts::device_put(c.seg, {c.n}, s));
  EXPECT_EQ(got.to_vector<double>(), eager);
}

TEST(ResampleAccumulate, Errors) {
  auto s = single();
  auto f2 = ts::device_put(std::vector<float>(6, 1.0f), {2, 3}, s);
  auto w3 = ts::device_put(std::vector<float>{1, 2, 3}, {3}, s);
  auto t2 = ts::device_put(std::vector<float>{1.5f, 2.5f}, {2}, s);
  auto id2 = ts::device_put(std::vector<int>{0, 1}, {2}, s);
  const char* op = "[resample_accumulate]";
  expect_error<ts::ShapeError>([&] { ts::resample_accumulate(w3, w3, t2, id2, 2, 10); }, op, {"flux must be 2-d", "(3,)"});
  expect_error<ts::ShapeError>([&] { ts::resample_accumulate(f2, t2, t2, id2, 2, 10); }, op, {"wave must be (K,) or (n, K)", "(2, 3)"});
  expect_error<ts::ShapeError>([&] { ts::resample_accumulate(f2, w3, ts::device_put(std::vector<float>{}, {0}, s), id2, 2, 10); }, op, {"target", "non-empty"});
  expect_error<ts::ShapeError>([&] { ts::resample_accumulate(f2, w3, t2, w3, 2, 10); }, op, {"segment_ids must have shape (2,)", "got shape (3,)"});
  expect_error<ts::DTypeError>([&] { ts::resample_accumulate(f2, w3, t2, t2, 2, 10); }, op, {"segment_ids must be integers", "f32"});
  expect_error<ts::DTypeError>([&] { ts::resample_accumulate(ts::device_put(std::vector<int>(6, 1), {2, 3}, s), w3, t2, id2, 2, 10); }, op, {"flux must be a float array"});
  expect_error<ts::ValueError>([&] { ts::resample_accumulate(f2, w3, t2, id2, -1, 10); }, op, {"num_segments must be >= 0", "-1"});
  expect_error<ts::ValueError>([&] { ts::resample_accumulate(f2, w3, t2, id2, 2, 0.0); }, op, {"max_abs must be a finite bound"});
  expect_error<ts::ValueError>([&] { ts::resample_accumulate(f2, w3, t2, id2, 2, INFINITY); }, op, {"max_abs"});
  expect_error<ts::ShapeError>([&] { ts::resample_accumulate(f2, w3, t2, id2, 2, 10, {.weights = w3, .wave_scale = {}}); }, op, {"weights must have shape (2,)"});
  // A term above the bound: flux 1 x weight 100 > max_abs 10.
  expect_error<ts::ValueError>(
      [&] {
        ts::resample_accumulate(f2, w3, t2, id2, 2, 10, {.weights = ts::device_put(std::vector<float>{100, 1}, {2}, s), .wave_scale = {}})
            .to_vector<double>();
      },
      op, {"contributes 100", "max_abs = 10"});
  // init: shape, dtype, and rows that are sharded (it would be counted once per device).
  auto acc = ts::resample_accumulate(f2, w3, t2, id2, 2, 10);
  expect_error<ts::ShapeError>([&] { ts::resample_accumulate(f2, w3, t2, id2, 3, 10, {.init = acc}); }, op,
                               {"init must be an exact accumulator f64 (3, 3, 2)", "f64[3,2,2]"});
  {
    const ts::Mesh m = test_meshes()[1];
    const ts::NamedSharding rows(m, P("x")), rep(m, P());
    expect_error<ts::ShardingError>(
        [&] {
          ts::resample_accumulate(ts::device_put(std::vector<float>(6, 1.0f), {2, 3}, rows),
                                  ts::device_put(std::vector<float>{1, 2, 3}, {3}, rep),
                                  ts::device_put(std::vector<float>{1.5f, 2.5f}, {2}, rep),
                                  ts::device_put(std::vector<int>{0, 1}, {2}, rows), 2, 10,
                                  {.init = ts::zeros({3, 2, 2}, ts::DType::f64, rep)});
        },
        op, {"init needs the rows unsharded", "f32[2@x,3]"});
    // Replicated rows but sharded weights: the rows would be sharded too.
    expect_error<ts::ShardingError>(
        [&] {
          ts::resample_accumulate(ts::device_put(std::vector<float>(6, 1.0f), {2, 3}, rep),
                                  ts::device_put(std::vector<float>{1, 2, 3}, {3}, rep),
                                  ts::device_put(std::vector<float>{1.5f, 2.5f}, {2}, rep),
                                  ts::device_put(std::vector<int>{0, 1}, {2}, rep), 2, 10,
                                  {.weights = ts::device_put(std::vector<float>{1, 1}, {2}, rows),
                                   .init = ts::zeros({3, 2, 2}, ts::DType::f64, rep)});
        },
        op, {"init needs the rows unsharded", "f32[2@x]"});
    // An init sharded over its segments is brought whole: the same result.
    auto f = ts::device_put(std::vector<float>(6, 1.0f), {2, 3}, rep);
    auto w = ts::device_put(std::vector<float>{1, 2, 3}, {3}, rep);
    auto t = ts::device_put(std::vector<float>{1.5f, 2.5f}, {2}, rep);
    auto ids = ts::device_put(std::vector<int>{0, 1}, {2}, rep);
    auto first = ts::resample_accumulate(f, w, t, ids, 2, 10);
    auto twice = ts::resample_accumulate(f, w, t, ids, 2, 10, {.init = ts::reshard(first, P(ts::none, "x"))});
    EXPECT_EQ(ts::exact_total(twice, ts::DType::f64).to_vector<double>(), (std::vector<double>{2, 2, 2, 2}));
  }
  expect_error<ts::DTypeError>([&] { ts::resample_accumulate(f2, w3, t2, id2, 2, 10, {.init = ts::astype(acc, ts::DType::f32)}); },
                               op, {"init must be an exact accumulator f64 (3, 2, 2)", "f32[3,2,2]"});
  auto other = ts::NamedSharding(test_meshes()[1], P());
  expect_error<ts::ShardingError>([&] { ts::resample_accumulate(f2, ts::device_put(std::vector<float>{1, 2, 3}, {3}, other), t2, id2, 2, 10); }, op);
  expect_error<ts::ShapeError>([&] { ts::exact_total(f2); }, "[exact_total]", {"exact accumulator"});
  expect_error<ts::ValueError>([&] { ts::exact_limbs(f2, -1.0); }, "[exact_limbs]", {"max_abs"});
}

TEST(ResampleAccumulate, IdsOutOfRangeAreDropped) {
  auto s = single();
  auto acc = ts::resample_accumulate(ts::device_put(std::vector<float>{1, 1, 1, 1, 1, 1}, {2, 3}, s),
                                     ts::device_put(std::vector<float>{1, 2, 3}, {3}, s),
                                     ts::device_put(std::vector<float>{1.5f, 2.5f}, {2}, s),
                                     ts::device_put(std::vector<int>{-1, 7}, {2}, s), 2, 10.0);
  EXPECT_EQ(ts::exact_total(acc, ts::DType::f64).to_vector<double>(), std::vector<double>(4, 0.0));
}

}  // namespace
