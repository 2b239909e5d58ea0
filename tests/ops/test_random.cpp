// Tests of the counter-based random numbers: threefry-2x32-20 against the
// Random123 known-answer vectors, key handling (key, split, fold_in), the
// mesh-independence guarantee (bitwise the same values for every mesh and
// sharding, in every shard), ranges and moments of uniform and normal,
// errors, the primitives' rules and parameters, and jit == eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/erfinv.hpp"
#include "backend/cpu/threefry.hpp"
#include "ops/data/jax_normal_golden.inc"
#include "primitives/primitive.hpp"
#include "tessera/tessera.hpp"
#include "test_util.hpp"
#include "trace_util.hpp"
#include "transforms/trace.hpp"

namespace ts = tessera;
using ts::testing::expect_same;
using ts::testing::rule_of;
using ts::testing::numel;
using ts::testing::sub_block;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::random_spec;
using ts::testing::test_meshes;

namespace {

ts::Mesh mesh1() { return ts::Mesh(std::vector<ts::Device>{ts::devices()[0]}, {1}, {"x"}); }
ts::NamedSharding rep1() { return ts::NamedSharding(mesh1(), ts::P()); }
ts::Mesh mesh24() { return ts::make_mesh({2, 4}, {"x", "y"}); }

// The bit patterns of a float vector, so comparisons are exact (and -0 != 0).
template <class T>
auto bits_of(const std::vector<T>& v) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  std::vector<U> out;
  for (T x : v) out.push_back(std::bit_cast<U>(x));
  return out;
}

// ---------------------------------------------------------------- threefry

