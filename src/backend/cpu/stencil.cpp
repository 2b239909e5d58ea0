// The stencil and scan kernels (see stencil.hpp).
#include "backend/cpu/stencil.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/array_impl.hpp"
#include "core/dispatch.hpp"
#include "kernels/wrapping.hpp"

namespace tessera::detail::cpu {

namespace {

/// Elements per chunk of the kernels' scratch buffers (fits in L1/L2).
constexpr std::int64_t kChunkElems = 8192;

/// Copies rows [r0, r1) of outer index `o` into dst (row-major, converted to
/// T); rows no segment covers are zero. `segs` are sorted and disjoint.
template <class T>
void assemble_rows(const std::vector<Segment>& segs, std::int64_t o, std::int64_t inner, std::int64_t r0,
                   std::int64_t r1, T* dst) {
  std::int64_t cur = r0;
  for (const Segment& s : segs) {
    const std::int64_t a = std::max(r0, s.start), b = std::min(r1, s.stop);
    if (a >= b) continue;
    if (a > cur) std::fill(dst + (cur - r0) * inner, dst + (a - r0) * inner, T(0));
    const auto* src = static_cast<const unsigned char*>(s.data) +
                      (o * s.outer_stride + (a - s.start) * inner) * static_cast<std::int64_t>(itemsize(s.dtype));
    detail::convert(src, s.dtype, dst + (a - r0) * inner, dtype_of<T>(), (b - a) * inner);
    cur = b;
  }
  if (cur < r1) std::fill(dst + (cur - r0) * inner, dst + (r1 - r0) * inner, T(0));
}

template <class T>
const T* segment_row(const Segment& s, std::int64_t o, std::int64_t r, std::int64_t inner) {
  return static_cast<const T*>(s.data) + o * s.outer_stride + (r - s.start) * inner;
}

/// Calls f(T{}) with T = double for f64, float otherwise (the convolutions'
/// and interp's computing types).
template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  if (t == DType::f64) return f(double{});
  return f(float{});
}

/// n values of dtype `t` converted to T.
template <class T>
std::vector<T> values_as(const void* p, DType t, std::int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  detail::convert(p, t, v.data(), dtype_of<T>(), n);
  return v;
}

// -------------------------------------------------------------- diff kernel

template <class T>
inline T sub(T hi, T lo) {
  if constexpr (std::is_same_v<T, bool>) {
    return hi != lo;  // jnp.diff uses not_equal on bool
  } else {
    return detail::wrapping_sub(hi, lo);  // integers wrap like XLA, without UB
  }
}

/// out[k] = src[k + inner] - src[k], k in [0, count).
template <class T>
void diff_pass(const T* __restrict src, T* __restrict out, std::int64_t count, std::int64_t inner) {
  const T* __restrict next = src + inner;
  for (std::int64_t k = 0; k < count; ++k) out[k] = sub(next[k], src[k]);
}

/// t[k] = t[k + inner] - t[k], in place (reads run ahead of writes).
template <class T>
void diff_pass_inplace(T* t, std::int64_t count, std::int64_t inner) {
  for (std::int64_t k = 0; k < count; ++k) t[k] = sub(t[k + inner], t[k]);
}

/// The n-th difference of `rows + n` contiguous input rows at src into `rows`
/// output rows at out, with the same pass order as jnp.diff (first
/// differences of everything, then differences of those, ...).
template <class T>
void diff_rows(const T* src, T* out, std::int64_t rows, int n, std::int64_t inner, detail::Scratch<T>& tmp) {
  if (n == 1) {
    diff_pass(src, out, rows * inner, inner);
    return;
  }
  const std::int64_t chunk = std::max<std::int64_t>(1, kChunkElems / std::max<std::int64_t>(inner, 1));
  for (std::int64_t r = 0; r < rows; r += chunk) {
    const std::int64_t c = std::min(chunk, rows - r);
    tmp.resize(static_cast<size_t>((c + n) * inner));
    diff_pass(src + r * inner, tmp.data(), (c + n - 1) * inner, inner);
    for (int p = 2; p < n; ++p) diff_pass_inplace(tmp.data(), (c + n - p) * inner, inner);
    diff_pass(tmp.data(), out + r * inner, c * inner, inner);
  }
}

/// One device's diff: `segs` cover rows [0, m + n) of the (prepend | x |
/// append) sequence relative to the block start; out is (outer, m, inner).
template <class T>
void diff_block(const std::vector<Segment>& segs, T* out, const Lines& ol, int n) {
  const std::int64_t m = ol.len, inner = ol.inner;
  if (m == 0 || inner == 0) return;
  detail::Scratch<T> tmp, window(static_cast<size_t>((n + 1) * inner));  // T may be bool
  for (std::int64_t o = 0; o < ol.outer; ++o) {
    T* out_o = out + o * m * inner;
    size_t k = 0;
    std::int64_t i = 0;
    while (i < m) {
      while (segs[k].stop <= i) ++k;
      if (i + n < segs[k].stop) {
        // Rows i .. end-1 read only segment k: stream from it in place.
        const std::int64_t end = std::min(m, segs[k].stop - n);
        diff_rows(segment_row<T>(segs[k], o, i, inner), out_o + i * inner, end - i, n, inner, tmp);
        i = end;
      } else {
        // The window of row i straddles segments: assemble its n + 1 rows.
        assemble_rows(segs, o, inner, i, i + n + 1, window.data());
        for (int p = 1; p < n; ++p) diff_pass_inplace(window.data(), (n + 1 - p) * inner, inner);
        diff_pass(window.data(), out_o + i * inner, inner, inner);
        ++i;
      }
    }
  }
}

// ------------------------------------------------------------ cumsum kernel

template <class T>
inline T add(T a, T b) {
  return detail::wrapping_add(a, b);  // integers wrap like XLA, without UB
}

/// Line totals of a block (outer, len, inner) into tot (outer, inner), summed
/// in row order.
template <class In, class Out>
void line_totals(const In* x, Out* tot, const Lines& l) {
  for (std::int64_t o = 0; o < l.outer; ++o) {
    Out* t = tot + o * l.inner;
    // From -0, not 0: adding -0 changes nothing, not even a -0 (0 + -0 is
    // +0). So a block after blocks that hold only -0s (or none: an empty
    // block's total is -0) keeps the -0 that the sequential scan gives.
    std::fill(t, t + l.inner, static_cast<Out>(-Out(0)));
    for (std::int64_t r = 0; r < l.len; ++r) {
      const In* xr = x + (o * l.len + r) * l.inner;
      for (std::int64_t j = 0; j < l.inner; ++j) t[j] = add(t[j], static_cast<Out>(xr[j]));
    }
  }
}

/// Inclusive scan of a block along its len dim, starting from `offset`
/// (outer, inner) when given.
template <class In, class Out>
void scan_block(const In* x, Out* out, const Lines& l, const Out* offset) {
  for (std::int64_t o = 0; o < l.outer; ++o) {
    for (std::int64_t r = 0; r < l.len; ++r) {
      const In* __restrict xr = x + (o * l.len + r) * l.inner;
      Out* __restrict yr = out + (o * l.len + r) * l.inner;
      const Out* __restrict prev = r > 0 ? yr - l.inner : (offset ? offset + o * l.inner : nullptr);
      if (prev)
        for (std::int64_t j = 0; j < l.inner; ++j) yr[j] = add(prev[j], static_cast<Out>(xr[j]));
      else
        for (std::int64_t j = 0; j < l.inner; ++j) yr[j] = static_cast<Out>(xr[j]);
    }
  }
}

// cumsum's result type: detail::sum_dtype as a C++ type (bool and i8 scan
// in i32, u8 in u32), so only those pairs are instantiated.
template <class In>
using ScanOut = std::conditional_t<std::is_same_v<In, bool> || std::is_same_v<In, std::int8_t>, std::int32_t,
                                   std::conditional_t<std::is_same_v<In, std::uint8_t>, std::uint32_t, In>>;

// ---------------------------------------------------------- convolve kernel

/// One device's 1-d convolution: out (outer, len, inner) in T; `segs` hold the
/// input rows [start - hl, stop + hr) that exist (x rows, global coords);
/// `first` is the block's first row; w the kernel (K taps).
template <class T>
void convolve_block(const std::vector<Segment>& segs, const Segment& mid, T* out, const Lines& l, std::int64_t first,
                    const std::vector<T>& w, std::int64_t hl) {
  const std::int64_t m = l.len, inner = l.inner, K = static_cast<std::int64_t>(w.size());
  if (m == 0 || inner == 0) return;
  const std::int64_t chunk = std::max<std::int64_t>(1, kChunkElems / inner);
  std::vector<T> tmp;
  const bool direct_ok = mid.dtype == dtype_of<T>();
  for (std::int64_t o = 0; o < l.outer; ++o) {
    for (std::int64_t r = 0; r < m; r += chunk) {
      const std::int64_t c = std::min(chunk, m - r);
      // Input rows of the window, global: [g0, g0 + c + K - 1).
      const std::int64_t g0 = first + r - hl, g1 = g0 + c + K - 1;
      const T* win;
      if (direct_ok && g0 >= mid.start && g1 <= mid.stop) {
        win = segment_row<T>(mid, o, g0, inner);
      } else {
        tmp.resize(static_cast<size_t>((c + K - 1) * inner));
        assemble_rows(segs, o, inner, g0, g1, tmp.data());
        win = tmp.data();
      }
      // out row i = sum_k w[k] * in row (i + K - 1 - k) of the window.
      T* __restrict y = out + (o * m + r) * inner;
      const std::int64_t cnt = c * inner;
      std::fill(y, y + cnt, T(0));
      for (std::int64_t k = 0; k < K; ++k) {
        const T wk = w[k];
        const T* __restrict src = win + (K - 1 - k) * inner;
        for (std::int64_t e = 0; e < cnt; ++e) y[e] += wk * src[e];
      }
    }
  }
}

// -------------------------------------------------------- convolve2d kernel

/// One device's 2-d convolution over the last two dims. `in` is a row-major
/// block covering `in_box` (the output block widened by the halos, clipped to
/// the array); out covers `out_box`; w is kr x kc.
template <class T>
void convolve2d_block(const void* in, DType in_dtype, const std::vector<Slice>& in_box, T* out,
                      const std::vector<Slice>& out_box, const std::vector<T>& w, std::int64_t kr, std::int64_t kc) {
  const int nd = static_cast<int>(out_box.size());
  const Shape oshape = detail::box_shape(out_box);
  const Shape ishape = detail::box_shape(in_box);
  if (detail::num_elements(oshape) == 0) return;
  std::int64_t outer = 1;
  for (int d = 0; d < nd - 2; ++d) outer *= oshape[d];
  const std::int64_t mr = oshape[nd - 2], mc = oshape[nd - 1];
  const std::int64_t ir = ishape[nd - 2], ic = ishape[nd - 1];
  // Zero-padded plane: row p <-> global row out_box.start - kr/2 + p.
  const std::int64_t pr = mr + kr - 1, pc = mc + kc - 1;
  const std::int64_t row0 = out_box[nd - 2].start - kr / 2, col0 = out_box[nd - 1].start - kc / 2;
  const std::int64_t roff = in_box[nd - 2].start - row0, coff = in_box[nd - 1].start - col0;
  std::vector<T> plane(static_cast<size_t>(pr * pc));
  const auto isz = static_cast<std::int64_t>(itemsize(in_dtype));
  for (std::int64_t o = 0; o < outer; ++o) {
    std::fill(plane.begin(), plane.end(), T(0));
    for (std::int64_t i = 0; i < ir; ++i) {
      const auto* src = static_cast<const unsigned char*>(in) + ((o * ir + i) * ic) * isz;
      detail::convert(src, in_dtype, plane.data() + (i + roff) * pc + coff, dtype_of<T>(), ic);
    }
    T* y = out + o * mr * mc;
    std::fill(y, y + mr * mc, T(0));
    for (std::int64_t i = 0; i < mr; ++i) {
      T* __restrict yr = y + i * mc;
      for (std::int64_t p = 0; p < kr; ++p)
        for (std::int64_t q = 0; q < kc; ++q) {
          const T wk = w[p * kc + q];
          const T* __restrict src = plane.data() + (i + kr - 1 - p) * pc + (kc - 1 - q);
          for (std::int64_t j = 0; j < mc; ++j) yr[j] += wk * src[j];
        }
    }
  }
}

// ---------------------------------------------------------- gradient kernel

/// Row r of outer index o from the segment that holds it.
template <class T>
const T* row_in(const std::vector<Segment>& segs, std::int64_t o, std::int64_t r, std::int64_t inner) {
  for (const Segment& s : segs)
    if (r >= s.start && r < s.stop) return segment_row<T>(s, o, r, inner);
  return nullptr;  // not reached: the segments cover every row read
}

/// One block of gradient (see stencil.hpp): input rows of In from `segs`,
/// out (outer, l.len, inner) of T.
template <class In, class T>
void gradient_block(const std::vector<Segment>& segs, std::int64_t r0, std::int64_t r1, T* out, const Lines& l,
                    std::int64_t first, T h) {
  const std::int64_t m = l.len, inner = l.inner;
  for (std::int64_t o = 0; o < l.outer; ++o) {
    for (std::int64_t i = 0; i < m; ++i) {
      const std::int64_t g = first + i;  // the global row
      const std::int64_t lo = std::max(g - 1, r0), hi = std::min(g + 1, r1 - 1);
      const In* __restrict up = row_in<In>(segs, o, hi, inner);
      const In* __restrict down = row_in<In>(segs, o, lo, inner);
      T* __restrict y = out + (o * m + i) * inner;
      if (hi - lo == 2)
        for (std::int64_t j = 0; j < inner; ++j) y[j] = static_cast<T>(sub(up[j], down[j])) * T(0.5) / h;
      else
        for (std::int64_t j = 0; j < inner; ++j) y[j] = static_cast<T>(sub(up[j], down[j])) / h;
    }
  }
}

// ------------------------------------------------------------ interp kernel

/// jnp.interp for n values: Tx is x's and xp's computing type, Tf fp's, To
/// the result's. Same formula as JAX (searchsorted right, clipped to
/// [1, len - 1], flat where |dx| <= spacing(eps), ends held constant).
template <class Tx, class Tf, class To>
void interp_values(const void* x, DType xdt, To* out, std::int64_t n, const std::vector<Tx>& xp,
                   const std::vector<Tf>& fp) {
  const auto len = static_cast<std::int64_t>(xp.size());
  const Tx eps = std::numeric_limits<Tx>::epsilon() * std::numeric_limits<Tx>::epsilon();
  std::vector<Tx> xs(static_cast<size_t>(std::min<std::int64_t>(n, kChunkElems)));
  for (std::int64_t b = 0; b < n; b += kChunkElems) {
    const std::int64_t c = std::min(kChunkElems, n - b);
    detail::convert(static_cast<const unsigned char*>(x) + b * static_cast<std::int64_t>(itemsize(xdt)), xdt, xs.data(),
                    dtype_of<Tx>(), c);
    for (std::int64_t e = 0; e < c; ++e) {
      const Tx v = xs[e];
      // NaN sorts last (as in jnp.searchsorted): it lands past every point.
      std::int64_t i = std::isnan(v) ? len : std::upper_bound(xp.begin(), xp.end(), v) - xp.begin();
      i = std::min(std::max<std::int64_t>(i, 1), len - 1);  // jnp.clip(i, 1, len - 1)
      const std::int64_t im1 = (i - 1 + len) % len;         // Python's xp[i - 1]
      const Tf df = fp[i] - fp[im1];
      const Tx dx = xp[i] - xp[im1];
      const Tx delta = v - xp[im1];
      To f;
      if (std::abs(dx) <= eps)
        f = static_cast<To>(fp[im1]);
      else
        f = static_cast<To>(fp[im1]) + static_cast<To>(delta / dx) * static_cast<To>(df);
      if (v < xp[0]) f = static_cast<To>(fp[0]);
      if (v > xp[len - 1]) f = static_cast<To>(fp[len - 1]);
      out[b + e] = f;
    }
  }
}

}  // namespace

