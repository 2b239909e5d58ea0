// The spectra kernels on CUDA GPUs (spectra.hpp), bitwise the CPU's
// (backend/cpu/spectra.cpp, where the exactness argument is written out).
//
// The CPU runs each row as a march through its cells and the target grid,
// and adds each row's limbs into its segment's accumulator row, rows in
// row order within a segment. Here:
//  - one thread per row runs the CPU's march for that row (the same search
//    steps and the same running sums in the same order), giving the row's
//    scalars (L_in, L_out, ratio; for the tangent also dL_in, dL_out) and,
//    for each of its cells, the end of the targets the march gave it
//    (`cend`: cend[0] ends the targets held at the first value, cend[c]
//    those of cell c, the last one's the start of the held last value);
//  - one thread per accumulator element (segment s, target j) adds, in row
//    order, the limbs of the rows of segment s (a stable sort of the rows
//    by segment lists them), starting from the initial accumulator: the
//    CPU's order exactly, so the bits match even where limb sums would not
//    be exact (an initial accumulator off the limbs' grid). A row's value
//    at target j is recomputed from its cell (found in cend), with the
//    march's formula.
// resample_transpose is per row on the CPU too: one thread per row runs
// it, with the running sums over the segment's cotangent taken as it goes
// (the CPU's prefix sums, the same additions in the same order).
//
// Compiled with --fmad=false (cmake/cuda_options.cmake): every product and
// sum rounds on its own, as the CPU's -ffp-contract=off file does.
#include "kernels/convert.hpp"  // first: see launch.cuh
#include "kernels/portable.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cuda/atomics.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/spectra.hpp"
#include "backend/cuda/load_as.cuh"
#include "backend/cuda/scratch.cuh"
#include "backend/cuda/sort_pairs.cuh"

namespace tessera::cuda {

namespace {

using std::int64_t;
namespace lm = detail::lm;

// cpu's load_id: a segment id, -1 for a u64 past int64.
TESSERA_HD inline int64_t load_id(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::bool_: return static_cast<int64_t>(static_cast<const bool*>(p)[i]);
    case DType::u8: return static_cast<int64_t>(static_cast<const std::uint8_t*>(p)[i]);
    case DType::i8: return static_cast<int64_t>(static_cast<const std::int8_t*>(p)[i]);
    case DType::u32: return static_cast<int64_t>(static_cast<const std::uint32_t*>(p)[i]);
    case DType::i32: return static_cast<int64_t>(static_cast<const std::int32_t*>(p)[i]);
    case DType::u64: {
      const std::uint64_t v = static_cast<const std::uint64_t*>(p)[i];
      return v > static_cast<std::uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v);
    }
    case DType::i64: return static_cast<const std::int64_t*>(p)[i];
    case DType::f32: return static_cast<int64_t>(static_cast<const float*>(p)[i]);
    case DType::f64: return static_cast<int64_t>(static_cast<const double*>(p)[i]);
  }
  return -1;
}

// std::max(a, b): b where a < b, else a (NaN order included).
TESSERA_HD inline double max_of(double a, double b) { return a < b ? b : a; }

// ------------------------------------------------------------ the grid

// The target grid (cpu's TargetGrid and RowReader's t, dt): t, dt (dt[0] =
// 0), g = {t0, inv_h}, and the running sums of dt and t dt (transpose).
struct Grid {
  const double* t;
  const double* dt;
  const double* g;
  const double* pd;   // (T + 1)
  const double* ptd;  // (T + 1)
  int64_t T;

  TESSERA_HD int64_t first_at_or_above(double v, int64_t lo, bool strict) const {
    const double x = (v - g[0]) * g[1];
    int64_t j = !(x > 0.0) ? 0 : x >= static_cast<double>(T) ? T : static_cast<int64_t>(lm::ceil(x));
    j = j < lo ? lo : j;
    while (j > lo && !(strict ? t[j - 1] < v : t[j - 1] <= v)) --j;
    while (j < T && (strict ? t[j] < v : t[j] <= v)) ++j;
    return j;
  }
};

struct DtKernel {
  const double* t;
  double* dt;
  TESSERA_HD void operator()(int64_t j) const { dt[j] = j == 0 ? 0.0 : t[j] - t[j - 1]; }
};

