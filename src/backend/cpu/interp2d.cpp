// The interp2d kernel (see interp2d.hpp).
//
// Both methods are tensor products of a 1-d rule per axis, and both rules
// are linear in the tabulated values, so each query's result row is
//     out[q, :] = sum over taps (k, l) of  wx[k] * wy[l] * f[ix[k], iy[l], :]
// with 2 taps per axis (linear) or 4 (cubic). The cubic rule along x on the
// cell [x[i-1], x[i]] with t = (xq - x[i-1]) / h, h = x[i] - x[i-1], is the
// Hermite form
//     H0(t) f[i-1] + H1(t) f[i] + h G0(t) f'[i-1] + h G1(t) f'[i]
// where the knot derivatives f' are finite differences of f (interpax's
// "cubic": one-sided secants at the ends, the unweighted mean of the two
// neighbouring secants inside). Each f' is a combination of f at the knot
// and its neighbours, so the rule reads f at knots i-2 .. i+1: 4 taps. The
// cross derivative fxy (the y rule applied to fx) is exactly what the
// product of the two 1-d rules gives, so the 2-d patch is the 4 x 4 tensor
// product and no derivative table is ever built: per query the 16 weights
// are computed once (in f64), then one contiguous loop over the row sums
// weight x table row. Taps that fall off the grid at the edges are replaced
// by a tap on an in-stencil knot with weight 0, so every query runs the same
// 16-row loop (a NaN in that row propagates, as it does through interpax's
// derivative tables).
//
// The queries run in their given order. Running them by cell instead (so
// that neighbours reuse the table rows in L1/L2) was measured no faster on
// the real use (6 x 221 x 842 f32 table, 30,000 random queries): the rows
// read come from the last level cache either way, and writing the result
// rows out of order costs what the reuse saves.
#include "backend/cpu/interp2d.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/interp2d_taps.hpp"
#include "tessera/array.hpp"

// The row loop is compiled for AVX-512, AVX2 and the baseline; the loader
// picks the clone the CPU runs. fp-contract=off keeps every clone to one
// rounded multiply and one rounded add per term (no fused multiply-add where
// the CPU has one), so all give the same bits. Sanitizer builds skip the
// clones (an instrumented ifunc resolver runs before the sanitizer runtime).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TESSERA_INTERP2D_CLONES __attribute__((optimize("fp-contract=off")))
#else
#define TESSERA_INTERP2D_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#endif

namespace tessera::detail::cpu {

namespace {

/// Queries per chunk: their coordinates, converted to f64, stay in L1.
constexpr std::int64_t kChunk = 1024;

/// out[r] = sum_k w[k] * rows[k][r], the terms added in order k = 0, 1, ...
template <class T, int K>
TESSERA_INTERP2D_CLONES void weighted_rows(const T* const* rows, const T* w, T* __restrict out, std::int64_t n) {
  // Local copies: the compiler then knows the pointers and weights stay put
  // while out is written, and vectorises over r.
  const T* p[K];
  T c[K];
  for (int k = 0; k < K; ++k) p[k] = rows[k], c[k] = w[k];
  for (std::int64_t r = 0; r < n; ++r) {
    T acc = c[0] * p[0][r];
    for (int k = 1; k < K; ++k) acc += c[k] * p[k][r];
    out[r] = acc;
  }
}

/// The knots of one axis in f64, with their inverse spacings; its cells
/// and taps are the shared 1-d rules (kernels/interp2d_taps.hpp).
struct Axis {
  std::vector<double> knot;
  std::vector<double> inv;  // inv[m] = 1 / (knot[m+1] - knot[m]); 0 where they are equal (as interpax)
  std::int64_t n = 0;

  Axis(const void* p, DType dt, std::int64_t len) : knot(static_cast<size_t>(len)), n(len) {
    detail::convert(p, dt, knot.data(), DType::f64, len);
    inv.resize(static_cast<size_t>(len - 1));
    for (std::int64_t m = 0; m + 1 < len; ++m) {
      const double h = knot[m + 1] - knot[m];
      inv[m] = h == 0 ? 0.0 : 1.0 / h;
    }
  }
  Interp2dAxis view() const { return {knot.data(), inv.data(), n}; }
};

template <int K>
using Taps = Interp2dTaps<K>;

/// The cubic rule, kept a function of its own: inlined into the query loop
/// it is compiled with other operand orders for some additions, and where a
/// NaN query's weights of both signs meet, that picks the other NaN (the
/// result's bits would change).
[[gnu::noinline]] Taps<4> cubic_taps_of(const Interp2dAxis& a, std::int64_t i, double v, bool slope) {
  return cubic_taps(a, i, v, slope);
}

template <class T>
class Kernel {
 public:
  /// `f` and `out` are the table and the result rows; transposed, the
  /// result rows' cotangents and the table's (accumulated into).
  Kernel(Interp2dMethod method, const std::optional<double>& fill, Interp2dDeriv deriv, const Interp2dGrid& g,
         const T* f, std::int64_t rest, T* out, bool transposed)
      : method_(method),
        extrapolate_(!fill.has_value()),
        // A constant fill has zero slope.
        fill_(fill && deriv == Interp2dDeriv::Value ? static_cast<T>(*fill) : T(0)),
        slope_x_(deriv == Interp2dDeriv::X),
        slope_y_(deriv == Interp2dDeriv::Y),
        transposed_(transposed),
        ax_(g.x, g.x_dtype, g.nx),
        ay_(g.y, g.y_dtype, g.ny),
        vx_(ax_.view()),
        vy_(ay_.view()),
        f_(f),
        rest_(rest),
        out_(out) {}

