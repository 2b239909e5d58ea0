// exp, expm1, log, log1p, tanh (and pow) of f64 without libm, for every backend:
// the CPU's kernels (and the fused loops jit compiles, whose prelude embeds
// this text after kernels/portable.hpp), CUDA's kernels and NVRTC's. Only
// IEEE-exact operations are used (+ - * / rounded once each, fma() where a
// fused step is meant, bit manipulation, selects), and every file that
// compiles this does so with -ffp-contract=off (nvcc: --fmad=false), so a
// GPU computes the host's bits. Branch-free (special inputs are selected
// after the fact) and always inlined, so the CPU's loops vectorise.
//
// The f32 functions with no polynomial of their own (and the f32
// polynomials' elements beyond their ranges) are these, rounded once to f32
// (kernels/scalar_math.hpp).
//
// Error against the exact value, measured by tests/kernels/test_shared_math
// against long double: below 0.56 ulp (exp, expm1, log, log1p, tanh, pow), each
// the final rounding (0.5 ulp) of a sum whose low-order part carries its own
// rounding errors at 2^-56 or below relative to the result; subnormal
// results add one more rounding (below 1 ulp in all).
//
// Embedded as text: this header may include only standard headers and
// kernels/portable.hpp (whose #include line the embedding drops).
#pragma once

#include "kernels/portable.hpp"