// One thread: the grid's guess parameters and the fixed running sums.
struct GridParamsKernel {
  const double* t;
  const double* dt;
  int64_t T;
  double* g;
  double* pd;
  double* ptd;
  TESSERA_HD void operator()(int64_t) const {
    g[0] = t[0];
    g[1] = T > 1 && t[T - 1] > t[0] ? static_cast<double>(T - 1) / (t[T - 1] - t[0]) : 0.0;
    pd[0] = 0, ptd[0] = 0;
    for (int64_t j = 0; j < T; ++j) {
      pd[j + 1] = pd[j] + dt[j];
      ptd[j + 1] = ptd[j] + t[j] * dt[j];
    }
  }
};

// ------------------------------------------------------------ the rows

struct Rows {
  ResampleRows a;
  const int64_t* id;

  TESSERA_HD double base(int64_t i, int64_t k) const {
    return load_as<double>(a.wave, a.wave_dt, a.wave_per_row ? i * a.K + k : k);
  }
  TESSERA_HD double s(int64_t i, int64_t k) const { return load_as<double>(a.flux, a.flux_dt, i * a.K + k); }
  TESSERA_HD double scale(int64_t i) const { return a.scale ? load_as<double>(a.scale, a.scale_dt, i) : 1.0; }
  TESSERA_HD double weight(int64_t i) const { return a.weights ? load_as<double>(a.weights, a.weights_dt, i) : 1.0; }
};

// A row's wavelengths w[k] = base[k] * scale, and std::upper_bound's steps
// over them.
struct Wave {
  const Rows& r;
  int64_t i;
  double c;
  TESSERA_HD double operator()(int64_t k) const { return r.base(i, k) * c; }
  TESSERA_HD int64_t upper_bound(double v) const {
    int64_t first = 0, len = r.a.K;
    while (len > 0) {
      const int64_t half = len >> 1, mid = first + half;
      if (v < (*this)(mid)) {
        len = half;
      } else {
        first = mid + 1;
        len = len - half - 1;
      }
    }
    return first;
  }
};

// A row's sums over the cells k >= 1 whose upper wavelength w[k] lies on
// the target grid [tlo, thi]: lin of s[k] * (w[k] - w[k-1]) and bsum of
// s[k] * (base[k] - base[k-1]), each in k order from 0 (the CPU's order).
struct OnGridSums {
  double lin = 0, bsum = 0;
};
TESSERA_HD inline OnGridSums on_grid_sums(const Wave& w, double tlo, double thi) {
  const Rows& r = w.r;
  const int64_t i = w.i;
  OnGridSums out;
  for (int64_t k = 1; k < r.a.K; ++k) {
    const double wk = w(k);
    if (!(wk >= tlo && wk <= thi)) continue;
    out.lin += r.s(i, k) * (wk - w(k - 1));
    out.bsum += r.s(i, k) * (r.base(i, k) - r.base(i, k - 1));
  }
  return out;
}

// Rows grouped by segment: key = the segment (S: dropped), value = the row.
struct IdKernel {
  ResampleRows a;
  int64_t* id;
  std::uint64_t* key;
  int64_t* val;
  TESSERA_HD void operator()(int64_t i) const {
    const int64_t s = load_id(a.seg, a.seg_dt, i);
    id[i] = (s >= 0 && s < a.S) ? s : -1;
    key[i] = static_cast<std::uint64_t>(id[i] < 0 ? a.S : id[i]);
    val[i] = i;
  }
};

// The sum over q >= 1 of p[q] * dt[q] in interp_row's (and model_row's)
// order: four running sums over q = 1, 5, 9, ... (+ 0, 1, 2, 3), the tail
// into the first; terms arrive in increasing q.
struct Lout {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t main_end;
  const double* dt;
  TESSERA_HD Lout(int64_t T, const double* d) : main_end(1 + 4 * ((T - 1) / 4)), dt(d) {}
  TESSERA_HD void add(int64_t q, double p) {
    if (q < 1) return;
    if (q < main_end)
      acc[(q - 1) & 3] += p * dt[q];
    else
      acc[0] += p * dt[q];
  }
  TESSERA_HD double total() const { return (acc[0] + acc[1]) + (acc[2] + acc[3]); }
};