void diff_block(DType t, const std::vector<Segment>& segs, void* out, const Lines& ol, int n) {
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    diff_block<T>(segs, static_cast<T*>(out), ol, n);
  });
}

void line_totals(DType in, const void* x, void* tot, const Lines& l) {
  detail::dispatch(in, [&](auto tag) {
    using In = decltype(tag);
    line_totals(static_cast<const In*>(x), static_cast<ScanOut<In>*>(tot), l);
  });
}

void scan_offsets(DType in, const void* before, int parts, const Lines& l, void* offset) {
  detail::dispatch(in, [&](auto tag) {
    using Out = ScanOut<decltype(tag)>;
    const Out* g = static_cast<const Out*>(before);
    for (std::int64_t o = 0; o < l.outer; ++o) {
      Out* off = static_cast<Out*>(offset) + o * l.inner;
      const Out* go = g + o * parts * l.inner;
      std::copy(go, go + l.inner, off);
      for (int p = 1; p < parts; ++p)
        for (std::int64_t j = 0; j < l.inner; ++j) off[j] = add(off[j], go[p * l.inner + j]);
    }
  });
}

void scan_block(DType in, const void* x, void* out, const Lines& l, const void* offset) {
  detail::dispatch(in, [&](auto tag) {
    using In = decltype(tag);
    using Out = ScanOut<In>;
    scan_block(static_cast<const In*>(x), static_cast<Out*>(out), l, static_cast<const Out*>(offset));
  });
}

