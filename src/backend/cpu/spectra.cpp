// resample_accumulate's kernel: flux-conserving resampling of spectra onto a
// target grid, accumulated exactly per segment.
//
// Exactness (tessera/spectra.hpp). A term x with |x| <= 2^P is split with the
// round-to-nearest trick: for sigma = 1.5 * q * 2^52, (x + sigma) - sigma is x
// rounded to a multiple of q whenever |x| <= 2^51 q. With q0 = 2^(P-22),
// q1 = 2^(P-46), q2 = 2^(P-70):
//   h = round(x, q0), r = x - h (exact, |r| <= q0/2),
//   m = round(r, q1), r' = r - m (exact, |r'| <= q1/2), l = round(r', q2).
// |h| <= 2^22 q0 + q0/2, |m| <= 2^23 q1, |l| <= 2^23 q2, so 2^30 terms per
// element keep every limb sum below 2^53 of its quantum: the float64 sums are
// exact, and their bits cannot depend on the order. The file is compiled with
// -ffp-contract=off: a fused x*y + sigma would round differently.
//
// Speed. Rows are visited grouped by segment (a counting sort of the ids), so
// consecutive rows add into the same accumulator rows while they are in
// cache. Per row: the interpolation marches through the target grid and the
// row's wavelengths together (both increasing), one cell at a time.
#include "backend/cpu/spectra.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/dispatch.hpp"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TESSERA_SPECTRA_CLONES
#else
#define TESSERA_SPECTRA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace tessera::cpu {