// A row's cell for target j from its cend: 0 (held at the first value), K
// (held at the last) or c in [1, K-1].
TESSERA_HD inline int64_t cell_of(const int64_t* ce, int64_t K, int64_t j) {
  if (K == 1 || j < ce[0]) return 0;
  if (j >= ce[K - 1]) return K;
  int64_t lo = 1, hi = K - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ce[mid] > j)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// --------------------------------------------------- resample_accumulate

// Per row: scale_and_integrate's L_in, interp_row's march (its cells into
// cend, L_out, the bound on |p|), then the row's factor f and max |term|.
struct RowAccumulateKernel {
  Rows r;
  Grid g;
  int64_t* cend;
  double* f;
  double* mx;
  TESSERA_HD void operator()(int64_t i) const {
    if (r.id[i] < 0) return;
    const int64_t K = r.a.K, T = r.a.T;
    const double* t = g.t;
    const Wave w{r, i, r.scale(i)};
    const double tlo = t[0], thi = t[T - 1];
    // L_in: scale_and_integrate's four running sums.
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t k = 1;
    for (; k + 4 <= K; k += 4)
      for (int u = 0; u < 4; ++u) {
        const double wk = w(k + u);
        acc[u] += (wk >= tlo && wk <= thi) ? r.s(i, k + u) * (wk - w(k + u - 1)) : 0.0;
      }
    for (; k < K; ++k) {
      const double wk = w(k);
      acc[0] += (wk >= tlo && wk <= thi) ? r.s(i, k) * (wk - w(k - 1)) : 0.0;
    }
    const double lin = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    // interp_row's march.
    int64_t* ce = cend + i * K;
    Lout lo(T, g.dt);
    double big = 0.0;
    int64_t j = 0;
    if (K == 1) {
      const double s0 = r.s(i, 0);
      for (; j < T; ++j) lo.add(j, s0);
      big = lm::fabs(s0);
      ce[0] = T;
    } else {
      const double first = r.s(i, 0), last = r.s(i, K - 1);
      j = g.first_at_or_above(w(0), 0, true);
      for (int64_t q = 0; q < j; ++q) lo.add(q, first);
      if (j > 0) big = lm::fabs(first);
      ce[0] = j;
      int64_t c = j < T ? w.upper_bound(t[j]) : K;
      c = c < 1 ? 1 : c;
      for (int64_t b = 1; b < c && b < K; ++b) ce[b] = j;
      for (; c < K && j < T; ++c) {
        const int64_t j1 = g.first_at_or_above(w(c), j, c < K - 1);
        if (j1 == j) {
          ce[c] = j;
          continue;
        }
        const double w0 = w(c - 1), s0 = r.s(i, c - 1), sc = r.s(i, c);
        const double dx = w(c) - w0;
        big = max_of(big, max_of(lm::fabs(s0), lm::fabs(sc)));
        const double slope = lm::fabs(dx) <= 0.0 ? 0.0 : (sc - s0) / dx;
        for (int64_t q = j; q < j1; ++q) lo.add(q, s0 + (t[q] - w0) * slope);
        ce[c] = j1;
        j = j1;
      }
      for (; c < K; ++c) ce[c] = j;
      if (j < T) big = max_of(big, lm::fabs(last));
      for (; j < T; ++j) lo.add(j, last);
    }
    const double lout = lo.total();
    double ratio = lin / lout;
    if (lm::isnan(ratio) || lout == 0.0) ratio = 0.0;
    const double fi = r.weight(i) * ratio;
    f[i] = fi;
    mx[i] = big * lm::fabs(fi);
  }
};

// interp_row's value of row i at target j, from its cell.
TESSERA_HD inline double p_accumulate(const Rows& r, const Grid& g, const int64_t* cend, int64_t i, int64_t j) {
  const int64_t K = r.a.K;
  const int64_t* ce = cend + i * K;
  const int64_t c = cell_of(ce, K, j);
  if (c == 0) return r.s(i, 0);
  if (c == K) return r.s(i, K - 1);
  const Wave w{r, i, r.scale(i)};
  const double w0 = w(c - 1), s0 = r.s(i, c - 1);
  const double dx = w(c) - w0;
  const double slope = lm::fabs(dx) <= 0.0 ? 0.0 : (r.s(i, c) - s0) / dx;
  return s0 + (g.t[j] - w0) * slope;
}

