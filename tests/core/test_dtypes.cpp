// Dtypes: names and sizes, JAX's promotion table as data, every op family on
// u8, i8, u32 and u64 (and bool, i32, i64 where they differ) against plain
// host references over many meshes and layouts, astype's in-graph rules,
// and host extraction that raises instead of wrapping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::for_each_layout;
using ts::testing::numel;
using ts::testing::test_meshes;

namespace {

using i128 = __int128;  // wide enough for every reference computation below
using u128 = unsigned __int128;

const std::vector<ts::DType> kAll = {ts::bool_, ts::u8, ts::i8, ts::u32, ts::i32, ts::u64, ts::i64, ts::f32, ts::f64};

// v modulo 2^bits of T, as two's complement (the wrap XLA's integers do).
template <class T>
T wrap(i128 v) {
  return static_cast<T>(static_cast<u128>(v));
}

// Host data with the interesting values of T first (its ends, 0, +-1), then
// a spread of values; n elements.
template <class T>
std::vector<T> edge_data(std::int64_t n, int salt = 0) {
  std::vector<T> special = {std::numeric_limits<T>::max(), std::numeric_limits<T>::min(), T(0), T(1), T(2)};
  if constexpr (std::is_signed_v<T>) special.push_back(static_cast<T>(-1)), special.push_back(static_cast<T>(-7));
  else special.push_back(static_cast<T>(std::numeric_limits<T>::max() - 1));
  std::vector<T> v(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>((i + salt) % static_cast<std::int64_t>(special.size() + 5));
    v[i] = k < special.size() ? special[k] : wrap<T>(static_cast<i128>(i * 37 + salt * 11) - 50);
  }
  return v;
}

template <class T>
std::vector<T> host(const ts::Array& a) {
  return a.to_vector<T>();
}

// Calls fn(T{}) for each of the new integer dtypes.
template <class F>
void for_new_ints(F&& fn) {
  fn(std::uint8_t{});
  fn(std::int8_t{});
  fn(std::uint32_t{});
  fn(std::uint64_t{});
}

// A mesh over the first devices (make_mesh wants them all).
ts::Mesh small_mesh(const std::vector<int>& shape, const std::vector<std::string>& names) {
  int n = 1;
  for (int v : shape) n *= v;
  return ts::Mesh(ts::testing::first_devices(n), shape, names);
}

template <class T>
std::string tname() {
  return ts::dtype_name(ts::dtype_of<T>());
}

}  // namespace

// ------------------------------------------------------------ the dtypes

TEST(DTypes, NamesSizesAndCppTypes) {
  const std::vector<std::string> names = {"bool", "u8", "i8", "u32", "i32", "u64", "i64", "f32", "f64"};
  const std::vector<std::size_t> sizes = {1, 1, 1, 4, 4, 8, 8, 4, 8};
  for (size_t i = 0; i < kAll.size(); ++i) {
    EXPECT_EQ(ts::dtype_name(kAll[i]), names[i]);
    EXPECT_EQ(ts::itemsize(kAll[i]), sizes[i]);
  }
  static_assert(ts::dtype_of<bool>() == ts::bool_);
  static_assert(ts::dtype_of<std::uint8_t>() == ts::u8);
  static_assert(ts::dtype_of<std::int8_t>() == ts::i8);
  static_assert(ts::dtype_of<std::uint32_t>() == ts::u32);
  static_assert(ts::dtype_of<std::int32_t>() == ts::i32);
  static_assert(ts::dtype_of<std::uint64_t>() == ts::u64);
  static_assert(ts::dtype_of<std::int64_t>() == ts::i64);
  static_assert(ts::dtype_of<float>() == ts::f32);
  static_assert(ts::dtype_of<double>() == ts::f64);
}

// ------------------------------------------------------------- promotion

// jnp.promote_types with jax_enable_x64, copied from JAX's binary promotion
// table (docs.jax.dev "Type promotion semantics") for the dtypes we have, in
// JAX's notation: b1 u1 i1 u4 i4 u8 i8 f4 f8 (u1 = uint8, i8 = int64, ...).
// "f*" is a weak float, which x64 mode makes f64. The one deviation: JAX's
// i2 (int16, u1 with i1) is i32 here, the nearest wider type we have.
const char* const kJaxTable[9][9] = {
    /*        b1    u1    i1    u4    i4    u8    i8    f4    f8 */
    /* b1 */ {"b1", "u1", "i1", "u4", "i4", "u8", "i8", "f4", "f8"},
    /* u1 */ {"u1", "u1", "i2", "u4", "i4", "u8", "i8", "f4", "f8"},
    /* i1 */ {"i1", "i2", "i1", "i8", "i4", "f*", "i8", "f4", "f8"},
    /* u4 */ {"u4", "u4", "i8", "u4", "i8", "u8", "i8", "f4", "f8"},
    /* i4 */ {"i4", "i4", "i4", "i8", "i4", "f*", "i8", "f4", "f8"},
    /* u8 */ {"u8", "u8", "f*", "u8", "f*", "u8", "f*", "f4", "f8"},
    /* i8 */ {"i8", "i8", "i8", "i8", "i8", "f*", "i8", "f4", "f8"},
    /* f4 */ {"f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f8"},
    /* f8 */ {"f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8"},
};

ts::DType from_jax(const std::string& j) {
  static const std::map<std::string, ts::DType> m = {
      {"b1", ts::bool_}, {"u1", ts::u8},  {"i1", ts::i8},  {"u4", ts::u32}, {"i4", ts::i32}, {"u8", ts::u64},
      {"i8", ts::i64},   {"f4", ts::f32}, {"f8", ts::f64}, {"f*", ts::f64},
      {"i2", ts::i32},  // deviation: no int16
  };
  return m.at(j);
}

