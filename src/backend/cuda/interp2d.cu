// interp2d and its transpose on CUDA GPUs (interp2d.hpp).
//
// Forward: one thread per query finds its cell and its 1-d taps (the CPU's
// Axis::cell, linear_taps and cubic_taps: the same f64 operations, the
// knots' search the same steps as std::upper_bound), then one thread per
// result element sums the K x K taps' weight x table element in the CPU's
// order (k, then l; the first term not added to a zero).
//
// Transpose: the CPU adds, into each table element, the terms of the
// queries in query order and, within a query, tap order (k, then l), onto a
// table of zeros. To keep that order without float atomics, every (query,
// tap) pair is an entry e = q * K*K + k * K + l keyed by the table row it
// adds to; a stable sort by row (a radix sort on the GPU, a counting sort
// on an emulated one) lists each row's entries in increasing e, which is
// exactly the CPU's order; then one thread per table element adds its row's
// entries in that order. Filled queries (outside the grid) add nothing:
// their entries get the key past the last row.
#include "kernels/convert.hpp"  // first: see launch.cuh
#include "kernels/portable.hpp"

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cuda/interp2d.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/load_as.cuh"

namespace tessera::cuda {

namespace {

using std::int64_t;

// ------------------------------------------------------------------ axes

// cpu's Axis: the knots in f64 and their inverse spacings (0 where equal).
struct AxisView {
  const double* knot;
  const double* inv;
  int64_t n;

  // std::upper_bound's steps (libstdc++), so unsorted knots give the CPU's
  // cell too.
  TESSERA_HD int64_t upper_bound(double v) const {
    int64_t first = 0, len = n;
    while (len > 0) {
      const int64_t half = len >> 1, mid = first + half;
      if (v < knot[mid]) {
        len = half;
      } else {
        first = mid + 1;
        len = len - half - 1;
      }
    }
    return first;
  }
  TESSERA_HD int64_t cell(double v) const {
    const int64_t i = detail::lm::isnan(v) ? n : upper_bound(v);
    return i < 1 ? 1 : i > n - 1 ? n - 1 : i;
  }
  TESSERA_HD bool inside(double v) const { return v >= knot[0] && v <= knot[n - 1]; }
};

struct KnotKernel {
  const void* p;
  DType dt;
  double* knot;
  TESSERA_HD void operator()(int64_t i) const { knot[i] = load_as<double>(p, dt, i); }
};

struct InvKernel {
  const double* knot;
  double* inv;
  TESSERA_HD void operator()(int64_t m) const {
    const double h = knot[m + 1] - knot[m];
    inv[m] = h == 0 ? 0.0 : 1.0 / h;
  }
};

template <int K>
struct Taps {
  int64_t idx[K];
  double w[K];
};

TESSERA_HD inline double frac(double v, double a, double h) { return h == 0 ? 0.0 : (v - a) / h; }

// cpu's linear_taps.
TESSERA_HD inline Taps<2> linear_taps(const AxisView& a, int64_t i, double v, bool slope) {
  const double h = a.knot[i] - a.knot[i - 1];
  if (slope) return {{i - 1, i}, {-a.inv[i - 1], a.inv[i - 1]}};
  return {{i - 1, i}, {frac(a.knot[i], v, h), frac(v, a.knot[i - 1], h)}};
}

// cpu's cubic_taps, operation for operation.
TESSERA_HD inline Taps<4> cubic_taps(const AxisView& a, int64_t i, double v, bool slope) {
  const double h = a.knot[i] - a.knot[i - 1];
  const double s = a.inv[i - 1];
  const double t = frac(v, a.knot[i - 1], h);
  const double t2 = t * t, t3 = t2 * t;
  double h0 = 1 - 3 * t2 + 2 * t3, h1 = 3 * t2 - 2 * t3;
  double g0 = h * (t - 2 * t2 + t3), g1 = h * (t3 - t2);
  if (slope) {
    h0 = (6 * t2 - 6 * t) * s;
    h1 = -h0;
    g0 = s == 0 ? 0.0 : 1 - 4 * t + 3 * t2;
    g1 = s == 0 ? 0.0 : 3 * t2 - 2 * t;
  }
  Taps<4> r{{i - 2, i - 1, i, i + 1}, {0, h0, h1, 0}};
  if (i - 1 == 0) {
    r.w[1] -= g0 * s;
    r.w[2] += g0 * s;
  } else {
    const double sl = a.inv[i - 2];
    r.w[0] -= 0.5 * g0 * sl;
    r.w[1] += 0.5 * g0 * sl - 0.5 * g0 * s;
    r.w[2] += 0.5 * g0 * s;
  }
  if (i == a.n - 1) {
    r.w[1] -= g1 * s;
    r.w[2] += g1 * s;
  } else {
    const double sr = a.inv[i];
    r.w[1] -= 0.5 * g1 * s;
    r.w[2] += 0.5 * g1 * s - 0.5 * g1 * sr;
    r.w[3] += 0.5 * g1 * sr;
  }
  if (r.idx[0] < 0) r.idx[0] = i - 1;
  if (r.idx[3] > a.n - 1) r.idx[3] = i;
  return r;
}

// One query's taps on both axes; `filled` for a query the fill answers.
struct QueryTaps {
  int64_t ix[4], iy[4];
  double wx[4], wy[4];
  int filled;
};

struct Setup {
  AxisView ax, ay;
  const void* xq;
  DType xq_dt;
  const void* yq;
  DType yq_dt;
  bool extrapolate, cubic, slope_x, slope_y;