  void run(const void* xq, DType xq_dt, const void* yq, DType yq_dt, std::int64_t n) {
    const auto* xb = static_cast<const unsigned char*>(xq);
    const auto* yb = static_cast<const unsigned char*>(yq);
    const std::int64_t xs = itemsize(xq_dt), ys = itemsize(yq_dt);
    double xv[kChunk], yv[kChunk];
    for (std::int64_t b = 0; b < n; b += kChunk) {
      const std::int64_t c = std::min(kChunk, n - b);
      detail::convert(xb + b * xs, xq_dt, xv, DType::f64, c);
      detail::convert(yb + b * ys, yq_dt, yv, DType::f64, c);
      for (std::int64_t e = 0; e < c; ++e) one(b + e, xv[e], yv[e]);
    }
  }

 private:
  /// Result row q for the query (u, v).
  void one(std::int64_t q, double u, double v) {
    if (!extrapolate_ && !(vx_.inside(u) && vy_.inside(v))) {
      // The fill does not depend on the table: nothing to scatter back.
      if (!transposed_) std::fill_n(out_ + q * rest_, rest_, fill_);
      return;
    }
    const std::int64_t i = vx_.cell(u), j = vy_.cell(v);
    if (method_ == Interp2dMethod::Linear)
      tensor(q, linear_taps(vx_, i, u, slope_x_), linear_taps(vy_, j, v, slope_y_));
    else
      tensor(q, cubic_taps_of(vx_, i, u, slope_x_), cubic_taps_of(vy_, j, v, slope_y_));
  }

  template <int K>
  void tensor(std::int64_t q, const Taps<K>& tx, const Taps<K>& ty) const {
    if (transposed_) {
      // Each tap's table row receives its weight times the query's row, in
      // query order and tap order (a fixed order: the same bits every run).
      const T* c = f_ + q * rest_;
      for (int k = 0; k < K; ++k)
        for (int l = 0; l < K; ++l) {
          const T w = static_cast<T>(tx.w[k] * ty.w[l]);
          T* o = out_ + (tx.idx[k] * ay_.n + ty.idx[l]) * rest_;
          for (std::int64_t r = 0; r < rest_; ++r) o[r] += w * c[r];
        }
      return;
    }
    const T* rows[K * K];
    T w[K * K];
    for (int k = 0; k < K; ++k)
      for (int l = 0; l < K; ++l) {
        rows[k * K + l] = f_ + (tx.idx[k] * ay_.n + ty.idx[l]) * rest_;
        w[k * K + l] = static_cast<T>(tx.w[k] * ty.w[l]);
      }
    weighted_rows<T, K * K>(rows, w, out_ + q * rest_, rest_);
  }

  Interp2dMethod method_;
  bool extrapolate_;
  T fill_;
  bool slope_x_, slope_y_, transposed_;
  Axis ax_, ay_;
  Interp2dAxis vx_, vy_;
  const T* f_;
  std::int64_t rest_;
  T* out_;
};

}  // namespace

void interp2d(Interp2dMethod method, const std::optional<double>& fill, Interp2dDeriv deriv,
              const Interp2dGrid& grid, const void* xq, DType xq_dtype, const void* yq, DType yq_dtype,
              std::int64_t n, const void* f, DType t, std::int64_t rest, void* out) {
  if (n == 0 || rest == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    Kernel<T>(method, fill, deriv, grid, static_cast<const T*>(f), rest, static_cast<T*>(out), false)
        .run(xq, xq_dtype, yq, yq_dtype, n);
  };
  if (t == DType::f64)
    go(double{});
  else
    go(float{});
}

void interp2d_transpose(Interp2dMethod method, const std::optional<double>& fill, Interp2dDeriv deriv,
                        const Interp2dGrid& grid, const void* xq, DType xq_dtype, const void* yq, DType yq_dtype,
                        std::int64_t n, const void* ct, DType t, std::int64_t rest, void* table) {
  const std::int64_t size = grid.nx * grid.ny * rest;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(static_cast<T*>(table), size, T(0));
    if (n == 0 || rest == 0) return;
    Kernel<T>(method, fill, deriv, grid, static_cast<const T*>(ct), rest, static_cast<T*>(table), true)
        .run(xq, xq_dtype, yq, yq_dtype, n);
  };
  if (t == DType::f64)
    go(double{});
  else
    go(float{});
}

}  // namespace tessera::detail::cpu