// The first row (in the accumulation order) whose terms pass max_abs.
struct TooLargeKernel {
  const int64_t* order;
  const double* mx;
  double max_abs;
  int64_t* first;
  TESSERA_HD void operator()(int64_t pos) const {
    if (mx[order[pos]] > max_abs) atomic_min(first, pos);
  }
};

TESSERA_HD inline void add_limbs(double x, const double* sigma, double& a0, double& a1, double& a2) {
  const double h = (x + sigma[0]) - sigma[0];
  const double rr = x - h;
  const double m = (rr + sigma[1]) - sigma[1];
  const double r2 = rr - m;
  const double l = (r2 + sigma[2]) - sigma[2];
  a0 += h;
  a1 += m;
  a2 += l;
}

struct Sigma {
  double v[3];
};

struct SegmentAccumulateKernel {
  Rows r;
  Grid g;
  const int64_t* cend;
  const double* f;
  const int64_t* start;
  const int64_t* order;
  Sigma sigma;
  const double* init;
  double* out;
  TESSERA_HD void operator()(int64_t e) const {
    const int64_t S = r.a.S, T = r.a.T;
    const int64_t s = e / T, j = e - s * T;
    double a0 = init ? init[e] : 0.0, a1 = init ? init[S * T + e] : 0.0, a2 = init ? init[2 * S * T + e] : 0.0;
    for (int64_t pos = start[s]; pos < start[s + 1]; ++pos) {
      const int64_t i = order[pos];
      add_limbs(p_accumulate(r, g, cend, i, j) * f[i], sigma.v, a0, a1, a2);
    }
    out[e] = a0;
    out[S * T + e] = a1;
    out[2 * S * T + e] = a2;
  }
};

struct CopyKernel {
  const double* in;
  double* out;
  TESSERA_HD void operator()(int64_t i) const { out[i] = in ? in[i] : 0.0; }
};

struct SetKernel {
  int64_t* p;
  int64_t v;
  TESSERA_HD void operator()(int64_t) const { *p = v; }
};

struct FillKernel {
  double* out;
  double v;
  TESSERA_HD void operator()(int64_t i) const { out[i] = v; }
};

// ------------------------------------------------------ resample_tangent

// Per row: model_row (its linear scans, L_in, L_out, ratio), then the
// tangent's dL_in, dL_out and d ratio, and with rowmax the row's largest
// |term| (in target order, as the CPU's loop).
struct RowTangentKernel {
  Rows r;
  Grid g;
  ResampleTangents tg;
  int64_t* cend;
  double* ratio_out;
  double* dratio_out;
  double* tm_out;
  double* tc_out;
  unsigned char* valid;
  double* rowmax;

  TESSERA_HD double ts(int64_t i, int64_t k) const {
    return tg.tflux ? load_as<double>(tg.tflux, tg.tflux_dt, i * r.a.K + k) : 0.0;
  }