namespace {

double load(const void* p, DType dt, std::int64_t i) {
  return detail::dispatch(dt, [&](auto t) { return static_cast<double>(static_cast<const decltype(t)*>(p)[i]); });
}

/// A segment id; -1 (dropped) for a u64 id past int64 (the front end
/// admits integer ids only).
std::int64_t load_id(const void* p, DType dt, std::int64_t i) {
  return detail::dispatch(dt, [&](auto t) -> std::int64_t {
    using T = decltype(t);
    const T v = static_cast<const T*>(p)[i];
    if constexpr (std::is_same_v<T, std::uint64_t>)
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return -1;
    return static_cast<std::int64_t>(v);
  });
}

/// dst[0..n) = src[off .. off+n) as doubles.
TESSERA_SPECTRA_CLONES
void load_row(const void* src, DType dt, std::int64_t off, std::int64_t n, double* dst) {
  if (dt == DType::f32) {
    const float* s = static_cast<const float*>(src) + off;
    for (std::int64_t k = 0; k < n; ++k) dst[k] = s[k];
  } else if (dt == DType::f64) {
    std::memcpy(dst, static_cast<const double*>(src) + off, static_cast<std::size_t>(n) * sizeof(double));
  } else {
    for (std::int64_t k = 0; k < n; ++k) dst[k] = load(src, dt, off + k);
  }
}

/// w[k] = base[k] * scale, and the flux inside [tlo, thi]:
/// sum_{k>=1} s[k] (w[k] - w[k-1]) [tlo <= w[k] <= thi], in four running
/// sums (a fixed order).
TESSERA_SPECTRA_CLONES
double scale_and_integrate(const double* base, double scale, const double* s, std::int64_t K, double tlo, double thi,
                           double* w) {
  for (std::int64_t k = 0; k < K; ++k) w[k] = base[k] * scale;
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  std::int64_t k = 1;
  for (; k + 4 <= K; k += 4)
    for (int u = 0; u < 4; ++u) {
      const double wk = w[k + u];
      acc[u] += (wk >= tlo && wk <= thi) ? s[k + u] * (wk - w[k + u - 1]) : 0.0;
    }
  for (; k < K; ++k) acc[0] += (w[k] >= tlo && w[k] <= thi) ? s[k] * (w[k] - w[k - 1]) : 0.0;
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/// The target grid with what finds a value's place in it fast: for a
/// (nearly) uniform grid, (v - t0) * inv_h guesses the index and a check or
/// two fixes it, so a row's cell boundaries cost no mispredicted branches.
struct TargetGrid {
  const double* t;
  std::int64_t T;
  double t0, inv_h;
  /// The first j >= lo with t[j] >= v (strict = true) or t[j] > v (false).
  std::int64_t first_at_or_above(double v, std::int64_t lo, bool strict) const {
    const double g = (v - t0) * inv_h;
    // (NaN: start at 0; the checks below settle it.)
    std::int64_t j = !(g > 0.0) ? 0 : g >= static_cast<double>(T) ? T : static_cast<std::int64_t>(std::ceil(g));
    j = std::max(j, lo);
    auto below = [&](std::int64_t q) { return strict ? t[q] < v : t[q] <= v; };
    while (j > lo && !below(j - 1)) --j;
    while (j < T && below(j)) ++j;
    return j;
  }
};

/// p[j] = jnp.interp(t[j], w, s) for increasing t and w (K >= 1): the cell of
/// t[j] is the i in [1, K-1] with w[i-1] <= t[j] < w[i] (searchsorted right,
/// clipped), as jnp.interp. Cell by cell, each cell's targets 16 at a time (p
/// has 16 spare entries at the end: a cell may write past its last target,
/// the next cell overwrites them). Returns sum_{j>=1} p[j] * dt[j]; *pmax
/// gets a bound on |p| (the largest |s| at the ends of the cells used: p
/// lies between them).
TESSERA_SPECTRA_CLONES
double interp_row(const TargetGrid& tg, const double* dt, const double* w, const double* s, std::int64_t K, double* p,
                  double* pmax) {
  const double* t = tg.t;
  const std::int64_t T = tg.T;
  std::int64_t j = 0;
  double big = 0.0;
  if (K == 1) {
    for (; j < T; ++j) p[j] = s[0];
    big = std::abs(s[0]);
  } else {
    // Below the grid: the first value.
    j = tg.first_at_or_above(w[0], 0, true);
    for (std::int64_t q = 0; q < j; ++q) p[q] = s[0];
    if (j > 0) big = std::abs(s[0]);
    // The first cell with targets: w[i] > t[j].
    std::int64_t i = j < T ? std::upper_bound(w, w + K, t[j]) - w : K;
    i = std::max<std::int64_t>(i, 1);
    for (; i < K && j < T; ++i) {
      // Targets in [w[i-1], w[i]) (the last cell also takes t == w[K-1]).
      const std::int64_t j1 = tg.first_at_or_above(w[i], j, i < K - 1);
      if (j1 == j) continue;
      const double w0 = w[i - 1], s0 = s[i - 1];
      const double dx = w[i] - w0;
      big = std::max(big, std::max(std::abs(s0), std::abs(s[i])));
      const double slope = std::abs(dx) <= 0.0 ? 0.0 : (s[i] - s0) / dx;
      for (std::int64_t q = j; q < j1; q += 16)
        for (int u = 0; u < 16; ++u) p[q + u] = s0 + (t[q + u] - w0) * slope;
      j = j1;
    }
    // Above the grid: the last value.
    if (j < T) big = std::max(big, std::abs(s[K - 1]));
    for (; j < T; ++j) p[j] = s[K - 1];
  }
  *pmax = big;
  // Four running sums (a fixed order: the same bits for every row and mesh)
  // keep the adds from waiting on each other.
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  std::int64_t q = 1;
  for (; q + 4 <= T; q += 4)
    for (int u = 0; u < 4; ++u) acc[u] += p[q + u] * dt[q + u];
  for (; q < T; ++q) acc[0] += p[q] * dt[q];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/// acc{0,1,2}[j] += the limbs of p[j] * f.
TESSERA_SPECTRA_CLONES
void accumulate_row(const double* p, double f, std::int64_t T, const double* sigma, double* __restrict a0,
                    double* __restrict a1, double* __restrict a2) {
  const double s0 = sigma[0], s1 = sigma[1], s2 = sigma[2];
  for (std::int64_t j = 0; j < T; ++j) {
    const double x = p[j] * f;
    const double h = (x + s0) - s0;
    const double r = x - h;
    const double m = (r + s1) - s1;
    const double r2 = r - m;
    const double l = (r2 + s2) - s2;
    a0[j] += h;
    a1[j] += m;
    a2[j] += l;
  }
}

std::string too_large(double x, double max_abs) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "[resample_accumulate] a row contributes %.6g, above max_abs = %.6g (the exact accumulator's "
                "bound); give a larger max_abs",
                x, max_abs);
  return buf;
}

}  // namespace