TEST(DTypePromotion, EveryPairMatchesJaxTable) {
  auto mesh = small_mesh({2}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x"));
  for (size_t i = 0; i < kAll.size(); ++i)
    for (size_t j = 0; j < kAll.size(); ++j) {
      SCOPED_TRACE(ts::dtype_name(kAll[i]) + " with " + ts::dtype_name(kAll[j]));
      const ts::DType want = from_jax(kJaxTable[i][j]);
      EXPECT_EQ(std::string(kJaxTable[i][j]), kJaxTable[j][i]) << "the table is symmetric";
      const auto a = ts::ones({3}, kAll[i], s), b = ts::ones({3}, kAll[j], s);
      EXPECT_EQ(ts::dtype_name((a + b).dtype()), ts::dtype_name(want));
      EXPECT_EQ(ts::dtype_name(ts::maximum(a, b).dtype()), ts::dtype_name(want));
      EXPECT_EQ(ts::dtype_name(ts::where(a > b, a, b).dtype()), ts::dtype_name(want));
      EXPECT_EQ((a == b).dtype(), ts::bool_);
    }
}

// C++ scalars are weakly typed: an int keeps an integer array's dtype (bool
// becomes i32), a float keeps a float dtype (others become f32), a bool
// changes nothing.
TEST(DTypePromotion, WeakScalars) {
  auto mesh = small_mesh({2}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x"));
  for (ts::DType t : kAll) {
    SCOPED_TRACE(ts::dtype_name(t));
    const auto a = ts::ones({3}, t, s);
    const bool is_float = t == ts::f32 || t == ts::f64;
    EXPECT_EQ((2 * a).dtype(), t == ts::bool_ ? ts::i32 : t);
    EXPECT_EQ((a + 1).dtype(), t == ts::bool_ ? ts::i32 : t);
    EXPECT_EQ((a * 2.0).dtype(), is_float ? t : ts::f32);
    EXPECT_EQ((a + true).dtype(), t);
  }
  const auto u = ts::full({4}, 200, ts::u8, s);
  EXPECT_EQ(host<std::uint8_t>(2 * u), std::vector<std::uint8_t>(4, 144));  // 400 mod 256
  EXPECT_EQ(host<std::uint64_t>(ts::zeros({2}, ts::u64, s) + 18446744073709551615ULL),
            std::vector<std::uint64_t>(2, 18446744073709551615ULL));
  // A weak int that the array's dtype cannot hold is an error (JAX raises
  // OverflowError), not a silent wrap.
  expect_error<ts::DTypeError>([&] { (void)(u + 300); }, "[add]", {"300", "u8"});
  expect_error<ts::DTypeError>([&] { (void)(u - (-1)); }, "[subtract]", {"-1", "u8"});
  expect_error<ts::DTypeError>([&] { (void)ts::where(u > 1, u, -1); }, "[where]", {"-1", "u8"});
  expect_error<ts::DTypeError>([&] { (void)ts::pad(u, {{1, 1}}, 256); }, "[pad]", {"256", "u8"});
  expect_error<ts::DTypeError>([&] { (void)(ts::ones({2}, ts::i8, s) * 128); }, "[multiply]", {"128", "i8"});
  expect_error<ts::DTypeError>([&] { (void)(ts::ones({2}, ts::i64, s) + 18446744073709551615ULL); }, "[add]",
                               {"18446744073709551615", "i64"});
}

// ---------------------------------------------------------- elementwise

namespace {

// Host reference of one binary op on T with JAX's integer semantics,
// computed in 128-bit arithmetic and wrapped at the end.
template <class T>
T ref_binary(const std::string& op, T a, T b) {
  const i128 x = a, y = b;
  if (op == "add") return wrap<T>(x + y);
  if (op == "subtract") return wrap<T>(x - y);
  if (op == "multiply") return wrap<T>(x * y);
  if (op == "maximum") return a > b ? a : b;
  if (op == "minimum") return a < b ? a : b;
  if (op == "floor_divide" || op == "remainder") {
    if (y == 0) return T(0);  // as NumPy
    i128 q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;  // round toward minus infinity
    return wrap<T>(op == "floor_divide" ? q : r);
  }
  ADD_FAILURE() << "no reference for " << op;
  return T(0);
}

ts::Array apply_binary(const std::string& op, const ts::Array& a, const ts::Array& b) {
  if (op == "add") return a + b;
  if (op == "subtract") return a - b;
  if (op == "multiply") return a * b;
  if (op == "maximum") return ts::maximum(a, b);
  if (op == "minimum") return ts::minimum(a, b);
  if (op == "floor_divide") return ts::floor_divide(a, b);
  return a % b;
}

const std::vector<std::string> kBinaryOps = {"add",     "subtract",     "multiply", "maximum",
                                             "minimum", "floor_divide", "remainder"};

}  // namespace

TEST(DTypeElementwise, BinaryOpsEveryLayout) {
  int cases = 0;
  for_new_ints([&](auto tag) {
    using T = decltype(tag);
    for (const ts::Shape& shape : {ts::Shape{13}, ts::Shape{3}, ts::Shape{1}}) {
      const auto ha = edge_data<T>(numel(shape)), hb = edge_data<T>(numel(shape), 3);
      for_each_layout(1, [&](const ts::NamedSharding& s) {
        SCOPED_TRACE(tname<T>() + " " + s.str() + " shape " + ts::shape_str(shape));
        const ts::Array a = ts::device_put(ha, shape, s), b = ts::device_put(hb, shape, s);
        ASSERT_EQ(a.dtype(), ts::dtype_of<T>());
        for (const auto& op : kBinaryOps) {
          SCOPED_TRACE(op);
          const auto y = apply_binary(op, a, b);
          ASSERT_EQ(y.dtype(), ts::dtype_of<T>());
          EXPECT_EQ(y.sharding(), s);
          std::vector<T> want(ha.size());
          for (size_t i = 0; i < ha.size(); ++i) want[i] = ref_binary<T>(op, ha[i], hb[i]);
          EXPECT_EQ(host<T>(y), want);
          ++cases;
        }
        std::vector<bool> lt(ha.size()), eq(ha.size());
        for (size_t i = 0; i < ha.size(); ++i) lt[i] = ha[i] < hb[i], eq[i] = ha[i] == hb[i];
        EXPECT_EQ(host<bool>(a < b), lt);
        EXPECT_EQ(host<bool>(a == b), eq);
      });
    }
  });
  EXPECT_GT(cases, 1000);
}

TEST(DTypeElementwise, BroadcastAndMixedDtypes2d) {
  // (5, 4) u8 with (4,) i8: promoted to i32, sharded on both dims.
  const auto hu = edge_data<std::uint8_t>(20);
  const auto hi = edge_data<std::int8_t>(4, 1);
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    const ts::Array u = ts::device_put(hu, {5, 4}, s);
    const ts::Array i = ts::device_put(hi, {4}, ts::NamedSharding(s.mesh(), ts::P()));
    const auto y = u - i;
    ASSERT_EQ(y.dtype(), ts::i32);
    std::vector<std::int32_t> want(20);
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 4; ++c) want[r * 4 + c] = hu[r * 4 + c] - hi[c];
    EXPECT_EQ(host<std::int32_t>(y), want);
  });
}

