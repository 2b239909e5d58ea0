// The stencil and scan kernels on CUDA GPUs (stencil.hpp). One thread per
// output element (per line for the scans), each doing what the CPU's loop
// (backend/cpu/stencil.cpp) does for that element, in the same order:
//   - diff: the n + 1 rows of the element's window, then n passes of
//     differences over them (pass p leaves n + 1 - p values), so every
//     difference is the one the CPU's pass computes; for n beyond
//     kDiffWindow the passes run over the whole block in scratch memory,
//     one kernel per pass.
//   - cumsum: one thread per (outer, inner) line walks the axis row by row
//     from the offset (or from the first row), as the CPU's scan does; the
//     totals sum rows from zero in row order, the offsets the parts' totals
//     in part order.
//   - convolve, convolve2d: y = 0, then y += w[k] * x[...] tap by tap in the
//     CPU's tap order (--fmad=false keeps the multiply and the add apart);
//     rows (and columns) outside the array read as zero.
//   - gradient: ((x[i+1] - x[i-1]) * 0.5) / h inside, (x[1] - x[0]) / h at
//     the ends, differences taken in the input dtype.
//   - interp: libstdc++'s upper_bound on the table, then JAX's formula.
#include "kernels/convert.hpp"  // first: see launch.cuh
#include "kernels/wrapping.hpp"

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/stencil.hpp"
#include "tessera/error.hpp"
#include "core/dispatch.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

using detail::dispatch;

// f(double{}) for f64, f(float{}) otherwise: the convolutions', gradient's
// and interp's computing types.
template <class F>
void dispatch_float(DType t, F&& f) {
  if (t == DType::f64) return f(double{});
  f(float{});
}

template <class T>
TESSERA_HD T sub(T hi, T lo) {
  if constexpr (std::is_same_v<T, bool>) {
    return hi != lo;  // jnp.diff uses not_equal on bool
  } else {
    return detail::wrapping_sub(hi, lo);
  }
}

template <class T>
TESSERA_HD T add(T a, T b) {
  return detail::wrapping_add(a, b);
}

// cumsum's result type (detail::sum_dtype): bool and i8 scan in i32, u8 in
// u32, everything else in itself.
template <class In>
using ScanOut = std::conditional_t<std::is_same_v<In, bool> || std::is_same_v<In, std::int8_t>, std::int32_t,
                                   std::conditional_t<std::is_same_v<In, std::uint8_t>, std::uint32_t, In>>;

// ------------------------------------------------------------- segments

/// A block's rows from up to kMaxSegments buffers of element type In, by
/// value in the kernel's functor.
template <class In>
struct Rows {
  int count = 0;
  Segment s[kMaxSegments];

  /// Element j of row r of outer index o, converted to T as the CPU's
  /// assemble_rows converts it; zero where no segment holds the row (the
  /// zero padding past the array's ends).
  template <class T>
  TESSERA_HD T at(int64_t o, int64_t r, int64_t j, int64_t inner) const {
    for (int k = 0; k < count; ++k) {
      if (r < s[k].start || r >= s[k].stop) continue;
      const In* p = static_cast<const In*>(s[k].data);
      if (s[k].broadcast) return detail::convert_one<T>(p[0]);
      return detail::convert_one<T>(p[o * s[k].outer_stride + (r - s[k].start) * inner + j]);
    }
    return T(0);
  }
};

template <class In>
Rows<In> rows_of(const char* op, const std::vector<Segment>& segs) {
  if (segs.size() > static_cast<size_t>(kMaxSegments))
    throw Error(std::string("[") + op + "] internal: a block in " + std::to_string(segs.size()) +
                " segments, the CUDA kernels take at most " + std::to_string(kMaxSegments));
  Rows<In> r;
  for (const Segment& g : segs) r.s[r.count++] = g;
  return r;
}

// ----------------------------------------------------------------- diff

// The n passes over a window of rows w[0 .. len]: pass p turns the
// len + 2 - p values into len + 1 - p differences, value k of pass p being
// the CPU pass p's difference at row i + k; w[0] ends as the element.
template <class T>
TESSERA_HD void diff_passes(T* w, int len) {
  for (int p = 1; p <= len; ++p)
    for (int k = 0; k <= len - p; ++k) w[k] = sub(w[k + 1], w[k]);
}