  TESSERA_HD void operator()(int64_t i) const {
    valid[i] = 0;
    if (r.id[i] < 0) return;
    const int64_t K = r.a.K, T = r.a.T;
    const double* t = g.t;
    const Wave w{r, i, r.scale(i)};
    const double tlo = t[0], thi = t[T - 1];
    if (lm::isnan(w(0)) || lm::isnan(w(K - 1))) return;
    const OnGridSums sums = on_grid_sums(w, tlo, thi);
    const double lin = sums.lin, bsum = sums.bsum;
    int64_t* ce = cend + i * K;
    Lout lo(T, g.dt);
    int64_t j = 0;
    if (K == 1) {
      j = T;
    } else {
      const double w0 = w(0);
      while (j < T && t[j] < w0) ++j;
    }
    ce[0] = j;
    const double first = r.s(i, 0), last = r.s(i, K - 1);
    for (int64_t q = 0; q < j; ++q) lo.add(q, first);
    int64_t b = 1;
    if (K > 1) {
      for (; b < K && j < T; ++b) {
        const double wb = w(b);
        int64_t j1 = j;
        if (b < K - 1) {
          while (j1 < T && t[j1] < wb) ++j1;
        } else {
          while (j1 < T && t[j1] <= wb) ++j1;
        }
        ce[b] = j1;
        if (j1 == j) continue;
        const double w0 = w(b - 1), s0 = r.s(i, b - 1), dx = wb - w0;
        const double sl = dx > 0 ? (r.s(i, b) - s0) / dx : 0.0;
        for (int64_t q = j; q < j1; ++q) lo.add(q, s0 + (t[q] - w0) * sl);
        j = j1;
      }
    }
    for (; b < K; ++b) ce[b] = j;
    for (int64_t q = j; q < T; ++q) lo.add(q, last);
    const double lout = lo.total();
    const double ratio = lin / lout;
    if (lm::isnan(ratio) || lout == 0.0) return;
    // The tangent's sums.
    const double tm = tg.tweights ? load_as<double>(tg.tweights, tg.tweights_dt, i) : 0.0;
    const double tc = tg.tscale ? load_as<double>(tg.tscale, tg.tscale_dt, i) : 0.0;
    double dlin = tc * bsum;
    for (int64_t k = 1; k < K; ++k) {
      const double wk = w(k);
      if (wk >= tlo && wk <= thi) dlin += ts(i, k) * (wk - w(k - 1));
    }
    double dlout = 0;
    for (int64_t q = 1; q < T; ++q) dlout += dp(i, q, tc) * g.dt[q];
    const double dratio = (dlin - ratio * dlout) / lout;
    ratio_out[i] = ratio;
    dratio_out[i] = dratio;
    tm_out[i] = tm;
    tc_out[i] = tc;
    valid[i] = 1;
    if (rowmax) {
      double mx = 0;
      for (int64_t q = 0; q < T; ++q) {
        const double v = lm::fabs(term(i, q, ratio, dratio, tm, tc));
        if (!(v <= mx)) mx = v;  // as the CPU's loop
      }
      rowmax[i] = mx;
    }
  }

  // model_row's p, and the tangent's dp, of row i at target q.
  TESSERA_HD void values(int64_t i, int64_t q, double tc, double& p, double& dpv) const {
    const int64_t K = r.a.K;
    const int64_t c = cell_of(cend + i * K, K, q);
    if (c == 0) {
      p = r.s(i, 0), dpv = ts(i, 0);
      return;
    }
    if (c == K) {
      p = r.s(i, K - 1), dpv = ts(i, K - 1);
      return;
    }
    const Wave w{r, i, r.scale(i)};
    const double w0 = w(c - 1), s0 = r.s(i, c - 1), dx = w(c) - w0;
    const double sl = dx > 0 ? (r.s(i, c) - s0) / dx : 0.0;
    const double u = dx > 0 ? (g.t[q] - w0) / dx : 0.0;
    p = s0 + (g.t[q] - w0) * sl;
    dpv = (1 - u) * ts(i, c - 1) + u * ts(i, c) - sl * ((1 - u) * r.base(i, c - 1) + u * r.base(i, c)) * tc;
  }
  TESSERA_HD double dp(int64_t i, int64_t q, double tc) const {
    double p, d;
    values(i, q, tc, p, d);
    return d;
  }
  TESSERA_HD double term(int64_t i, int64_t q, double ratio, double dratio, double tm, double tc) const {
    double p, d;
    values(i, q, tc, p, d);
    return tm * p * ratio + r.weight(i) * (d * ratio + p * dratio);
  }
};

struct SegmentTangentKernel {
  RowTangentKernel row;
  const double* ratio;
  const double* dratio;
  const double* tm;
  const double* tc;
  const unsigned char* valid;
  const int64_t* start;
  const int64_t* order;
  Sigma sigma;
  double* out;
  TESSERA_HD void operator()(int64_t e) const {
    const int64_t S = row.r.a.S, T = row.r.a.T;
    const int64_t s = e / T, j = e - s * T;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0;
    for (int64_t pos = start[s]; pos < start[s + 1]; ++pos) {
      const int64_t i = order[pos];
      if (!valid[i]) continue;
      add_limbs(row.term(i, j, ratio[i], dratio[i], tm[i], tc[i]) * 1.0, sigma.v, a0, a1, a2);
    }
    out[e] = a0;
    out[S * T + e] = a1;
    out[2 * S * T + e] = a2;
  }
};

// ---------------------------------------------------- resample_transpose

