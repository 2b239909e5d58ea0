// Elementwise kernels. Each op is a small functor; loops are templated on it
// so the compiler vectorises the contiguous cases (same-shape operands, or an
// array with a scalar). Broadcast cases walk the output with NdIndex over
// all dims but the last and run a strided inner loop.
#include "backend/cpu/elementwise.hpp"
#include "core/dispatch.hpp"
#include "core/nd_index.hpp"
#include "core/wrapping.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

// Hot loops are compiled several times and the loader picks the clone the
// CPU runs. Every clone gives the same bits: this file is built with
// -ffp-contract=off, and the polynomials write each fused multiply-add they
// want as fma() (one instruction where the CPU has FMA, an exact libm call
// on the baseline).
//   TESSERA_MATH_CLONES: the polynomial kernels, for AVX-512, Haswell (AVX2
//     and FMA) and the baseline. GCC inlines nothing into an arch= clone
//     that is not always_inline, so these kernels call only the
//     always_inline helpers below and compiler builtins.
//   TESSERA_TARGET_CLONES: plain loops over an inlined lambda, for AVX-512,
//     AVX2 and the baseline.
// Sanitizer builds skip the clones: an instrumented ifunc resolver runs
// before the sanitizer runtime is up and crashes.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TESSERA_TARGET_CLONES
#define TESSERA_MATH_CLONES
#else
#define TESSERA_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define TESSERA_MATH_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#endif