// Output element (o, i0 + i, j) from its window of rows i0 + i .. + n, for
// the rows [i0, i0 + mr) of a block of m rows, the n passes in registers.
// kN is n when it is known at compile time (the loops unroll and the window
// stays in registers; a window indexed by a run-time n lives in local
// memory), 0 for any n up to kDiffWindow.
template <class T, int kN = 0>
struct DiffWindow {
  Rows<T> rows;
  T* out;
  int64_t m, inner;
  int n;
  int64_t i0, mr;  // the rows launched

  TESSERA_HD void operator()(int64_t idx) const {
    const DivMod jt = divmod(idx, inner), io = divmod(jt.q, mr);
    const int64_t j = jt.r, i = i0 + io.r, o = io.q;
    const int len = kN ? kN : n;
    T w[(kN ? kN : kDiffWindow) + 1];
    for (int k = 0; k <= len; ++k) w[k] = rows.template at<T>(o, i + k, j, inner);
    diff_passes(w, len);
    out[(o * m + i) * inner + j] = w[0];
  }
};

// The window's rows of output element (o, r) of a run whose windows all lie
// in one buffer (the common case: every row of a block but the last n reads
// only the device's own rows): plain loads at a fixed row stride, no search
// over the segments. Element (o, r) of the run reads src[o * src_outer + r
// + k * inner] and writes dst[o * dst_outer + r], r < span.
// kOneSlab: the run has one outer block (a diff along the leading axis, the
// common case), so o is 0 throughout and no element divides. The division
// is then not in the kernel at all: a 64-bit division's code holds
// registers (f64 order 1: 40 registers with it, six blocks of 256 threads
// per SM, 32 without it, eight), even where no element takes it.
template <class T, int kN, bool kOneSlab>
struct DiffRun {
  struct Window {
    T w[kN + 1];
  };
  const T* src;
  T* dst;
  int64_t span, src_outer, dst_outer, inner;

  // (o, r) of element idx; the elements of the first outer block skip the
  // division (some twenty instructions, twice per element).
  TESSERA_HD DivMod at(int64_t idx) const {
    if constexpr (kOneSlab) return DivMod{0, idx};
    else return idx < span ? DivMod{0, idx} : divmod(idx, span);
  }
  TESSERA_HD Window load(int64_t idx) const {
    const DivMod d = at(idx);
    const T* s = src + d.q * src_outer + d.r;
    Window v;
    for (int k = 0; k <= kN; ++k) v.w[k] = s[k * inner];
    return v;
  }
  TESSERA_HD void store(int64_t idx, Window v) const {
    const DivMod d = at(idx);
    diff_passes(v.w, kN);
    dst[d.q * dst_outer + d.r] = v.w[0];
  }
};

// diff of order kN (1 or 2) over the block: the output rows whose windows
// lie in one (non-broadcast) segment by DiffRun, a run per segment, the
// others (next to a segment's end, a broadcast prepend or append) by
// DiffWindow.
template <class T, int kN>
void diff_runs(const Rows<T>& rows, T* out, int64_t outer, int64_t m, int64_t inner) {
  int64_t done = 0;  // output rows [0, done) are launched
  auto windows = [&](int64_t stop) {
    if (stop > done)
      for_each("diff", outer * (stop - done) * inner, DiffWindow<T, kN>{rows, out, m, inner, kN, done, stop - done});
  };
  for (int k = 0; k < rows.count; ++k) {
    const Segment& g = rows.s[k];
    if (g.broadcast) continue;
    const int64_t lo = g.start > done ? g.start : done;
    const int64_t hi = g.stop - kN < m ? g.stop - kN : m;
    if (hi <= lo) continue;
    windows(lo);
    const T* p = static_cast<const T*>(g.data);
    const T* src = p + (lo - g.start) * inner;
    T* dst = out + lo * inner;
    const int64_t span = (hi - lo) * inner;
    if (outer == 1)
      for_each_batched("diff", span, DiffRun<T, kN, true>{src, dst, span, g.outer_stride, m * inner, inner});
    else
      for_each_batched("diff", outer * span, DiffRun<T, kN, false>{src, dst, span, g.outer_stride, m * inner, inner});
    done = hi;
  }
  windows(m);
}

// The sequence's rows [0, rows) into a contiguous (outer, rows, inner) block.
template <class T>
struct Assemble {
  Rows<T> rows;
  T* dst;
  int64_t nrows, inner;

