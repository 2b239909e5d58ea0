// interp2d's 1-d rules: an axis' cell for a query coordinate and the taps
// (knots and f64 weights) of the linear and cubic rules on it, written once
// for the CPU's kernel (backend/cpu/interp2d.cpp, which explains the rules)
// and the GPU's (backend/cuda/interp2d.cu), so both give the same bits.
#pragma once

#include "kernels/portable.hpp"

namespace tessera::detail {

/// One axis: its n knots in f64 and their inverse spacings, inv[m] =
/// 1 / (knot[m+1] - knot[m]), 0 where they are equal (as interpax).
struct Interp2dAxis {
  const double* knot;
  const double* inv;
  TESSERA_STD::int64_t n;

  /// std::upper_bound(knot, knot + n, v) in libstdc++'s steps, so unsorted
  /// knots give the same cell as the standard algorithm.
  TESSERA_HD TESSERA_STD::int64_t upper_bound(double v) const {
    TESSERA_STD::int64_t first = 0, len = n;
    while (len > 0) {
      const TESSERA_STD::int64_t half = len >> 1, mid = first + half;
      if (v < knot[mid]) {
        len = half;
      } else {
        first = mid + 1;
        len = len - half - 1;
      }
    }
    return first;
  }
  /// The cell's upper knot: clip(searchsorted(knot, v, 'right'), 1, n - 1).
  /// NaN sorts after every knot.
  TESSERA_HD TESSERA_STD::int64_t cell(double v) const {
    const TESSERA_STD::int64_t i = lm::isnan(v) ? n : upper_bound(v);
    return i < 1 ? 1 : i > n - 1 ? n - 1 : i;
  }
  /// Inside [knot[0], knot[n-1]], the ends included; false for NaN.
  TESSERA_HD bool inside(double v) const { return v >= knot[0] && v <= knot[n - 1]; }
};

/// One axis' share of a query: K knots and their weights.
template <int K>
struct Interp2dTaps {
  TESSERA_STD::int64_t idx[K];
  double w[K];
};

/// (v - a) / h, and 0 for an empty cell (as interpax). A division, not a
/// multiplication by 1 / h: at the far knot (v - a is then h itself) it
/// gives exactly 1, so at every knot the weights are exactly 0 and 1 and
/// the result is the knot's row.
TESSERA_HD inline double interp2d_frac(double v, double a, double h) { return h == 0 ? 0.0 : (v - a) / h; }

/// Linear: (x[i] - v) / h on knot i-1, (v - x[i-1]) / h on knot i. Their
/// derivatives in v (`slope`): -1 / h and 1 / h (0 for an empty cell).
TESSERA_HD inline Interp2dTaps<2> linear_taps(const Interp2dAxis& a, TESSERA_STD::int64_t i, double v, bool slope) {
  const double h = a.knot[i] - a.knot[i - 1];
  if (slope) return {{i - 1, i}, {-a.inv[i - 1], a.inv[i - 1]}};
  return {{i - 1, i}, {interp2d_frac(a.knot[i], v, h), interp2d_frac(v, a.knot[i - 1], h)}};
}

/// Cubic (Hermite with finite-difference knot derivatives) on knots
/// i-2 .. i+1; see backend/cpu/interp2d.cpp. With `slope`, the weights of
/// the interpolant's derivative in v instead: the basis functions'
/// derivatives times dt/dv = 1 / h (the knot derivatives are fixed by the
/// table, so the taps and the way they combine stay the same).
TESSERA_HD inline Interp2dTaps<4> cubic_taps(const Interp2dAxis& a, TESSERA_STD::int64_t i, double v, bool slope) {
  const double h = a.knot[i] - a.knot[i - 1];
  const double s = a.inv[i - 1];  // secant of the cell: (f[i] - f[i-1]) * s
  const double t = interp2d_frac(v, a.knot[i - 1], h);
  const double t2 = t * t, t3 = t2 * t;
  double h0 = 1 - 3 * t2 + 2 * t3, h1 = 3 * t2 - 2 * t3;
  double g0 = h * (t - 2 * t2 + t3), g1 = h * (t3 - t2);  // h G0(t), h G1(t)
  if (slope) {
    // d/dv of H0, H1 is (-6t + 6t^2) / h and its negative; of h G0 and h G1,
    // 1 - 4t + 3t^2 and 3t^2 - 2t. An empty cell (s = 0) has t fixed at 0.
    h0 = (6 * t2 - 6 * t) * s;
    h1 = -h0;
    g0 = s == 0 ? 0.0 : 1 - 4 * t + 3 * t2;
    g1 = s == 0 ? 0.0 : 3 * t2 - 2 * t;
  }
  Interp2dTaps<4> r{{i - 2, i - 1, i, i + 1}, {0, h0, h1, 0}};
  // g0 * f'[i-1]: the secant of the cell alone at the first knot, else the
  // mean of the secants before and after knot i-1.
  if (i - 1 == 0) {
    r.w[1] -= g0 * s;
    r.w[2] += g0 * s;
  } else {
    const double sl = a.inv[i - 2];
    r.w[0] -= 0.5 * g0 * sl;
    r.w[1] += 0.5 * g0 * sl - 0.5 * g0 * s;
    r.w[2] += 0.5 * g0 * s;
  }
  // g1 * f'[i]: likewise at the last knot.
  if (i == a.n - 1) {
    r.w[1] -= g1 * s;
    r.w[2] += g1 * s;
  } else {
    const double sr = a.inv[i];
    r.w[1] -= 0.5 * g1 * s;
    r.w[2] += 0.5 * g1 * s - 0.5 * g1 * sr;
    r.w[3] += 0.5 * g1 * sr;
  }
  // Off-grid taps (their weights are 0) read a knot of the stencil instead.
  if (r.idx[0] < 0) r.idx[0] = i - 1;
  if (r.idx[3] > a.n - 1) r.idx[3] = i;
  return r;
}

}  // namespace tessera::detail