std::string resample_accumulate(const ResampleArgs& a) {
  const std::int64_t S = a.S, T = a.T, K = a.K, n = a.n;
  if (a.init)
    std::memcpy(a.out, a.init, static_cast<std::size_t>(3 * S * T) * sizeof(double));
  else
    std::fill_n(a.out, 3 * S * T, 0.0);
  if (n == 0 || T == 0 || S == 0 || K == 0) return {};
  const ExactLimbs limbs(a.max_abs);

  // 16 spare entries: interp_row's cells write targets 16 at a time.
  std::vector<double> t(static_cast<std::size_t>(T) + 16), dt(static_cast<std::size_t>(T), 0.0);
  load_row(a.target, a.target_dt, 0, T, t.data());
  for (std::int64_t j = T; j < T + 16; ++j) t[j] = t[T - 1];
  for (std::int64_t j = 1; j < T; ++j) dt[j] = t[j] - t[j - 1];
  const double tlo = t[0], thi = t[T - 1];

  // Rows grouped by segment, in row order within a segment (counting sort);
  // rows with ids out of range are dropped.
  std::vector<std::int64_t> id(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t s = load_id(a.seg, a.seg_dt, i);
    id[i] = (s >= 0 && s < S) ? s : -1;
  }
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(n));
  if (S <= 4 * n + 1024) {
    std::vector<std::int64_t> start(static_cast<std::size_t>(S) + 1, 0);
    for (std::int64_t i = 0; i < n; ++i)
      if (id[i] >= 0) ++start[id[i] + 1];
    std::partial_sum(start.begin(), start.end(), start.begin());
    order.resize(static_cast<std::size_t>(start[S]));
    for (std::int64_t i = 0; i < n; ++i)
      if (id[i] >= 0) order[start[id[i]]++] = i;
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      if (id[i] >= 0) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) { return id[x] < id[y]; });
  }

  std::vector<double> base(static_cast<std::size_t>(K)), w(static_cast<std::size_t>(K)), s(static_cast<std::size_t>(K)),
      p(static_cast<std::size_t>(T) + 16);
  const TargetGrid grid{t.data(), T, t[0], T > 1 && t[T - 1] > t[0] ? static_cast<double>(T - 1) / (t[T - 1] - t[0]) : 0.0};
  if (!a.wave_per_row) load_row(a.wave, a.wave_dt, 0, K, base.data());
  double* out0 = a.out;
  double* out1 = a.out + S * T;
  double* out2 = a.out + 2 * S * T;
  for (const std::int64_t i : order) {
    const double weight = a.weights ? load(a.weights, a.weights_dt, i) : 1.0;
    if (a.wave_per_row) load_row(a.wave, a.wave_dt, i * K, K, base.data());
    const double scale = a.scale ? load(a.scale, a.scale_dt, i) : 1.0;
    load_row(a.flux, a.flux_dt, i * K, K, s.data());
    const double lin = scale_and_integrate(base.data(), scale, s.data(), K, tlo, thi, w.data());
    double pmax = 0.0;
    const double lout = interp_row(grid, dt.data(), w.data(), s.data(), K, p.data(), &pmax);
    double ratio = lin / lout;
    if (std::isnan(ratio) || lout == 0.0) ratio = 0.0;
    const double f = weight * ratio;
    const std::int64_t off = id[i] * T;
    // |p[j] * f| <= pmax * |f| up to a few ulps (interpolation can overshoot
    // its ends by rounding): harmless, the limbs stay exact up to 2^P >=
    // max_abs, far above a few ulps past it.
    const double mx = pmax * std::abs(f);
    if (mx > a.max_abs) return too_large(mx, a.max_abs);
    accumulate_row(p.data(), f, T, limbs.sigma, out0 + off, out1 + off, out2 + off);
  }
  return {};
}