  template <int K>
  TESSERA_HD static void put(QueryTaps& r, const Taps<K>& tx, const Taps<K>& ty) {
    for (int k = 0; k < K; ++k) {
      r.ix[k] = tx.idx[k], r.wx[k] = tx.w[k];
      r.iy[k] = ty.idx[k], r.wy[k] = ty.w[k];
    }
  }
  TESSERA_HD QueryTaps operator()(int64_t q) const {
    QueryTaps r{};
    const double u = load_as<double>(xq, xq_dt, q), v = load_as<double>(yq, yq_dt, q);
    if (!extrapolate && !(ax.inside(u) && ay.inside(v))) {
      r.filled = 1;
      return r;
    }
    const int64_t i = ax.cell(u), j = ay.cell(v);
    if (cubic)
      put<4>(r, cubic_taps(ax, i, u, slope_x), cubic_taps(ay, j, v, slope_y));
    else
      put<2>(r, linear_taps(ax, i, u, slope_x), linear_taps(ay, j, v, slope_y));
    return r;
  }
};

struct TapsKernel {
  Setup s;
  QueryTaps* taps;
  TESSERA_HD void operator()(int64_t q) const { taps[q] = s(q); }
};

// out[q, r] = sum over (k, l) of w_kl * f[ix[k], iy[l], r], as weighted_rows.
template <class T, int K>
struct ForwardKernel {
  const QueryTaps* taps;
  const T* f;
  int64_t ny, rest;
  T fill;
  T* out;
  TESSERA_HD void operator()(int64_t e) const {
    const int64_t q = e / rest, r = e - q * rest;
    const QueryTaps& qt = taps[q];
    if (qt.filled) {
      out[e] = fill;
      return;
    }
    T acc = T(0);
    for (int k = 0; k < K; ++k)
      for (int l = 0; l < K; ++l) {
        const T w = static_cast<T>(qt.wx[k] * qt.wy[l]);
        const T term = w * f[(qt.ix[k] * ny + qt.iy[l]) * rest + r];
        acc = (k == 0 && l == 0) ? term : acc + term;
      }
    out[e] = acc;
  }
};

// ------------------------------------------------------------- transpose

// Entry e = q * K*K + k * K + l: its table row (rows past the last for a
// filled query) and its weight.
template <class T, int K>
struct EntryKernel {
  Setup s;
  int64_t ny, rows;
  std::uint64_t* key;
  int64_t* val;
  T* weight;
  TESSERA_HD void operator()(int64_t q) const {
    const QueryTaps qt = s(q);
    for (int k = 0; k < K; ++k)
      for (int l = 0; l < K; ++l) {
        const int64_t e = q * K * K + k * K + l;
        key[e] = qt.filled ? static_cast<std::uint64_t>(rows) : static_cast<std::uint64_t>(qt.ix[k] * ny + qt.iy[l]);
        val[e] = e;
        weight[e] = static_cast<T>(qt.wx[k] * qt.wy[l]);
      }
  }
};

// start[row] = the first sorted entry of a row >= `row`.
struct StartKernel {
  const std::uint64_t* key;
  int64_t m;
  int64_t* start;
  TESSERA_HD void operator()(int64_t row) const {
    int64_t lo = 0, hi = m;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (key[mid] < static_cast<std::uint64_t>(row))
        lo = mid + 1;
      else
        hi = mid;
    }
    start[row] = lo;
  }
};

template <class T, int K>
struct GatherKernel {
  const int64_t* start;
  const int64_t* entry;
  const T* weight;
  const T* ct;
  int64_t rest;
  T* table;
  TESSERA_HD void operator()(int64_t e) const {
    const int64_t row = e / rest, r = e - row * rest;
    T acc = T(0);
    for (int64_t i = start[row]; i < start[row + 1]; ++i) {
      const int64_t en = entry[i];
      acc += weight[en] * ct[(en / (K * K)) * rest + r];
    }
    table[e] = acc;
  }
};

template <class T>
struct ZeroKernel {
  T* p;
  TESSERA_HD void operator()(int64_t i) const { p[i] = T(0); }
};

// The scratch regions, each 256-byte aligned.
struct Layout {
  std::size_t knots = 0, taps = 0, key = 0, key_out = 0, val = 0, val_out = 0, weight = 0, start = 0, sort = 0,
              total = 0;
  std::size_t sort_bytes = 0;
};

std::size_t align(std::size_t b) { return (b + 255) / 256 * 256; }

int bits_for(std::uint64_t v) {
  int b = 1;
  while (b < 64 && (v >> b) != 0) ++b;
  return b;
}

Layout layout(const Interp2dParams& p, const Interp2dGrid& g, int64_t n, bool transposed) {
  Layout l;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t o = at;
    at += align(bytes);
    return o;
  };
  l.knots = take(static_cast<std::size_t>(2 * (g.nx + g.ny)) * sizeof(double));
  if (!transposed) {
    l.taps = take(static_cast<std::size_t>(n) * sizeof(QueryTaps));
  } else {
    const int kk = p.method == Interp2dMethod::Cubic ? 16 : 4;
    const std::size_t m = static_cast<std::size_t>(n) * kk;
    const int64_t rows = g.nx * g.ny;
    l.key = take(m * 8);
    l.key_out = take(m * 8);
    l.val = take(m * 8);
    l.val_out = take(m * 8);
    l.weight = take(m * 8);
    l.start = take(static_cast<std::size_t>(rows + 1) * 8);
    if (!current("interp2d_transpose").emulated && m > 0) {
      cub::DeviceRadixSort::SortPairs(nullptr, l.sort_bytes, static_cast<const std::uint64_t*>(nullptr),
                                      static_cast<std::uint64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                      static_cast<int64_t*>(nullptr), static_cast<int64_t>(m), 0,
                                      bits_for(static_cast<std::uint64_t>(rows)));
    }
    l.sort = take(l.sort_bytes);
  }
  l.total = at;
  return l;
}

