// A sweep of the shared kernel math (src/kernels/) over many inputs, written
// once as __host__ __device__ code so that every compiler of it evaluates the
// same thing: the host compiler (the CPU library's kernels), nvcc's host pass
// and the GPU. Probe p at input i gives the result's bits and whether the CPU
// took a polynomial's slow path for it.
//
// Each probe computes one element the way the CPU's eager kernel does
// (backend/cpu/elementwise.cpp): the polynomial, then the slow path for the
// elements beyond its range. Every element stays in the shared source
// (polynomials, kernels/libm.hpp's exp/expm1/log/log1p/tanh/pow/sin/cos,
// IEEE arithmetic, integers, conversions, threefry), so each must give the
// same bits on every compiler and on the GPU. The slow-path mark only shows
// that the sweep reaches those paths (huge sin/cos arguments, exp/log of f32
// beyond their polynomials).
//
// Inputs are functions of i (edge cases first, then hashed bit patterns in
// several ranges), so the GPU needs no input arrays.
#pragma once

#include "kernels/random.hpp"
#include "kernels/scalar_math.hpp"
#include "kernels/threefry.hpp"

namespace tessera::sweep {

using u8 = TESSERA_STD::uint8_t;
using u32 = TESSERA_STD::uint32_t;
using u64 = TESSERA_STD::uint64_t;
using i8 = TESSERA_STD::int8_t;
using i32 = TESSERA_STD::int32_t;
using i64 = TESSERA_STD::int64_t;

/// Inputs per probe.
inline constexpr i64 kInputs = i64(1) << 14;

/// What a probe's bits hold: how a comparison reads them.
enum class Kind : int { f32, f64, integer };

// X(name, kind): every probe, in order.
#define TESSERA_SWEEP_PROBES(X)                                                                                   \
  X(sin_f32, f32) X(cos_f32, f32) X(exp_f32, f32) X(log_f32, f32) X(tanh_f32, f32) X(sigmoid_f32, f32)          \
  X(log1p_f32, f32) X(expm1_f32, f32) X(sqrt_f32, f32) X(rsqrt_f32, f32) X(floor_f32, f32) X(ceil_f32, f32)     \
  X(round_f32, f32) X(sign_f32, f32) X(abs_f32, f32) X(neg_f32, f32) X(add_f32, f32) X(sub_f32, f32)            \
  X(mul_f32, f32) X(div_f32, f32) X(floordiv_f32, f32) X(mod_f32, f32) X(pow_f32, f32) X(max_f32, f32)          \
  X(min_f32, f32) X(lt_f32, integer) X(isfinite_f32, integer)                                                   \
  X(sin_f64, f64) X(cos_f64, f64) X(exp_f64, f64) X(log_f64, f64) X(tanh_f64, f64) X(sigmoid_f64, f64)          \
  X(log1p_f64, f64) X(expm1_f64, f64) X(sqrt_f64, f64) X(rsqrt_f64, f64) X(floor_f64, f64) X(round_f64, f64)    \
  X(add_f64, f64) X(mul_f64, f64) X(div_f64, f64) X(mod_f64, f64) X(pow_f64, f64) X(max_f64, f64)               \
  X(add_i32, integer) X(sub_i32, integer) X(mul_i32, integer) X(div_i32, integer) X(mod_i32, integer)           \
  X(pow_i32, integer) X(neg_i32, integer) X(abs_i32, integer) X(sign_i32, integer) X(add_i8, integer)           \
  X(mul_i8, integer) X(div_i8, integer) X(mod_i8, integer) X(sub_u8, integer) X(div_u8, integer)                \
  X(mul_i64, integer) X(div_i64, integer) X(mod_i64, integer) X(pow_i64, integer) X(div_u32, integer)           \
  X(mod_u32, integer) X(pow_u32, integer) X(mul_u64, integer) X(mod_u64, integer)                               \
  X(f32_to_i32, integer) X(f32_to_u8, integer) X(f32_to_i64, integer) X(f32_to_u32, integer)                    \
  X(f64_to_i32, integer) X(f64_to_u64, integer) X(f32_to_bool, integer) X(i64_to_f32, f32) X(u64_to_f64, f64)   \
  X(f64_to_f32, f32) X(i32_to_f64, f64)                                                                         \
  X(random_bits32, integer) X(random_bits64, integer) X(unit_float, f32) X(unit_double, f64)                    \
  X(fold_in, integer) X(split, integer) X(normal_f32, f32) X(normal_f64, f64)

enum class Probe : int {
#define TESSERA_SWEEP_ENUM(name, kind) name,
  TESSERA_SWEEP_PROBES(TESSERA_SWEEP_ENUM)
#undef TESSERA_SWEEP_ENUM
      count
};
inline constexpr int kProbes = static_cast<int>(Probe::count);

struct ProbeInfo {
  const char* name;
  Kind kind;
};
inline constexpr ProbeInfo kProbeInfo[] = {
#define TESSERA_SWEEP_INFO(name, kind) {#name, Kind::kind},
    TESSERA_SWEEP_PROBES(TESSERA_SWEEP_INFO)
#undef TESSERA_SWEEP_INFO
};

/// One element's result: its bits (a float's bit pattern, or an integer
/// zero-extended) and whether the CPU computes it by a polynomial's slow
/// path (kernels/libm.hpp beyond the polynomial's range).
struct Result {
  u64 bits = 0;
  u32 slow = 0;
};

// SplitMix64: well-mixed bits of i, integers only.
TESSERA_HD inline u64 mix(u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A float in [lo, hi) from 24 bits of h (exact: a multiple of 2^-24 scaled).
TESSERA_HD inline float f32_in(u64 h, float lo, float hi) {
  return lo + (hi - lo) * (static_cast<float>(h >> 40) * 5.9604644775390625e-8f);
}
TESSERA_HD inline double f64_in(u64 h, double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(h >> 11) * 1.1102230246251565e-16);
}

/// The f32 input i of stream s (binary probes read streams 0 and 1).
TESSERA_HD inline float f32_at(i64 i, int s = 0) {
  // Edge cases: zeros, ones, denormals, the extremes, inf, NaN, and the
  // polynomials' range limits (sin/cos 8192, exp 87, tanh 0.625 and 9).
  constexpr u32 kEdges[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x3f000000u, 0x00000001u,
                            0x80000001u, 0x007fffffu, 0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu,
                            0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7fa00000u, 0x40490fdbu,
                            0x3fc90fdbu, 0x46000000u, 0x45ffffffu, 0x46000001u, 0xc6000000u, 0x42ae0000u,
                            0xc2ae0000u, 0x42b17218u, 0xc2cff1b5u, 0x3f200000u, 0x41100000u, 0x4f000000u,
                            0xcf000000u, 0x5f000000u, 0x4b800000u, 0x3effffffu, 0x3fc00000u, 0x40200000u};
  constexpr i64 kNumEdges = sizeof(kEdges) / sizeof(kEdges[0]);
  if (s == 0 && i < kNumEdges) return __builtin_bit_cast(float, kEdges[i]);
  const u64 h = mix(static_cast<u64>(i) * 2 + static_cast<u64>(s));
  switch (h & 7) {
    case 0: return __builtin_bit_cast(float, static_cast<u32>(h >> 32));  // any pattern: NaNs, denormals, huge
    case 1: return f32_in(h, -10.0f, 10.0f);
    case 2: return f32_in(h, -8300.0f, 8300.0f);  // across the trig limit
    case 3: return f32_in(h, -100.0f, 100.0f);    // across the exp limit
    case 4: return __builtin_bit_cast(float, static_cast<u32>(h >> 40) | ((h & 8) ? 0x80000000u : 0u));  // tiny
    case 5: return static_cast<float>(static_cast<i32>(h >> 48) - 32768) * 0.5f;  // integers and halves (ties)
    case 6: return f32_in(h, 0.0f, 1.0e6f);
    default: return static_cast<float>(static_cast<i32>(h >> 56) - 128) * 1.5707963267948966f;  // near k pi/2
  }
}

/// The f64 input i of stream s.
TESSERA_HD inline double f64_at(i64 i, int s = 0) {
  // Edge cases as f32_at's (sin/cos 1e5, exp's overflow and underflow),
  // then huge arguments of sin/cos that come closest to multiples of pi/2
  // (0x1.6ac5b262ca1ffp+849 the closest of all doubles) and their
  // neighbours, and 1e22.
  constexpr u64 kEdges[] = {0x0000000000000000ull, 0x8000000000000000ull, 0x3ff0000000000000ull,
                            0xbff0000000000000ull, 0x0000000000000001ull, 0x800fffffffffffffull,
                            0x0010000000000000ull, 0x7fefffffffffffffull, 0xffefffffffffffffull,
                            0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
                            0xfff8000000000000ull, 0x400921fb54442d18ull, 0x40f86a0000000000ull,
                            0x40f869ffffffffffull, 0x40f86a0000000001ull, 0x40862e42fefa39efull,
                            0xc0874385446d71c3ull, 0x43e0000000000000ull, 0x4330000000000000ull,
                            0x7506ac5b262ca1ffull, 0xf506ac5b262ca1ffull, 0x7506ac5b262ca1feull,
                            0x7506ac5b262ca200ull, 0x3ff921fb54442d18ull, 0x3fe921fb54442d18ull,
                            0x3fe921fb54442d19ull, 0x4480f0cf064dd592ull, 0x5fe0000000000000ull};
  constexpr i64 kNumEdges = sizeof(kEdges) / sizeof(kEdges[0]);
  if (s == 0 && i < kNumEdges) return __builtin_bit_cast(double, kEdges[i]);
  const u64 h = mix(static_cast<u64>(i) * 2 + static_cast<u64>(s) + 0x5bd1e995u);
  switch (h & 7) {
    case 0: return __builtin_bit_cast(double, mix(h));
    case 1: return f64_in(h, -10.0, 10.0);
    case 2: return f64_in(h, -1.1e5, 1.1e5);  // across the trig limit
    case 3: return f64_in(h, -750.0, 750.0);
    case 4: return __builtin_bit_cast(double, (h >> 12) | ((h & 8) ? 0x8000000000000000ull : 0ull));  // tiny
    case 5: return static_cast<double>(static_cast<i32>(h >> 40) - 8388608) * 0.5;
    case 6:  // beyond the trig limit: up to 1e12, or any exponent from 2^16 up (inf and NaN included)
      if (h & 8) return f64_in(h, 0.0, 1.0e12);
      return __builtin_bit_cast(double, (mix(h) >> 1) | 0x40f0000000000000ull | ((h & 16) ? 0x8000000000000000ull : 0ull));
    default: return static_cast<double>(static_cast<i32>(h >> 56) - 128) * 1.5707963267948966;
  }
}

/// 64 raw integer bits, input i of stream s: the signed and unsigned
/// extremes first, then small values (where division and powers are
/// interesting) and any pattern.
TESSERA_HD inline u64 int_at(i64 i, int s = 0) {
  constexpr u64 kEdges[] = {0, 1, ~0ull, 2, ~1ull, 0x7fffffffull, 0x80000000ull, 0xffffffff80000000ull,
                            0x7fffffffffffffffull, 0x8000000000000000ull, 0x7f, 0x80, 0xff, 0xffffffffffffff80ull,
                            3, ~2ull};
  constexpr i64 kNumEdges = sizeof(kEdges) / sizeof(kEdges[0]);
  if (i < kNumEdges * kNumEdges) return kEdges[s == 0 ? i % kNumEdges : i / kNumEdges];  // every pair
  const u64 h = mix(static_cast<u64>(i) * 2 + static_cast<u64>(s) + 0x1234567u);
  if (h & 1) return static_cast<u64>(static_cast<i64>(h >> 58) - 32);  // [-32, 32)
  return mix(h);
}

template <class T>
TESSERA_HD inline u64 bits_of(T v) {
  if constexpr (TESSERA_STD::is_same_v<T, float>) return __builtin_bit_cast(u32, v);
  else if constexpr (TESSERA_STD::is_same_v<T, double>) return __builtin_bit_cast(u64, v);
  else if constexpr (TESSERA_STD::is_same_v<T, bool>) return v ? 1u : 0u;
  else return static_cast<u64>(static_cast<TESSERA_STD::make_unsigned_t<T>>(v));
}

template <class T>
TESSERA_HD inline Result exact(T v) {
  return {bits_of(v), 0u};
}
template <class T>
TESSERA_HD inline Result slow(T v) {
  return {bits_of(v), 1u};
}

// sin (kPhase 0) or cos (1) as the eager kernel computes it: the polynomial,
// and the slow path beyond its range (NaN keeps the polynomial's NaN).
template <class T, int kPhase>
TESSERA_HD inline Result trig(T x) {
  namespace m = detail::math;
  u32 outside = 0;
  const T y = m::trig_fast<T, kPhase>(x, outside);
  const T limit = TESSERA_STD::is_same_v<T, float> ? T(m::kTrigFastLimit) : T(m::kTrigFastLimitF64);
  if (!(detail::lm::fabs(x) <= limit) && !detail::lm::isnan(x)) return slow(m::trig_slow<T, kPhase>(x));
  return exact(y);
}

// exp of f32 times `sign` as exp_f32_checked computes it.
TESSERA_HD inline Result exp_f32_checked(float x, float sign) {
  namespace m = detail::math;
  if (m::exp_f32_outside(x)) return slow(m::exp_f32_slow(sign * x));
  return exact(m::exp_f32_one(sign * x));
}

template <class T>
TESSERA_HD inline Result binary(int op, T a, T b) {
  using O = detail::math::Ops<T>;
  switch (op) {
    case 0: return exact(O::add(a, b));
    case 1: return exact(O::sub(a, b));
    case 2: return exact(O::mul(a, b));
    case 3: return exact(O::div(a, b));
    case 4: return exact(O::mod(a, b));
    case 5: return exact(O::floordiv(a, b));
    case 6: return exact(O::max(a, b));
    case 7: return exact(O::min(a, b));
    default: return exact(O::pow(a, b));
  }
}

// Integer operands from raw bits; powers get small exponents.
template <class T>
TESSERA_HD inline Result int_binary(int op, i64 i) {
  const T a = static_cast<T>(int_at(i, 0));
  T b = static_cast<T>(int_at(i, 1));
  if (op == 8) b = static_cast<T>(int_at(i, 1) % 70);
  return binary<T>(op, a, b);
}

/// Probe p at input i.
TESSERA_HD inline Result run_probe(int p, i64 i) {
  namespace m = detail::math;
  namespace lm = detail::lm;
  const float x = f32_at(i), y = f32_at(i, 1);
  const double xd = f64_at(i), yd = f64_at(i, 1);
  switch (static_cast<Probe>(p)) {
    case Probe::sin_f32: return trig<float, 0>(x);
    case Probe::cos_f32: return trig<float, 1>(x);
    case Probe::exp_f32: return exp_f32_checked(x, 1.0f);
    case Probe::log_f32:
      if (m::log_f32_outside(x)) return slow(m::log_f32_slow(x));
      return exact(m::log_f32_one(x));
    case Probe::tanh_f32: return exact(m::tanh_f32(x));
    case Probe::sigmoid_f32: {
      Result e = exp_f32_checked(x, -1.0f);
      return {bits_of(m::sigmoid_of_exp(__builtin_bit_cast(float, static_cast<u32>(e.bits)))), e.slow};
    }
    case Probe::log1p_f32: return exact(m::log1p(x));
    case Probe::expm1_f32: return exact(m::expm1(x));
    case Probe::sqrt_f32: return exact(m::sqrt(x));
    case Probe::rsqrt_f32: return exact(m::rsqrt(x));
    case Probe::floor_f32: return exact(m::floor(x));
    case Probe::ceil_f32: return exact(m::ceil(x));
    case Probe::round_f32: return exact(m::round(x));
    case Probe::sign_f32: return exact(m::sign(x));
    case Probe::abs_f32: return exact(m::abs(x));
    case Probe::neg_f32: return exact(m::neg(x));
    case Probe::add_f32: return binary<float>(0, x, y);
    case Probe::sub_f32: return binary<float>(1, x, y);
    case Probe::mul_f32: return binary<float>(2, x, y);
    case Probe::div_f32: return binary<float>(3, x, y);
    case Probe::mod_f32: return binary<float>(4, x, y);
    case Probe::floordiv_f32: return binary<float>(5, x, y);
    case Probe::max_f32: return binary<float>(6, x, y);
    case Probe::min_f32: return binary<float>(7, x, y);
    case Probe::pow_f32: return binary<float>(8, x, y);
    case Probe::lt_f32: return exact(m::Ops<float>::lt(x, y));
    case Probe::isfinite_f32: return exact(m::is_finite(x));
    case Probe::sin_f64: return trig<double, 0>(xd);
    case Probe::cos_f64: return trig<double, 1>(xd);
    case Probe::exp_f64: return exact(m::exp(xd));
    case Probe::log_f64: return exact(m::log(xd));
    case Probe::tanh_f64: return exact(m::tanh(xd));
    case Probe::sigmoid_f64: return exact(m::sigmoid(xd));
    case Probe::log1p_f64: return exact(m::log1p(xd));
    case Probe::expm1_f64: return exact(m::expm1(xd));
    case Probe::sqrt_f64: return exact(m::sqrt(xd));
    case Probe::rsqrt_f64: return exact(m::rsqrt(xd));
    case Probe::floor_f64: return exact(m::floor(xd));
    case Probe::round_f64: return exact(m::round(xd));
    case Probe::add_f64: return binary<double>(0, xd, yd);
    case Probe::mul_f64: return binary<double>(2, xd, yd);
    case Probe::div_f64: return binary<double>(3, xd, yd);
    case Probe::mod_f64: return binary<double>(4, xd, yd);
    case Probe::max_f64: return binary<double>(6, xd, yd);
    case Probe::pow_f64: return binary<double>(8, xd, yd);
    case Probe::add_i32: return int_binary<i32>(0, i);
    case Probe::sub_i32: return int_binary<i32>(1, i);
    case Probe::mul_i32: return int_binary<i32>(2, i);
    case Probe::div_i32: return int_binary<i32>(3, i);
    case Probe::mod_i32: return int_binary<i32>(4, i);
    case Probe::pow_i32: return int_binary<i32>(8, i);
    case Probe::neg_i32: return exact(m::neg(static_cast<i32>(int_at(i))));
    case Probe::abs_i32: return exact(m::abs(static_cast<i32>(int_at(i))));
    case Probe::sign_i32: return exact(m::sign(static_cast<i32>(int_at(i))));
    case Probe::add_i8: return int_binary<i8>(0, i);
    case Probe::mul_i8: return int_binary<i8>(2, i);
    case Probe::div_i8: return int_binary<i8>(3, i);
    case Probe::mod_i8: return int_binary<i8>(4, i);
    case Probe::sub_u8: return int_binary<u8>(1, i);
    case Probe::div_u8: return int_binary<u8>(3, i);
    case Probe::mul_i64: return int_binary<i64>(2, i);
    case Probe::div_i64: return int_binary<i64>(3, i);
    case Probe::mod_i64: return int_binary<i64>(4, i);
    case Probe::pow_i64: return int_binary<i64>(8, i);
    case Probe::div_u32: return int_binary<u32>(3, i);
    case Probe::mod_u32: return int_binary<u32>(4, i);
    case Probe::pow_u32: return int_binary<u32>(8, i);
    case Probe::mul_u64: return int_binary<u64>(2, i);
    case Probe::mod_u64: return int_binary<u64>(4, i);
    case Probe::f32_to_i32: return exact(detail::convert_one<i32>(x));
    case Probe::f32_to_u8: return exact(detail::convert_one<u8>(x));
    case Probe::f32_to_i64: return exact(detail::convert_one<i64>(x));
    case Probe::f32_to_u32: return exact(detail::convert_one<u32>(x));
    case Probe::f64_to_i32: return exact(detail::convert_one<i32>(xd));
    case Probe::f64_to_u64: return exact(detail::convert_one<u64>(xd));
    case Probe::f32_to_bool: return exact(detail::convert_one<bool>(x));
    case Probe::i64_to_f32: return exact(detail::convert_one<float>(static_cast<i64>(int_at(i))));
    case Probe::u64_to_f64: return exact(detail::convert_one<double>(int_at(i)));
    case Probe::f64_to_f32: return exact(detail::convert_one<float>(xd));
    case Probe::i32_to_f64: return exact(detail::convert_one<double>(static_cast<i32>(int_at(i))));
    case Probe::random_bits32: {
      const u64 k = int_at(i);
      return exact(detail::random_bits32(static_cast<u32>(k), static_cast<u32>(k >> 32), int_at(i, 1)));
    }
    case Probe::random_bits64: {
      const u64 k = int_at(i);
      return exact(detail::random_bits64(static_cast<u32>(k), static_cast<u32>(k >> 32), int_at(i, 1)));
    }
    case Probe::unit_float: return exact(detail::unit_float(static_cast<u32>(mix(static_cast<u64>(i)))));
    case Probe::unit_double: return exact(detail::unit_double(mix(static_cast<u64>(i) + 1)));
    case Probe::fold_in: {
      const u32 key[2] = {static_cast<u32>(int_at(i)), static_cast<u32>(int_at(i) >> 32)};
      const u32 data = static_cast<u32>(int_at(i, 1));
      u32 out[2];
      detail::fold_in_keys(key, 1, &data, 0, out);
      return exact((static_cast<u64>(out[0]) << 32) | out[1]);
    }
    case Probe::split: {
      const u32 key[2] = {static_cast<u32>(int_at(i)), static_cast<u32>(int_at(i) >> 32)};
      u32 out[6];
      detail::split_keys(key, 1, 3, out);
      return exact((static_cast<u64>(out[2 * (i % 3)]) << 32) | out[2 * (i % 3) + 1]);
    }
    // normal's erfinv takes kernels/libm.hpp's log: bit-exact too.
    case Probe::normal_f32: {
      const u64 k = int_at(i);
      return exact(detail::normal_at<float>(static_cast<u32>(k), static_cast<u32>(k >> 32), int_at(i, 1)));
    }
    case Probe::normal_f64: {
      const u64 k = int_at(i);
      return exact(detail::normal_at<double>(static_cast<u32>(k), static_cast<u32>(k >> 32), int_at(i, 1)));
    }
    default: return {};
  }
}

}  // namespace tessera::sweep