// ================================================================ derivatives
//
// The derivative of row i's contribution out[j] = m p[j] L_in / L_out (m the
// weight, c the wave scale, w = c * base, s the flux row). Differentiated
// almost everywhere: which cell a target falls in and which wavelengths
// count in L_in are piecewise constant, so only the values move:
//   p[j] = s[a] + (t[j] - w[a]) slope, slope = (s[b] - s[a]) / (w[b] - w[a])
//     (a = b - 1, the cell's knots; p held at s[0] or s[K-1] off the ends),
//   dp[j] = (1-u) ds[a] + u ds[b] - slope ((1-u) base[a] + u base[b]) dc,
//     u = (t[j] - w[a]) / (w[b] - w[a]) (an empty cell: ds[a]);
//   dL_in = sum_k [inside] (ds[k] (w[k] - w[k-1]) + s[k] (base[k] - base[k-1]) dc),
//   dL_out = sum_{j>=1} dp[j] dt[j],
//   d ratio = (dL_in - ratio dL_out) / L_out,
//   d out[j] = dm p[j] ratio + m (dp[j] ratio + p[j] d ratio).
// A row whose ratio the primal replaces by 0 (NaN, or L_out = 0) has zero
// derivative, as a constant branch. The rows are computed by plain loops:
// these kernels run once per derivative, not per pipeline step.

namespace {

/// One row's primal quantities and the cells of its targets.
struct RowModel {
  std::vector<double> w, p, u;
  std::vector<char> inside;  // wavelength k (k >= 1) counts in L_in
  /// The non-empty interior cells in order: knots b-1 and b hold targets
  /// [j0, j1), with slope (s[b] - s[b-1]) / (w[b] - w[b-1]) (0 for an empty
  /// cell); u[j] = (t[j] - w[b-1]) / (w[b] - w[b-1]) there.
  struct Cell {
    std::int64_t b, j0, j1;
    double slope;
  };
  std::vector<Cell> cells;
  std::int64_t below = 0, above = 0;  // targets [0, below) held at s[0]; [above, T) at s[K-1]
  double lin = 0, lout = 0, ratio = 0, bsum = 0;
  bool valid = false;

