// exp, expm1, log, log1p, tanh, pow, sin and cos of f64 without libm, for
// every backend: the CPU's kernels (and the fused loops jit compiles, whose
// prelude embeds this text after kernels/portable.hpp), CUDA's kernels and
// NVRTC's. Only IEEE-exact operations are used (+ - * / rounded once each,
// fma() where a fused step is meant, bit manipulation, integer arithmetic,
// selects, lookups in function-local constant tables), and every file that
// compiles this does so with -ffp-contract=off (nvcc: --fmad=false), so a
// GPU computes the host's bits. Branch-free (special inputs are selected
// after the fact) and always inlined, so the CPU's loops vectorise.
//
// The f32 functions with no polynomial of their own (and the f32
// polynomials' elements beyond their ranges) are these, rounded once to f32
// (kernels/scalar_math.hpp).
//
// Error against the exact value, measured by tests/kernels/test_shared_math
// against long double: below 0.56 ulp (exp, expm1, log, log1p, tanh, pow,
// sin, cos), each the final rounding (0.5 ulp) of a sum whose low-order part
// carries its own rounding errors at 2^-56 or below relative to the result;
// subnormal results add one more rounding (below 1 ulp in all). sin and cos
// hold for every double: their reduction by pi/2 is exact (Payne-Hanek,
// reduce_pio2).
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

// 2^k for k in [-1022, 1023], by the exponent bits. (Other k, such as a
// NaN's meaningless n, give meaningless bits: the arithmetic wraps, in
// unsigned integers, where signed overflow would be undefined.)
TESSERA_SCALAR_FN double pow2(i64 k) { return as_f64((static_cast<u64>(k) + 1023) << 52); }

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
  // (Unsigned arithmetic: a NaN's n is meaningless and may be huge.)
  const i64 n1 = static_cast<i64>((static_cast<u64>(n) + 2048) >> 1) - 1024;
  return (p * pow2(n1)) * pow2(static_cast<i64>(static_cast<u64>(n) - static_cast<u64>(n1)));
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

// ---- sin and cos of any argument: an exact reduction by pi/2.
//
// For |x| > pi/4: x (2/pi) = 4N + k + f with k in 0..3 and |f| <= 1/2, so
// that sin(x) and cos(x) are +-sin(r) or +-cos(r) of r = f pi/2, |r| <= pi/4
// (Payne and Hanek's method). x = m 2^E with m an integer of 53 bits, so x
// (2/pi) = m 2^E sum_j c_j 2^(-32 (j+1)), c_j the 32-bit words of 2/pi's
// fraction; a word's term is m c_j 2^(E - 32 (j+1)), a multiple of 4 (whole
// turns: they change neither k nor f) once E - 32 (j+1) >= 2. So only seven
// words from the first word j0 whose term is not a multiple of 4 matter: the
// words before contribute multiples of 4, and those after at most
// m 2^(E - 32 (j0+7)) < 2^-138 in all (below). Their product with m is
// formed exactly in integers (32-bit limbs, 64-bit products: no rounding at
// all), and its bits from 2^1 down to 2^-158 are k and f. |f| is at least
// 2^-62 for every double (no double comes closer to a multiple of pi/2
// than about 2^-61: 0x1.6ac5b262ca1ffp+849, whose cos is -0x1.14ae7p-61,
// comes that close): so f is known to a relative 2^-75 or better, and r = f
// pi/2 formed as a double-double is good to about 2^-100 relative, far
// below what the final rounding needs.
//
// The table starts with two zero words, so that with E' = E + 64 the first
// word used is j0 = floor((E' - 2) / 32) >= 0 for every |x| >= 2^-10, and
// s = E' - 32 j0 in [2, 34) is fixed up to a shift of m by s - 2 < 32 bits:
// the product m 2^(s-2) C (C the seven words as one 224-bit integer) has
// its bit for 2^0 of x (2/pi) mod 4 at bit 222, always, and only its low 224
// bits are needed (7 limbs; higher ones are multiples of 4). The largest
// finite double (E = 971) takes words up to j0 + 6 = 38.