void convolve_block(DType t, const std::vector<Segment>& segs, const Segment& mid, void* out, const Lines& l,
                    std::int64_t first, const void* w, DType wdt, std::int64_t K, std::int64_t hl) {
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    convolve_block<T>(segs, mid, static_cast<T*>(out), l, first, values_as<T>(w, wdt, K), hl);
  });
}

void convolve2d_block(DType t, const void* in, DType in_dtype, const std::vector<Slice>& in_box, void* out,
                      const std::vector<Slice>& out_box, const void* w, DType wdt, std::int64_t kr, std::int64_t kc) {
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    convolve2d_block<T>(in, in_dtype, in_box, static_cast<T*>(out), out_box, values_as<T>(w, wdt, kr * kc), kr, kc);
  });
}

void gradient_block(DType t, const std::vector<Segment>& segs, std::int64_t r0, std::int64_t r1, void* out,
                    const Lines& l, std::int64_t first, double h) {
  if (segs.empty()) return;
  detail::dispatch(segs.front().dtype, [&](auto itag) {
    using In = decltype(itag);
    dispatch_float(t, [&](auto tag) {
      using T = decltype(tag);
      gradient_block<In, T>(segs, r0, r1, static_cast<T*>(out), l, first, static_cast<T>(h));
    });
  });
}

void interp(DType tx, DType tf, DType to, const void* x, DType xdt, void* out, std::int64_t n, const void* xp,
            DType xpdt, const void* fp, DType fpdt, std::int64_t len) {
  dispatch_float(tx, [&](auto xtag) {
    using Tx = decltype(xtag);
    const std::vector<Tx> xv = values_as<Tx>(xp, xpdt, len);
    dispatch_float(tf, [&](auto ftag) {
      using Tf = decltype(ftag);
      const std::vector<Tf> fv = values_as<Tf>(fp, fpdt, len);
      dispatch_float(to, [&](auto otag) {
        using To = decltype(otag);
        interp_values<Tx, Tf, To>(x, xdt, static_cast<To*>(out), n, xv, fv);
      });
    });
  });
}

}  // namespace tessera::detail::cpu