TEST(DTypeElementwise, UnaryOpsOnUnsignedAndSigned) {
  auto mesh = small_mesh({4}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x"));
  const ts::Array u = ts::device_put(std::vector<std::uint8_t>{0, 1, 7, 255, 128}, {5}, s);
  // JAX: negative wraps for unsigned, abs is the identity, sign is 0 or 1.
  EXPECT_EQ(host<std::uint8_t>(-u), (std::vector<std::uint8_t>{0, 255, 249, 1, 128}));
  EXPECT_EQ(host<std::uint8_t>(ts::abs(u)), (std::vector<std::uint8_t>{0, 1, 7, 255, 128}));
  EXPECT_EQ(host<std::uint8_t>(ts::sign(u)), (std::vector<std::uint8_t>{0, 1, 1, 1, 1}));
  EXPECT_EQ(ts::sqrt(u).dtype(), ts::f32);
  EXPECT_EQ(host<float>(ts::sqrt(u))[3], std::sqrt(255.0f));
  const ts::Array i = ts::device_put(std::vector<std::int8_t>{-128, -1, 0, 5, 127}, {5}, s);
  EXPECT_EQ(host<std::int8_t>(-i), (std::vector<std::int8_t>{-128, 1, 0, -5, -127}));
  EXPECT_EQ(host<std::int8_t>(ts::abs(i)), (std::vector<std::int8_t>{-128, 1, 0, 5, 127}));
  EXPECT_EQ(host<std::int8_t>(ts::sign(i)), (std::vector<std::int8_t>{-1, -1, 0, 1, 1}));
  const ts::Array w = ts::device_put(std::vector<std::uint64_t>{0, 1, 18446744073709551615ULL}, {3}, s);
  EXPECT_EQ(host<std::uint64_t>(-w), (std::vector<std::uint64_t>{0, 18446744073709551615ULL, 1}));
  EXPECT_EQ(host<bool>(ts::logical_not(w)), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(host<std::uint64_t>(ts::pow(w, 2)), (std::vector<std::uint64_t>{0, 1, 1}));
  EXPECT_EQ(host<std::uint32_t>(ts::pow(ts::full({2}, 3u, ts::u32, s), 21)),
            std::vector<std::uint32_t>(2, wrap<std::uint32_t>(static_cast<i128>(10460353203LL))));
  // True division of integers is float; floor division stays integer.
  EXPECT_EQ((u / u).dtype(), ts::f32);
  EXPECT_EQ(host<std::uint8_t>(ts::floor_divide(u, 2)), (std::vector<std::uint8_t>{0, 0, 3, 127, 64}));
  EXPECT_EQ(host<std::int8_t>(ts::floor_divide(i, 2)), (std::vector<std::int8_t>{-64, -1, 0, 2, 63}));
  EXPECT_EQ(host<std::int8_t>(i % 3), (std::vector<std::int8_t>{1, 2, 0, 2, 1}));
  EXPECT_EQ(host<std::int8_t>(i % -3), (std::vector<std::int8_t>{-2, -1, 0, -1, -2}));
  EXPECT_EQ(host<std::int8_t>(ts::floor_divide(i, -1)), (std::vector<std::int8_t>{-128, 1, 0, -5, -127}));
  // Floats: floor division and the remainder take the divisor's sign.
  const ts::Array f = ts::device_put(std::vector<double>{-7.5, 7.5, 1.0}, {3}, s);
  EXPECT_EQ(host<double>(ts::floor_divide(f, 2.0)), (std::vector<double>{-4, 3, 0}));
  EXPECT_EQ(host<double>(f % -2.0), (std::vector<double>{-1.5, -0.5, -1.0}));
  // bool: floor_divide and remainder count in i32.
  const ts::Array b = ts::device_put(std::vector<bool>{true, false}, {2}, s);
  EXPECT_EQ(ts::floor_divide(b, b).dtype(), ts::i32);
}

TEST(DTypeElementwise, BoolStaysZeroOrOne) {
  // bool arithmetic as jnp: + is or, * is and, - is xor; results read back
  // as 0/1 through every integer type.
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    const std::vector<bool> ha = {true, true, false, false, true}, hb = {true, false, true, false, true};
    const ts::Array a = ts::device_put(ha, {5}, s), b = ts::device_put(hb, {5}, s);
    EXPECT_EQ(host<std::uint8_t>(a + b), (std::vector<std::uint8_t>{1, 1, 1, 0, 1}));
    EXPECT_EQ(host<std::uint8_t>(a * b), (std::vector<std::uint8_t>{1, 0, 0, 0, 1}));
    EXPECT_EQ(host<std::uint8_t>(a - b), (std::vector<std::uint8_t>{0, 1, 1, 0, 0}));
    EXPECT_EQ(host<std::int32_t>(ts::sum(a + b)), std::vector<std::int32_t>{4});
    EXPECT_EQ(ts::astype(ts::astype(a, ts::u8) + ts::astype(b, ts::u8), ts::u8).dtype(), ts::u8);
    EXPECT_EQ(host<std::uint8_t>(ts::astype(a, ts::u8) + ts::astype(b, ts::u8)),
              (std::vector<std::uint8_t>{2, 1, 1, 0, 2}));
  });
  // Raw host bytes other than 0/1 become true.
  auto mesh = small_mesh({2}, {"x"});
  const unsigned char raw[3] = {0, 2, 255};
  const auto r = ts::device_put_raw(raw, ts::bool_, {3}, ts::NamedSharding(mesh, ts::P("x")));
  EXPECT_EQ(host<std::uint8_t>(r), (std::vector<std::uint8_t>{0, 1, 1}));
  EXPECT_EQ(host<std::int32_t>(ts::sum(r)), std::vector<std::int32_t>{2});
}

