// The arithmetic of one element, for every elementwise op: the one source
// both kinds of CPU kernel are built from. The eager kernels
// (backend/cpu/elementwise.cpp) call these functions in their loops, and the
// fused loops jit compiles at run time (backend/cpu/native.cpp) are
// generated as calls to them, with this header's text (after
// kernels/wrapping.hpp and kernels/convert.hpp) as their prelude. So a fused loop
// gives the eager kernels' bits by construction, not by a second copy of the
// math.
//
// What keeps the bits the same whatever compiles this and for whichever
// instruction set: every file that evaluates it is compiled with
// -ffp-contract=off (and never fast-math), each fused multiply-add the
// polynomials want is written as fma(), and the functions libm would give
// are computed here too (kernels/libm.hpp), so a GPU gives the same bits.
// Nothing calls the platform's libm for a transcendental function: lm::
// gives only operations every libm computes exactly (fma, rounding to an
// integer, fabs, fmod, sqrt, ...).
//
// The polynomial kernels are fast on an input range; the `_fast` forms take
// an `outside` flag they set (never clear) for an element beyond it, and the
// caller recomputes the elements (eager) or the tile (fused) that set it
// by the slower exact path (f64, kernels/libm.hpp). Everything here is a template or always inlined: GCC inlines
// nothing into an arch= clone that is not always_inline, and a call per
// element does not vectorise.
//
// Embedded as text: this header may include only standard headers and the
// kernel headers above (whose #include lines the embedding drops; the
// prelude holds their text first).
#pragma once

#include "kernels/convert.hpp"
#include "kernels/libm.hpp"
#include "kernels/portable.hpp"
#include "kernels/wrapping.hpp"