namespace tessera::cpu {

namespace {

template <class T>
constexpr bool kFloat = std::is_floating_point_v<T>;
template <class T>
constexpr bool kBool = std::is_same_v<T, bool>;
// Integer arithmetic goes through the unsigned type of the same width: it
// wraps like XLA's, where signed overflow would be undefined in C++.
template <class T>
constexpr bool kSignedInt = std::is_integral_v<T> && std::is_signed_v<T>;
template <class T>
constexpr bool kUnsignedInt = std::is_integral_v<T> && !std::is_signed_v<T> && !kBool<T>;

// ------------------------------------------------------------------ unary

template <class T>
T round_half_even(T v) {
  if constexpr (kFloat<T>) return std::nearbyint(v);  // default rounding mode: ties to even
  else return v;
}

// sin/cos of f32 without calls, so the loops vectorise. Cody-Waite
// reduction by pi in three parts (the leading part short, so x - h * pi1 is
// exact): sin(x) = (-1)^q sin(x - q pi) with q = round(x / pi), and
// cos(x) = (-1)^(q+1) sin(x - (q + 1/2) pi) with q = round(x / pi - 1/2).
// One odd polynomial then serves both: r + r^3 P(r^2) on [-pi/2, pi/2], P
// of degree 4 fitted for least maximum error (2e-11 in exact arithmetic).
// Absolute error below 1.3e-7 against the exact value for
// |x| <= kTrigFastLimit; larger |x| (and inf) are recomputed with std::sin
// afterwards.
constexpr float kTrigFastLimit = 8192.0f;

// Always inlined: GCC does not inline plain functions into the arch=haswell
// clones, and a call per element does not vectorise.
[[gnu::always_inline]] inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

template <int kPhase>  // 0: sin, 1: cos
[[gnu::always_inline]] inline float sincos_f32(float x) {
  // Rounded to the nearest integer, ties to even (one instruction where the
  // CPU has SSE4.1 or AVX-512).
  const float j = kPhase ? __builtin_nearbyintf(fma(x, 0.318309886183790671f, -0.5f))
                         : __builtin_nearbyintf(x * 0.318309886183790671f);
  const int q = static_cast<int>(j) + kPhase;
  const float h = kPhase ? j + 0.5f : j;
  float r = fma(-h, 3.140625f, x);
  r = fma(-h, 9.67502593994140625e-4f, r);
  r = fma(-h, 1.509957990978376432e-7f, r);
  const float r2 = r * r;
  float p = fma(r2, -2.3846693508744465e-08f, 2.752261934801936e-06f);
  p = fma(p, r2, -0.00019840804452542216f);
  p = fma(p, r2, 0.008333330042660236f);
  p = fma(p, r2, -0.1666666716337204f);
  const float s = fma(p * r2, r, r);
  // The sign by a bit operation rather than a branch, so the loop vectorises.
  return __builtin_bit_cast(float, __builtin_bit_cast(std::uint32_t, s) ^ (static_cast<std::uint32_t>(q) << 31));
}

// True when some |x[i]| is not <= limit (or is NaN): a vectorised scan, so
// the scalar fix-up passes below cost nothing on ordinary inputs.
TESSERA_MATH_CLONES bool any_outside(const float* __restrict x, std::int64_t n, float limit) {
  // An integer or-reduction (a bool one does not vectorise).
  std::uint32_t out = 0;
  for (std::int64_t i = 0; i < n; ++i) out |= __builtin_fabsf(x[i]) <= limit ? 0u : 1u;
  return out != 0;
}


// sin/cos of f64 the same way: reduction by pi in three parts (each fma
// rounds once, so r carries an absolute error near 1 ulp of pi/2), then the
// odd Taylor polynomial of degree 23 on [-pi/2, pi/2] (truncation error
// below 6e-21). Error within a few ulp of 1 for |x| <= kTrigFastLimitF64;
// larger |x|, inf and NaN are recomputed with std::sin / std::cos.
constexpr double kTrigFastLimitF64 = 1e5;

[[gnu::always_inline]] inline double fma(double a, double b, double c) { return __builtin_fma(a, b, c); }

template <int kPhase>  // 0: sin, 1: cos
[[gnu::always_inline]] inline double sincos_f64(double x) {
  const double j = kPhase ? __builtin_nearbyint(fma(x, 0.3183098861837907, -0.5)) : __builtin_nearbyint(x * 0.3183098861837907);
  const std::int64_t q = static_cast<std::int64_t>(j) + kPhase;
  const double h = kPhase ? j + 0.5 : j;
  double r = fma(-h, 3.141592653589793, x);
  r = fma(-h, 1.2246467991473532e-16, r);
  r = fma(-h, -2.9947698097183397e-33, r);
  const double r2 = r * r;
  double p = fma(r2, -3.868170170630684e-23, 1.9572941063391263e-20);
  p = fma(p, r2, -8.22063524662433e-18);
  p = fma(p, r2, 2.8114572543455206e-15);
  p = fma(p, r2, -7.647163731819816e-13);
  p = fma(p, r2, 1.6059043836821613e-10);
  p = fma(p, r2, -2.505210838544172e-08);
  p = fma(p, r2, 2.7557319223985893e-06);
  p = fma(p, r2, -0.0001984126984126984);
  p = fma(p, r2, 0.008333333333333333);
  p = fma(p, r2, -0.16666666666666666);
  const double s = fma(p * r2, r, r);
  return __builtin_bit_cast(double, __builtin_bit_cast(std::uint64_t, s) ^ (static_cast<std::uint64_t>(q) << 63));
}

// sin (kPhase 0) or cos (1) of n elements. Returns true when some |x[i]|
// is not <= the fast limit (or is NaN): the check rides in the same
// vectorised loop (an integer or-reduction; a bool one does not
// vectorise), so ordinary inputs cost no second pass.
template <class T, int kPhase>
TESSERA_MATH_CLONES bool trig_fast(const T* __restrict x, T* __restrict y, std::int64_t n) {
  constexpr bool f32 = std::is_same_v<T, float>;
  std::uint32_t out = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    T s;
    if constexpr (f32) s = sincos_f32<kPhase>(x[i]);
    else s = sincos_f64<kPhase>(x[i]);
    // sin(-0) is -0 (the reduction loses the sign of a zero).
    y[i] = kPhase == 0 && x[i] == 0 ? x[i] : s;
    out |= (f32 ? __builtin_fabsf(x[i]) <= kTrigFastLimit : __builtin_fabs(x[i]) <= kTrigFastLimitF64) ? 0u : 1u;
  }
  return out != 0;
}

// The fast loop, then libm for the elements beyond its range.
template <class T, bool kCos>
void trig_checked(const T* x, T* y, std::int64_t n) {
  if (!trig_fast<T, kCos ? 1 : 0>(x, y, n)) return;
  const T limit = std::is_same_v<T, float> ? T(kTrigFastLimit) : T(kTrigFastLimitF64);
  for (std::int64_t i = 0; i < n; ++i)
    if (!(std::fabs(x[i]) <= limit) && !std::isnan(x[i])) y[i] = kCos ? std::cos(x[i]) : std::sin(x[i]);
}

// exp of f32 without calls: n = round(x / ln 2), r = x - n ln 2 (two-part
// constant), e^r by the Cephes polynomial, scaled by 2^n through the exponent
// bits. Relative error below 2e-7 for |x| <= kExpFastLimit; other inputs
// (overflow, deep underflow, inf, NaN) are recomputed with std::exp.
constexpr float kExpFastLimit = 87.0f;

[[gnu::always_inline]] inline float exp_f32_one(float x) {
  const float magic = 12582912.0f;
  // Clamped by selects (std::fmin is a call that blocks vectorising); NaN
  // passes through and is fixed up afterwards.
  float xc = x > kExpFastLimit ? kExpFastLimit : x;
  xc = xc < -kExpFastLimit ? -kExpFastLimit : xc;
  const float n = fma(xc, 1.44269504088896341f, magic) - magic;
  const float r = fma(-n, -2.12194440e-4f, fma(-n, 0.693359375f, xc));
  const float r2 = r * r;
  float p = fma(1.9875691500e-4f, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  p = fma(p, r2, r) + 1.0f;
  const std::uint32_t scale = static_cast<std::uint32_t>(static_cast<int>(n) + 127) << 23;
  return p * __builtin_bit_cast(float, scale);
}

TESSERA_MATH_CLONES void exp_f32(const float* __restrict x, float* __restrict y,
                                                              std::int64_t n, float sign) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = exp_f32_one(sign * x[i]);
}

void exp_f32_checked(const float* x, float* y, std::int64_t n, float sign) {
  exp_f32(x, y, n, sign);
  if (!any_outside(x, n, kExpFastLimit)) return;
  for (std::int64_t i = 0; i < n; ++i)
    if (!(std::fabs(x[i]) <= kExpFastLimit)) y[i] = std::exp(sign * x[i]);
}

// tanh of f32 without calls: the Cephes odd polynomial x + x^3 P(x^2) for
// |x| < 0.625, else 1 - 2 / (e^(2|x|) + 1) with the sign of x, where |x| is
// clamped to 9 (tanh rounds to +-1 in f32 beyond it). Error a few ulp
// against the exact value; NaN is recomputed with std::tanh afterwards.
[[gnu::always_inline]] inline float tanh_f32_one(float x) {
  const float a = __builtin_fabsf(x);
  const float z = x * x;
  float p = fma(-5.70498872745e-3f, z, 2.06390887954e-2f);
  p = fma(p, z, -5.37397155531e-2f);
  p = fma(p, z, 1.33314422036e-1f);
  p = fma(p, z, -3.33332819422e-1f);
  p = fma(p * z, x, x);
  const float ac = a < 9.0f ? a : 9.0f;
  const float big = 1.0f - 2.0f / (exp_f32_one(2.0f * ac) + 1.0f);
  // Both branches take x's sign (p alone loses it for x = -0).
  return __builtin_copysignf(a < 0.625f ? p : big, x);
}

TESSERA_MATH_CLONES void tanh_f32(const float* __restrict x, float* __restrict y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = tanh_f32_one(x[i]);
}

void tanh_f32_checked(const float* x, float* y, std::int64_t n) {
  tanh_f32(x, y, n);
  if (!any_outside(x, n, std::numeric_limits<float>::infinity())) return;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) y[i] = x[i];
}