// --------------------------------------------------------------- astype

TEST(DTypeAstype, FloatToIntSaturatesNanIsZero) {
  // XLA's convert: truncate toward zero, saturate at the ends, NaN -> 0.
  auto mesh = small_mesh({3}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x"));
  const double nan = std::nan(""), inf = INFINITY;
  const ts::Array f = ts::device_put(std::vector<double>{nan, -1.5, 3e9, 300.7, -3e9, inf, -inf, 2.9, -2.9, 1e20}, {10},
                                s);
  EXPECT_EQ(host<std::uint8_t>(ts::astype(f, ts::u8)),
            (std::vector<std::uint8_t>{0, 0, 255, 255, 0, 255, 0, 2, 0, 255}));
  EXPECT_EQ(host<std::int8_t>(ts::astype(f, ts::i8)),
            (std::vector<std::int8_t>{0, -1, 127, 127, -128, 127, -128, 2, -2, 127}));
  EXPECT_EQ(host<std::int32_t>(ts::astype(f, ts::i32)),
            (std::vector<std::int32_t>{0, -1, INT32_MAX, 300, INT32_MIN, INT32_MAX, INT32_MIN, 2, -2, INT32_MAX}));
  EXPECT_EQ(host<std::uint32_t>(ts::astype(f, ts::u32)),
            (std::vector<std::uint32_t>{0, 0, 3000000000u, 300, 0, UINT32_MAX, 0, 2, 0, UINT32_MAX}));
  EXPECT_EQ(host<std::uint64_t>(ts::astype(f, ts::u64)),
            (std::vector<std::uint64_t>{0, 0, 3000000000u, 300, 0, UINT64_MAX, 0, 2, 0, UINT64_MAX}));
  EXPECT_EQ(host<std::int64_t>(ts::astype(ts::astype(f, ts::f32), ts::i64)),
            (std::vector<std::int64_t>{0, -1, 3000000000LL, 300, -3000000000LL, INT64_MAX, INT64_MIN, 2, -2,
                                       INT64_MAX}));
  EXPECT_EQ(host<bool>(ts::astype(f, ts::bool_)),
            (std::vector<bool>{true, true, true, true, true, true, true, true, true, true}));
}

TEST(DTypeAstype, IntToIntWrapsAndRoundTrips) {
  auto mesh = small_mesh({2, 2}, {"x", "y"});
  ts::NamedSharding s(mesh, ts::P({"x", "y"}));
  const ts::Array i = ts::device_put(std::vector<std::int64_t>{300, -1, 255, -129, 4294967296LL + 5}, {5}, s);
  EXPECT_EQ(host<std::uint8_t>(ts::astype(i, ts::u8)), (std::vector<std::uint8_t>{44, 255, 255, 127, 5}));
  EXPECT_EQ(host<std::int8_t>(ts::astype(i, ts::i8)), (std::vector<std::int8_t>{44, -1, -1, 127, 5}));
  EXPECT_EQ(host<std::uint32_t>(ts::astype(i, ts::u32)),
            (std::vector<std::uint32_t>{300, UINT32_MAX, 255, 4294967167u, 5}));
  EXPECT_EQ(host<std::uint64_t>(ts::astype(i, ts::u64))[1], UINT64_MAX);
  EXPECT_EQ(host<double>(ts::astype(ts::astype(i, ts::u64), ts::f64))[1], 18446744073709551616.0);
  // Every dtype to every dtype and back on small non-negative values.
  const ts::Array small = ts::device_put(std::vector<std::int32_t>{0, 1, 5, 100, 127}, {5}, s);
  for (ts::DType a : kAll)
    for (ts::DType b : kAll) {
      if (a == ts::bool_ || b == ts::bool_) continue;
      SCOPED_TRACE(ts::dtype_name(a) + " -> " + ts::dtype_name(b));
      const auto y = ts::astype(ts::astype(ts::astype(small, a), b), ts::i32);
      EXPECT_EQ(host<std::int32_t>(y), (std::vector<std::int32_t>{0, 1, 5, 100, 127}));
    }
}

// ---------------------------------------------------- host extraction

TEST(DTypeHost, ExtractionRaisesInsteadOfWrapping) {
  auto mesh = small_mesh({2}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x"));
  const ts::Array f = ts::device_put(std::vector<float>{1.0f, 3e9f}, {2}, s);
  expect_error<ts::DTypeError>([&] { (void)f.to_vector<std::int32_t>(); }, "[to_vector]",
                               {"value 3e+09 at index 1 does not fit in i32"});
  const ts::Array n = ts::device_put(std::vector<double>{std::nan("")}, {1}, s);
  expect_error<ts::DTypeError>([&] { (void)n.item<std::int64_t>(); }, "[item]", {"nan", "i64"});
  expect_error<ts::DTypeError>([&] { (void)n.to_vector<std::uint8_t>(); }, "[to_vector]", {"nan", "u8"});
  const ts::Array inf = ts::device_put(std::vector<double>{INFINITY}, {1}, s);
  expect_error<ts::DTypeError>([&] { (void)inf.item<std::uint64_t>(); }, "[item]", {"inf", "u64"});
  const ts::Array neg = ts::device_put(std::vector<std::int32_t>{5, -1, 7}, {3}, s);
  expect_error<ts::DTypeError>([&] { (void)neg.to_vector<std::uint32_t>(); }, "[to_vector]",
                               {"value -1 at index 1", "u32"});
  expect_error<ts::DTypeError>([&] { (void)neg.to_vector<std::uint64_t>(); }, "[to_vector]", {"-1", "u64"});
  const ts::Array big = ts::device_put(std::vector<std::int64_t>{0, 0, std::int64_t{1} << 40}, {3}, s);
  expect_error<ts::DTypeError>([&] { (void)big.to_vector<std::int32_t>(); }, "[to_vector]",
                               {"1099511627776 at index 2", "i32"});
  const ts::Array u = ts::device_put(std::vector<std::uint64_t>{UINT64_MAX}, {1}, s);
  expect_error<ts::DTypeError>([&] { (void)u.item<std::int64_t>(); }, "[item]", {"18446744073709551615", "i64"});
  expect_error<ts::DTypeError>([&] { (void)ts::full({2}, 200, ts::u8, s).to_vector<std::int8_t>(); },
                               "[to_vector]", {"200", "i8"});
  // f64 -> f32: a finite value that would become inf does not fit; inf and
  // NaN themselves do, and rounding is fine.
  const ts::Array d = ts::device_put(std::vector<double>{1e300}, {1}, s);
  expect_error<ts::DTypeError>([&] { (void)d.item<float>(); }, "[item]", {"1e+300", "f32"});
  EXPECT_TRUE(std::isinf(inf.item<float>()));
  EXPECT_TRUE(std::isnan(n.item<float>()));
  EXPECT_EQ(ts::device_put(std::vector<double>{0.1}, {1}, s).item<float>(), 0.1f);
}

TEST(DTypeHost, FittingValuesAndCallbacks) {
  auto mesh = small_mesh({2, 2}, {"x", "y"});
  ts::NamedSharding s(mesh, ts::P("y"));
  EXPECT_EQ(ts::device_put(std::vector<double>{-0.9, 255.9, 3.0}, {3}, s).to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{0, 255, 3}));
  EXPECT_EQ(ts::device_put(std::vector<double>{2147483647.0, -2147483648.0}, {2}, s).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{INT32_MAX, INT32_MIN}));
  EXPECT_EQ(ts::device_put(std::vector<double>{std::nan("")}, {1}, s).item<bool>(), true);
  EXPECT_EQ(ts::full({3}, 18446744073709551615ULL, ts::u64, s).to_vector<double>(),
            std::vector<double>(3, 18446744073709551616.0));
  // make_array_from_callback converts host values with the same check.
  auto ok = ts::make_array_from_callback({4}, ts::u8, s, [](const std::vector<ts::Slice>& idx) {
    std::vector<double> out;
    for (auto i = idx[0].start; i < idx[0].stop; ++i) out.push_back(static_cast<double>(i) * 80.0);
    return out;
  });
  EXPECT_EQ(host<std::uint8_t>(ok), (std::vector<std::uint8_t>{0, 80, 160, 240}));
  expect_error<ts::DTypeError>(
      [&] {
        (void)ts::make_array_from_callback({5}, ts::u8, s, [](const std::vector<ts::Slice>& idx) {
          return std::vector<int>(static_cast<size_t>(idx[0].size()), 300);
        });
      },
      "[make_array_from_callback]", {"value 300", "u8"});
}