  TESSERA_HD void operator()(int64_t idx) const {
    const DivMod jt = divmod(idx, inner), ro = divmod(jt.q, nrows);
    dst[idx] = rows.template at<T>(ro.q, ro.r, jt.r, inner);
  }
};

// One pass over a whole block: dst (outer, nout, inner) = differences of
// consecutive rows of src (outer, nout + 1, inner).
template <class T>
struct DiffPass {
  const T* src;
  T* dst;
  int64_t nout, inner;

  TESSERA_HD void operator()(int64_t idx) const {
    const DivMod jt = divmod(idx, inner), ro = divmod(jt.q, nout);
    const T* s = src + (ro.q * (nout + 1) + ro.r) * inner + jt.r;
    dst[idx] = sub(s[inner], s[0]);
  }
};

// --------------------------------------------------------------- cumsum

template <class In>
struct LineTotals {
  const In* x;
  ScanOut<In>* tot;
  int64_t len, inner;

  TESSERA_HD void operator()(int64_t idx) const {
    using Out = ScanOut<In>;
    const int64_t o = idx / inner, j = idx % inner;
    Out t = static_cast<Out>(-Out(0));  // -0: as the CPU's line_totals (a -0 stays -0)
    for (int64_t r = 0; r < len; ++r) t = add(t, static_cast<Out>(x[(o * len + r) * inner + j]));
    tot[idx] = t;
  }
};

template <class Out>
struct ScanOffsets {
  const Out* before;
  Out* offset;
  int parts;
  int64_t inner;

  TESSERA_HD void operator()(int64_t idx) const {
    const int64_t o = idx / inner, j = idx % inner;
    const Out* g = before + o * parts * inner + j;
    Out off = g[0];
    for (int p = 1; p < parts; ++p) off = add(off, g[p * inner]);
    offset[idx] = off;
  }
};

template <class In>
struct ScanLine {
  const In* x;
  ScanOut<In>* out;
  const ScanOut<In>* offset;  // null: the line starts at its first row
  int64_t len, inner;

  TESSERA_HD void operator()(int64_t idx) const {
    using Out = ScanOut<In>;
    const int64_t o = idx / inner, j = idx % inner;
    const int64_t base = o * len * inner + j;
    if (len == 0) return;
    Out y = offset ? add(offset[idx], static_cast<Out>(x[base])) : static_cast<Out>(x[base]);
    out[base] = y;
    for (int64_t r = 1; r < len; ++r) {
      y = add(y, static_cast<Out>(x[base + r * inner]));
      out[base + r * inner] = y;
    }
  }
};

// ------------------------------------------------------------- convolve

// Output row i reads input rows (global) first + i - hl + K - 1 - k for tap
// k, as the CPU's window does.
template <class In, class T>
struct Convolve1d {
  Rows<In> rows;
  T* out;
  const T* w;
  int64_t m, inner, first, K, hl;

  TESSERA_HD void operator()(int64_t idx) const {
    const int64_t j = idx % inner, t = idx / inner;
    const int64_t i = t % m, o = t / m;
    const int64_t g0 = first + i - hl + K - 1;
    T y = T(0);
    for (int64_t k = 0; k < K; ++k) y = y + w[k] * rows.template at<T>(o, g0 - k, j, inner);
    out[idx] = y;
  }
};

// Output (o, i, j) reads the zero-padded plane at (i + kr - 1 - p, j + kc -
// 1 - q) for tap (p, q); plane (P, Q) is input (P - roff, Q - coff) where
// that lies in the block, else zero.
template <class In, class T>
struct Convolve2d {
  const In* in;
  T* out;
  const T* w;
  int64_t mr, mc, ir, ic, kr, kc, roff, coff;

  TESSERA_HD void operator()(int64_t idx) const {
    const int64_t j = idx % mc, t = idx / mc;
    const int64_t i = t % mr, o = t / mr;
    const In* plane = in + o * ir * ic;
    T y = T(0);
    for (int64_t p = 0; p < kr; ++p) {
      const int64_t row = i + kr - 1 - p - roff;
      for (int64_t q = 0; q < kc; ++q) {
        const int64_t col = j + kc - 1 - q - coff;
        const T v = row >= 0 && row < ir && col >= 0 && col < ic ? detail::convert_one<T>(plane[row * ic + col]) : T(0);
        y = y + w[p * kc + q] * v;
      }
    }
    out[idx] = y;
  }
};