namespace tessera::detail::math {

template <class T>
constexpr bool kFloat = TESSERA_STD::is_floating_point_v<T>;
template <class T>
constexpr bool kBool = TESSERA_STD::is_same_v<T, bool>;
// Integer arithmetic goes through the unsigned type of the same width: it
// wraps like XLA's, where signed overflow would be undefined in C++.
template <class T>
constexpr bool kSignedInt = TESSERA_STD::is_integral_v<T> && TESSERA_STD::is_signed_v<T>;
template <class T>
constexpr bool kUnsignedInt = TESSERA_STD::is_integral_v<T> && !TESSERA_STD::is_signed_v<T> && !kBool<T>;

using lm::fma;

// ------------------------------------------------------------ polynomials

// sin/cos of f32 without calls, so the loops vectorise. Cody-Waite
// reduction by pi in three parts (the leading part short, so x - h * pi1 is
// exact): sin(x) = (-1)^q sin(x - q pi) with q = round(x / pi), and
// cos(x) = (-1)^(q+1) sin(x - (q + 1/2) pi) with q = round(x / pi - 1/2).
// One odd polynomial then serves both: r + r^3 P(r^2) on [-pi/2, pi/2], P
// of degree 4 fitted for least maximum error (2e-11 in exact arithmetic).
// Absolute error below 1.3e-7 against the exact value for
// |x| <= kTrigFastLimit; larger |x| (and inf) go to trig_slow.
constexpr float kTrigFastLimit = 8192.0f;

template <int kPhase>  // 0: sin, 1: cos
TESSERA_SCALAR_FN float sincos_f32(float x) {
  // Rounded to the nearest integer, ties to even (one instruction where the
  // CPU has SSE4.1 or AVX-512).
  const float j = kPhase ? lm::nearbyint(fma(x, 0.318309886183790671f, -0.5f))
                         : lm::nearbyint(x * 0.318309886183790671f);
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
  return __builtin_bit_cast(float, __builtin_bit_cast(TESSERA_STD::uint32_t, s) ^ (static_cast<TESSERA_STD::uint32_t>(q) << 31));
}

// sin/cos of f64 the same way: reduction by pi in three parts (each fma
// rounds once, so r carries an absolute error near 1 ulp of pi/2), then the
// odd Taylor polynomial of degree 23 on [-pi/2, pi/2] (truncation error
// below 6e-21). Error within a few ulp of 1 for |x| <= kTrigFastLimitF64;
// larger |x| and inf go to trig_slow.
constexpr double kTrigFastLimitF64 = 1e5;

template <int kPhase>  // 0: sin, 1: cos
TESSERA_SCALAR_FN double sincos_f64(double x) {
  const double j = kPhase ? lm::nearbyint(fma(x, 0.3183098861837907, -0.5)) : lm::nearbyint(x * 0.3183098861837907);
  const TESSERA_STD::int64_t q = static_cast<TESSERA_STD::int64_t>(j) + kPhase;
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
  return __builtin_bit_cast(double, __builtin_bit_cast(TESSERA_STD::uint64_t, s) ^ (static_cast<TESSERA_STD::uint64_t>(q) << 63));
}

// sin (kPhase 0) or cos (1) by the polynomial; `outside` set when |x| is
// beyond its range (or x is NaN), where trig_slow gives the value (NaN
// keeps the polynomial's).
template <class T, int kPhase>
TESSERA_SCALAR_FN T trig_fast(T x, TESSERA_STD::uint32_t& outside) {
  constexpr bool f32 = TESSERA_STD::is_same_v<T, float>;
  T s;
  if constexpr (f32) s = sincos_f32<kPhase>(x);
  else s = sincos_f64<kPhase>(x);
  // An integer or-reduction (a bool one does not vectorise).
  outside |= (f32 ? lm::fabs(x) <= kTrigFastLimit : lm::fabs(x) <= kTrigFastLimitF64) ? 0u : 1u;
  // sin(-0) is -0 (the reduction loses the sign of a zero).
  return kPhase == 0 && x == 0 ? x : s;
}

// exp of f32 without calls: n = round(x / ln 2), r = x - n ln 2 (two-part
// constant), e^r by the Cephes polynomial, scaled by 2^n through the exponent
// bits. Relative error below 2e-7 for |x| <= kExpFastLimit; other inputs
// (overflow, deep underflow, inf, NaN) go to exp_f32_slow.
constexpr float kExpFastLimit = 87.0f;

// The polynomial of exp_f32_one for xc already in [-kExpFastLimit,
// kExpFastLimit] (or NaN): tanh_f32_one calls it on [0, 18], where the
// clamps would change nothing and only cost instructions.
TESSERA_SCALAR_FN float exp_f32_unclamped(float xc) {
  const float magic = 12582912.0f;
  const float n = fma(xc, 1.44269504088896341f, magic) - magic;
  const float r = fma(-n, -2.12194440e-4f, fma(-n, 0.693359375f, xc));
  const float r2 = r * r;
  float p = fma(1.9875691500e-4f, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  p = fma(p, r2, r) + 1.0f;
  const TESSERA_STD::uint32_t scale = static_cast<TESSERA_STD::uint32_t>(static_cast<int>(n) + 127) << 23;
  return p * __builtin_bit_cast(float, scale);
}

TESSERA_SCALAR_FN float exp_f32_one(float x) {
  // Clamped by selects (std::fmin is a call that blocks vectorising); NaN
  // passes through and is recomputed.
  float xc = x > kExpFastLimit ? kExpFastLimit : x;
  xc = xc < -kExpFastLimit ? -kExpFastLimit : xc;
  return exp_f32_unclamped(xc);
}

TESSERA_SCALAR_FN bool exp_f32_outside(float x) { return !(lm::fabs(x) <= kExpFastLimit); }

TESSERA_SCALAR_FN float exp_f32_fast(float x, TESSERA_STD::uint32_t& outside) {
  outside |= exp_f32_outside(x) ? 1u : 0u;
  return exp_f32_one(x);
}

// tanh of f32 without calls: the Cephes odd polynomial x + x^3 P(x^2) for
// |x| < 0.625, else 1 - 2 / (e^(2|x|) + 1) with the sign of x, where |x| is
// clamped to 9 (tanh rounds to +-1 in f32 beyond it). Error a few ulp
// against the exact value. NaN gives a wrong number here; tanh_f32 returns
// the NaN itself.
TESSERA_SCALAR_FN float tanh_f32_one(float x) {
  const float a = lm::fabs(x);
  const float z = x * x;
  float p = fma(-5.70498872745e-3f, z, 2.06390887954e-2f);
  p = fma(p, z, -5.37397155531e-2f);
  p = fma(p, z, 1.33314422036e-1f);
  p = fma(p, z, -3.33332819422e-1f);
  p = fma(p * z, x, x);
  const float ac = a < 9.0f ? a : 9.0f;
  const float big = 1.0f - 2.0f / (exp_f32_unclamped(2.0f * ac) + 1.0f);
  // Both branches take x's sign (p alone loses it for x = -0).
  return lm::copysign(a < 0.625f ? p : big, x);
}

// Computed first and selected after: written as `isnan(x) ? x :
// tanh_f32_one(x)`, GCC predicates every compare inside on x being a number
// and vectorises the clamps as pairs of masked compares (48 instructions
// per vector against 36; the same bits).
TESSERA_SCALAR_FN float tanh_f32(float x) {
  const float t = tanh_f32_one(x);
  return lm::isnan(x) ? x : t;
}

// log of f32 without calls (the Cephes method): x = m 2^e with m in
// [sqrt(1/2), sqrt(2)) read from the bits, log(m) by a degree-9 polynomial
// in m - 1, plus e ln 2 in two parts. Error a couple of ulp for normal
// positive x; zero, negatives, subnormals, inf and NaN go to log_f32_slow.
TESSERA_SCALAR_FN float log_f32_one(float x) {
  const TESSERA_STD::uint32_t bits = __builtin_bit_cast(TESSERA_STD::uint32_t, x);
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

// True outside [FLT_MIN, FLT_MAX] (and for NaN).
TESSERA_SCALAR_FN bool log_f32_outside(float x) { return !(x >= TESSERA_STD::numeric_limits<float>::min() && x <= TESSERA_STD::numeric_limits<float>::max()); }

TESSERA_SCALAR_FN float log_f32_fast(float x, TESSERA_STD::uint32_t& outside) {
  outside |= log_f32_outside(x) ? 1u : 0u;
  return log_f32_one(x);
}

// 1/(1+e^-x); e^-x overflows harmlessly to inf (and the result to 0) for
// very negative x.
TESSERA_SCALAR_FN float sigmoid_of_exp(float e) { return 1.0f / (1.0f + e); }

TESSERA_SCALAR_FN float sigmoid_f32_fast(float x, TESSERA_STD::uint32_t& outside) {
  return sigmoid_of_exp(exp_f32_fast(-1.0f * x, outside));
}

// The f32 functions beyond the polynomials' ranges, and those with no
// polynomial: the f64 function rounded once to f32 (below 0.5 ulp + 2^-29).
TESSERA_SCALAR_FN float exp_f32_slow(float x) { return static_cast<float>(exp_f64(static_cast<double>(x))); }
TESSERA_SCALAR_FN float log_f32_slow(float x) { return static_cast<float>(log_f64(static_cast<double>(x))); }
// sin (kPhase 0) or cos (1) beyond the polynomials' ranges: kernels/libm.hpp's
// (exact reduction by pi/2, below 0.54 ulp for any double), f32 through f64.
template <class T, int kPhase>
TESSERA_SCALAR_FN T trig_slow(T x) {
  const double d = static_cast<double>(x);
  return static_cast<T>(kPhase == 1 ? cos_f64(d) : sin_f64(d));
}

// Per element, the values of the CPU's eager kernels
// (backend/cpu/elementwise.cpp): the polynomial, or the slow path beyond
// its range.
// For loops that cannot recompute a tile afterwards, as the CPU's do when
// `outside` is set: the GPU's kernels, eager and fused.

// exp(sign * x) of f32 (sign -1 for sigmoid).
TESSERA_SCALAR_FN float exp_f32_checked(float x, float sign) {
  return exp_f32_outside(x) ? exp_f32_slow(sign * x) : exp_f32_one(sign * x);
}
TESSERA_SCALAR_FN float log_f32_checked(float x) { return log_f32_outside(x) ? log_f32_slow(x) : log_f32_one(x); }
TESSERA_SCALAR_FN float sigmoid_f32_checked(float x) { return sigmoid_of_exp(exp_f32_checked(x, -1.0f)); }
// sin (kPhase 0) or cos (1) of float T; NaN keeps the polynomial's value.
template <class T, int kPhase>
TESSERA_SCALAR_FN T trig_checked(T x) {
  TESSERA_STD::uint32_t outside = 0;
  const T y = trig_fast<T, kPhase>(x, outside);
  constexpr T limit = sizeof(T) == 4 ? T(kTrigFastLimit) : T(kTrigFastLimitF64);
  if (!(lm::fabs(x) <= limit) && !lm::isnan(x)) return trig_slow<T, kPhase>(x);
  return y;
}

// ------------------------------------------------------------------ unary

template <class T>
TESSERA_SCALAR_FN T neg(T v) {
  // Unsigned negation wraps (jnp.negative(u8 1) is 255), as does the signed
  // minimum.
  if constexpr (kBool<T>) return v;
  else return wrapping_neg(v);
}
template <class T>
TESSERA_SCALAR_FN T abs(T v) {
  if constexpr (kBool<T> || kUnsignedInt<T>) return v;
  else return v < 0 ? wrapping_neg(v) : v;
}
template <class T>
TESSERA_SCALAR_FN T sign(T v) {
  if constexpr (kBool<T>) return v;
  else if constexpr (kUnsignedInt<T>) return static_cast<T>(v != 0);
  else if constexpr (kFloat<T>) return lm::isnan(v) ? v : static_cast<T>((v > 0) - (v < 0));
  else return static_cast<T>((v > 0) - (v < 0));
}
template <class T>
TESSERA_SCALAR_FN T floor(T v) {
  if constexpr (kFloat<T>) return lm::floor(v);
  else return v;
}
template <class T>
TESSERA_SCALAR_FN T ceil(T v) {
  if constexpr (kFloat<T>) return lm::ceil(v);
  else return v;
}
template <class T>
TESSERA_SCALAR_FN T round(T v) {
  if constexpr (kFloat<T>) return lm::nearbyint(v);  // default rounding mode: ties to even
  else return v;
}
template <class T>
TESSERA_SCALAR_FN bool is_nan(T v) {
  if constexpr (kFloat<T>) return lm::isnan(v);
  else return false;
}
template <class T>
TESSERA_SCALAR_FN bool is_finite(T v) {
  if constexpr (kFloat<T>) return lm::isfinite(v);
  else return true;
}
template <class T>
TESSERA_SCALAR_FN bool logical_not(T v) { return v == T(0); }

// The float ops by kernels/libm.hpp: f64 directly, f32 (where no
// polynomial serves) through f64, rounded once. The front end converts
// integer inputs of these ops to f32.
template <class T>
TESSERA_SCALAR_FN T exp(T v) { return static_cast<T>(exp_f64(static_cast<double>(v))); }
template <class T>
TESSERA_SCALAR_FN T log(T v) { return static_cast<T>(log_f64(static_cast<double>(v))); }
template <class T>
TESSERA_SCALAR_FN T log1p(T v) { return static_cast<T>(log1p_f64(static_cast<double>(v))); }
template <class T>
TESSERA_SCALAR_FN T expm1(T v) { return static_cast<T>(expm1_f64(static_cast<double>(v))); }
template <class T>
TESSERA_SCALAR_FN T sqrt(T v) { return lm::sqrt(v); }
template <class T>
TESSERA_SCALAR_FN T rsqrt(T v) { return T(1) / lm::sqrt(v); }
template <class T>
TESSERA_SCALAR_FN T tanh(T v) { return static_cast<T>(tanh_f64(static_cast<double>(v))); }
template <class T>
TESSERA_SCALAR_FN T sigmoid(T v) { return T(1) / (T(1) + exp(-v)); }

// ----------------------------------------------------------------- binary

// On bool (C++ bool, 0 or 1): add is or, sub is xor, mul is and, as jnp
// computes them; the others need no special case.
template <class T>
struct Ops {
  static TESSERA_SCALAR_FN T add(T a, T b) {
    if constexpr (kBool<T>) return a || b;
    else return wrapping_add(a, b);  // integers wrap like XLA instead of UB
  }
  static TESSERA_SCALAR_FN T sub(T a, T b) {
    if constexpr (kBool<T>) return a != b;
    else if constexpr (TESSERA_STD::is_integral_v<T>) return wrapping_sub(a, b);
    else return a - b;
  }
  static TESSERA_SCALAR_FN T mul(T a, T b) {
    if constexpr (kBool<T>) return a && b;
    else if constexpr (TESSERA_STD::is_integral_v<T>) return wrapping_mul(a, b);
    else return a * b;
  }
  // Integer division rounds toward minus infinity for signed types (jnp's
  // floor_divide; the front end makes true division float), plainly for
  // unsigned ones; division by zero gives 0 (as NumPy) instead of trapping.
  // The front ends never compute it in bool.
  static TESSERA_SCALAR_FN T div(T a, T b) {
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
  static TESSERA_SCALAR_FN T floordiv(T a, T b) {
    if constexpr (kFloat<T>) return lm::floor(a / b);
    else return div(a, b);
  }
  // The remainder with the sign of the divisor (jnp.remainder, Python's %);
  // x % 0 gives 0 for integers (as NumPy) and NaN for floats.
  static TESSERA_SCALAR_FN T mod(T a, T b) {
    if constexpr (kFloat<T>) {
      T r = lm::fmod(a, b);
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
  // Floats: kernels/libm.hpp's pow_f64, f32 through f64 rounded once (as
  // the other f32 functions without a polynomial: below 0.5 ulp + 2^-29,
  // the double rounding deterministic like all else here). Its fma()s want
  // FMA instructions: the CPU's loops for it are the math clones.
  static TESSERA_SCALAR_FN T pow(T a, T b) {
    if constexpr (kFloat<T>) return static_cast<T>(pow_f64(static_cast<double>(a), static_cast<double>(b)));
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
  static TESSERA_SCALAR_FN T max(T a, T b) {
    if constexpr (kFloat<T>)
      if (lm::isnan(a) || lm::isnan(b)) return TESSERA_STD::numeric_limits<T>::quiet_NaN();
    return a > b ? a : b;
  }
  static TESSERA_SCALAR_FN T min(T a, T b) {
    if constexpr (kFloat<T>)
      if (lm::isnan(a) || lm::isnan(b)) return TESSERA_STD::numeric_limits<T>::quiet_NaN();
    return a < b ? a : b;
  }
  static TESSERA_SCALAR_FN bool eq(T a, T b) { return a == b; }
  static TESSERA_SCALAR_FN bool ne(T a, T b) { return a != b; }
  static TESSERA_SCALAR_FN bool lt(T a, T b) { return a < b; }
  static TESSERA_SCALAR_FN bool le(T a, T b) { return a <= b; }
  static TESSERA_SCALAR_FN bool gt(T a, T b) { return a > b; }
  static TESSERA_SCALAR_FN bool ge(T a, T b) { return a >= b; }
  static TESSERA_SCALAR_FN bool logical_and(T a, T b) { return a != T(0) && b != T(0); }
  static TESSERA_SCALAR_FN bool logical_or(T a, T b) { return a != T(0) || b != T(0); }
  static TESSERA_SCALAR_FN bool logical_xor(T a, T b) { return (a != T(0)) != (b != T(0)); }
};

}  // namespace tessera::detail::math