// The running sums of a segment's cotangent c and of t c (cpu's Prefix),
// taken as a row's march asks for consecutive ranges of them.
struct Cursor {
  const double* x;
  const double* t;
  int64_t pos = 0;
  double c = 0, tc = 0;
  TESSERA_HD void to(int64_t j) {
    for (; pos < j; ++pos) {
      c = c + x[pos];
      tc = tc + t[pos] * x[pos];
    }
  }
};

struct RowTransposeKernel {
  Rows r;
  Grid g;
  const double* ct;
  double* gflux;
  double* gweights;
  double* gscale;

  // transpose_row's cells from `below` on: calls cell(b, slope, sc, sd, xc,
  // xd, dx) for each cell with targets, in order; returns where the last
  // one ends. The cursor starts at `below`.
  template <class F>
  TESSERA_HD int64_t cells(const Wave& w, int64_t i, int64_t below, Cursor& cur, F&& cell) const {
    const int64_t K = r.a.K, T = r.a.T;
    const double* t = g.t;
    int64_t j = below;
    if (K > 1 && j < T) {
      int64_t b = w.upper_bound(t[j]);
      if (b >= K && t[j] <= w(K - 1)) b = K - 1;
      for (b = b < 1 ? 1 : b; b < K && j < T; ++b) {
        const int64_t j1 = g.first_at_or_above(w(b), j, b < K - 1);
        if (j1 == j) continue;
        const double w0 = w(b - 1), s0 = r.s(i, b - 1), dx = w(b) - w0;
        const double inv = dx > 0 ? 1.0 / dx : 0.0, sl = (r.s(i, b) - s0) * inv;
        const double c0 = cur.c, tc0 = cur.tc;
        cur.to(j1);
        const double sc = cur.c - c0, sd = g.pd[j1] - g.pd[j];
        const double xc = (cur.tc - tc0) - w0 * sc, xd = (g.ptd[j1] - g.ptd[j]) - w0 * sd;
        cell(b, s0, sl, inv, sc, sd, xc, xd);
        j = j1;
      }
    }
    return j;
  }

  TESSERA_HD void operator()(int64_t i) const {
    const int64_t K = r.a.K, T = r.a.T;
    double* gf = gflux ? gflux + i * K : nullptr;
    if (gf)
      for (int64_t k = 0; k < K; ++k) gf[k] = 0.0;
    if (gweights) gweights[i] = 0.0;
    if (gscale) gscale[i] = 0.0;
    const int64_t seg = r.id[i];
    if (seg < 0) return;
    const double* t = g.t;
    const double wt = r.weight(i);
    const Wave w{r, i, r.scale(i)};
    const double tlo = t[0], thi = t[T - 1];
    if (lm::isnan(w(0)) || lm::isnan(w(K - 1))) return;
    const OnGridSums sums = on_grid_sums(w, tlo, thi);
    const double lin = sums.lin, bsum = sums.bsum;
    const double first = r.s(i, 0), last = r.s(i, K - 1);
    const int64_t below = K == 1 ? T : g.first_at_or_above(w(0), 0, true);
    const double* cc = ct + seg * T;
    Cursor cur{cc, t};
    cur.to(below);
    const double lo_c = cur.c, lo_d = g.pd[below] - g.pd[0];
    double lout = first * lo_d, G = first * lo_c;
    const int64_t j = cells(w, i, below, cur,
                            [&](int64_t, double s0, double sl, double, double sc, double sd, double xc, double xd) {
                              lout += s0 * sd + sl * xd;
                              G += s0 * sc + sl * xc;
                            });
    const double c0 = cur.c;
    cur.to(T);
    const double hi_c = cur.c - c0, hi_d = g.pd[T] - g.pd[j];
    lout += last * hi_d;
    G += last * hi_c;
    const double ratio = lin / lout;
    if (lm::isnan(ratio) || lout == 0.0) return;
    if (gweights) gweights[i] = ratio * G;
    if (!gf && !gscale) return;
    const double q = G * ratio / lout, amp = wt * G / lout;
    auto e_of = [&](double cs, double ds) { return wt * (ratio * cs - q * ds); };
    if (gf) {
      gf[0] += e_of(lo_c, lo_d);
      gf[K - 1] += e_of(hi_c, hi_d);
    }
    // The cells again (the same sums, from a fresh cursor), now with the
    // row's totals known.
    double gs = 0;
    Cursor again{cc, t};
    again.to(below);
    cells(w, i, below, again, [&](int64_t b, double, double sl, double inv, double sc, double sd, double xc, double xd) {
      const double bc = xc * inv, bd = xd * inv;
      const double A = e_of(sc - bc, sd - bd), B = e_of(bc, bd);
      if (gf) {
        gf[b - 1] += A;
        gf[b] += B;
      }
      gs += sl * (r.base(i, b - 1) * A + r.base(i, b) * B);
    });
    if (gf)
      for (int64_t k = 1; k < K; ++k) {
        const double wk = w(k);
        if (wk >= tlo && wk <= thi) gf[k] += amp * (wk - w(k - 1));
      }
    if (gscale) gscale[i] = amp * bsum - gs;
  }
};