// ---------------------------------------------------- round trips, typeof

TEST(DTypeRoundTrip, EveryMeshAndLayout) {
  int cases = 0;
  for_new_ints([&](auto tag) {
    using T = decltype(tag);
    for (const ts::Shape& shape : {ts::Shape{10, 3}, ts::Shape{3, 1}, ts::Shape{0, 4}, ts::Shape{2, 7}}) {
      const auto h = edge_data<T>(numel(shape), 2);
      for_each_layout(2, [&](const ts::NamedSharding& s) {
        SCOPED_TRACE(tname<T>() + " " + s.str() + " " + ts::shape_str(shape));
        const ts::Array a = ts::device_put(h, shape, s);
        EXPECT_EQ(a.dtype(), ts::dtype_of<T>());
        EXPECT_EQ(a.nbytes(), numel(shape) * static_cast<std::int64_t>(sizeof(T)));
        EXPECT_EQ(host<T>(a), h);
        for (const auto& sh : a.addressable_shards())
          EXPECT_EQ(host<T>(sh.data), ts::testing::sub_block(h, shape, sh.index));
        // Through another mesh (the host path) and another layout.
        const ts::Array b = ts::device_put(a, ts::NamedSharding(small_mesh({1}, {"z"}), ts::P()));
        EXPECT_EQ(host<T>(b), h);
        EXPECT_EQ(host<T>(ts::reshard(a, ts::P())), h);
        ++cases;
      });
    }
  });
  EXPECT_GT(cases, 300);
}

TEST(DTypeRoundTrip, TypeofStrings) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  EXPECT_EQ(ts::typeof(ts::zeros({8, 2}, ts::u32, ts::NamedSharding(mesh, ts::P("x")))), "u32[8@x,2]");
  EXPECT_EQ(ts::typeof(ts::zeros({3}, ts::u8, ts::NamedSharding(mesh, ts::P({"x", "y"})))), "u8[3@(x,y)]");
  EXPECT_EQ(ts::typeof(ts::zeros({5, 6}, ts::i8, ts::NamedSharding(mesh, ts::P("y", "x")))), "i8[5@y,6@x]");
  EXPECT_EQ(ts::typeof(ts::zeros({}, ts::u64, ts::NamedSharding(mesh, ts::P()))), "u64[]");
}

// --------------------------------------------------------------- creation