// log of f32 without calls (the Cephes method): x = m 2^e with m in
// [sqrt(1/2), sqrt(2)) read from the bits, log(m) by a degree-9 polynomial
// in m - 1, plus e ln 2 in two parts. Error a couple of ulp for normal
// positive x; zero, negatives, subnormals, inf and NaN are recomputed with
// std::log afterwards.
[[gnu::always_inline]] inline float log_f32_one(float x) {
  const std::uint32_t bits = __builtin_bit_cast(std::uint32_t, x);
  float e = static_cast<float>(static_cast<int>((bits >> 23) & 0xffu) - 126);
  float m = __builtin_bit_cast(float, (bits & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1.0f : e;
  m = low ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = fma(7.0376836292e-2f, m, -1.1514610310e-1f);
  y = fma(y, m, 1.1676998740e-1f);
  y = fma(y, m, -1.2420140846e-1f);
  y = fma(y, m, 1.4249322787e-1f);
  y = fma(y, m, -1.6668057665e-1f);
  y = fma(y, m, 2.0000714765e-1f);
  y = fma(y, m, -2.4999993993e-1f);
  y = fma(y, m, 3.3333331174e-1f);
  y = y * m * z;
  y = fma(-2.12194440e-4f, e, y);
  y = fma(-0.5f, z, y);
  return fma(0.693359375f, e, m + y);
}

TESSERA_MATH_CLONES void log_f32(const float* __restrict x, float* __restrict y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = log_f32_one(x[i]);
}

// True when some x[i] is outside [FLT_MIN, FLT_MAX] (or NaN).
TESSERA_MATH_CLONES bool any_not_normal_positive(const float* __restrict x, std::int64_t n) {
  std::uint32_t out = 0;
  for (std::int64_t i = 0; i < n; ++i)
    out |= x[i] >= __FLT_MIN__ && x[i] <= __FLT_MAX__ ? 0u : 1u;
  return out != 0;
}

void log_f32_checked(const float* x, float* y, std::int64_t n) {
  log_f32(x, y, n);
  if (!any_not_normal_positive(x, n)) return;
  for (std::int64_t i = 0; i < n; ++i)
    if (!(x[i] >= std::numeric_limits<float>::min() && x[i] <= std::numeric_limits<float>::max())) y[i] = std::log(x[i]);
}

template <class T, class R, class F>
TESSERA_TARGET_CLONES void unary_loop(const T* x, R* y, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

template <class T>
void unary_typed(UnaryOp op, const T* x, void* out, std::int64_t n) {
  // An empty block may have no buffer at all, and memcpy/memset below must
  // not see a null pointer even for zero bytes.
  if (n == 0) return;
  T* y = static_cast<T*>(out);
  bool* yb = static_cast<bool*>(out);
  switch (op) {
    case UnaryOp::Neg:
      // Unsigned negation wraps (jnp.negative(u8 1) is 255), as does the
      // signed minimum.
      if constexpr (kBool<T>) unary_loop(x, y, n, [](T v) { return v; });
      else unary_loop(x, y, n, [](T v) { return detail::wrapping_neg(v); });
      return;
    case UnaryOp::Abs:
      if constexpr (kBool<T> || kUnsignedInt<T>) unary_loop(x, y, n, [](T v) { return v; });
      else unary_loop(x, y, n, [](T v) { return v < 0 ? detail::wrapping_neg(v) : v; });
      return;
    case UnaryOp::Sign:
      if constexpr (kBool<T>) unary_loop(x, y, n, [](T v) { return v; });
      else if constexpr (kUnsignedInt<T>) unary_loop(x, y, n, [](T v) { return static_cast<T>(v != 0); });
      else if constexpr (kFloat<T>)
        unary_loop(x, y, n, [](T v) { return std::isnan(v) ? v : static_cast<T>((v > 0) - (v < 0)); });
      else unary_loop(x, y, n, [](T v) { return static_cast<T>((v > 0) - (v < 0)); });
      return;
    case UnaryOp::Floor:
      if constexpr (kFloat<T>) unary_loop(x, y, n, [](T v) { return std::floor(v); });
      else std::memcpy(y, x, static_cast<size_t>(n) * sizeof(T));
      return;
    case UnaryOp::Ceil:
      if constexpr (kFloat<T>) unary_loop(x, y, n, [](T v) { return std::ceil(v); });
      else std::memcpy(y, x, static_cast<size_t>(n) * sizeof(T));
      return;
    case UnaryOp::Round:
      unary_loop(x, y, n, [](T v) { return round_half_even(v); });
      return;
    case UnaryOp::IsNan:
      if constexpr (kFloat<T>) unary_loop(x, yb, n, [](T v) { return static_cast<bool>(std::isnan(v)); });
      else std::fill_n(yb, n, false);
      return;
    case UnaryOp::IsFinite:
      if constexpr (kFloat<T>) unary_loop(x, yb, n, [](T v) { return static_cast<bool>(std::isfinite(v)); });
      else std::fill_n(yb, n, true);
      return;
    case UnaryOp::Not:
      unary_loop(x, yb, n, [](T v) { return v == T(0); });
      return;
    default:
      break;
  }
  if constexpr (kFloat<T>) {
    switch (op) {
      case UnaryOp::Exp:
        if constexpr (std::is_same_v<T, float>) exp_f32_checked(x, y, n, 1.0f);
        else unary_loop(x, y, n, [](T v) { return std::exp(v); });
        return;
      case UnaryOp::Log:
        if constexpr (std::is_same_v<T, float>) log_f32_checked(x, y, n);
        else unary_loop(x, y, n, [](T v) { return std::log(v); });
        return;
      case UnaryOp::Log1p: unary_loop(x, y, n, [](T v) { return std::log1p(v); }); return;
      case UnaryOp::Expm1: unary_loop(x, y, n, [](T v) { return std::expm1(v); }); return;
      case UnaryOp::Sqrt: unary_loop(x, y, n, [](T v) { return std::sqrt(v); }); return;
      case UnaryOp::Rsqrt: unary_loop(x, y, n, [](T v) { return T(1) / std::sqrt(v); }); return;
      case UnaryOp::Sin: trig_checked<T, false>(x, y, n); return;
      case UnaryOp::Cos: trig_checked<T, true>(x, y, n); return;
      case UnaryOp::Tanh:
        if constexpr (std::is_same_v<T, float>) tanh_f32_checked(x, y, n);
        else unary_loop(x, y, n, [](T v) { return std::tanh(v); });
        return;
      case UnaryOp::Sigmoid:
        // 1/(1+e^-v) overflows harmlessly to 0 for very negative v.
        if constexpr (std::is_same_v<T, float>) {
          exp_f32_checked(x, y, n, -1.0f);
          for (std::int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + y[i]);
        } else {
          unary_loop(x, y, n, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
        }
        return;
      default: break;
    }
  }
  // The front end converts integer inputs of float-valued ops to f32 first.
}

// ----------------------------------------------------------------- binary

// On bool (C++ bool, 0 or 1): add is or, sub is xor, mul is and, as jnp
// computes them; the others need no special case.
template <class T>
struct Ops {
  static T add(T a, T b) {
    if constexpr (kBool<T>) return a || b;
    else return detail::wrapping_add(a, b);  // integers wrap like XLA instead of UB
  }
  static T sub(T a, T b) {
    if constexpr (kBool<T>) return a != b;
    else if constexpr (std::is_integral_v<T>) return detail::wrapping_sub(a, b);
    else return a - b;
  }
  static T mul(T a, T b) {
    if constexpr (kBool<T>) return a && b;
    else if constexpr (std::is_integral_v<T>) return detail::wrapping_mul(a, b);
    else return a * b;
  }
  // Integer division rounds toward minus infinity for signed types (jnp's
  // floor_divide; the front end makes true division float), plainly for
  // unsigned ones; division by zero gives 0 (as NumPy) instead of trapping.
  // The front ends never compute it in bool.
  static T div(T a, T b) {
    if constexpr (kFloat<T>) return a / b;
    else if constexpr (kBool<T>) return a && b;
    else if (b == 0) return 0;
    else if constexpr (kSignedInt<T>) {
      if (b == -1) return sub(0, a);
      T q = static_cast<T>(a / b);
      return (a % b != 0 && ((a < 0) != (b < 0))) ? static_cast<T>(q - 1) : q;
    } else {
      return static_cast<T>(a / b);
    }
  }
  static T floordiv(T a, T b) {
    if constexpr (kFloat<T>) return std::floor(a / b);
    else return div(a, b);
  }
  // The remainder with the sign of the divisor (jnp.remainder, Python's %);
  // x % 0 gives 0 for integers (as NumPy) and NaN for floats.
  static T mod(T a, T b) {
    if constexpr (kFloat<T>) {
      T r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    } else if constexpr (kBool<T>) {
      return false;
    } else if (b == 0) {
      return 0;
    } else if constexpr (kSignedInt<T>) {
      if (b == -1) return 0;
      T r = static_cast<T>(a % b);
      return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
    } else {
      return static_cast<T>(a % b);
    }
  }
  static T pow(T a, T b) {
    if constexpr (kFloat<T>) return std::pow(a, b);
    else if constexpr (kBool<T>) return a || !b;
    else {
      if constexpr (kSignedInt<T>)
        if (b < 0) return a == 1 ? 1 : (a == -1 ? (b % 2 ? -1 : 1) : 0);
      T r = 1;
      T base = a;
      while (b > 0) {
        if (b & 1) r = mul(r, base);
        base = mul(base, base);
        b = static_cast<T>(b >> 1);
      }
      return r;
    }
  }
  static T max(T a, T b) {
    if constexpr (kFloat<T>)
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    return a > b ? a : b;
  }
  static T min(T a, T b) {
    if constexpr (kFloat<T>)
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    return a < b ? a : b;
  }
};

// The contiguous cases, the hot loops of elementwise ops and of fused tiles:
// cloned per instruction set like the math loops above.
template <class T, class R, class F>
TESSERA_TARGET_CLONES void loop_vv(const T* a, const T* b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}
template <class T, class R, class F>
TESSERA_TARGET_CLONES void loop_vs(const T* a, T b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b);
}
template <class T, class R, class F>
TESSERA_TARGET_CLONES void loop_sv(T a, const T* b, R* out, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a, b[i]);
}

template <class T>
T scalar_of(const Operand& o) {
  if (!o.is_scalar) return T{};
  return kFloat<T> ? static_cast<T>(o.f) : static_cast<T>(o.i);
}

// Operands that are contiguous runs of n elements or scalars (not both
// scalars): no shape walk.
template <class T, class R, class F>
void flat_loop(const Operand& a, const Operand& b, R* out, std::int64_t n, F f) {
  if (n == 0) return;
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  if (a.is_scalar) return loop_sv<T>(scalar_of<T>(a), pb, out, n, f);
  if (b.is_scalar) return loop_vs<T>(pa, scalar_of<T>(b), out, n, f);
  loop_vv<T>(pa, pb, out, n, f);
}

template <class T, class R, class F>
void binary_loop(const Operand& a, const Operand& b, R* out, std::span<const std::int64_t> shape, F f) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  if (n == 0) return;
  auto contiguous = [&](const Operand& o) {
    if (o.is_scalar) return false;
    std::int64_t acc = 1;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (shape[d] != 1 && o.strides[d] != acc) return false;
      acc *= shape[d];
    }
    return true;
  };
  const bool ca = contiguous(a), cb = contiguous(b);
  if ((ca || a.is_scalar) && (cb || b.is_scalar) && !(a.is_scalar && b.is_scalar))
    return flat_loop<T>(a, b, out, n, f);
  // General broadcast: NdIndex over the outer dims, strided inner loop.
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const T sa = scalar_of<T>(a), sb = scalar_of<T>(b);
  const int r = static_cast<int>(shape.size());
  const std::int64_t inner = shape[r - 1];
  const std::vector<std::int64_t> none(r, 0);  // a scalar operand carries no strides
  const auto& ast = a.is_scalar ? none : a.strides;
  const auto& bst = b.is_scalar ? none : b.strides;
  const std::int64_t as = ast[r - 1], bs = bst[r - 1];
  const std::vector<std::int64_t> dims(shape.begin(), shape.end());
  std::int64_t o = 0;
  for (detail::NdIndex it(detail::first_dims(dims, r - 1), ast, bst); !it.done(); it.next(), o += inner) {
    const std::int64_t ao = it.offset(0), bo = it.offset(1);
    for (std::int64_t j = 0; j < inner; ++j)
      out[o + j] = f(a.is_scalar ? sa : pa[ao + j * as], b.is_scalar ? sb : pb[bo + j * bs]);
  }
}