template <class P>
P* at(void* scratch, std::size_t off) {
  return reinterpret_cast<P*>(static_cast<unsigned char*>(scratch) + off);
}

Setup setup(const Interp2dParams& p, const Interp2dGrid& g, const void* xq, DType xq_dt, const void* yq, DType yq_dt,
            void* scratch, const Layout& l, const char* op) {
  double* kx = at<double>(scratch, l.knots);
  double* ix = kx + g.nx;
  double* ky = ix + g.nx;
  double* iy = ky + g.ny;
  for_each(op, g.nx, KnotKernel{g.x, g.x_dtype, kx});
  for_each(op, g.ny, KnotKernel{g.y, g.y_dtype, ky});
  for_each(op, g.nx - 1, InvKernel{kx, ix});
  for_each(op, g.ny - 1, InvKernel{ky, iy});
  return Setup{AxisView{kx, ix, g.nx},
               AxisView{ky, iy, g.ny},
               xq,
               xq_dt,
               yq,
               yq_dt,
               !p.has_fill,
               p.method == Interp2dMethod::Cubic,
               p.deriv == Interp2dDeriv::X,
               p.deriv == Interp2dDeriv::Y};
}

// Sorts the m entries by key, stably (equal keys keep increasing e).
void sort_entries(const char* op, std::uint64_t* key, std::uint64_t* key_out, int64_t* val, int64_t* val_out,
                  int64_t m, int64_t rows, void* temp, std::size_t temp_bytes) {
  const Current& c = current(op);
  if (c.emulated) {
    // A counting sort on the host (emulated device memory is host memory).
    std::vector<int64_t> next(static_cast<std::size_t>(rows) + 2, 0);
    for (int64_t e = 0; e < m; ++e) ++next[key[e] + 1];
    for (int64_t r = 0; r <= rows; ++r) next[r + 1] += next[r];
    for (int64_t e = 0; e < m; ++e) {
      const int64_t to = next[key[e]]++;
      key_out[to] = key[e];
      val_out[to] = val[e];
    }
    return;
  }
  check(static_cast<int>(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, key, key_out, val, val_out, m, 0,
                                                         bits_for(static_cast<std::uint64_t>(rows)),
                                                         static_cast<cudaStream_t>(c.stream))),
        op, "a radix sort");
}