// ------------------------------------------------------------ scratch

struct Layout {
  std::size_t t, dt, g, pd, ptd, id, key, key_out, val, val_out, start, cend, row[5], valid, first, sort, total;
  std::size_t sort_bytes = 0;
};

Layout layout(const ResampleRows& a) {
  Layout l{};
  ScratchRegions sc;
  const std::size_t n = static_cast<std::size_t>(a.n), T = static_cast<std::size_t>(a.T);
  l.t = sc.take(T * 8);
  l.dt = sc.take(T * 8);
  l.g = sc.take(2 * 8);
  l.pd = sc.take((T + 1) * 8);
  l.ptd = sc.take((T + 1) * 8);
  l.id = sc.take(n * 8);
  l.key = sc.take(n * 8);
  l.key_out = sc.take(n * 8);
  l.val = sc.take(n * 8);
  l.val_out = sc.take(n * 8);
  l.start = sc.take(static_cast<std::size_t>(a.S + 1) * 8);
  l.cend = sc.take(n * static_cast<std::size_t>(a.K) * 8);
  for (std::size_t& r : l.row) r = sc.take(n * 8);
  l.valid = sc.take(n);
  l.first = sc.take(8);
  l.sort_bytes = sort_pairs_bytes("resample_accumulate", a.n, static_cast<std::uint64_t>(a.S));
  l.sort = sc.take(l.sort_bytes);
  l.total = sc.total();
  return l;
}

// Device bytes to the host (waits for the stream).
void read_back(const char* op, void* host, const void* dev, std::size_t bytes) {
  refuse_while_recording(op, "a copy to the host");
  const Current& c = current(op);
  if (c.emulated) {
    std::memcpy(host, dev, bytes);
    return;
  }
  check(static_cast<int>(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(c.stream))),
        op, "a copy to the host");
  synchronize(op);
}

// The grid, the rows' segments and their order by segment (stable).
struct Prepared {
  Grid g;
  Rows r;
  const int64_t* order;
  const int64_t* start;
  int64_t* cend;
};

Prepared prepare(const char* op, const ResampleRows& a, void* scratch, const Layout& l) {
  const int64_t T = a.T, n = a.n, S = a.S;
  double* t = at<double>(scratch, l.t);
  double* dt = at<double>(scratch, l.dt);
  double* gp = at<double>(scratch, l.g);
  double* pd = at<double>(scratch, l.pd);
  double* ptd = at<double>(scratch, l.ptd);
  for_each(op, T, LoadAsKernel<double>{a.target, a.target_dt, t});
  for_each(op, T, DtKernel{t, dt});
  for_each(op, 1, GridParamsKernel{t, dt, T, gp, pd, ptd});
  int64_t* id = at<int64_t>(scratch, l.id);
  auto* key = at<std::uint64_t>(scratch, l.key);
  auto* key_out = at<std::uint64_t>(scratch, l.key_out);
  auto* val = at<int64_t>(scratch, l.val);
  auto* val_out = at<int64_t>(scratch, l.val_out);
  for_each(op, n, IdKernel{a, id, key, val});
  sort_pairs(op, key, key_out, val, val_out, n, static_cast<std::uint64_t>(S), at<void>(scratch, l.sort),
             l.sort_bytes);
  int64_t* start = at<int64_t>(scratch, l.start);
  for_each(op, S + 1, RunStartKernel{key_out, n, start});
  return Prepared{Grid{t, dt, gp, pd, ptd, T}, Rows{a, id}, val_out, start, at<int64_t>(scratch, l.cend)};
}

}  // namespace