// `run(out, f)` runs f over the operands: binary_loop for shaped operands,
// flat_loop for tiles.
template <class T, class Run>
void binary_typed(BinaryOp op, void* out, Run run) {
  using O = Ops<T>;
  T* y = static_cast<T*>(out);
  bool* yb = static_cast<bool*>(out);
  switch (op) {
    case BinaryOp::Add: return run(y, [](T u, T v) { return O::add(u, v); });
    case BinaryOp::Sub: return run(y, [](T u, T v) { return O::sub(u, v); });
    case BinaryOp::Mul: return run(y, [](T u, T v) { return O::mul(u, v); });
    case BinaryOp::Div: return run(y, [](T u, T v) { return O::div(u, v); });
    case BinaryOp::FloorDiv: return run(y, [](T u, T v) { return O::floordiv(u, v); });
    case BinaryOp::Mod: return run(y, [](T u, T v) { return O::mod(u, v); });
    case BinaryOp::Pow: return run(y, [](T u, T v) { return O::pow(u, v); });
    case BinaryOp::Max: return run(y, [](T u, T v) { return O::max(u, v); });
    case BinaryOp::Min: return run(y, [](T u, T v) { return O::min(u, v); });
    case BinaryOp::Eq: return run(yb, [](T u, T v) { return u == v; });
    case BinaryOp::Ne: return run(yb, [](T u, T v) { return u != v; });
    case BinaryOp::Lt: return run(yb, [](T u, T v) { return u < v; });
    case BinaryOp::Le: return run(yb, [](T u, T v) { return u <= v; });
    case BinaryOp::Gt: return run(yb, [](T u, T v) { return u > v; });
    case BinaryOp::Ge: return run(yb, [](T u, T v) { return u >= v; });
    case BinaryOp::And:
      return run(yb, [](T u, T v) { return u != T(0) && v != T(0); });
    case BinaryOp::Or:
      return run(yb, [](T u, T v) { return u != T(0) || v != T(0); });
    case BinaryOp::Xor:
      return run(yb, [](T u, T v) { return (u != T(0)) != (v != T(0)); });
  }
}

}  // namespace