// lo += the low 32 bits of a b, hi += the high 32 bits (a, b < 2^32).
TESSERA_SCALAR_FN void mul_add(u64 a, u64 b, u64& lo, u64& hi) {
  const u64 p = a * b;
  lo += p & 0xffffffffull;
  hi += p >> 32;
}

// k (the quadrant, x (2/pi) rounded to the nearest integer, mod 4) and r =
// rh + rl = x - k pi/2 (mod 2 pi), for x >= pi/4 finite. Other x give
// defined values (the table index stays in range), which the callers
// replace.
TESSERA_SCALAR_FN u64 reduce_pio2(double x, double& rh, double& rl) {
  // 2^64 (2/pi) in 32-bit words, most significant first: 0, 0, then the
  // fraction's first 1184 bits. Held in 64-bit elements, so that GCC
  // vectorises the lookups (as gathers of 64-bit elements by 64-bit
  // indices).
  static constexpr u64 kTwoOverPi[39] = {
      0x00000000, 0x00000000, 0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599, 0x3c439041,
      0xfe5163ab, 0xdebbc561, 0xb7246e3a, 0x424dd2e0, 0x06492eea, 0x09d1921c, 0xfe1deb1c, 0xb129a73e,
      0xe88235f5, 0x2ebb4484, 0xe99c7026, 0xb45f7e41, 0x3991d639, 0x835339f4, 0x9c845f8b, 0xbdf9283b,
      0x1ff897ff, 0xde05980f, 0xef2f118b, 0x5a0a6d1f, 0x6d367ecf, 0x27cb09b7, 0x4f463f66, 0x9e5fea2d,
      0x7527bac7, 0xebe5f17b, 0x3d0739f7, 0x8a5292ea, 0x6bfb5fb1, 0x1f8d5d08, 0x56033046};
  constexpr u64 kLow32 = 0xffffffffull;
  const u64 ix = as_u64(x);
  const u64 m = (ix & ((u64(1) << 52) - 1)) | (u64(1) << 52);
  // E' = E + 64 = biased exponent - 1011, at least 2 (smaller x are not
  // reduced here).
  const u64 be = ix >> 52;
  const u64 ep = be > 1013 ? be - 1011 : 2;
  const u64 j0 = (ep - 2) >> 5;
  const u64 sh = ep - 2 - (j0 << 5);  // s - 2, in [0, 32)
  // m 2^sh in three limbs (85 bits at most). (m >> 1) >> (63 - sh) is
  // m >> (64 - sh) without a shift by 64 where sh = 0.
  const u64 ml = m << sh;
  // (The masks and the casts below change no value: they show the
  // compiler that every factor has 32 bits, so that a vectorised product
  // is one 32x32-bit multiply.)
  const u64 a0 = ml & kLow32, a1 = ml >> 32, a2 = ((m >> 1) >> (63 - sh)) & kLow32;
  // C's limbs, least significant first.
  using u32 = TESSERA_STD::uint32_t;
  const u64 w0 = u32(kTwoOverPi[j0 + 6]), w1 = u32(kTwoOverPi[j0 + 5]), w2 = u32(kTwoOverPi[j0 + 4]);
  const u64 w3 = u32(kTwoOverPi[j0 + 3]), w4 = u32(kTwoOverPi[j0 + 2]), w5 = u32(kTwoOverPi[j0 + 1]);
  const u64 w6 = u32(kTwoOverPi[j0]);
  // The low 224 bits of the product: column sums of the 32-bit halves of
  // the partial products a_i w_t (exact: both factors below 2^32; column t
  // gets the low halves of i + t = t and the high halves of i + t = t - 1,
  // below 2^35 in all), then one carry pass. Written out, not as loops: so
  // that the compilers keep it all in registers (GCC vectorises a loop of
  // these only so).
  u64 c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0;
  mul_add(a0, w0, c0, c1);
  mul_add(a0, w1, c1, c2);
  mul_add(a0, w2, c2, c3);
  mul_add(a0, w3, c3, c4);
  mul_add(a0, w4, c4, c5);
  mul_add(a0, w5, c5, c6);
  c6 += (a0 * w6) & kLow32;
  mul_add(a1, w0, c1, c2);
  mul_add(a1, w1, c2, c3);
  mul_add(a1, w2, c3, c4);
  mul_add(a1, w3, c4, c5);
  mul_add(a1, w4, c5, c6);
  c6 += (a1 * w5) & kLow32;
  mul_add(a2, w0, c2, c3);
  mul_add(a2, w1, c3, c4);
  mul_add(a2, w2, c4, c5);
  mul_add(a2, w3, c5, c6);
  c6 += (a2 * w4) & kLow32;
  c1 += c0 >> 32;
  c2 += c1 >> 32;
  c3 += c2 >> 32;
  c4 += c3 >> 32;
  c5 += c4 >> 32;
  c6 += c5 >> 32;
  // The limbs are the low 32 bits of c0..c6; c0 and c1 hold bits below
  // 2^-158 of x (2/pi): only their carries count.
  // The 224 bits are x (2/pi) mod 4 with 222 fraction bits. Adding 1/2
  // (bit 221) makes the two top bits round(x (2/pi)) mod 4 = k, and leaves
  // bit 221 clear exactly where f = x (2/pi) - k is negative; then f's
  // magnitude is the complement of the 221 bits below (the ones'
  // complement: off by 2^-222, nothing next to 2^-138).
  const u64 g6 = (c6 + (u64(1) << 29)) & kLow32;
  const u64 k = g6 >> 30;
  const u64 neg = ((g6 >> 29) & 1) ^ 1;
  const u64 flip = neg ? kLow32 : 0;
  // |f| from its five top limbs, each exact in a double (scaled by a power
  // of two), summed from the smallest: all are nonnegative, so the
  // double-double sum keeps about 2^-104 of |f| however many lead with
  // zeros.
  const double f6 = i64_to_f64(static_cast<i64>((g6 ^ flip) & ((u64(1) << 29) - 1))) * 0x1p-30;
  const double f5 = i64_to_f64(static_cast<i64>((c5 ^ flip) & kLow32)) * 0x1p-62;
  const double f4 = i64_to_f64(static_cast<i64>((c4 ^ flip) & kLow32)) * 0x1p-94;
  const double f3 = i64_to_f64(static_cast<i64>((c3 ^ flip) & kLow32)) * 0x1p-126;
  const double f2 = i64_to_f64(static_cast<i64>((c2 ^ flip) & kLow32)) * 0x1p-158;
  double e1, e2, e3;
  const double u = two_sum(f4, f3 + f2, e1);
  const double v = two_sum(f5, u, e2);
  const double hi = two_sum(f6, v, e3);
  double fl;
  const double fh = fast_two_sum(hi, e3 + (e2 + e1), fl);
  // r = f pi/2, pi/2 = kPio2Hi + kPio2Lo.
  constexpr double kPio2Hi = 0x1.921fb54442d18p+0, kPio2Lo = 0x1.1a62633145c07p-54;
  const double ph = fh * kPio2Hi;
  const double pl = fma(fh, kPio2Hi, -ph) + fma(fh, kPio2Lo, fl * kPio2Hi);
  const double sign = neg ? -1.0 : 1.0;
  rh = sign * ph;
  rl = sign * pl;
  return k;
}