// ------------------------------------------------------------- gradient

template <class In, class T>
struct Gradient {
  Rows<In> rows;
  T* out;
  int64_t m, inner, first, r0, r1;
  T h;

  TESSERA_HD void operator()(int64_t idx) const {
    const int64_t j = idx % inner, t = idx / inner;
    const int64_t i = t % m, o = t / m;
    const int64_t g = first + i;
    const int64_t lo = g - 1 > r0 ? g - 1 : r0, hi = g + 1 < r1 - 1 ? g + 1 : r1 - 1;
    const In up = rows.template at<In>(o, hi, j, inner), down = rows.template at<In>(o, lo, j, inner);
    if (hi - lo == 2)
      out[idx] = static_cast<T>(sub(up, down)) * T(0.5) / h;
    else
      out[idx] = static_cast<T>(sub(up, down)) / h;
  }
};

// --------------------------------------------------------------- interp

template <class Tx, class Tf, class To>
struct Interp {
  const Tx* x;
  To* out;
  const Tx* xp;
  const Tf* fp;
  int64_t len;

  TESSERA_HD void operator()(int64_t e) const {
    const Tx eps = TESSERA_STD::numeric_limits<Tx>::epsilon() * TESSERA_STD::numeric_limits<Tx>::epsilon();
    const Tx v = x[e];
    int64_t i;
    if (detail::lm::isnan(v)) {
      i = len;  // NaN sorts last (as in jnp.searchsorted)
    } else {
      // std::upper_bound as libstdc++ writes it, so an unsorted table
      // gives the CPU's index too.
      int64_t first = 0, n = len;
      while (n > 0) {
        const int64_t half = n >> 1, mid = first + half;
        if (v < xp[mid]) {
          n = half;
        } else {
          first = mid + 1;
          n = n - half - 1;
        }
      }
      i = first;
    }
    i = i < 1 ? 1 : i;
    i = i < len - 1 ? i : len - 1;
    const int64_t im1 = (i - 1 + len) % len;
    const Tf df = fp[i] - fp[im1];
    const Tx dx = xp[i] - xp[im1];
    const Tx delta = v - xp[im1];
    To f;
    if (detail::lm::fabs(dx) <= eps)
      f = static_cast<To>(fp[im1]);
    else
      f = static_cast<To>(fp[im1]) + static_cast<To>(delta / dx) * static_cast<To>(df);
    if (v < xp[0]) f = static_cast<To>(fp[0]);
    if (v > xp[len - 1]) f = static_cast<To>(fp[len - 1]);
    out[e] = f;
  }
};

}  // namespace

void diff(DType t, const std::vector<Segment>& segs, void* out, const Lines& ol, int n, void* scratch) {
  const int64_t m = ol.len, inner = ol.inner, total = ol.outer * m * inner;
  if (total == 0 || n < 1) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const Rows<T> rows = rows_of<T>("diff", segs);
    T* o = static_cast<T*>(out);
    if (n == 1) return diff_runs<T, 1>(rows, o, ol.outer, m, inner);
    if (n == 2) return diff_runs<T, 2>(rows, o, ol.outer, m, inner);
    if (n <= kDiffWindow) return for_each("diff", total, DiffWindow<T>{rows, o, m, inner, n, 0, m});
    if (!scratch) throw Error("[diff] internal: the CUDA kernel of an n > 16 difference needs scratch memory");
    const int64_t block = ol.outer * (m + n) * inner;
    T* a = static_cast<T*>(scratch);
    T* b = a + block;
    for_each("diff", block, Assemble<T>{rows, a, m + n, inner});
    for (int p = 1; p <= n; ++p) {
      const int64_t nout = m + n - p;
      T* dst = p == n ? static_cast<T*>(out) : b;
      for_each("diff", ol.outer * nout * inner, DiffPass<T>{a, dst, nout, inner});
      std::swap(a, b);
    }
  });
}

void line_totals(DType in, const void* x, void* tot, const Lines& l) {
  dispatch(in, [&](auto tag) {
    using In = decltype(tag);
    for_each("cumsum", l.outer * l.inner,
             LineTotals<In>{static_cast<const In*>(x), static_cast<ScanOut<In>*>(tot), l.len, l.inner});
  });
}