void unary(UnaryOp op, DType t, const void* x, void* y, std::int64_t n) {
  detail::dispatch(t, [&](auto tag) { unary_typed<decltype(tag)>(op, static_cast<const decltype(tag)*>(x), y, n); });
}

void binary(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out,
            const std::vector<std::int64_t>& shape) {
  if (shape.empty()) {  // rank 0: one element
    std::vector<std::int64_t> one{1};
    Operand a1 = a, b1 = b;
    if (!a1.is_scalar) a1.strides = {0};
    if (!b1.is_scalar) b1.strides = {0};
    return binary(op, t, a1, b1, out, one);
  }
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    binary_typed<T>(op, out, [&](auto* y, auto f) { binary_loop<T>(a, b, y, shape, f); });
  });
}

void binary_flat(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out, std::int64_t n) {
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    binary_typed<T>(op, out, [&](auto* y, auto f) { flat_loop<T>(a, b, y, n, f); });
  });
}

template <class T>
TESSERA_TARGET_CLONES void select_loop(const bool* c, const T* x, T xs, const T* y, T ys, T* o, std::int64_t n) {
  if (x && y) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
  } else if (x) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : ys;
  } else if (y) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? xs : y[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i] ? xs : ys;
  }
}

void select_flat(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out, std::int64_t n) {
  if (n == 0) return;
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    if (cond.is_scalar) {
      const Operand& pick = cond.i != 0 ? x : y;
      if (pick.is_scalar) std::fill_n(o, n, scalar_of<T>(pick));
      else std::memcpy(o, pick.data, static_cast<std::size_t>(n) * sizeof(T));
      return;
    }
    select_loop<T>(static_cast<const bool*>(cond.data), x.is_scalar ? nullptr : static_cast<const T*>(x.data),
                   scalar_of<T>(x), y.is_scalar ? nullptr : static_cast<const T*>(y.data), scalar_of<T>(y), o, n);
  });
}