  RowModel(std::int64_t K, std::int64_t T)
      : w(static_cast<std::size_t>(K)), p(static_cast<std::size_t>(T) + 4), u(static_cast<std::size_t>(T)),
        inside(static_cast<std::size_t>(K)) {
    cells.reserve(static_cast<std::size_t>(K));
  }
  void run(const double* base, double c, const double* s, std::int64_t K, const double* t, const double* dt,
           std::int64_t T);
};

// A cell at a time (its slope and width once; the targets in it a loop the
// compiler vectorises), with the values a target at a time would give: the
// same divisions in the same order, and L_out summed as interp_row sums it
// (the forward pass's bits).
TESSERA_SPECTRA_CLONES
void model_row(RowModel& m, const double* base, double c, const double* s, std::int64_t K, const double* t,
               const double* dt, std::int64_t T) {
  double* w = m.w.data();
  double* p = m.p.data();
  double* u = m.u.data();
  const double tlo = t[0], thi = t[T - 1];
  for (std::int64_t k = 0; k < K; ++k) w[k] = base[k] * c;
  m.valid = false;
  m.cells.clear();
  // A NaN scale (or grid) makes every quantity NaN: the row counts as 0.
  if (std::isnan(w[0]) || std::isnan(w[K - 1])) return;
  double lin = 0, bsum = 0;
  for (std::int64_t k = 1; k < K; ++k) {
    m.inside[k] = w[k] >= tlo && w[k] <= thi;
    if (!m.inside[k]) continue;
    lin += s[k] * (w[k] - w[k - 1]);
    bsum += s[k] * (base[k] - base[k - 1]);
  }
  m.lin = lin, m.bsum = bsum;
  std::int64_t j = 0;
  if (K == 1) {
    j = T;
  } else {
    while (j < T && t[j] < w[0]) ++j;
  }
  m.below = j;
  for (std::int64_t q = 0; q < m.below; ++q) p[q] = s[0], u[q] = 0;
  if (K > 1) {
    for (std::int64_t b = 1; b < K && j < T; ++b) {
      // Cell b holds the targets with w[b-1] <= t < w[b] (the last one also
      // t == w[K-1]).
      std::int64_t j1 = j;
      if (b < K - 1) {
        while (j1 < T && t[j1] < w[b]) ++j1;
      } else {
        while (j1 < T && t[j1] <= w[b]) ++j1;
      }
      if (j1 == j) continue;
      const double w0 = w[b - 1], s0 = s[b - 1], dx = w[b] - w0;
      const double sl = dx > 0 ? (s[b] - s0) / dx : 0.0;
      if (dx > 0) {
        for (std::int64_t q = j; q < j1; ++q) u[q] = (t[q] - w0) / dx;
      } else {
        for (std::int64_t q = j; q < j1; ++q) u[q] = 0;
      }
      for (std::int64_t q = j; q < j1; ++q) p[q] = s0 + (t[q] - w0) * sl;
      m.cells.push_back({b, j, j1, sl});
      j = j1;
    }
  }
  m.above = j;
  for (std::int64_t q = m.above; q < T; ++q) p[q] = s[K - 1], u[q] = 0;
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  std::int64_t q = 1;
  for (; q + 4 <= T; q += 4)
    for (int v = 0; v < 4; ++v) acc[v] += p[q + v] * dt[q + v];
  for (; q < T; ++q) acc[0] += p[q] * dt[q];
  m.lout = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  m.ratio = m.lin / m.lout;
  m.valid = !(std::isnan(m.ratio) || m.lout == 0.0);
}

void RowModel::run(const double* base, double c, const double* s, std::int64_t K, const double* t, const double* dt,
                   std::int64_t T) {
  model_row(*this, base, c, s, K, t, dt, T);
}

/// The primal grids and rows of one call, read as f64.
struct RowReader {
  const ResampleArgs& a;
  std::vector<double> t, dt, base, s;
  std::vector<std::int64_t> id;