// sin(r) and cos(r) for r = rh + rl, |r| <= pi/4 (or a little beyond),
// |rl| <= 2^-52 |rh|: Taylor series (truncated below 2^-67 relative on
// that range), the leading terms exact. sin: rh - rh^3/6 as a two-sum of
// rh and a double-double rh^3/6 (from the exact square), the rest (r^5
// S(r^2) <= 0.0025 |r|, and rl cos(rh) ~ rl (1 - rh^2/2)) added in one
// double whose rounding errors lie near 2^-60 of the result. cos: 1 -
// rh^2/2 exactly by a two-sum, the rest (r^4 C(r^2) <= 0.016, the
// square's low part, -rl sin(rh) ~ -rl rh) likewise. So the final
// rounding (0.5 ulp) is nearly all of the error.
TESSERA_SCALAR_FN double sin_poly(double rh, double rl) {
  const double z = rh * rh;
  const double ze = fma(rh, rh, -z);
  const double r3 = z * rh;
  const double r3e = fma(z, rh, -r3) + ze * rh;
  constexpr double c3h = 0x1.5555555555555p-3, c3l = 0x1.5555555555555p-57;  // 1/6
  const double th = r3 * c3h;
  const double te = fma(r3, c3h, -th) + fma(r3e, c3h, r3 * c3l);
  // S(z) = 1/5! - z/7! + z^2/9! - ... - z^7/19!
  double s = -0x1.2f49b46814157p-57;
  s = fma(s, z, 0x1.952c77030ad4ap-49);
  s = fma(s, z, -0x1.ae7f3e733b81fp-41);
  s = fma(s, z, 0x1.6124613a86d09p-33);
  s = fma(s, z, -0x1.ae64567f544e4p-26);
  s = fma(s, z, 0x1.71de3a556c734p-19);
  s = fma(s, z, -0x1.a01a01a01a01ap-13);
  s = fma(s, z, 0x1.1111111111111p-7);
  double ae;
  const double a = two_sum(rh, -th, ae);
  const double rest = fma(z * rh, z * s, fma(-0.5 * z, rl, rl));
  return a + ((ae - te) + rest);
}
TESSERA_SCALAR_FN double cos_poly(double rh, double rl) {
  const double z = rh * rh;
  const double ze = fma(rh, rh, -z);
  // C(z) = 1/4! - z/6! + z^2/8! - ... - z^7/18!
  double c = -0x1.6827863b97d97p-53;
  c = fma(c, z, 0x1.ae7f3e733b81fp-45);
  c = fma(c, z, -0x1.93974a8c07c9dp-37);
  c = fma(c, z, 0x1.1eed8eff8d898p-29);
  c = fma(c, z, -0x1.27e4fb7789f5cp-22);
  c = fma(c, z, 0x1.a01a01a01a01ap-16);
  c = fma(c, z, -0x1.6c16c16c16c17p-10);
  c = fma(c, z, 0x1.5555555555555p-5);
  double be;
  const double b = fast_two_sum(1.0, -0.5 * z, be);
  // z^2 C + (z + ze)^2 / 24 - z^2 / 24 (the square's low part in r^4/24)
  // - rl sin(rh) (sin(rh) to r^3/6) - ze / 2.
  const double small = fma(z * ze, 0x1.5555555555555p-4, -0.5 * ze);
  const double rest = fma(z * z, c, fma(-rl, rh * fma(z, -0x1.5555555555555p-3, 1.0), small));
  return b + (be + rest);
}

