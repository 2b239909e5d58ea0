// interp2d and its transpose on CUDA GPUs (interp2d.hpp).
//
// Forward: one thread per query finds its cell and its 1-d taps (the CPU's
// code: kernels/interp2d_taps.hpp), then one thread per
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

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cuda/interp2d.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/load_as.cuh"
#include "backend/cuda/scratch.cuh"
#include "backend/cuda/sort_pairs.cuh"
#include "kernels/interp2d_taps.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

// ------------------------------------------------------------------ axes

// The CPU's axis, cells and 1-d rules (kernels/interp2d_taps.hpp), over
// the knots and inverse spacings in scratch memory.
using AxisView = detail::Interp2dAxis;
template <int K>
using Taps = detail::Interp2dTaps<K>;
using detail::cubic_taps;
using detail::linear_taps;

struct InvKernel {
  const double* knot;
  double* inv;
  TESSERA_HD void operator()(int64_t m) const {
    const double h = knot[m + 1] - knot[m];
    inv[m] = h == 0 ? 0.0 : 1.0 / h;
  }
};

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

Layout layout(const Interp2dParams& p, const Interp2dGrid& g, int64_t n, bool transposed) {
  Layout l;
  ScratchRegions sc;
  l.knots = sc.take(static_cast<std::size_t>(2 * (g.nx + g.ny)) * sizeof(double));
  if (!transposed) {
    l.taps = sc.take(static_cast<std::size_t>(n) * sizeof(QueryTaps));
  } else {
    const int kk = p.method == Interp2dMethod::Cubic ? 16 : 4;
    const std::size_t m = static_cast<std::size_t>(n) * kk;
    const int64_t rows = g.nx * g.ny;
    l.key = sc.take(m * 8);
    l.key_out = sc.take(m * 8);
    l.val = sc.take(m * 8);
    l.val_out = sc.take(m * 8);
    l.weight = sc.take(m * 8);
    l.start = sc.take(static_cast<std::size_t>(rows + 1) * 8);
    l.sort_bytes = sort_pairs_bytes("interp2d_transpose", static_cast<int64_t>(m), static_cast<std::uint64_t>(rows));
    l.sort = sc.take(l.sort_bytes);
  }
  l.total = sc.total();
  return l;
}

Setup setup(const Interp2dParams& p, const Interp2dGrid& g, const void* xq, DType xq_dt, const void* yq, DType yq_dt,
            void* scratch, const Layout& l, const char* op) {
  double* kx = at<double>(scratch, l.knots);
  double* ix = kx + g.nx;
  double* ky = ix + g.nx;
  double* iy = ky + g.ny;
  for_each(op, g.nx, LoadAsKernel<double>{g.x, g.x_dtype, kx});
  for_each(op, g.ny, LoadAsKernel<double>{g.y, g.y_dtype, ky});
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
      sort_pairs(op, key, key_out, val, val_out, m, static_cast<std::uint64_t>(rows), at<void>(scratch, l.sort),
                 l.sort_bytes);
      for_each(op, rows + 1, RunStartKernel{key_out, m, start});
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