TEST(DTypeCreation, FillsArangeEye) {
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    EXPECT_EQ(host<std::uint8_t>(ts::ones({5}, ts::u8, s)), std::vector<std::uint8_t>(5, 1));
    EXPECT_EQ(host<std::int8_t>(ts::full({3}, -128, ts::i8, s)), std::vector<std::int8_t>(3, -128));
    EXPECT_EQ(host<std::uint32_t>(ts::full({2}, 4294967295u, ts::u32, s)), std::vector<std::uint32_t>(2, UINT32_MAX));
    EXPECT_EQ(host<std::uint64_t>(ts::full({4}, 18446744073709551615ULL, ts::u64, s)),
              std::vector<std::uint64_t>(4, UINT64_MAX));
    EXPECT_EQ(host<std::uint64_t>(ts::zeros({0}, ts::u64, s)), std::vector<std::uint64_t>{});
    EXPECT_EQ(host<std::uint8_t>(ts::arange(250, 256, 1, ts::u8, s)),
              (std::vector<std::uint8_t>{250, 251, 252, 253, 254, 255}));
    EXPECT_EQ(host<std::int8_t>(ts::arange(5, -10, -4, ts::i8, s)), (std::vector<std::int8_t>{5, 1, -3, -7}));
    EXPECT_EQ(host<std::uint32_t>(ts::linspace(0, 10, 3, ts::u32, s)), (std::vector<std::uint32_t>{0, 5, 10}));
  });
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    EXPECT_EQ(host<std::uint8_t>(ts::eye(3, 4, 1, ts::u8, s)),
              (std::vector<std::uint8_t>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
    EXPECT_EQ(host<bool>(ts::eye(2, 2, 0, ts::bool_, s)), (std::vector<bool>{true, false, false, true}));
  });
  auto mesh = small_mesh({2}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x"));
  expect_error<ts::DTypeError>([&] { (void)ts::full({2}, 256, ts::u8, s); }, "[full]", {"256", "u8"});
  expect_error<ts::DTypeError>([&] { (void)ts::full({2}, -1, ts::u64, s); }, "[full]", {"-1", "u64"});
  expect_error<ts::DTypeError>([&] { (void)ts::full({2}, 2.5e9, ts::i32, s); }, "[full]", {"i32"});
  expect_error<ts::DTypeError>([&] { (void)ts::arange(-2, 3, 1, ts::u32, s); }, "[arange]", {"u32"});
  expect_error<ts::DTypeError>([&] { (void)ts::arange(0, 200, 1, ts::i8, s); }, "[arange]", {"i8"});
  expect_error<ts::DTypeError>([&] { (void)ts::arange(0, 3, 1, ts::bool_, s); }, "[arange]", {"u8", "bool"});
  expect_error<ts::DTypeError>([&] { (void)ts::random::uniform(ts::random::key(0), {4}, ts::u8, s); },
                               "[uniform]", {"u8"});
  expect_error<ts::DTypeError>([&] { (void)ts::random::normal(ts::random::key(0), {4}, ts::u64, s); },
                               "[normal]", {"u64"});
}

// ------------------------------------------------------------- reductions

namespace {

// Result dtype of sum/prod/cumsum: JAX's integer promotion with i32/u32 as
// the default integers.
template <class T>
using SumT = std::conditional_t<std::is_same_v<T, std::uint8_t>, std::uint32_t,
                                std::conditional_t<std::is_same_v<T, std::int8_t>, std::int32_t, T>>;

}  // namespace

TEST(DTypeReduce, SumProdMaxMinMeanArgEveryLayout) {
  int cases = 0;
  for_new_ints([&](auto tag) {
    using T = decltype(tag);
    using S = SumT<T>;
    for (const ts::Shape& shape : {ts::Shape{7, 5}, ts::Shape{2, 3}, ts::Shape{1, 9}}) {
      const auto h = edge_data<T>(numel(shape), 1);
      const std::int64_t rows = shape[0], cols = shape[1];
      // Reference over axis 0 (columns) and over everything.
      std::vector<S> colsum(cols, 0), colprod(cols, 1);
      std::vector<T> colmax(cols, std::numeric_limits<T>::lowest()), colmin(cols, std::numeric_limits<T>::max());
      std::vector<std::int32_t> argmax(cols, 0);
      S total = 0;
      double mean_total = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          const T v = h[r * cols + c];
          colsum[c] = wrap<S>(static_cast<i128>(colsum[c]) + v);
          colprod[c] = wrap<S>(static_cast<i128>(colprod[c]) * v);
          if (v > colmax[c]) colmax[c] = v, argmax[c] = static_cast<std::int32_t>(r);
          colmin[c] = std::min(colmin[c], v);
          total = wrap<S>(static_cast<i128>(total) + v);
          mean_total += static_cast<double>(v);
        }
      for (std::int64_t c = 0; c < cols; ++c)  // first maximum wins: recompute ties
        for (std::int64_t r = 0; r < rows; ++r)
          if (h[r * cols + c] == colmax[c]) {
            argmax[c] = static_cast<std::int32_t>(r);
            break;
          }
      for_each_layout(2, [&](const ts::NamedSharding& s) {
        SCOPED_TRACE(tname<T>() + " " + s.str() + " " + ts::shape_str(shape));
        const ts::Array x = ts::device_put(h, shape, s);
        const auto sm = ts::sum(x, 0);
        ASSERT_EQ(sm.dtype(), ts::dtype_of<S>());
        EXPECT_EQ(host<S>(sm), colsum);
        EXPECT_EQ(host<S>(ts::prod(x, 0)), colprod);
        EXPECT_EQ(ts::max(x, 0).dtype(), ts::dtype_of<T>());
        EXPECT_EQ(host<T>(ts::max(x, 0)), colmax);
        EXPECT_EQ(host<T>(ts::min(x, 0)), colmin);
        EXPECT_EQ(host<S>(ts::sum(x)), std::vector<S>{total});
        const ts::Array mu = ts::mean(x);
        EXPECT_EQ(mu.dtype(), ts::f32);
        EXPECT_NEAR(mu.item<float>(), mean_total / static_cast<double>(numel(shape)),
                    1e-5 * std::abs(mean_total / static_cast<double>(numel(shape))) + 1e-5);
        EXPECT_EQ(host<std::int32_t>(ts::argmax(x, 0)), argmax);
        EXPECT_EQ(ts::any(x).item<bool>(), true);
        ++cases;
      });
    }
  });
  EXPECT_GT(cases, 300);
}