std::size_t resample_scratch(const ResampleRows& a) { return layout(a).total; }

void fill_f64(double* out, std::int64_t n, double v) { for_each("resample_accumulate", n, FillKernel{out, v}); }

double read_f64(const double* p) {
  double v = 0;
  read_back("resample_accumulate", &v, p, sizeof v);
  return v;
}

std::string resample_accumulate(const ResampleRows& a, double max_abs, const double sigma[3], const double* init,
                                double* out, void* scratch) {
  const char* op = "resample_accumulate";
  const int64_t S = a.S, T = a.T, K = a.K, n = a.n;
  if (n == 0 || T == 0 || S == 0 || K == 0) {
    for_each(op, 3 * S * T, CopyKernel{init, out});
    return {};
  }
  const Layout l = layout(a);
  const Prepared p = prepare(op, a, scratch, l);
  double* f = at<double>(scratch, l.row[0]);
  double* mx = at<double>(scratch, l.row[1]);
  for_each(op, n, RowAccumulateKernel{p.r, p.g, p.cend, f, mx});
  // The CPU stops at the first row, in its order, whose terms pass the
  // bound: that row's message.
  int64_t* first = at<int64_t>(scratch, l.first);
  for_each(op, 1, SetKernel{first, n});
  int64_t rows = 0;
  read_back(op, &rows, p.start + S, sizeof rows);
  for_each(op, rows, TooLargeKernel{p.order, mx, max_abs, first});
  int64_t bad = n;
  read_back(op, &bad, first, sizeof bad);
  if (bad < rows) {
    int64_t i = 0;
    double m = 0;
    read_back(op, &i, p.order + bad, sizeof i);
    read_back(op, &m, mx + i, sizeof m);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "[resample_accumulate] a row contributes %.6g, above max_abs = %.6g (the exact accumulator's "
                  "bound); give a larger max_abs",
                  m, max_abs);
    return buf;
  }
  for_each(op, S * T,
           SegmentAccumulateKernel{p.r, p.g, p.cend, f, p.start, p.order, Sigma{{sigma[0], sigma[1], sigma[2]}}, init,
                                   out});
  return {};
}

void resample_tangent(const ResampleRows& a, const ResampleTangents& tg, const double sigma[3], double* rowmax,
                      double* out, void* scratch) {
  const char* op = "resample_accumulate";
  const int64_t S = a.S, T = a.T, n = a.n;
  const Layout l = layout(a);
  const Prepared p = prepare(op, a, scratch, l);
  double* ratio = at<double>(scratch, l.row[0]);
  double* dratio = at<double>(scratch, l.row[1]);
  double* tm = at<double>(scratch, l.row[2]);
  double* tc = at<double>(scratch, l.row[3]);
  auto* valid = at<unsigned char>(scratch, l.valid);
  const RowTangentKernel row{p.r, p.g, tg, p.cend, ratio, dratio, tm, tc, valid, rowmax};
  for_each(op, n, row);
  if (rowmax || !out) return;
  for_each(op, S * T,
           SegmentTangentKernel{row, ratio, dratio, tm, tc, valid, p.start, p.order,
                                Sigma{{sigma[0], sigma[1], sigma[2]}}, out});
}

void resample_transpose(const ResampleRows& a, const double* ct, double* gflux, double* gweights, double* gscale,
                        void* scratch) {
  const char* op = "resample_transpose";
  const int64_t T = a.T, K = a.K, n = a.n, S = a.S;
  if (n == 0 || T == 0 || S == 0 || K == 0) {
    if (gflux) for_each(op, n * K, FillKernel{gflux, 0.0});
    if (gweights) for_each(op, n, FillKernel{gweights, 0.0});
    if (gscale) for_each(op, n, FillKernel{gscale, 0.0});
    return;
  }
  const Layout l = layout(a);
  const Prepared p = prepare(op, a, scratch, l);
  for_each(op, n, RowTransposeKernel{p.r, p.g, ct, gflux, gweights, gscale});
}

}  // namespace tessera::cuda