template <class F>
void by_dtype(DType t, F&& f) {
  if (t == DType::f64) return f(double{});
  return f(float{});
}

}  // namespace

std::size_t interp2d_scratch(const Interp2dParams& p, const Interp2dGrid& g, std::int64_t n, bool transposed) {
  return layout(p, g, n, transposed).total;
}

void interp2d(const Interp2dParams& p, const Interp2dGrid& g, const void* xq, DType xq_dtype, const void* yq,
              DType yq_dtype, std::int64_t n, const void* f, DType t, std::int64_t rest, void* out, void* scratch) {
  if (n == 0 || rest == 0) return;
  const char* op = "interp2d";
  const Layout l = layout(p, g, n, false);
  const Setup s = setup(p, g, xq, xq_dtype, yq, yq_dtype, scratch, l, op);
  QueryTaps* taps = at<QueryTaps>(scratch, l.taps);
  for_each(op, n, TapsKernel{s, taps});
  by_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    // A constant fill has zero slope.
    const T fill = p.has_fill && p.deriv == Interp2dDeriv::Value ? static_cast<T>(p.fill) : T(0);
    if (s.cubic)
      for_each(op, n * rest, ForwardKernel<T, 4>{taps, static_cast<const T*>(f), g.ny, rest, fill, static_cast<T*>(out)});
    else
      for_each(op, n * rest, ForwardKernel<T, 2>{taps, static_cast<const T*>(f), g.ny, rest, fill, static_cast<T*>(out)});
  });
}

void interp2d_transpose(const Interp2dParams& p, const Interp2dGrid& g, const void* xq, DType xq_dtype,
                        const void* yq, DType yq_dtype, std::int64_t n, const void* ct, DType t, std::int64_t rest,
                        void* table, void* scratch) {
  const char* op = "interp2d_transpose";
  const int64_t rows = g.nx * g.ny;
  by_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0 || rest == 0) {
      for_each(op, rows * rest, ZeroKernel<T>{static_cast<T*>(table)});
      return;
    }
    const Layout l = layout(p, g, n, true);
    const Setup s = setup(p, g, xq, xq_dtype, yq, yq_dtype, scratch, l, op);
    auto* key = at<std::uint64_t>(scratch, l.key);
    auto* key_out = at<std::uint64_t>(scratch, l.key_out);
    auto* val = at<int64_t>(scratch, l.val);
    auto* val_out = at<int64_t>(scratch, l.val_out);
    auto* weight = at<T>(scratch, l.weight);
    auto* start = at<int64_t>(scratch, l.start);
    auto go = [&](auto kc) {
      constexpr int K = decltype(kc)::value;
      const int64_t m = n * K * K;
      for_each(op, n, EntryKernel<T, K>{s, g.ny, rows, key, val, weight});
      sort_entries(op, key, key_out, val, val_out, m, rows, at<void>(scratch, l.sort), l.sort_bytes);
      for_each(op, rows + 1, StartKernel{key_out, m, start});
      for_each(op, rows * rest,
               GatherKernel<T, K>{start, val_out, weight, static_cast<const T*>(ct), rest, static_cast<T*>(table)});
    };
    if (s.cubic)
      go(std::integral_constant<int, 4>{});
    else
      go(std::integral_constant<int, 2>{});
  });
}

}  // namespace tessera::cuda