  explicit RowReader(const ResampleArgs& args)
      : a(args),
        t(static_cast<std::size_t>(args.T)),
        dt(static_cast<std::size_t>(args.T), 0.0),
        base(static_cast<std::size_t>(args.K)),
        s(static_cast<std::size_t>(args.K)),
        id(static_cast<std::size_t>(args.n)) {
    load_row(a.target, a.target_dt, 0, a.T, t.data());
    for (std::int64_t j = 1; j < a.T; ++j) dt[j] = t[j] - t[j - 1];
    if (!a.wave_per_row && a.K > 0) load_row(a.wave, a.wave_dt, 0, a.K, base.data());
    for (std::int64_t i = 0; i < a.n; ++i) {
      const std::int64_t v = load_id(a.seg, a.seg_dt, i);
      id[i] = (v >= 0 && v < a.S) ? v : -1;
    }
  }
  /// Loads row i into base and s and runs the model; false for a dropped row.
  bool row(std::int64_t i, RowModel& m) {
    if (id[i] < 0) return false;
    if (a.wave_per_row) load_row(a.wave, a.wave_dt, i * a.K, a.K, base.data());
    load_row(a.flux, a.flux_dt, i * a.K, a.K, s.data());
    m.run(base.data(), scale(i), s.data(), a.K, t.data(), dt.data(), a.T);
    return m.valid;
  }
  double weight(std::int64_t i) const { return a.weights ? load(a.weights, a.weights_dt, i) : 1.0; }
  double scale(std::int64_t i) const { return a.scale ? load(a.scale, a.scale_dt, i) : 1.0; }
};

/// Running sums over the targets (index j holds the sum over [0, j)) of
/// what resample_transpose's cells need: of ct and t ct per segment, of dt
/// and t dt once.
struct Prefix {
  std::vector<double> v;  // (T + 1) per array
  std::int64_t T = 0;
  const double* at(std::int64_t k) const { return v.data() + k * (T + 1); }
  static void fill(double* out, const double* x, const double* t, std::int64_t T, bool times_t) {
    out[0] = 0;
    for (std::int64_t j = 0; j < T; ++j) out[j + 1] = out[j] + (times_t ? t[j] * x[j] : x[j]);
  }
};

/// One row's cotangents (resample_transpose), in one pass over its
/// wavelengths and one over its cells (not its targets). With
/// e[j] = wt (ratio c[j] - q dt[j]) the cotangent of p[j] (L_out's share
/// included), every sum the cotangents need is, over a cell [j0, j1) with
/// knots w0 = w[b-1], slope sl and u = (t - w0) / dx, a combination of range
/// sums of c, t c, dt and t dt, which the running sums give in O(1):
///   sum u c = (sum t c - w0 sum c) / dx,   sum p c = s0 sum c + sl (sum t c - w0 sum c),
///   d flux[b-1] += sum (1-u) e,   d flux[b] += sum u e,
///   d scale = amp bsum - sum_cells sl (base[b-1] sum (1-u) e + base[b] sum u e),
/// and likewise for the held ends. The row's model (w, L_in, L_out, ratio)
/// is interp_row's, its sums taken this way; a row the primal counts as 0
/// gets no cotangent.
TESSERA_SPECTRA_CLONES
void transpose_row(const double* cc, const double* ctc, const double* pd, const double* ptd, const TargetGrid& tg,
                   const double* base, double scale, const double* s, std::int64_t K, double wt, double* w,
                   double* gflux, double* gweight, double* gscale) {
  const double* t = tg.t;
  const std::int64_t T = tg.T;
  auto range = [](const double* P, std::int64_t j0, std::int64_t j1) { return P[j1] - P[j0]; };
  const double tlo = t[0], thi = t[T - 1];
  for (std::int64_t k = 0; k < K; ++k) w[k] = base[k] * scale;
  if (std::isnan(w[0]) || std::isnan(w[K - 1])) return;
  double lin = 0, bsum = 0;
  for (std::int64_t k = 1; k < K; ++k)
    if (w[k] >= tlo && w[k] <= thi) {
      lin += s[k] * (w[k] - w[k - 1]);
      bsum += s[k] * (base[k] - base[k - 1]);
    }
  // Below the row's grid p = s[0]; above it s[K-1].
  const std::int64_t below = K == 1 ? T : tg.first_at_or_above(w[0], 0, true);
  const double lo_c = range(cc, 0, below), lo_d = range(pd, 0, below);
  double lout = s[0] * lo_d, G = s[0] * lo_c;
  // The cells' sums, kept for the second pass: at most K - 1 of them.
  struct CellSums {
    std::int64_t b;
    double slope, ac, bc, ad, bd;  // sum (1-u) c, sum u c, sum (1-u) dt, sum u dt
  };
  thread_local std::vector<CellSums> cells;
  cells.clear();
  std::int64_t j = below;
  if (K > 1 && j < T) {
    // The first cell with targets: the first knot above t[j] (the last cell
    // also takes t == w[K-1]).
    std::int64_t b = std::upper_bound(w, w + K, t[j]) - w;
    if (b >= K && t[j] <= w[K - 1]) b = K - 1;
    for (b = std::max<std::int64_t>(b, 1); b < K && j < T; ++b) {
      const std::int64_t j1 = tg.first_at_or_above(w[b], j, b < K - 1);
      if (j1 == j) continue;
      const double w0 = w[b - 1], s0 = s[b - 1], dx = w[b] - w0;
      const double inv = dx > 0 ? 1.0 / dx : 0.0, sl = (s[b] - s0) * inv;
      const double sc = range(cc, j, j1), sd = range(pd, j, j1);
      const double xc = range(ctc, j, j1) - w0 * sc, xd = range(ptd, j, j1) - w0 * sd;
      lout += s0 * sd + sl * xd;
      G += s0 * sc + sl * xc;
      const double bc = xc * inv, bd = xd * inv;
      cells.push_back({b, sl, sc - bc, bc, sd - bd, bd});
      j = j1;
    }
  }
  const double hi_c = range(cc, j, T), hi_d = range(pd, j, T);
  lout += s[K - 1] * hi_d;
  G += s[K - 1] * hi_c;
  const double ratio = lin / lout;
  if (std::isnan(ratio) || lout == 0.0) return;
  if (gweight) *gweight = ratio * G;
  if (!gflux && !gscale) return;
  const double q = G * ratio / lout, amp = wt * G / lout;
  auto e_of = [&](double cs, double ds) { return wt * (ratio * cs - q * ds); };
  if (gflux) {
    gflux[0] += e_of(lo_c, lo_d);
    gflux[K - 1] += e_of(hi_c, hi_d);
  }
  double gs = 0;
  for (const CellSums& cl : cells) {
    const double A = e_of(cl.ac, cl.ad), B = e_of(cl.bc, cl.bd);
    if (gflux) {
      gflux[cl.b - 1] += A;
      gflux[cl.b] += B;
    }
    gs += cl.slope * (base[cl.b - 1] * A + base[cl.b] * B);
  }
  if (gflux)
    for (std::int64_t k = 1; k < K; ++k)
      if (w[k] >= tlo && w[k] <= thi) gflux[k] += amp * (w[k] - w[k - 1]);
  if (gscale) *gscale = amp * bsum - gs;
}

}  // namespace