TEST(Threefry, Random123KnownAnswers) {
  using ts::detail::threefry2x32;
  // threefry2x32_20 vectors from Random123's kat_vectors (key, counter -> out).
  auto a = threefry2x32(0u, 0u, 0u, 0u);
  EXPECT_EQ(a[0], 0x6b200159u);
  EXPECT_EQ(a[1], 0x99ba4efeu);
  auto b = threefry2x32(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(b[0], 0x1cb996fcu);
  EXPECT_EQ(b[1], 0xbb002be7u);
  auto c = threefry2x32(0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u);
  EXPECT_EQ(c[0], 0xc4923a9cu);
  EXPECT_EQ(c[1], 0x483df7a0u);
}

TEST(Threefry, CounterIsTheSixtyFourBitIndex) {
  using ts::detail::threefry2x32;
  using ts::detail::threefry_at;
  const std::uint64_t i = (std::uint64_t{5} << 32) | 7u;
  EXPECT_EQ(threefry_at(1u, 2u, i), threefry2x32(1u, 2u, 5u, 7u));
  EXPECT_EQ(threefry_at(1u, 2u, 9u), threefry2x32(1u, 2u, 0u, 9u));
  auto w = threefry2x32(3u, 4u, 0u, 11u);
  EXPECT_EQ(ts::detail::random_bits32(3u, 4u, 11u), w[0] ^ w[1]);
  EXPECT_EQ(ts::detail::random_bits64(3u, 4u, 11u), (std::uint64_t{w[0]} << 32) | w[1]);
}

TEST(Threefry, UnitFloatsUseTheTopBits) {
  EXPECT_EQ(ts::detail::unit_float(0u), 0.0f);
  EXPECT_EQ(ts::detail::unit_float(0xffffffffu), 1.0f - 0x1p-23f);
  EXPECT_EQ(ts::detail::unit_float(0x80000000u), 0.5f);
  EXPECT_EQ(ts::detail::unit_float(0x000001ffu), 0.0f);  // low 9 bits are dropped
  EXPECT_EQ(ts::detail::unit_double(0u), 0.0);
  EXPECT_EQ(ts::detail::unit_double(~std::uint64_t{0}), 1.0 - 0x1p-52);
  EXPECT_EQ(ts::detail::unit_double(std::uint64_t{1} << 63), 0.5);
  EXPECT_EQ(ts::detail::unit_double(0xfffu), 0.0);  // low 12 bits are dropped
}

TEST(Threefry, ErfinvIsGilesApproximation) {
  // XLA's erfinv (Giles' polynomials): close to the true inverse of erf, exact
  // at 0, odd, infinite at +-1 and NaN outside [-1, 1].
  using ts::detail::erfinv_f32;
  using ts::detail::erfinv_f64;
  for (double y = -2.5; y <= 2.5; y += 0.0625) {
    EXPECT_NEAR(erfinv_f64(std::erf(y)), y, 1e-14 * (1 + std::fabs(y))) << "y " << y;
    EXPECT_NEAR(erfinv_f32(static_cast<float>(std::erf(y))), y, 2e-6 * (1 + std::fabs(y)) / (std::exp(-y * y) + 1e-3))
        << "y " << y;
  }
  // The three f64 ranges (w < 6.25, < 16, >= 16) meet continuously.
  for (double y : {1.0, 2.0, 2.7, 3.0, 4.0, 5.0, 5.8}) {
    const double x = 1.0 - std::erfc(y);
    if (x < 1.0) {
      EXPECT_NEAR(std::erfc(erfinv_f64(x)), 1.0 - x, 1e-9 * (1.0 - x)) << "y " << y;
    }
  }
  EXPECT_EQ(erfinv_f64(0.0), 0.0);
  EXPECT_EQ(erfinv_f32(0.0f), 0.0f);
  EXPECT_EQ(erfinv_f64(-0.3), -erfinv_f64(0.3));
  EXPECT_EQ(erfinv_f32(-0.3f), -erfinv_f32(0.3f));
  EXPECT_EQ(erfinv_f64(1.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(erfinv_f32(-1.0f), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(erfinv_f64(1.5)));
  EXPECT_TRUE(std::isnan(erfinv_f32(-2.0f)));
  // Finite up to the last value below 1.
  EXPECT_NEAR(erfinv_f64(std::nextafter(1.0, 0.0)), 5.8636, 1e-3);
  EXPECT_NEAR(erfinv_f32(std::nextafter(1.0f, 0.0f)), 3.8325, 1e-3);
}

// -------------------------------------------------------------------- keys

TEST(RandomKeys, KeyFromSeedLikeJax) {
  EXPECT_EQ(ts::random::key(0), (ts::Key{0u, 0u}));
  EXPECT_EQ(ts::random::key(42), (ts::Key{0u, 42u}));
  EXPECT_EQ(ts::random::key(0x123456789abcdef0ull), (ts::Key{0x12345678u, 0x9abcdef0u}));
  EXPECT_EQ(ts::random::key(~0ull), (ts::Key{0xffffffffu, 0xffffffffu}));
}

TEST(RandomKeys, FoldIn) {
  const ts::Key k = ts::random::key(7);
  const ts::Key f = ts::random::fold_in(k, 3);
  EXPECT_NE(f, k);
  EXPECT_EQ(ts::random::fold_in(k, 3), f);  // deterministic
  EXPECT_NE(ts::random::fold_in(k, 4), f);
  EXPECT_NE(ts::random::fold_in(ts::random::key(8), 3), f);
  // JAX's definition: the hash of the counter (0, data).
  auto w = ts::detail::threefry2x32(k.k0, k.k1, 0u, 3u);
  EXPECT_EQ(f, (ts::Key{w[0], w[1]}));
  // With key 0 and data 0 this is the first Random123 vector.
  EXPECT_EQ(ts::random::fold_in(ts::random::key(0), 0), (ts::Key{0x6b200159u, 0x99ba4efeu}));
  // Many data values give distinct keys.
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
  for (std::uint32_t d = 0; d < 1000; ++d) {
    auto g = ts::random::fold_in(k, d);
    seen.insert({g.k0, g.k1});
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(RandomKeys, Split) {
  const ts::Key k = ts::random::key(1234);
  EXPECT_EQ(ts::random::split(k).size(), 2u);
  auto keys = ts::random::split(k, 64);
  ASSERT_EQ(keys.size(), 64u);
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
  for (const auto& s : keys) {
    EXPECT_NE(s, k);
    seen.insert({s.k0, s.k1});
  }
  EXPECT_EQ(seen.size(), 64u);
  EXPECT_EQ(ts::random::split(k, 64), keys);  // deterministic
  EXPECT_NE(ts::random::split(ts::random::key(1235), 2), ts::random::split(k, 2));
  // Partitionable threefry (JAX's default): key i hashes counter i, so a
  // shorter split is a prefix of a longer one and matches fold_in(k, i).
  auto three = ts::random::split(k, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(three[i], keys[i]);
    EXPECT_EQ(three[i], ts::random::fold_in(k, static_cast<std::uint32_t>(i)));
  }
  EXPECT_TRUE(ts::random::split(k, 0).empty());
  // Splitting a split key gives new keys.
  auto sub = ts::random::split(keys[0], 2);
  EXPECT_NE(sub[0], keys[0]);
  EXPECT_NE(sub[0], keys[1]);
}

// ------------------------------------------------------- mesh independence

const std::vector<ts::Shape> kShapes1 = {{0}, {1}, {3}, {13}};
const std::vector<ts::Shape> kShapes2 = {{0, 4}, {1, 1}, {3, 2}, {13, 5}, {2, 11}};

// For every layout: same type as asked, the gathered values bitwise equal to
// the single-device ones, and every shard (replicas too) holds its block.
template <class T, class Make>
void check_mesh_independent(int rank, const std::vector<ts::Shape>& shapes, Make&& make) {
  std::vector<std::vector<T>> refs;
  for (const auto& shape : shapes) {
    auto ref = make(shape, rep1()).template to_vector<T>();
    ASSERT_EQ(static_cast<std::int64_t>(ref.size()), numel(shape));
    refs.push_back(std::move(ref));
  }
  for_each_layout(rank, [&](const ts::NamedSharding& s) {
    for (size_t c = 0; c < shapes.size(); ++c) {
      const auto& shape = shapes[c];
      SCOPED_TRACE(s.str() + " shape " + ts::shape_str(shape));
      ts::Array a = make(shape, s);
      ASSERT_EQ(a.shape(), shape);
      EXPECT_EQ(a.dtype(), ts::dtype_of<T>());
      EXPECT_EQ(a.sharding(), s);
      EXPECT_EQ(bits_of(a.template to_vector<T>()), bits_of(refs[c]));
      int pos = 0;
      for (const ts::Shard& sh : a.addressable_shards()) {
        EXPECT_EQ(bits_of(sh.data.template to_vector<T>()), bits_of(sub_block(refs[c], shape, sh.index)))
            << "position " << pos;
        ++pos;
      }
    }
  });
}

TEST(RandomSpmd, UniformSameOnEveryLayout) {
  const ts::Key k = ts::random::key(2024);
  check_mesh_independent<float>(1, kShapes1, [&](const ts::Shape& sh, const ts::NamedSharding& s) {
    return ts::random::uniform(k, sh, ts::f32, s);
  });
  check_mesh_independent<double>(2, kShapes2, [&](const ts::Shape& sh, const ts::NamedSharding& s) {
    return ts::random::uniform(k, sh, ts::f64, s, -2.0, 3.0);
  });
  check_mesh_independent<float>(2, kShapes2, [&](const ts::Shape& sh, const ts::NamedSharding& s) {
    return ts::random::uniform(k, sh, ts::f32, s, 10.0, 10.5);
  });
}

TEST(RandomSpmd, NormalSameOnEveryLayout) {
  const ts::Key k = ts::random::fold_in(ts::random::key(5), 9);
  check_mesh_independent<float>(2, kShapes2, [&](const ts::Shape& sh, const ts::NamedSharding& s) {
    return ts::random::normal(k, sh, ts::f32, s);
  });
  check_mesh_independent<double>(1, kShapes1, [&](const ts::Shape& sh, const ts::NamedSharding& s) {
    return ts::random::normal(k, sh, ts::f64, s);
  });
}

TEST(RandomSpmd, Rank3AndRank0) {
  const ts::Key k = ts::random::key(77);
  check_mesh_independent<float>(3, {{3, 1, 5}, {2, 3, 4}}, [&](const ts::Shape& sh, const ts::NamedSharding& s) {
    return ts::random::normal(k, sh, ts::f32, s);
  });
  for (const ts::Mesh& m : ts::testing::test_meshes()) {
    ts::Array a = ts::random::uniform(k, {}, ts::f64, ts::NamedSharding(m, ts::P()));
    EXPECT_EQ(a.ndim(), 0);
    EXPECT_EQ(a.item<double>(), ts::detail::unit_double(ts::detail::random_bits64(k.k0, k.k1, 0)));
  }
}

TEST(RandomSpmd, ExplicitMesh) {
  const ts::Key k = ts::random::key(8);
  ts::Mesh em = ts::make_mesh({2, 4}, {"X", "Y"}, {ts::AxisType::Explicit, ts::AxisType::Explicit});
  const ts::NamedSharding s(em, ts::P("Y", "X"));
  ts::Array a = ts::random::normal(k, {9, 5}, ts::f32, s);
  EXPECT_EQ(ts::typeof(a), "f32[9@Y,5@X]");
  EXPECT_EQ(bits_of(a.to_vector<float>()), bits_of(ts::random::normal(k, {9, 5}, ts::f32, rep1()).to_vector<float>()));
}

// The value at flat index i is exactly the documented function of (key, i).
TEST(RandomSpmd, ValuesAreTheDocumentedFunctionOfKeyAndIndex) {
  const ts::Key k = ts::random::key(31337);
  const ts::Shape shape{7, 9};
  const ts::NamedSharding s(mesh24(), ts::P("y", "x"));
  auto u32 = ts::random::uniform(k, shape, ts::f32, s).to_vector<float>();
  auto u64 = ts::random::uniform(k, shape, ts::f64, s).to_vector<double>();
  for (std::uint64_t i = 0; i < u32.size(); ++i) {
    EXPECT_EQ(u32[i], ts::detail::unit_float(ts::detail::random_bits32(k.k0, k.k1, i)));
    EXPECT_EQ(u64[i], ts::detail::unit_double(ts::detail::random_bits64(k.k0, k.k1, i)));
  }
  // A reshape of the same element count gives the same flat sequence.
  auto flat = ts::random::uniform(k, {63}, ts::f32, ts::NamedSharding(mesh24(), ts::P("x"))).to_vector<float>();
  EXPECT_EQ(bits_of(flat), bits_of(u32));
}

TEST(RandomSpmd, Deterministic) {
  const ts::Key k = ts::random::key(3);
  const ts::NamedSharding s(mesh24(), ts::P("x", "y"));
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_EQ(bits_of(ts::random::normal(k, {33, 17}, ts::f64, s).to_vector<double>()),
              bits_of(ts::random::normal(k, {33, 17}, ts::f64, s).to_vector<double>()));
  }
}

TEST(RandomSpmd, MovesNothing) {
  const ts::NamedSharding s(mesh24(), ts::P("x", "y"));
  auto ex = ts::explain([&] {
    ts::random::uniform(ts::random::key(1), {13, 7}, ts::f32, s);
    ts::random::normal(ts::random::key(1), {13, 7}, ts::f64, s);
  });
  EXPECT_EQ(ex.bytes_moved(), 0);
}

// ---------------------------------------------------------- distributions

TEST(RandomValues, DifferentKeysDiffer) {
  const ts::NamedSharding s(mesh24(), ts::P("x"));
  auto a = ts::random::uniform(ts::random::key(0), {1000}, ts::f32, s).to_vector<float>();
  auto b = ts::random::uniform(ts::random::key(1), {1000}, ts::f32, s).to_vector<float>();
  auto c = ts::random::uniform(ts::random::fold_in(ts::random::key(0), 1), {1000}, ts::f32, s).to_vector<float>();
  int same_ab = 0, same_ac = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  EXPECT_LT(same_ab, 5);
  EXPECT_LT(same_ac, 5);
  // Neighbouring elements differ too.
  std::set<float> distinct(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 990u);
}

template <class T>
void check_uniform_range(double lo, double hi) {
  SCOPED_TRACE("lo " + std::to_string(lo) + " hi " + std::to_string(hi));
  const ts::NamedSharding s(mesh24(), ts::P({"x", "y"}));
  auto v = ts::random::uniform(ts::random::key(11), {20000}, ts::dtype_of<T>(), s, lo, hi).template to_vector<T>();
  const T l = static_cast<T>(lo), h = static_cast<T>(hi);
  double sum = 0;  // of offsets from lo, so large bounds keep their precision
  for (T x : v) {
    ASSERT_GE(x, l);
    ASSERT_LT(x, h);
    sum += static_cast<double>(x) - static_cast<double>(l);
  }
  const double mean = sum / static_cast<double>(v.size());
  // Standard error of the mean: (hi - lo) / sqrt(12 n) ~ 0.002 (hi - lo);
  // a coarse grid of representable values adds a bias of up to one spacing.
  const double spacing = static_cast<double>(std::nextafter(h, l + h)) - static_cast<double>(h);
  EXPECT_NEAR(mean, 0.5 * (hi - lo), 0.012 * (hi - lo) + spacing);
}

TEST(RandomValues, UniformStaysInRange) {
  check_uniform_range<float>(0.0, 1.0);
  check_uniform_range<double>(0.0, 1.0);
  check_uniform_range<float>(-3.0, 5.0);
  check_uniform_range<double>(-1e-3, 2e-3);
  // A coarse f32 grid (spacing 0.0625 near 1e6) where u * (hi - lo) + lo
  // rounds up to hi unless held below it.
  check_uniform_range<float>(1e6, 1e6 + 1);
  check_uniform_range<double>(1e15, 1e15 + 1);
}

TEST(RandomValues, UniformVariance) {
  const ts::NamedSharding s(mesh24(), ts::P("x"));
  auto v = ts::random::uniform(ts::random::key(12), {100000}, ts::f64, s).to_vector<double>();
  double m = 0, m2 = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) m2 += (x - m) * (x - m);
  m2 /= static_cast<double>(v.size());
  EXPECT_NEAR(m, 0.5, 0.005);
  EXPECT_NEAR(m2, 1.0 / 12.0, 0.002);
}

template <class T>
void check_normal_moments(const ts::Key& k) {
  const ts::NamedSharding s(mesh24(), ts::P("y", "x"));
  auto v = ts::random::normal(k, {400, 250}, ts::dtype_of<T>(), s).template to_vector<T>();
  const double n = static_cast<double>(v.size());
  double m = 0;
  for (T x : v) {
    ASSERT_TRUE(std::isfinite(x));
    m += static_cast<double>(x);
  }
  m /= n;
  double var = 0, skew = 0, kurt = 0;
  int within1 = 0;
  for (T x : v) {
    const double d = static_cast<double>(x) - m;
    var += d * d;
    skew += d * d * d;
    kurt += d * d * d * d;
    within1 += std::fabs(static_cast<double>(x)) < 1.0;
  }
  var /= n;
  skew /= n * var * std::sqrt(var);
  kurt /= n * var * var;
  // Standard errors for n = 1e5: mean 0.0032, variance 0.0045, skewness
  // 0.008, kurtosis 0.015, P(|x| < 1) 0.0015; bounds at about 5 of them.
  EXPECT_NEAR(m, 0.0, 0.016);
  EXPECT_NEAR(var, 1.0, 0.025);
  EXPECT_NEAR(skew, 0.0, 0.04);
  EXPECT_NEAR(kurt, 3.0, 0.08);
  EXPECT_NEAR(within1 / n, 0.682689, 0.008);
}

TEST(RandomValues, NormalMoments) {
  check_normal_moments<float>(ts::random::key(0));
  check_normal_moments<double>(ts::random::key(1));
  check_normal_moments<float>(ts::random::split(ts::random::key(2), 2)[1]);
}

// -------------------------------------------------------------- key arrays

// Keys as data: key_data / wrap_key_data round trip, and every operation on a
// key array equals the Key form bitwise, on every layout.
std::vector<ts::Key> some_keys(int n) {
  std::vector<ts::Key> out;
  for (int i = 0; i < n; ++i) out.push_back(ts::random::fold_in(ts::random::key(100 + i), 7u * i));
  return out;
}
std::vector<std::uint32_t> words_of(const std::vector<ts::Key>& keys) {
  std::vector<std::uint32_t> w;
  for (const auto& k : keys) w.insert(w.end(), {k.k0, k.k1});
  return w;
}

TEST(RandomKeyArrays, KeyDataRoundTrip) {
  const ts::Key k = ts::random::key(0x0123456789abcdefull);
  ts::Array d = ts::random::key_data(k, rep1());
  EXPECT_EQ(d.dtype(), ts::u32);
  EXPECT_EQ(d.shape(), (ts::Shape{2}));
  EXPECT_EQ(d.to_vector<std::uint32_t>(), (std::vector<std::uint32_t>{0x01234567u, 0x89abcdefu}));
  EXPECT_EQ(ts::random::wrap_key_data(d), k);
  auto keys = some_keys(5);
  ts::Array many = ts::random::key_data(keys, ts::NamedSharding(mesh24(), ts::P("y")));
  EXPECT_EQ(ts::typeof(many), "u32[5@y,2]");
  EXPECT_EQ(many.to_vector<std::uint32_t>(), words_of(keys));
  // A key array of one key with unit leading dims (a local shard) wraps too.
  EXPECT_EQ(ts::random::wrap_key_data(ts::reshape(d, {1, 1, 2})), k);
}

TEST(RandomKeyArrays, SplitAndFoldInMatchKeyForms) {
  auto keys = some_keys(5);
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    ts::Array ka = ts::random::key_data(keys, s);
    ts::Array sp = ts::random::split(ka, 3);
    ASSERT_EQ(sp.shape(), (ts::Shape{5, 3, 2})) << s.str();
    std::vector<ts::Key> want_split, want_fold, want_fold_each;
    for (int i = 0; i < 5; ++i) {
      for (const auto& k : ts::random::split(keys[i], 3)) want_split.push_back(k);
      want_fold.push_back(ts::random::fold_in(keys[i], 42u));
      want_fold_each.push_back(ts::random::fold_in(keys[i], static_cast<std::uint32_t>(i * 3 - 4)));
    }
    EXPECT_EQ(sp.to_vector<std::uint32_t>(), words_of(want_split)) << s.str();
    EXPECT_EQ(ts::random::fold_in(ka, 42u).to_vector<std::uint32_t>(), words_of(want_fold)) << s.str();
    // Per-key data as an i32 array (negative values wrap modulo 2^32, as JAX's).
    ts::Array data = ts::device_put(std::vector<std::int32_t>{-4, -1, 2, 5, 8}, {5},
                                    ts::NamedSharding(s.mesh(), ts::P()));
    EXPECT_EQ(ts::random::fold_in(ka, data).to_vector<std::uint32_t>(), words_of(want_fold_each)) << s.str();
    ts::Array scalar = ts::device_put(std::vector<std::int64_t>{42}, {}, ts::NamedSharding(s.mesh(), ts::P()));
    EXPECT_EQ(ts::random::fold_in(ka, scalar).to_vector<std::uint32_t>(), words_of(want_fold)) << s.str();
  });
  // A single key: split gives (num, 2), like JAX's split of one key.
  ts::Array one = ts::random::key_data(keys[0], rep1());
  EXPECT_EQ(ts::random::split(one, 4).shape(), (ts::Shape{4, 2}));
  EXPECT_EQ(ts::random::split(one, 4).to_vector<std::uint32_t>(), words_of(ts::random::split(keys[0], 4)));
  EXPECT_EQ(ts::random::split(one, 0).shape(), (ts::Shape{0, 2}));
}

TEST(RandomKeyArrays, SamplersMatchKeyForms) {
  const ts::Key k = ts::random::key(9);
  const ts::NamedSharding s(mesh24(), ts::P("x", "y"));
  ts::Array ka = ts::random::key_data(k, ts::NamedSharding(mesh24(), ts::P()));
  EXPECT_EQ(bits_of(ts::random::normal(ka, {7, 5}, ts::f32, s).to_vector<float>()),
            bits_of(ts::random::normal(k, {7, 5}, ts::f32, s).to_vector<float>()));
  EXPECT_EQ(bits_of(ts::random::uniform(ka, {7, 5}, ts::f64, s, -2.0, 3.0).to_vector<double>()),
            bits_of(ts::random::uniform(k, {7, 5}, ts::f64, s, -2.0, 3.0).to_vector<double>()));
  // Without a sharding: replicated on the key's mesh.
  ts::Array r = ts::random::normal(ka, {4});
  EXPECT_EQ(r.sharding(), ts::NamedSharding(mesh24(), ts::P()));
  EXPECT_EQ(r.dtype(), ts::f32);
  EXPECT_EQ(bits_of(r.to_vector<float>()), bits_of(ts::random::normal(k, {4}, ts::f32, rep1()).to_vector<float>()));
  EXPECT_EQ(bits_of(ts::random::uniform(ka, {3}, ts::f32, 1.0, 2.0).to_vector<float>()),
            bits_of(ts::random::uniform(k, {3}, ts::f32, rep1(), 1.0, 2.0).to_vector<float>()));
}

TEST(RandomKeyArrays, PerDeviceKeysThroughShardMap) {
  // Keys sharded like any array: each device receives its own key, folds in
  // its axis index, splits, and draws; no key is captured.
  const ts::Mesh mesh = ts::make_mesh({8}, {"x"});
  auto keys = some_keys(8);
  ts::Array ka = ts::random::key_data(keys, ts::NamedSharding(mesh, ts::P("x")));
  auto body = [](ts::Array k) {
    ts::Array mine = ts::random::fold_in(ts::reshape(k, {2}), ts::axis_index("x"));
    ts::Array two = ts::random::split(mine, 2);
    ts::Array second = ts::reshape(ts::slice(two, {{1, 2}}), {2});
    return ts::random::normal(second, {3}, ts::f64);
  };
  auto f = ts::shard_map(body, mesh, {ts::P("x")}, ts::P("x"));
  std::vector<double> want;
  for (int i = 0; i < 8; ++i) {
    const ts::Key mine = ts::random::split(ts::random::fold_in(keys[i], static_cast<std::uint32_t>(i)), 2)[1];
    for (double v : ts::random::normal(mine, {3}, ts::f64, rep1()).to_vector<double>()) want.push_back(v);
  }
  ts::Array out = f(ka);
  EXPECT_EQ(out.shape(), (ts::Shape{24}));
  EXPECT_EQ(bits_of(out.to_vector<double>()), bits_of(want));
  EXPECT_EQ(bits_of(f(ka).to_vector<double>()), bits_of(want));  // deterministic
  // The draws vary over x (they came from x-sharded keys): claiming they are
  // replicated is caught by check_vma.
  auto g = ts::shard_map(body, mesh, {ts::P("x")}, ts::P());
  expect_error<ts::ShardingError>([&] { g(ka); }, "[shard_map]", {"'x'"});
}

TEST(RandomKeyArrays, Errors) {
  const ts::NamedSharding r(mesh1(), ts::P());
  ts::Array f = ts::zeros({2}, ts::f32, r);
  ts::Array three = ts::device_put(std::vector<std::uint32_t>{1, 2, 3}, {3}, r);
  ts::Array keys = ts::random::key_data(some_keys(3), r);
  expect_error<ts::DTypeError>([&] { ts::random::split(f, 2); }, "[split]", {"u32", "f32[2]"});
  expect_error<ts::ShapeError>([&] { ts::random::fold_in(three, 1u); }, "[fold_in]", {"size 2", "(3,)"});
  expect_error<ts::ShapeError>([&] { ts::random::split(keys, -1); }, "[split]", {"num=-1"});
  expect_error<ts::ShapeError>([&] { ts::random::wrap_key_data(keys); }, "[wrap_key_data]", {"one key", "(3, 2)"});
  expect_error<ts::ShapeError>([&] { ts::random::normal(keys, {4}); }, "[normal]", {"one key", "(3, 2)"});
  expect_error<ts::DTypeError>([&] { ts::random::uniform(f, {4}); }, "[uniform]", {"u32"});
  expect_error<ts::DTypeError>([&] { ts::random::fold_in(keys, f); }, "[fold_in]", {"integer", "f32"});
  ts::Array two = ts::device_put(std::vector<std::int32_t>{1, 2}, {2}, r);
  expect_error<ts::ShapeError>([&] { ts::random::fold_in(keys, two); }, "[fold_in]", {"(3,)", "(2,)"});
  expect_error<ts::ShardingError>([&] { ts::random::key_data(ts::random::key(1), ts::NamedSharding(mesh1(), ts::P("x", ts::none))); },
                                  "[key_data]");
}

// ---------------------------------------------------------------- vs JAX

// Golden values from JAX 0.10.2 (jax_threefry_partitionable on, its default;
// x64 enabled for f64):
//   k = jax.random.PRNGKey(42); jax.random.split(k, 3); jax.random.fold_in(k, 3)
//   jax.random.uniform(k, (2, 5), dtype) viewed as unsigned bits
//   jax.random.normal(k, (6,), dtype)
TEST(RandomJax, KeysMatchJax) {
  EXPECT_EQ(ts::random::key(0x123456789abcdef0ull), (ts::Key{0x12345678u, 0x9abcdef0u}));
  const ts::Key k = ts::random::key(42);
  auto s = ts::random::split(k, 3);
  EXPECT_EQ(s[0], (ts::Key{0x6d3e048fu, 0x1022172du}));
  EXPECT_EQ(s[1], (ts::Key{0x03d7b32du, 0xadd083f4u}));
  EXPECT_EQ(s[2], (ts::Key{0x92fb20eau, 0x0f38d913u}));
  EXPECT_EQ(ts::random::fold_in(k, 3), (ts::Key{0xbad56946u, 0x354ba891u}));
}

TEST(RandomJax, UniformMatchesJaxBitwise) {
  const ts::Key k = ts::random::key(42);
  const ts::NamedSharding s(mesh24(), ts::P("x", "y"));
  const std::vector<std::uint32_t> u32 = {0x3efa3824, 0x3f2e0730, 0x3f1dc3f8, 0x3f0f9ec0, 0x3ee6bae4,
                                          0x3f15fb4e, 0x3d9935b0, 0x3f466f24, 0x3f32eefe, 0x3f5191fa};
  const std::vector<std::uint64_t> u64 = {
      0x3fdb4f8123c40884, 0x3f8ebd996d6e8400, 0x3fe25f641d41e71a, 0x3fe75aad28c6a974, 0x3fe60275dc7869da,
      0x3fe49b2352c6244a, 0x3fe4a0d8a116c40e, 0x3fe2fa0aa5ea37ee, 0x3fce4cc8b3c73bb0, 0x3fd0d25122e4b62c};
  EXPECT_EQ(bits_of(ts::random::uniform(k, {2, 5}, ts::f32, s).to_vector<float>()), u32);
  EXPECT_EQ(bits_of(ts::random::uniform(k, {2, 5}, ts::f64, s).to_vector<double>()), u64);
}

// Distance in units in the last place between two finite floats of one type.
template <class T>
std::int64_t ulp_distance(T a, T b) {
  using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  auto ordered = [](T v) {
    const I i = std::bit_cast<I>(v);
    return i < 0 ? static_cast<std::int64_t>(std::numeric_limits<I>::min()) - i : static_cast<std::int64_t>(i);
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Compares Tessera's normal draw with values recorded from JAX (index -> bits),
// within 2 ulp; returns the largest distance seen.
template <class T>
std::int64_t check_against_jax(const std::vector<T>& got, const std::vector<std::pair<std::int64_t, std::uint64_t>>& want,
                               const char* what) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  std::int64_t worst = 0;
  for (const auto& [i, bits] : want) {
    const T w = std::bit_cast<T>(static_cast<U>(bits));
    const T g = got.at(static_cast<std::size_t>(i));
    const std::int64_t d = ulp_distance(g, w);
    worst = std::max(worst, d);
    EXPECT_LE(d, 2) << what << " index " << i << ": tessera " << g << " vs jax " << w;
  }
  return worst;
}

template <class T>
void check_normal_matches_jax(const std::vector<std::pair<std::int64_t, std::uint64_t>>& grid,
                              const std::vector<std::pair<std::int64_t, std::uint64_t>>& tails,
                              const std::vector<std::pair<std::int64_t, std::uint64_t>>& small) {
  const ts::DType dt = ts::dtype_of<T>();
  // Sharded draws, so the comparison also covers the layout independence.
  const ts::NamedSharding s2(mesh24(), ts::P("x", "y"));
  const ts::NamedSharding s1(mesh24(), ts::P({"y", "x"}));
  auto a = ts::random::normal(ts::random::key(0), {192, 64}, dt, s2).template to_vector<T>();
  std::int64_t worst = check_against_jax(a, grid, "key(0) (192, 64)");
  auto big = ts::random::normal(ts::random::key(7), {std::int64_t{1} << 22}, dt, s1).template to_vector<T>();
  worst = std::max(worst, check_against_jax(big, tails, "key(7) (2^22,) tails"));
  // The recorded tails are every |z| > 4 of the draw: the same set here.
  std::size_t n_tail = 0;
  for (T v : big) n_tail += std::fabs(v) > T(4);
  EXPECT_GE(tails.size(), n_tail);
  EXPECT_LE(tails.size(), n_tail + 2);  // + the extremes when inside 4
  EXPECT_GT(n_tail, 100u);
  auto c = ts::random::normal(ts::random::key(3), {5}, dt, rep1()).template to_vector<T>();
  worst = std::max(worst, check_against_jax(c, small, "key(3) (5,)"));
  ::testing::Test::RecordProperty("max_ulp_vs_jax", static_cast<int>(worst));
}

TEST(RandomJax, NormalMatchesJaxF32) {
  check_normal_matches_jax<float>(jax_normal::k0_192x64_f32, jax_normal::k7_4M_tails_f32, jax_normal::k3_5_f32);
}

TEST(RandomJax, NormalMatchesJaxF64) {
  check_normal_matches_jax<double>(jax_normal::k0_192x64_f64, jax_normal::k7_4M_tails_f64, jax_normal::k3_5_f64);
}

TEST(RandomJax, NormalCloseToJax) {
  // jax.random.normal(PRNGKey(42), (6,), dtype), printed as decimals.
  const ts::Key k = ts::random::key(42);
  const ts::NamedSharding s(mesh24(), ts::P("y"));
  const std::vector<double> n64 = {-0.18471174528191162, -2.169824560397754, 0.18693555179382582,
                                   0.6122653570510959,   0.4896249504757018, 0.36900430470828355};
  const std::vector<double> n32 = {-0.02830461598932743, 0.4671318531036377,   0.2957029640674591,
                                   0.15354591608047485,  -0.12403281778097153, 0.21692314743995667};
  auto a = ts::random::normal(k, {6}, ts::f64, s).to_vector<double>();
  auto b = ts::random::normal(k, {6}, ts::f32, s).to_vector<float>();
  for (int i = 0; i < 6; ++i) {
    EXPECT_LE(ulp_distance(a[i], n64[i]), 2) << i << ": " << a[i] << " vs " << n64[i];
    EXPECT_LE(ulp_distance(b[i], static_cast<float>(n32[i])), 2) << i << ": " << b[i] << " vs " << n32[i];
  }
}

// ------------------------------------------------------------------ errors

TEST(RandomErrors, NonFloatDtype) {
  auto s = rep1();
  const ts::Key k = ts::random::key(0);
  expect_error<ts::DTypeError>([&] { ts::random::uniform(k, {4}, ts::i32, s); }, "[uniform]", {"float", "i32"});
  expect_error<ts::DTypeError>([&] { ts::random::uniform(k, {4}, ts::bool_, s); }, "[uniform]", {"float", "bool"});
  expect_error<ts::DTypeError>([&] { ts::random::normal(k, {4}, ts::i64, s); }, "[normal]", {"float", "i64"});
}

TEST(RandomErrors, ShapeAndSharding) {
  const ts::Key k = ts::random::key(0);
  expect_error<ts::ShapeError>(
      [&] {
        ts::random::uniform(k, {3, -1}, ts::f32, rep1());
      },
      "[uniform]", {">= 0", "(3, -1)"});
  expect_error<ts::ShapeError>([&] { ts::random::normal(k, {-2}, ts::f64, rep1()); }, "[normal]", {"(-2,)"});
  const ts::NamedSharding s2(mesh24(), ts::P("x", "y"));
  expect_error<ts::ShardingError>([&] { ts::random::uniform(k, {8}, ts::f32, s2); }, "[uniform]", {"rank 1"});
  expect_error<ts::ShardingError>([&] { ts::random::normal(k, {}, ts::f32, s2); }, "[normal]", {"rank 0"});
  const ts::NamedSharding u(mesh24(), ts::PartitionSpec({ts::PartitionSpec::Entry("x")}, {"y"}));
  expect_error<ts::ShardingError>([&] { ts::random::normal(k, {8}, ts::f32, u); }, "[normal]", {"unreduced"});
}

TEST(RandomErrors, Bounds) {
  const ts::Key k = ts::random::key(0);
  auto s = rep1();
  expect_error<ts::Error>([&] { ts::random::uniform(k, {4}, ts::f32, s, 1.0, 1.0); }, "[uniform]",
                          {"lo < hi", "lo=1", "hi=1"});
  expect_error<ts::Error>([&] { ts::random::uniform(k, {4}, ts::f64, s, 2.0, -1.0); }, "[uniform]", {"lo < hi"});
  expect_error<ts::Error>([&] { ts::random::uniform(k, {4}, ts::f64, s, 0.0, INFINITY); }, "[uniform]", {"finite"});
  // Distinct as doubles, equal once rounded to f32.
  expect_error<ts::Error>([&] { ts::random::uniform(k, {4}, ts::f32, s, 1.0, 1.0 + 1e-12); }, "[uniform]", {"f32"});
  expect_error<ts::ShapeError>([&] { ts::random::split(k, -1); }, "[split]", {"num", "-1"});
}

// ------------------------------------------------------- primitives and jit

TEST(RandomRule, GoldenText) {
  const ts::Key k = ts::random::key(42);
  const ts::NamedSharding s(mesh24(), ts::P("x", "y"));
  const ts::NamedSharding rep(mesh24(), ts::P());
  // A host key is a parameter (its words, so programs with different keys
  // differ); bounds are printed as values of the dtype.
  auto r = rule_of([&] { ts::random::uniform(k, {13, 7}, ts::f32, s, 0.1, 2.0); });
  EXPECT_EQ(r.first, "()->([i,j]) {i=13,j=7}");
  EXPECT_EQ(r.second, "uniform key=[0,42] lo=0.10000000149011612 hi=2");
  r = rule_of([&] { ts::random::normal(ts::random::key(0x100000002ull), {5}, ts::f64, rep); });
  EXPECT_EQ(r.first, "()->([i]) {i=5}");
  EXPECT_EQ(r.second, "normal key=[1,2]");
  // A key array is an operand whose key dim must be whole.
  const ts::Array one = ts::random::key_data(k, rep);
  r = rule_of([&] { ts::random::normal(one, {13, 7}, ts::f32, s); });
  EXPECT_EQ(r.first, "([k])->([i,j]) {i=13,j=7,k=2} need_replication={k}");
  EXPECT_EQ(r.second, "normal ");
  const ts::Array one_row = ts::reshape(one, {1, 2});
  r = rule_of([&] { ts::random::uniform(one_row, {5}, ts::f64, -1.0, 1.0); });
  EXPECT_EQ(r.first, "([1,j])->([i]) {i=5,j=2} need_replication={j}");
  EXPECT_EQ(r.second, "uniform lo=-1 hi=1");
  r = rule_of([&] { ts::random::key_data(k, rep); });
  EXPECT_EQ(r.first, "()->([i]) {i=2}");
  EXPECT_EQ(r.second, "key_data keys=[[0,42]]");
  const ts::Array keys = ts::random::key_data(some_keys(5), ts::NamedSharding(mesh24(), ts::P("y")));
  r = rule_of([&] { ts::random::split(keys, 3); });
  EXPECT_EQ(r.first, "([i,k])->([i,j,k]) {i=5,j=3,k=2} need_replication={k}");
  EXPECT_EQ(r.second, "split num=3");
  r = rule_of([&] { ts::random::fold_in(keys, 7u); });
  EXPECT_EQ(r.first, "([i,j])->([i,j]) {i=5,j=2} need_replication={j}");
  EXPECT_EQ(r.second, "fold_in data=7");
  const ts::Array data = ts::device_put(std::vector<std::uint32_t>{1, 2, 3, 4, 5}, {5},
                                        ts::NamedSharding(mesh24(), ts::P("y")));
  r = rule_of([&] { ts::random::fold_in(keys, data); });
  EXPECT_EQ(r.first, "([i,j],[i])->([i,j]) {i=5,j=2} need_replication={j}");
  EXPECT_EQ(r.second, "fold_in ");
}

// Every random op under jit, with key arrays as traced arguments, equals
// eager bitwise (values, dtype, sharding) on every test mesh and random
// layouts, keys sharded along the key dim included.
TEST(RandomJit, MatchesEagerOnEveryLayout) {
  std::mt19937 rng(23);
  const auto keys = some_keys(5);
  const ts::Key k = ts::random::key(2024);
  for (const ts::Mesh& mesh : test_meshes()) {
    for (const ts::Shape& shape : {ts::Shape{13, 5}, ts::Shape{3, 2}, ts::Shape{1, 9}, ts::Shape{0, 3}}) {
      const ts::NamedSharding s(mesh, random_spec(rng, mesh, 2));
      const ts::NamedSharding ks(mesh, random_spec(rng, mesh, 2));
      const ts::NamedSharding ds(mesh, random_spec(rng, mesh, 1));
      const ts::NamedSharding os(mesh, random_spec(rng, mesh, 1));
      const ts::Array ka = ts::random::key_data(keys, ks);
      const ts::Array one = ts::random::key_data(keys[2], os);
      const ts::Array data = ts::device_put(std::vector<std::int32_t>{-4, -1, 2, 5, 8}, {5}, ds);
      const ts::Array scalar = ts::device_put(std::vector<std::int64_t>{-3}, {}, ts::NamedSharding(mesh, ts::P()));
      auto prog = [&](ts::Array kv, ts::Array ov, ts::Array dv, ts::Array sv) {
        const ts::Array folded = ts::random::fold_in(ov, 9u);
        return std::vector<ts::Array>{
            ts::random::split(kv, 3),
            ts::random::fold_in(kv, 42u),
            ts::random::fold_in(kv, dv),
            ts::random::fold_in(kv, sv),
            ts::random::uniform(ov, shape, ts::f32, s, -1.0, 2.0),
            ts::random::normal(folded, shape, ts::f64, s),
            ts::random::normal(ov, {4}),
            ts::random::uniform(k, shape, ts::f64, s),
            ts::random::normal(k, shape, ts::f32, s),
            ts::random::key_data(k, os),
            ts::random::key_data(keys, ks)};
      };
      const std::vector<ts::Array> eager = prog(ka, one, data, scalar);
      auto f = ts::jit(prog);
      const std::vector<ts::Array> got = f(ka, one, data, scalar);
      ASSERT_EQ(got.size(), eager.size());
      for (size_t i = 0; i < got.size(); ++i)
        expect_same(got[i], eager[i], "result " + std::to_string(i) + " keys " + ks.str() + " draw " + s.str());
      const std::string text = f.lower(ka, one, data, scalar).as_text();
      for (const char* want : {"= split[num=3](%", "= fold_in[data=42](%", "= fold_in(%", "= uniform[lo=-1 hi=2](%",
                               "= normal(%", "= uniform[key=[0,2024] lo=0 hi=1]()", "= normal[key=[0,2024]]()",
                               "= key_data[keys=[["})
        EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
    }
  }
}

TEST(RandomJit, KeysTraceApart) {
  const ts::NamedSharding s(mesh24(), ts::P("x"));
  const ts::Array x = ts::zeros({8}, ts::f32, s);
  auto draw = [&](ts::Key key) {
    return ts::jit([&, key](ts::Array v) { return v + ts::random::uniform(key, {8}, ts::f32, s); });
  };
  auto a = draw(ts::random::key(1));
  auto b = draw(ts::random::key(2));
  expect_same(a(x), ts::random::uniform(ts::random::key(1), {8}, ts::f32, s), "key 1");
  expect_same(b(x), ts::random::uniform(ts::random::key(2), {8}, ts::f32, s), "key 2");
  EXPECT_NE(a.lower(x).as_text(), b.lower(x).as_text());
}

TEST(RandomJit, KeyArraysMatchKeyFormsUnderJit) {
  // A traced key array draws what the host key draws.
  const ts::Key k = ts::random::key(77);
  const ts::NamedSharding s(mesh24(), ts::P("y", "x"));
  const ts::Array ka = ts::random::key_data(k, ts::NamedSharding(mesh24(), ts::P("x")));
  auto f = ts::jit([&](ts::Array key) { return ts::random::normal(ts::random::split(key, 2), {9, 5}, ts::f32, s); });
  expect_error<ts::ShapeError>([&] { f(ka); }, "[normal]", {"one key", "(2, 2)"});
  auto h = ts::jit([&](ts::Array key) { return ts::random::normal(ts::random::fold_in(key, 5u), {9, 5}, ts::f32, s); });
  EXPECT_EQ(bits_of(h(ka).to_vector<float>()),
            bits_of(ts::random::normal(ts::random::fold_in(k, 5u), {9, 5}, ts::f32, s).to_vector<float>()));
}

}  // namespace