TEST(DTypeReduce, ResultDtypes) {
  auto mesh = small_mesh({2}, {"x"});
  ts::NamedSharding s(mesh, ts::P("x"));
  const std::map<ts::DType, ts::DType> sum_of = {{ts::bool_, ts::i32}, {ts::u8, ts::u32}, {ts::i8, ts::i32},
                                                 {ts::u32, ts::u32},   {ts::i32, ts::i32}, {ts::u64, ts::u64},
                                                 {ts::i64, ts::i64},   {ts::f32, ts::f32}, {ts::f64, ts::f64}};
  for (auto [in, out] : sum_of) {
    SCOPED_TRACE(ts::dtype_name(in));
    const auto x = ts::ones({5}, in, s);
    EXPECT_EQ(ts::sum(x).dtype(), out);
    EXPECT_EQ(ts::prod(x).dtype(), out);
    EXPECT_EQ(ts::cumsum(x, 0).dtype(), out);
    EXPECT_EQ(ts::max(x).dtype(), in);
    EXPECT_EQ(ts::min(x).dtype(), in);
    EXPECT_EQ(ts::mean(x).dtype(), in == ts::f64 ? ts::f64 : ts::f32);
    EXPECT_EQ(ts::argmin(x, 0).dtype(), ts::i32);
    EXPECT_EQ(ts::all(x).dtype(), ts::bool_);
    EXPECT_EQ(host<double>(ts::sum(x)), std::vector<double>{5});
  }
  // 200 * 5 overflows u8 but not the u32 sum.
  EXPECT_EQ(ts::sum(ts::full({5}, 200, ts::u8, s)).item<std::uint32_t>(), 1000u);
  EXPECT_EQ(ts::sum(ts::full({3}, 4294967295u, ts::u32, s)).item<std::uint32_t>(), 4294967293u);
}

// ----------------------------------------------------------------- linalg

TEST(DTypeLinalg, IntegerMatmulWrapsEveryLayout) {
  for_new_ints([&](auto tag) {
    using T = decltype(tag);
    const std::int64_t m = 5, k = 6, n = 3;
    const auto ha = edge_data<T>(m * k), hb = edge_data<T>(k * n, 4);
    std::vector<T> want(static_cast<size_t>(m * n));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        i128 acc = 0;
        for (std::int64_t p = 0; p < k; ++p) acc = static_cast<i128>(wrap<T>(acc + static_cast<i128>(ha[i * k + p]) *
                                                                                      static_cast<i128>(hb[p * n + j])));
        want[i * n + j] = wrap<T>(acc);
      }
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      SCOPED_TRACE(tname<T>() + " " + s.str());
      const ts::Array a = ts::device_put(ha, {m, k}, s);
      // b's contracting dim sharded like a's: local products, then a wrapping all-reduce.
      const ts::Array b = ts::device_put(hb, {k, n}, ts::NamedSharding(s.mesh(), ts::PartitionSpec({s.spec()[1]})));
      const auto c = ts::matmul(a, b);
      ASSERT_EQ(c.dtype(), ts::dtype_of<T>());
      EXPECT_EQ(host<T>(c), want);
    });
  });
}

// ------------------------------------------------- shape ops and stencils

TEST(DTypeShape, LayoutOpsMatchTheF64Path) {
  // Shape ops move elements without arithmetic: on values exact in f64 the
  // integer result must equal the f64 result converted.
  const ts::Shape shape{6, 5};
  std::vector<std::uint8_t> h(30);
  for (int i = 0; i < 30; ++i) h[i] = static_cast<std::uint8_t>(i * 9);
  for_each_layout(2, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    for (ts::DType t : {ts::u8, ts::i8, ts::u32, ts::u64}) {
      SCOPED_TRACE(ts::dtype_name(t));
      const auto x = ts::astype(ts::device_put(h, shape, s), t);
      const auto xf = ts::astype(x, ts::f64);
      auto same = [&](const ts::Array& y, const ts::Array& yf) {
        EXPECT_EQ(y.dtype(), t);
        EXPECT_EQ(host<double>(y), host<double>(yf));
      };
      same(ts::transpose(x), ts::transpose(xf));
      same(ts::reshape(x, {3, 10}), ts::reshape(xf, {3, 10}));
      same(ts::slice(x, {{1, 5, 2}, {std::nullopt, std::nullopt, -1}}),
           ts::slice(xf, {{1, 5, 2}, {std::nullopt, std::nullopt, -1}}));
      same(ts::pad(x, {{1, 2}, {0, 1}}, 7), ts::pad(xf, {{1, 2}, {0, 1}}, 7));
      same(ts::roll(x, 2, 0), ts::roll(xf, 2, 0));
      same(ts::flip(x, 1), ts::flip(xf, 1));
      same(ts::concatenate({x, x}, 1), ts::concatenate({xf, xf}, 1));
      same(ts::broadcast_to(ts::expand_dims(x, 0), {2, 6, 5}), ts::broadcast_to(ts::expand_dims(xf, 0), {2, 6, 5}));
    }
  });
}

TEST(DTypeStencil, DiffWrapsCumsumPromotes) {
  const std::vector<std::uint8_t> hu = {5, 3, 255, 0, 1, 200, 100, 7, 9};
  std::vector<std::uint8_t> du(hu.size() - 1);
  for (size_t i = 0; i + 1 < hu.size(); ++i) du[i] = static_cast<std::uint8_t>(hu[i + 1] - hu[i]);
  std::vector<std::uint32_t> cu(hu.size());
  std::vector<std::int32_t> cb(hu.size());
  std::vector<bool> hb(hu.size());
  for (size_t i = 0; i < hu.size(); ++i) {
    cu[i] = (i ? cu[i - 1] : 0) + hu[i];
    hb[i] = hu[i] % 2 == 1;
    cb[i] = (i ? cb[i - 1] : 0) + (hb[i] ? 1 : 0);
  }
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    const ts::Array u = ts::device_put(hu, {9}, s);
    const auto d = ts::diff(u);
    ASSERT_EQ(d.dtype(), ts::u8);
    EXPECT_EQ(host<std::uint8_t>(d), du);
    const auto c = ts::cumsum(u, 0);
    ASSERT_EQ(c.dtype(), ts::u32);
    EXPECT_EQ(host<std::uint32_t>(c), cu);
    const auto b = ts::cumsum(ts::device_put(hb, {9}, s), 0);
    ASSERT_EQ(b.dtype(), ts::i32);
    EXPECT_EQ(host<std::int32_t>(b), cb);
    const auto i8 = ts::cumsum(ts::astype(u, ts::i8), 0);
    ASSERT_EQ(i8.dtype(), ts::i32);
    std::vector<std::int32_t> ci(hu.size());
    for (size_t i = 0; i < hu.size(); ++i) ci[i] = (i ? ci[i - 1] : 0) + static_cast<std::int8_t>(hu[i]);
    EXPECT_EQ(host<std::int32_t>(i8), ci);
    // Convolution of integers is float, as jnp.convolve.
    EXPECT_EQ(ts::convolve(u, ts::device_put(std::vector<std::uint8_t>{1, 1}, {2}, s)).dtype(), ts::f32);
  });
}