std::string resample_tangent(const ResampleTangentArgs& x) {
  const ResampleArgs& a = x.a;
  const std::int64_t S = a.S, T = a.T, K = a.K, n = a.n;
  if (x.rowmax) std::fill_n(x.rowmax, n, 0.0);
  if (x.out) std::fill_n(x.out, 3 * S * T, 0.0);
  if (n == 0 || T == 0 || S == 0 || K == 0) return {};
  if (x.out && !std::isfinite(x.bound)) {
    std::fill_n(x.out, 3 * S * T, std::numeric_limits<double>::quiet_NaN());
    return {};
  }
  if (x.out && x.bound == 0.0) return {};  // every term is 0
  if (x.out && x.bound > 0x1p900) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "[resample_accumulate] a tangent term of %.6g is too large for an exact accumulator (expected at "
                  "most 2^900)",
                  x.bound);
    return buf;
  }
  const ExactLimbs limbs(std::max(x.bound, 0x1p-900));
  RowReader rd(a);
  RowModel m(K, T);
  std::vector<double> ts(static_cast<std::size_t>(K), 0.0), dp(static_cast<std::size_t>(T)),
      term(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < n; ++i) {
    if (!rd.row(i, m)) continue;
    if (x.tflux) load_row(x.tflux, x.tflux_dt, i * K, K, ts.data());
    const double tm = x.tweights ? load(x.tweights, x.tweights_dt, i) : 0.0;
    const double tc = x.tscale ? load(x.tscale, x.tscale_dt, i) : 0.0;
    const double* base = rd.base.data();
    double dlin = tc * m.bsum;
    for (std::int64_t k = 1; k < K; ++k)
      if (m.inside[k]) dlin += ts[k] * (m.w[k] - m.w[k - 1]);
    for (std::int64_t j = 0; j < m.below; ++j) dp[j] = ts[0];
    for (const RowModel::Cell& cl : m.cells)
      for (std::int64_t j = cl.j0; j < cl.j1; ++j) {
        const double u = m.u[j];
        dp[j] = (1 - u) * ts[cl.b - 1] + u * ts[cl.b] - cl.slope * ((1 - u) * base[cl.b - 1] + u * base[cl.b]) * tc;
      }
    for (std::int64_t j = m.above; j < T; ++j) dp[j] = ts[K - 1];
    double dlout = 0;
    for (std::int64_t j = 1; j < T; ++j) dlout += dp[j] * rd.dt[j];
    const double dratio = (dlin - m.ratio * dlout) / m.lout;
    const double wt = rd.weight(i);
    double mx = 0;
    for (std::int64_t j = 0; j < T; ++j) {
      term[j] = tm * m.p[j] * m.ratio + wt * (dp[j] * m.ratio + m.p[j] * dratio);
      const double v = std::abs(term[j]);
      if (!(v <= mx)) mx = v;  // NaN sticks
    }
    if (x.rowmax) {
      x.rowmax[i] = mx;
      continue;
    }
    double* o0 = x.out + rd.id[i] * T;
    double* o1 = o0 + S * T;
    double* o2 = o1 + S * T;
    accumulate_row(term.data(), 1.0, T, limbs.sigma, o0, o1, o2);
  }
  return {};
}