void select(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out,
            const std::vector<std::int64_t>& shape) {
  const std::vector<std::int64_t> sh = shape.empty() ? std::vector<std::int64_t>{1} : shape;
  auto fix = [&](Operand o) {
    if (!o.is_scalar && shape.empty()) o.strides = {0};
    return o;
  };
  const Operand c = fix(cond), a = fix(x), b = fix(y);
  std::int64_t n = 1;
  for (auto s : sh) n *= s;
  if (n == 0) return;
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const int r = static_cast<int>(sh.size());
    auto val = [](const Operand& op, std::int64_t off) -> T {
      if (op.is_scalar) return kFloat<T> ? static_cast<T>(op.f) : static_cast<T>(op.i);
      return static_cast<const T*>(op.data)[off];
    };
    // NdIndex over the outer dims, a strided run along the last.
    const std::vector<std::int64_t> none(r, 0);  // a scalar operand carries no strides
    const auto& cst = c.is_scalar ? none : c.strides;
    const auto& xst = a.is_scalar ? none : a.strides;
    const auto& yst = b.is_scalar ? none : b.strides;
    const std::int64_t inner = sh[r - 1], cs = cst[r - 1], xs = xst[r - 1], ys = yst[r - 1];
    for (detail::NdIndex it(detail::first_dims(sh, r - 1), cst, xst, yst); !it.done(); it.next(), o += inner) {
      const std::int64_t co = it.offset(0), xo = it.offset(1), yo = it.offset(2);
      for (std::int64_t j = 0; j < inner; ++j) {
        const bool pick = c.is_scalar ? c.i != 0 : static_cast<const bool*>(c.data)[co + j * cs];
        o[j] = pick ? val(a, xo + j * xs) : val(b, yo + j * ys);
      }
    }
  });
}

std::vector<std::int64_t> broadcast_strides(const std::vector<std::int64_t>& local,
                                            const std::vector<std::int64_t>& out) {
  const int r = static_cast<int>(out.size()), lr = static_cast<int>(local.size());
  std::vector<std::int64_t> st(r, 0);
  std::int64_t acc = 1;
  for (int d = lr - 1; d >= 0; --d) {
    const int od = d + (r - lr);
    st[od] = (local[d] == 1 && out[od] != 1) ? 0 : acc;
    acc *= local[d];
  }
  return st;
}

}  // namespace tessera::cpu