// --------------------------------------------------------------- indexing

TEST(DTypeIndexing, TakeScatterSegmentSumWithEveryIndexDtype) {
  const std::vector<std::uint8_t> data = {10, 20, 30, 40, 250, 60, 70};
  for_each_layout(1, [&](const ts::NamedSharding& s) {
    SCOPED_TRACE(s.str());
    const ts::Array x = ts::device_put(data, {7}, s);
    for (ts::DType it : {ts::u8, ts::i8, ts::u32, ts::i32, ts::u64, ts::i64}) {
      SCOPED_TRACE(ts::dtype_name(it));
      const auto idx = ts::astype(ts::device_put(std::vector<std::int32_t>{4, 0, 6, 4}, {4}, s), it);
      EXPECT_EQ(host<std::uint8_t>(ts::take(x, idx)), (std::vector<std::uint8_t>{250, 10, 70, 250}));
      // u8 scatter-add wraps: 250 + 10 + 10 = 270 -> 14.
      const auto upd = ts::full({4}, 10, ts::u8, s);
      EXPECT_EQ(host<std::uint8_t>(ts::scatter_add(x, idx, upd)),
                (std::vector<std::uint8_t>{20, 20, 30, 40, 14, 60, 80}));
      const auto seg = ts::segment_sum(ts::astype(upd, ts::u32), idx, 7);
      EXPECT_EQ(seg.dtype(), ts::u32);
      EXPECT_EQ(host<std::uint32_t>(seg), (std::vector<std::uint32_t>{10, 0, 0, 0, 20, 0, 10}));
    }
    // A u64 index past the i64 range is out of range, not negative.
    const ts::Array huge = ts::device_put(std::vector<std::uint64_t>{UINT64_MAX}, {1}, ts::NamedSharding(s.mesh(), ts::P()));
    EXPECT_EQ(host<std::uint8_t>(ts::scatter_add(x, huge, ts::full({1}, 1, ts::u8, huge.sharding()))), data);
    expect_error<ts::ShapeError>([&] { (void)ts::take(x, huge); }, "[take]");
    expect_error<ts::DTypeError>([&] { (void)ts::take(x, ts::astype(huge, ts::f32)); }, "[take]",
                                 {"u8, i8, u32, i32, u64 or i64", "f32"});
  });
}

// ------------------------------------------------------------ shard_map

TEST(DTypeShardMap, PsumAndCollectivesOnSmallInts) {
  for (const ts::Mesh& mesh : test_meshes()) {
    const std::string ax = mesh.axis_names()[0];
    const int k = mesh.axis_size(ax);
    SCOPED_TRACE(mesh.str());
    // Each device adds its block of (1, 2, ...) * 100 in u8: wraps per JAX.
    const std::int64_t n = 2 * k;
    std::vector<std::uint8_t> h(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) h[i] = static_cast<std::uint8_t>(100 + i);
    const ts::Array x = ts::device_put(h, {n}, ts::NamedSharding(mesh, ts::P(ax)));
    auto f = ts::shard_map([&](ts::Array xl) { return ts::psum(xl, ax); }, mesh, {ts::P(ax)}, ts::P());
    const auto y = f(x);
    ASSERT_EQ(y.dtype(), ts::u8);
    std::vector<std::uint8_t> want(2, 0);
    for (std::int64_t i = 0; i < n; ++i) want[i % 2] = static_cast<std::uint8_t>(want[i % 2] + h[i]);
    EXPECT_EQ(host<std::uint8_t>(y), want);
    // u32 psum, pmax of i8, all_gather of u64.
    auto g = ts::shard_map(
        [&](ts::Array xl) {
          auto u = ts::astype(xl, ts::u32) * 50000000u;
          return ts::psum(u, ax);
        },
        mesh, {ts::P(ax)}, ts::P());
    std::vector<std::uint32_t> want32(2, 0);
    for (std::int64_t i = 0; i < n; ++i) want32[i % 2] += static_cast<std::uint32_t>(h[i]) * 50000000u;
    EXPECT_EQ(host<std::uint32_t>(g(x)), want32);
    auto pm = ts::shard_map([&](ts::Array xl) { return ts::pmax(ts::astype(xl, ts::i8), ax); }, mesh, {ts::P(ax)},
                            ts::P());
    std::vector<std::int8_t> want8(2, -128);
    for (std::int64_t i = 0; i < n; ++i) want8[i % 2] = std::max(want8[i % 2], static_cast<std::int8_t>(h[i]));
    EXPECT_EQ(host<std::int8_t>(pm(x)), want8);
    auto ag = ts::shard_map([&](ts::Array xl) { return ts::all_gather(ts::astype(xl, ts::u64), ax, 0, true); }, mesh,
                            {ts::P(ax)}, ts::P(), {.check_vma = false});
    const auto all = ag(x);
    EXPECT_EQ(all.dtype(), ts::u64);
    EXPECT_EQ(host<std::uint64_t>(all), std::vector<std::uint64_t>(h.begin(), h.end()));
  }
}