void scan_offsets(DType in, const void* before, int parts, const Lines& l, void* offset) {
  if (parts < 1) return;
  dispatch(in, [&](auto tag) {
    using Out = ScanOut<decltype(tag)>;
    for_each("cumsum", l.outer * l.inner,
             ScanOffsets<Out>{static_cast<const Out*>(before), static_cast<Out*>(offset), parts, l.inner});
  });
}

void scan_block(DType in, const void* x, void* out, const Lines& l, const void* offset) {
  if (l.len == 0) return;
  dispatch(in, [&](auto tag) {
    using In = decltype(tag);
    using Out = ScanOut<In>;
    for_each("cumsum", l.outer * l.inner,
             ScanLine<In>{static_cast<const In*>(x), static_cast<Out*>(out), static_cast<const Out*>(offset), l.len,
                          l.inner});
  });
}

void convolve(DType t, const std::vector<Segment>& segs, void* out, const Lines& l, std::int64_t first,
              const void* w, std::int64_t K, std::int64_t hl) {
  const int64_t total = l.outer * l.len * l.inner;
  if (total == 0 || segs.empty()) return;
  dispatch(segs.front().dtype, [&](auto itag) {
    using In = decltype(itag);
    const Rows<In> rows = rows_of<In>("convolve", segs);
    dispatch_float(t, [&](auto tag) {
      using T = decltype(tag);
      for_each("convolve", total,
               Convolve1d<In, T>{rows, static_cast<T*>(out), static_cast<const T*>(w), l.len, l.inner, first, K, hl});
    });
  });
}

void convolve2d(DType t, const void* in, DType in_dtype, const std::vector<Slice>& in_box, void* out,
                const std::vector<Slice>& out_box, const void* w, std::int64_t kr, std::int64_t kc) {
  const size_t nd = out_box.size();
  if (nd < 2) throw Error("[convolve2d] internal: a block of " + std::to_string(nd) + " dims, expected >= 2");
  int64_t total = 1;
  for (size_t d = 0; d < nd; ++d) total *= out_box[d].size();
  if (total == 0) return;
  const int64_t mr = out_box[nd - 2].size(), mc = out_box[nd - 1].size();
  const int64_t ir = in_box[nd - 2].size(), ic = in_box[nd - 1].size();
  const int64_t row0 = out_box[nd - 2].start - kr / 2, col0 = out_box[nd - 1].start - kc / 2;
  const int64_t roff = in_box[nd - 2].start - row0, coff = in_box[nd - 1].start - col0;
  dispatch(in_dtype, [&](auto itag) {
    using In = decltype(itag);
    dispatch_float(t, [&](auto tag) {
      using T = decltype(tag);
      for_each("convolve2d", total,
               Convolve2d<In, T>{static_cast<const In*>(in), static_cast<T*>(out), static_cast<const T*>(w), mr, mc,
                                 ir, ic, kr, kc, roff, coff});
    });
  });
}

void gradient(DType t, const std::vector<Segment>& segs, std::int64_t r0, std::int64_t r1, void* out,
              const Lines& l, std::int64_t first, double h) {
  const int64_t total = l.outer * l.len * l.inner;
  if (total == 0 || segs.empty()) return;
  dispatch(segs.front().dtype, [&](auto itag) {
    using In = decltype(itag);
    const Rows<In> rows = rows_of<In>("gradient", segs);
    dispatch_float(t, [&](auto tag) {
      using T = decltype(tag);
      for_each("gradient", total,
               Gradient<In, T>{rows, static_cast<T*>(out), l.len, l.inner, first, r0, r1, static_cast<T>(h)});
    });
  });
}

void interp(DType tx, DType tf, DType to, const void* x, void* out, std::int64_t n, const void* xp, const void* fp,
            std::int64_t len) {
  if (n <= 0) return;
  dispatch_float(tx, [&](auto xtag) {
    using Tx = decltype(xtag);
    dispatch_float(tf, [&](auto ftag) {
      using Tf = decltype(ftag);
      dispatch_float(to, [&](auto otag) {
        using To = decltype(otag);
        for_each("interp", n,
                 Interp<Tx, Tf, To>{static_cast<const Tx*>(x), static_cast<To*>(out), static_cast<const Tx*>(xp),
                                    static_cast<const Tf*>(fp), len});
      });
    });
  });
}

}  // namespace tessera::cuda