// Per row: G = sum_j ct[j] p[j] (eight running sums), e[j] (a vector
// loop), then a cell at a time the two sums of e weighted by the cell's
// interpolation factors, which give both the flux's cotangent at the cell's
// knots and the scale's: the slope is constant over a cell, so
//   sum_j e[j] slope ((1-u) base[a] + u base[b]) = slope (base[a] A + base[b] B)
// with A = sum (1-u) e and B = sum u e over the cell.
void resample_transpose(const ResampleTransposeArgs& x) {
  const ResampleArgs& a = x.a;
  const std::int64_t T = a.T, K = a.K, n = a.n, S = a.S;
  if (x.gflux) std::fill_n(x.gflux, n * K, 0.0);
  if (x.gweights) std::fill_n(x.gweights, n, 0.0);
  if (x.gscale) std::fill_n(x.gscale, n, 0.0);
  if (n == 0 || T == 0 || S == 0 || K == 0) return;
  RowReader rd(a);
  const TargetGrid grid{rd.t.data(), T, rd.t[0],
                        T > 1 && rd.t[T - 1] > rd.t[0] ? static_cast<double>(T - 1) / (rd.t[T - 1] - rd.t[0]) : 0.0};
  // Running sums of dt and t dt, and of ct and t ct for the segment whose
  // rows are being done: the rows go a segment at a time (a counting sort),
  // so each segment's sums are computed once and stay in cache.
  Prefix fixed{std::vector<double>(static_cast<std::size_t>(2 * (T + 1))), T};
  Prefix::fill(fixed.v.data(), rd.dt.data(), rd.t.data(), T, false);
  Prefix::fill(fixed.v.data() + (T + 1), rd.dt.data(), rd.t.data(), T, true);
  std::vector<std::int64_t> start(static_cast<std::size_t>(S) + 1, 0), order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    if (rd.id[i] >= 0) ++start[rd.id[i] + 1];
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<std::int64_t> next(start.begin(), start.end() - 1);
  for (std::int64_t i = 0; i < n; ++i)
    if (rd.id[i] >= 0) order[next[rd.id[i]]++] = i;
  Prefix seg{std::vector<double>(static_cast<std::size_t>(2 * (T + 1))), T};
  std::vector<double> w(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < S; ++k) {
    if (start[k] == start[k + 1]) continue;
    Prefix::fill(seg.v.data(), x.ct + k * T, rd.t.data(), T, false);
    Prefix::fill(seg.v.data() + (T + 1), x.ct + k * T, rd.t.data(), T, true);
    for (std::int64_t r = start[k]; r < start[k + 1]; ++r) {
      const std::int64_t i = order[r];
      if (a.wave_per_row) load_row(a.wave, a.wave_dt, i * K, K, rd.base.data());
      load_row(a.flux, a.flux_dt, i * K, K, rd.s.data());
      transpose_row(seg.at(0), seg.at(1), fixed.at(0), fixed.at(1), grid, rd.base.data(), rd.scale(i), rd.s.data(), K,
                    rd.weight(i), w.data(), x.gflux ? x.gflux + i * K : nullptr,
                    x.gweights ? x.gweights + i : nullptr, x.gscale ? x.gscale + i : nullptr);
    }
  }
}

}  // namespace tessera::cpu