namespace tessera::detail::math {

namespace libm_detail {

using lm::fma;
using u64 = TESSERA_STD::uint64_t;
using i64 = TESSERA_STD::int64_t;

TESSERA_SCALAR_FN double as_f64(u64 b) { return __builtin_bit_cast(double, b); }
TESSERA_SCALAR_FN u64 as_u64(double x) { return __builtin_bit_cast(u64, x); }

// 1.5 * 2^52: adding it to |v| < 2^51 rounds v to an integer (ties to
// even) held in the low bits of the sum's significand. Integers go between
// double and int64 this way, by bits: a conversion instruction for 64-bit
// integers exists only with AVX-512 and would keep the loops scalar.
constexpr double kShifter = 0x1.8p52;
TESSERA_SCALAR_FN double i64_to_f64(i64 k) { return as_f64(as_u64(kShifter) + static_cast<u64>(k)) - kShifter; }

constexpr double kInvLn2 = 0x1.71547652b82fep+0;
// ln 2 = kLn2Hi + kLn2Lo (kLn2Hi the nearest double: fma(-n, kLn2Hi, x) is
// exact for the |n| <= 1077 exp reduces by), and ln 2 = kLn2Hi32 + kLn2Lo32
// (kLn2Hi32 of 33 bits, so k * kLn2Hi32 is exact for log's |k| < 2^20).
constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;
constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;
constexpr double kLn2Hi32 = 0x1.62e42fee00000p-1;
constexpr double kLn2Lo32 = 0x1.a39ef35793c76p-33;

// s + e = a + b exactly (Knuth's two-sum: any magnitudes).
TESSERA_SCALAR_FN double two_sum(double a, double b, double& e) {
  const double s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
  return s;
}
// The same when |a| >= |b| (or a is 0).
TESSERA_SCALAR_FN double fast_two_sum(double a, double b, double& e) {
  const double s = a + b;
  e = b - (s - a);
  return s;
}

// The reduction of exp: x = n ln2 + r, |r| <= ln2/2 (+ rounding), with n =
// round(x / ln2) returned and r = rh + rl exact to 2^-100 or so (fma(-n,
// kLn2Hi, x) is exact: its value fits 53 bits; n kLn2Lo rounds at 2^-100).
// Then e^r = 1 + rh + h2 + small: h2 = rh^2/2 rounded (exact up to r2l,
// which goes into small), small = rh^3 q(rh) + r2l/2 + rl (1 + rh + h2), q the
// Taylor series of (e^r - 1 - r - r^2/2) / r^3 to r^11 (truncation below
// 2^-66 relative for |r| <= 0.35). small <= 0.008, so its rounding errors
// stay near 2^-60 of e^r. For |x| below 2^51 ln2 or NaN (n's bits are then
// meaningless but defined; the callers clamp x and select NaN's result).
// xl: a low-order part of the argument (pow's), x + xl the value.
TESSERA_SCALAR_FN double exp_reduce(double x, double xl, i64& n, double& rh, double& h2) {
  const double kd = fma(x, kInvLn2, kShifter);
  n = static_cast<i64>(as_u64(kd) - as_u64(kShifter));
  const double nd = kd - kShifter;
  const double r1 = fma(-nd, kLn2Hi, x);
  const double t = fma(nd, kLn2Lo, -xl);
  double rl;
  rh = fast_two_sum(r1, -t, rl);
  double q = 0x1.93974a8c07c9dp-37;  // 1/14!
  q = fma(q, rh, 0x1.6124613a86d09p-33);
  q = fma(q, rh, 0x1.1eed8eff8d898p-29);
  q = fma(q, rh, 0x1.ae64567f544e4p-26);
  q = fma(q, rh, 0x1.27e4fb7789f5cp-22);
  q = fma(q, rh, 0x1.71de3a556c734p-19);
  q = fma(q, rh, 0x1.a01a01a01a01ap-16);
  q = fma(q, rh, 0x1.a01a01a01a01ap-13);
  q = fma(q, rh, 0x1.6c16c16c16c17p-10);
  q = fma(q, rh, 0x1.1111111111111p-7);
  q = fma(q, rh, 0x1.5555555555555p-5);
  q = fma(q, rh, 0x1.5555555555555p-3);
  const double r2 = rh * rh;
  const double r2l = fma(rh, rh, -r2);
  h2 = 0.5 * r2;
  return fma(r2 * rh, q, fma(0.5, r2l, fma(rl, rh + h2, rl)));
}

// 2^k for k in [-1022, 1023], by the exponent bits.
TESSERA_SCALAR_FN double pow2(i64 k) { return as_f64(static_cast<u64>(k + 1023) << 52); }

// e^x - 1 = (h + low) * scale for x in [-40, 710] (clamped by the caller;
// not NaN): e^x - 1 = P (1 + rh + tail) - 1 with P = 2^n, summed exactly
// but for the low-order part: P - 1 and P rh are exact (two_sum, a power
// of two), so only tail and the sum of the small pieces round. scale is 2
// where n = 1024 (P = 2^1023 then, and the result is doubled: the 1 is
// far below its ulp), else 1. |low| <= |h| / 4 or so.
TESSERA_SCALAR_FN double expm1_parts(double x, double& low, double& scale) {
  i64 n;
  double rh, h2;
  const double small = exp_reduce(x, 0.0, n, rh, h2);
  const i64 big = n > 1023 ? 1 : 0;
  scale = big ? 2.0 : 1.0;
  const double p = pow2(n - big);
  double al, l1, l2;
  const double ah = two_sum(p, -1.0, al);
  const double h1 = two_sum(ah, p * rh, l1);
  const double h = two_sum(h1, p * h2, l2);
  low = fma(p, small, al) + (l1 + l2);
  return h;
}

// log(m) + k ln2 (+ add_h + add_l) for m = x 2^-k in [sqrt(1/2), sqrt(2))
// (x positive and normal; the callers select zero, negatives, inf and
// NaN), k0 added to k (a subnormal's scaling); add a double-double term
// (log1p's correction) summed in before the final rounding.
// With f = m - 1 (exact) and s = f / (2 + f): log(m) = 2 atanh(s) = f -
// f^2/2 + s (f^2/2 + R(s^2)), R(z) = sum 2 z^j / (2j + 1), j = 1..11 (|s|
// <= 0.172, truncation below 2^-62 relative). k ln2 + f - f^2/2 (+ add_h)
// is summed exactly (k kLn2Hi32 is exact, f^2/2 by fma, the sums by
// two_sum, s to 2^-100 by its remainder), and so is f^2/2 + R before the
// product by s, so the only roundings before the last are the product s
// (f^2/2 + R) (|.| <= 0.017, one rounding by fma) and terms far below it.
template <bool kAdd>
TESSERA_SCALAR_FN double log_core(double x, double k0, double add_h, double add_l) {
  const u64 ix = as_u64(x);
  // k = floor((ix - bits(sqrt(1/2))) / 2^52), computed unsigned (offset by
  // 2^63 and shifted logically: a 64-bit arithmetic shift exists only with
  // AVX-512).
  const u64 tmp = ix - 0x3fe6a09e667f3bcdull + (u64(1) << 63);
  const i64 k = static_cast<i64>(tmp >> 52) - 2048;
  const double m = as_f64(ix - (static_cast<u64>(k) << 52));
  const double kd = i64_to_f64(k) + k0;
  const double f = m - 1.0;
  double d2l;
  const double d2 = two_sum(2.0, f, d2l);
  const double s = f / d2;
  const double sl = (fma(-s, d2, f) - s * d2l) / d2;
  const double z = s * s;
  double r = 0x1.47ae147ae147bp-4;  // 2/25
  r = fma(r, z, 0x1.642c8590b2164p-4);
  r = fma(r, z, 0x1.8618618618618p-4);
  r = fma(r, z, 0x1.af286bca1af28p-4);
  r = fma(r, z, 0x1.e1e1e1e1e1e1ep-4);
  r = fma(r, z, 0x1.1111111111111p-3);
  r = fma(r, z, 0x1.3b13b13b13b14p-3);
  r = fma(r, z, 0x1.745d1745d1746p-3);
  r = fma(r, z, 0x1.c71c71c71c71cp-3);
  r = fma(r, z, 0x1.2492492492492p-2);
  r = fma(r, z, 0x1.999999999999ap-2);
  r = fma(r, z, 0x1.5555555555555p-1);
  r = r * z;
  const double hf = 0.5 * f;
  const double hfsq = hf * f;
  const double hfsq_l = fma(hf, f, -hfsq);
  double de, se, ae = 0.0, te;
  const double d = two_sum(f, -hfsq, de);
  double big = two_sum(kd * kLn2Hi32, d, se);
  if constexpr (kAdd) big = two_sum(big, add_h, ae);
  const double t = two_sum(hfsq, r, te);
  const double rest = ((se + de) + (ae - hfsq_l)) + fma(s, te + hfsq_l, fma(sl, t, fma(kd, kLn2Lo32, add_l)));
  return big + fma(s, t, rest);
}

// e^(x + xl) for x in [-746, 710] (or NaN: a NaN), |xl| <= 2^-40 |x| or so.
TESSERA_SCALAR_FN double exp_clamped(double x, double xl) {
  i64 n;
  double rh, h2;
  const double small = exp_reduce(x, xl, n, rh, h2);
  double lo1, lo2;
  const double hi = two_sum(fast_two_sum(1.0, rh, lo1), h2, lo2);
  const double p = hi + (small + (lo1 + lo2));
  // 2^n in two factors (n in [-1077, 1024]): p 2^n1 is exact, and the
  // second product rounds once, to inf, a subnormal or 0 where due.
  const i64 n1 = static_cast<i64>(static_cast<u64>(n + 2048) >> 1) - 1024;
  return (p * pow2(n1)) * pow2(n - n1);
}

// log(x) = hi + lo for pow, x positive and normal, k0 as log_core's: the
// same reduction, with R's two leading terms 2z/3 + 2z^2/5 in
// double-double too (z = s^2 from s + sl), and s (f^2/2 + R) as a
// double-double product, so that the errors left are z^3's (|z^3 q| <
// 1e-5, times s: below 2^-70) and smaller.
TESSERA_SCALAR_FN double log_dd(double x, double k0, double& lo) {
  const u64 ix = as_u64(x);
  const u64 tmp = ix - 0x3fe6a09e667f3bcdull + (u64(1) << 63);
  const i64 k = static_cast<i64>(tmp >> 52) - 2048;
  const double m = as_f64(ix - (static_cast<u64>(k) << 52));
  const double kd = i64_to_f64(k) + k0;
  const double f = m - 1.0;
  double d2l;
  const double d2 = two_sum(2.0, f, d2l);
  const double s = f / d2;
  const double sl = (fma(-s, d2, f) - s * d2l) / d2;
  const double zh = s * s;
  const double zl = fma(s, s, -zh) + 2.0 * s * sl;
  double q = 0x1.47ae147ae147bp-4;  // 2/25
  q = fma(q, zh, 0x1.642c8590b2164p-4);
  q = fma(q, zh, 0x1.8618618618618p-4);
  q = fma(q, zh, 0x1.af286bca1af28p-4);
  q = fma(q, zh, 0x1.e1e1e1e1e1e1ep-4);
  q = fma(q, zh, 0x1.1111111111111p-3);
  q = fma(q, zh, 0x1.3b13b13b13b14p-3);
  q = fma(q, zh, 0x1.745d1745d1746p-3);
  q = fma(q, zh, 0x1.c71c71c71c71cp-3);
  q = fma(q, zh, 0x1.2492492492492p-2);
  // R = z (2/3) + z^2 (2/5 + z q): both leading products as double-doubles
  // (2/3 = c1h + c1l, 2/5 = c2h + c2l).
  constexpr double c1h = 0x1.5555555555555p-1, c1l = 0x1.5555555555555p-55;
  constexpr double c2h = 0x1.999999999999ap-2, c2l = -0x1.999999999999ap-56;
  const double p1h = c1h * zh;
  const double p1l = fma(c1h, zh, -p1h) + (c1h * zl + c1l * zh);
  const double z2h = zh * zh;
  const double z2l = fma(zh, zh, -z2h) + 2.0 * zh * zl;
  const double uh = fma(zh, q, c2h);
  const double p2h = z2h * uh;
  const double p2l = fma(z2h, uh, -p2h) + (z2h * c2l + z2l * uh);
  double rl;
  const double rh = fast_two_sum(p1h, p2h, rl);
  rl += p1l + p2l;
  const double hf = 0.5 * f;
  const double hfsq = hf * f;
  const double hfsq_l = fma(hf, f, -hfsq);
  double te;
  const double th = two_sum(hfsq, rh, te);
  const double tl = te + (hfsq_l + rl);
  const double sth = s * th;
  const double stl = fma(s, th, -sth) + (s * tl + sl * th);
  double de, se, e2;
  const double d = two_sum(f, -hfsq, de);
  const double big = two_sum(two_sum(kd * kLn2Hi32, d, se), sth, e2);
  const double low = ((e2 + se) + (de - hfsq_l)) + fma(kd, kLn2Lo32, stl);
  return fast_two_sum(big, low, lo);
}

}  // namespace libm_detail

/// e^x in f64 (see the header comment for the error).
TESSERA_SCALAR_FN double exp_f64(double x) {
  using namespace libm_detail;
  // Beyond 710, e^x overflows (n = 1024 below); below -746 it rounds to 0.
  double xc = x > 710.0 ? 710.0 : x;
  xc = xc < -746.0 ? -746.0 : xc;
  const double y = exp_clamped(xc, 0.0);
  return lm::isnan(x) ? x + x : y;
}

/// e^x - 1 in f64.
TESSERA_SCALAR_FN double expm1_f64(double x) {
  using namespace libm_detail;
  // Below -40, e^x - 1 rounds to -1.
  double xc = x > 710.0 ? 710.0 : x;
  xc = xc < -40.0 ? -40.0 : xc;
  double low, scale;
  const double h = expm1_parts(xc, low, scale);
  const double y = (h + low) * scale;
  // For |x| < 2^-54 (zeros and subnormals included) the value rounds to x.
  return lm::fabs(x) < 0x1p-54 || lm::isnan(x) ? x + x * 0.0 : y;
}

/// log(x) in f64.
TESSERA_SCALAR_FN double log_f64(double x) {
  using namespace libm_detail;
  const bool sub = x < 0x1p-1022;
  const double y = log_core<false>(sub ? x * 0x1p54 : x, sub ? -54.0 : 0.0, 0.0, 0.0);
  const double inf = TESSERA_STD::numeric_limits<double>::infinity();
  double r = x == inf ? x : y;
  r = x == 0.0 ? -inf : r;
  r = x < 0.0 ? TESSERA_STD::numeric_limits<double>::quiet_NaN() : r;
  return lm::isnan(x) ? x + x : r;
}

/// log(1 + x) in f64: u = 1 + x rounded, c = 1 + x - u exactly (two_sum),
/// and log(1 + x) = log(u) + log(1 + c/u), the latter c/u - (c/u)^2/2
/// (|c/u| <= 2^-53, c/u to 2^-106 by its remainder) summed into log's
/// exact part: near 0, log(u) and c/u are of one size.
TESSERA_SCALAR_FN double log1p_f64(double x) {
  using namespace libm_detail;
  double c;
  const double u = two_sum(1.0, x, c);
  const double cu = c / u;
  const double cu_l = fma(-cu, u, c) / u;
  const double y = log_core<true>(u, 0.0, cu, fma(-0.5 * cu, cu, cu_l));
  const double inf = TESSERA_STD::numeric_limits<double>::infinity();
  double r = x == inf ? x : y;
  r = x == -1.0 ? -inf : r;
  r = x < -1.0 ? TESSERA_STD::numeric_limits<double>::quiet_NaN() : r;
  // Zeros keep their sign; subnormals round to x.
  r = lm::fabs(x) < 0x1p-1022 ? x : r;
  return lm::isnan(x) ? x + x : r;
}

/// tanh(x) in f64: E = e^(2|x|) - 1 as a double-double (expm1_parts), then
/// E / (E + 2) by one division corrected by its remainder (computed with
/// fma), so the quotient carries about 2^-100 relative error before its
/// final rounding. |x| is clamped to 20 (tanh rounds to 1 from 19.1); below
/// 2^-28, tanh(x) rounds to x.
TESSERA_SCALAR_FN double tanh_f64(double x) {
  using namespace libm_detail;
  const double a = lm::fabs(x);
  const double ac = a < 20.0 ? a : 20.0;
  double low, scale;
  const double h = expm1_parts(2.0 * ac, low, scale);
  double el, dl;
  const double eh = fast_two_sum(h, low, el);
  const double dh = two_sum(eh, 2.0, dl);
  dl += el;
  const double q0 = eh / dh;
  const double rem = fma(-q0, dh, eh) + fma(-q0, dl, el);
  const double t = q0 + rem / dh;
  const double y = lm::copysign(t, x);
  return a < 0x1p-28 || lm::isnan(x) ? x + x * 0.0 : y;
}

/// x^y in f64 (tested; the kernels still take libm's pow: the CPU's binary
/// loops would run it without FMA instructions on AVX2 machines, one call
/// per fma): e^(y log|x|) with log|x| a double-double (log_dd) and y
/// log|x| formed exactly as one (fma), so the exponent's error is near
/// 2^-64 relative: below 0.25 ulp of the result even where |y log x|
/// nears 745. IEEE pow's special cases (C99 Annex F) by selects: x^0 = 1
/// and 1^y = 1 (NaN included), (-1)^+-inf = 1, a negative x with a
/// non-integer y is NaN, with an odd integer y the sign of x; zeros and
/// infinities follow from log|x| = -inf / inf.
TESSERA_SCALAR_FN double pow_f64(double x, double y) {
  using namespace libm_detail;
  const double inf = TESSERA_STD::numeric_limits<double>::infinity();
  const double ax = lm::fabs(x);
  const bool sub = ax < 0x1p-1022;
  double ll;
  double lh = log_dd(sub ? ax * 0x1p54 : ax, sub ? -54.0 : 0.0, ll);
  lh = ax == inf ? inf : lh;
  lh = ax == 0.0 ? -inf : lh;
  ll = ax == inf || ax == 0.0 ? 0.0 : ll;
  double ph = y * lh;
  double pl = fma(y, lh, -ph) + y * ll;
  // Beyond [-746, 710] the result is 0 or inf: clamped (pl dropped; it is
  // NaN when ph is infinite). NaN passes and gives NaN.
  pl = lm::fabs(ph) <= 746.0 ? pl : 0.0;
  ph = ph > 710.0 ? 710.0 : ph;
  ph = ph < -746.0 ? -746.0 : ph;
  double r = exp_clamped(ph, pl);
  const bool yint = lm::floor(y) == y;  // inf counts: neither odd nor NaN-making
  const bool yodd = yint && lm::fabs(y) < 0x1p53 && lm::floor(0.5 * y) != 0.5 * y;
  r = yodd && lm::copysign(1.0, x) < 0.0 ? -r : r;
  r = x < 0.0 && lm::isfinite(x) && !yint ? TESSERA_STD::numeric_limits<double>::quiet_NaN() : r;
  r = lm::isnan(x) || lm::isnan(y) ? x + y : r;
  return y == 0.0 || x == 1.0 || (x == -1.0 && ax == 1.0 && lm::fabs(y) == inf) ? 1.0 : r;
}

}  // namespace tessera::detail::math