// sin (kPhase 0) or cos (1) of x, any double: x = +-(k pi/2 + r) reduced
// exactly (reduce_pio2; |x| <= pi/4 is r itself, k = 0), then with q = k +
// kPhase, +-sin(r) for even q and +-cos(r) for odd, negative for q = 2, 3
// (mod 4), sin odd in x. inf gives NaN, NaN itself.
template <int kPhase>
TESSERA_SCALAR_FN double sincos_exact(double x) {
  const double ax = lm::fabs(x);
  double rh, rl;
  u64 k = reduce_pio2(ax, rh, rl);
  const bool small = ax <= 0x1.921fb54442d18p-1;  // pi/4 rounded down
  rh = small ? ax : rh;
  rl = small ? 0.0 : rl;
  k = small ? 0 : k;
  const u64 q = k + kPhase;
  const double s = sin_poly(rh, rl);
  const double c = cos_poly(rh, rl);
  u64 flip = ((q >> 1) & 1) << 63;
  if constexpr (kPhase == 0) flip ^= as_u64(x) & (u64(1) << 63);
  const double y = as_f64(as_u64((q & 1) ? c : s) ^ flip);
  const double nan = TESSERA_STD::numeric_limits<double>::quiet_NaN();
  return lm::isfinite(x) ? y : (lm::isnan(x) ? x + x : nan);
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

/// x^y in f64 (the kernels' pow: f64, and f32 through f64): e^(y log|x|) with log|x| a double-double (log_dd) and y
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


/// sin(x) in f64, any x (sincos_exact). The kernels take their polynomial
/// (kernels/scalar_math.hpp) up to kTrigFastLimitF64 and this beyond it.
TESSERA_SCALAR_FN double sin_f64(double x) { return libm_detail::sincos_exact<0>(x); }
/// cos(x) in f64.
TESSERA_SCALAR_FN double cos_f64(double x) { return libm_detail::sincos_exact<1>(x); }

}  // namespace tessera::detail::math
