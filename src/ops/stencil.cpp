// Stencils and scans: diff, cumsum, convolve, convolve2d, interp.
//
// None of them gathers a sharded operand. Each works on the lines of the
// array along one axis, seen per device as a row-major block (outer, len,
// inner): `inner` elements make one "row" of the axis, so every inner loop
// runs over contiguous memory whatever the axis.
//
// Communication (all through the planner, recorded under the op's name):
//   - diff / convolve: a device's output block [a, b) along the axis needs
//     input rows just outside its own block. It reads its own block in place
//     (local_data) and gathers only the missing rows before and after it (two
//     gather_boxes calls: the halos). The rows form "segments" of one virtual
//     line (prepend | x | append for diff); the kernel streams over the rows
//     that lie in one segment and assembles the few rows that straddle two.
//   - cumsum along a sharded axis: pass 1 computes each block's line totals,
//     which form a small array with one row per part along the axis; each
//     device gathers the totals of the parts before it, adds them in part
//     order (deterministic) and scans its block starting from that offset.
//   - convolve2d: one gather of the block widened by the kernel's halos on
//     both dims (corners included).
//   - interp: xp and fp are small and replicated to every device; the rest
//     is elementwise.
//
// The per-device kernels live here (anonymous namespace); they know nothing
// about meshes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/wrapping.hpp"
#include "ops/common.hpp"

namespace tessera {

using detail::Buffer;
using detail::msg;

namespace {

// ----------------------------------------------------------------- helpers

/// Elements per chunk of the kernels' scratch buffers (fits in L1/L2).
constexpr std::int64_t kChunkElems = 8192;

/// A block's sizes around `axis`: (outer, len, inner).
struct Lines {
  std::int64_t outer = 1, len = 0, inner = 1;
};

Lines lines_of(const Shape& s, int axis) {
  Lines l;
  for (int d = 0; d < axis; ++d) l.outer *= s[d];
  l.len = s[axis];
  for (size_t d = axis + 1; d < s.size(); ++d) l.inner *= s[d];
  return l;
}

/// Consecutive rows [start, stop) of a line sequence, for every outer index:
/// row r of outer index o starts at element o * outer_stride + (r - start) * inner.
struct Segment {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t start = 0, stop = 0;
  std::int64_t outer_stride = 0;
};

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

/// True when no position has a non-empty box.
bool all_empty(const std::vector<std::vector<Slice>>& boxes) {
  return std::all_of(boxes.begin(), boxes.end(), [](const auto& b) { return detail::box_empty(b); });
}



/// JAX's promote_dtypes_inexact: integer and bool results become f32.
DType inexact(DType t) { return detail::is_float(t) ? t : DType::f32; }

/// The box `block` with its `axis` range replaced by [lo, hi) (empty when hi <= lo).
std::vector<Slice> with_range(std::vector<Slice> block, int axis, std::int64_t lo, std::int64_t hi) {
  block[axis] = Slice{lo, std::max(lo, hi)};
  return block;
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
    std::fill(t, t + l.inner, Out(0));
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

template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  if (t == DType::f64) return f(double{});
  return f(float{});
}

/// The kernel array brought to every device: replicated on x's mesh.
Array replicate(const Array& a, const char* op) {
  return detail::reshard_for(a, NamedSharding(a.sharding().mesh(), P()), op);
}

template <class T>
std::vector<T> host_values(const Array& replicated, int pos) {
  std::vector<T> v(static_cast<size_t>(replicated.size()));
  detail::convert(detail::local_data(replicated, pos), replicated.dtype(), v.data(), dtype_of<T>(),
                  replicated.size());
  return v;
}

}  // namespace

// ===================================================================== diff

Array diff(const Array& x, int n, int axis, const DiffOptions& opt) {
  const char* op = "diff";
  detail::check_valid(x, op, "x");
  if (n < 0) throw ShapeError(msg(op, "n must be >= 0, got " + std::to_string(n)));
  if (x.ndim() == 0) throw ShapeError(msg(op, "x must be at least 1-d, got shape " + shape_str(x.shape())));
  axis = detail::normalize_axis(axis, x.ndim(), op);
  const Shape& xs = x.shape();
  // prepend / append: x's shape except along axis, or rank 0 (one row).
  auto check_extra = [&](const std::optional<Array>& e, const char* name) -> std::int64_t {
    if (!e) return 0;
    detail::check_valid(*e, op, name);
    detail::check_same_mesh({&x, &*e}, op);
    if (e->ndim() == 0) return 1;
    bool ok = e->ndim() == x.ndim();
    for (int d = 0; ok && d < x.ndim(); ++d) ok = d == axis || e->shape()[d] == xs[d];
    if (!ok)
      throw ShapeError(msg(op, std::string(name) + " must have x's shape " + shape_str(xs) + " except along axis " +
                                   std::to_string(axis) + " (or be a scalar), got " + shape_str(e->shape())));
    return e->shape()[axis];
  };
  const std::int64_t np = check_extra(opt.prepend, "prepend");
  const std::int64_t na = check_extra(opt.append, "append");
  if (n == 0) return x;  // as jnp.diff: the input, prepend/append ignored

  DType dt = x.dtype();
  if (opt.prepend) dt = detail::promote(dt, opt.prepend->dtype());
  if (opt.append) dt = detail::promote(dt, opt.append->dtype());
  const Array xc = detail::cast(x, dt);
  const std::optional<Array> pre = opt.prepend ? std::optional<Array>(detail::cast(*opt.prepend, dt)) : std::nullopt;
  const std::optional<Array> app = opt.append ? std::optional<Array>(detail::cast(*opt.append, dt)) : std::nullopt;

  // The virtual sequence along axis: prepend rows [0, np), x rows [np, np + L),
  // append rows [np + L, S). Output row i = n-th difference of rows [i, i + n].
  const std::int64_t L = xs[axis];
  const auto what = [&] { return "prepend, x and append along axis " + std::to_string(axis); };
  const std::int64_t S = detail::checked_add(detail::checked_add(np, L, op, what), na, op, what);
  Shape out_shape = xs;
  out_shape[axis] = std::max<std::int64_t>(S - n, 0);
  detail::checked_nbytes(out_shape, dt, op);
  const NamedSharding& sh = x.sharding();
  const Mesh& mesh = sh.mesh();
  const int npos = mesh.size();

  // Per position: the output block [a, b) needs sequence rows [a, b + n).
  std::vector<std::vector<Slice>> pre_boxes(npos), lo_boxes(npos), hi_boxes(npos), app_boxes(npos);
  std::vector<std::vector<Slice>> out_idx(npos), x_idx(npos);
  std::vector<Slice> mid(npos);
  for (int t = 0; t < npos; ++t) {
    out_idx[t] = sh.shard_index(out_shape, t);
    x_idx[t] = sh.shard_index(xs, t);
    const bool none = detail::box_empty(out_idx[t]);
    const std::int64_t a = out_idx[t][axis].start, e = out_idx[t][axis].stop + n;
    const std::int64_t xa = x_idx[t][axis].start, xb = x_idx[t][axis].stop;
    // x rows needed: [ra, rb); the part inside the local block is read in place.
    const std::int64_t ra = std::max(a - np, std::int64_t{0}), rb = std::min(e - np, L);
    const bool need_x = !none && ra < rb;
    lo_boxes[t] = with_range(x_idx[t], axis, ra, need_x ? std::min(rb, xa) : ra);
    hi_boxes[t] = with_range(x_idx[t], axis, std::max(ra, xb), need_x ? rb : ra);
    mid[t] = need_x ? Slice{std::max(ra, xa), std::max(std::max(ra, xa), std::min(rb, xb))} : Slice{xa, xa};
    if (pre && pre->ndim() > 0) pre_boxes[t] = with_range(x_idx[t], axis, a, none ? a : std::min(e, np));
    if (app && app->ndim() > 0)
      app_boxes[t] = with_range(x_idx[t], axis, std::max(a, np + L) - np - L, none ? 0 : e - np - L);
  }
  std::vector<Buffer> pre_buf(npos), lo_buf(npos), hi_buf(npos), app_buf(npos);
  bool gathered = false;
  auto gather = [&](const Array& a, const std::vector<std::vector<Slice>>& boxes, std::vector<Buffer>& buf) {
    if (all_empty(boxes)) return;
    buf = detail::gather_boxes(a, boxes, op);
    gathered = true;
  };
  if (pre && pre->ndim() > 0) gather(*pre, pre_boxes, pre_buf);
  gather(xc, lo_boxes, lo_buf);
  gather(xc, hi_boxes, hi_buf);
  if (app && app->ndim() > 0) gather(*app, app_boxes, app_buf);
  if (!gathered) detail::record_none(mesh, op);

  return detail::make_array(out_shape, dt, sh, [&](int t, Buffer& out) {
    const Lines ol = lines_of(detail::box_shape(out_idx[t]), axis);
    if (ol.len == 0 || ol.outer * ol.inner == 0) return;
    const std::int64_t a = out_idx[t][axis].start, e = out_idx[t][axis].stop + n;
    const std::int64_t row = ol.inner;
    // Segments in sequence rows relative to a: [0, m + n).
    std::vector<Segment> segs;
    auto add_seg = [&](const void* data, std::int64_t s0, std::int64_t s1, std::int64_t stride) {
      if (s1 > s0) segs.push_back(Segment{data, dt, s0 - a, s1 - a, stride});
    };
    // A rank-0 prepend/append broadcast to one row (one buffer each).
    std::vector<unsigned char> pre_row, app_row;
    auto broadcast_row = [&](const Array& s, std::vector<unsigned char>& buf) {
      buf.resize(static_cast<size_t>(ol.outer * row) * itemsize(dt));
      detail::dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T v = *static_cast<const T*>(detail::local_data(s, t));
        std::fill_n(reinterpret_cast<T*>(buf.data()), ol.outer * row, v);
      });
      return static_cast<const void*>(buf.data());
    };
    if (pre) {
      if (pre->ndim() == 0) {
        if (a < 1) add_seg(broadcast_row(*pre, pre_row), 0, 1, row);
      } else {
        const Slice s = pre_boxes[t][axis];
        add_seg(pre_buf[t].data(), s.start, s.stop, s.size() * row);
      }
    }
    const Slice lo = lo_boxes[t][axis], hi = hi_boxes[t][axis];
    const std::int64_t xa = x_idx[t][axis].start, xl = x_idx[t][axis].size();
    add_seg(lo_buf[t].data(), lo.start + np, lo.stop + np, lo.size() * row);
    if (mid[t].size() > 0) {
      const auto* base = static_cast<const unsigned char*>(detail::local_data(xc, t));
      add_seg(base + (mid[t].start - xa) * row * static_cast<std::int64_t>(itemsize(dt)), mid[t].start + np,
              mid[t].stop + np, xl * row);
    }
    add_seg(hi_buf[t].data(), hi.start + np, hi.stop + np, hi.size() * row);
    if (app) {
      if (app->ndim() == 0) {
        if (e > np + L) add_seg(broadcast_row(*app, app_row), np + L, np + L + 1, row);
      } else {
        const Slice s = app_boxes[t][axis];
        add_seg(app_buf[t].data(), s.start + np + L, s.stop + np + L, s.size() * row);
      }
    }
    detail::dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      diff_block<T>(segs, static_cast<T*>(out.data()), ol, n);
    });
  });
}

// =================================================================== cumsum

Array cumsum(const Array& x, int axis) {
  const char* op = "cumsum";
  detail::check_valid(x, op, "x");
  axis = detail::normalize_axis(axis, x.ndim(), op);
  const DType out_dt = detail::sum_dtype(x.dtype());
  const NamedSharding& sh = x.sharding();
  const Mesh& mesh = sh.mesh();
  const int npos = mesh.size();
  const int K = sh.num_parts(axis);

  // Sharded axis: the totals of every block form an array with one row per
  // part along axis (same spec: part c holds exactly row c); each device
  // gathers the rows of the parts before it.
  std::vector<Buffer> before(npos);
  if (K > 1) {
    Shape tshape = x.shape();
    tshape[axis] = K;
    const Array totals = detail::make_array(tshape, out_dt, sh, [&](int t, Buffer& b) {
      const Lines l = lines_of(detail::local_shape(x, t), axis);
      detail::dispatch(x.dtype(), [&](auto tag) {
        using In = decltype(tag);
        line_totals(static_cast<const In*>(detail::local_data(x, t)), static_cast<ScanOut<In>*>(b.data()), l);
      });
    });
    std::vector<std::vector<Slice>> boxes(npos);
    for (int t = 0; t < npos; ++t)
      boxes[t] = with_range(detail::local_index(totals, t), axis, 0, sh.part_index(axis, t));
    before = detail::gather_boxes(totals, boxes, op);
  } else {
    detail::record_none(mesh, op);
  }

  return detail::make_array(x.shape(), out_dt, sh, [&](int t, Buffer& out) {
    const Lines l = lines_of(detail::local_shape(x, t), axis);
    if (l.outer * l.len * l.inner == 0) return;
    const int c = K > 1 ? sh.part_index(axis, t) : 0;
    detail::dispatch(x.dtype(), [&](auto tag) {
      using In = decltype(tag);
      using Out = ScanOut<In>;
      std::vector<Out> offset;
      if (c > 0) {
        // Offsets: the totals of parts 0 .. c-1, added in part order.
        const Out* g = static_cast<const Out*>(before[t].data());
        offset.resize(static_cast<size_t>(l.outer * l.inner));
        for (std::int64_t o = 0; o < l.outer; ++o) {
          Out* off = offset.data() + o * l.inner;
          const Out* go = g + o * c * l.inner;
          std::copy(go, go + l.inner, off);
          for (int p = 1; p < c; ++p)
            for (std::int64_t j = 0; j < l.inner; ++j) off[j] = add(off[j], go[p * l.inner + j]);
        }
      }
      scan_block(static_cast<const In*>(detail::local_data(x, t)), static_cast<Out*>(out.data()), l,
                 offset.empty() ? nullptr : offset.data());
    });
  });
}

// ================================================================= convolve

Array convolve(const Array& x, const Array& kernel, int axis) {
  const char* op = "convolve";
  detail::check_valid(x, op, "x");
  detail::check_valid(kernel, op, "kernel");
  detail::check_same_mesh({&x, &kernel}, op);
  if (kernel.ndim() != 1) throw ShapeError(msg(op, "kernel must be 1-d, got shape " + shape_str(kernel.shape())));
  if (kernel.size() == 0) throw ShapeError(msg(op, "kernel must not be empty, got shape (0,)"));
  if (x.ndim() == 0) throw ShapeError(msg(op, "x must be at least 1-d, got shape " + shape_str(x.shape())));
  axis = detail::normalize_axis(axis, x.ndim(), op);
  const DType dt = inexact(detail::promote(x.dtype(), kernel.dtype()));
  const std::int64_t K = kernel.size(), L = x.shape()[axis];
  // 'same': out[i] = sum_k w[k] x[i + (K-1)/2 - k], so rows [i - K/2, i + (K-1)/2].
  const std::int64_t hl = K / 2, hr = (K - 1) / 2;
  const NamedSharding& sh = x.sharding();
  const int npos = sh.mesh().size();
  const Array w = replicate(kernel, op);

  std::vector<std::vector<Slice>> lo_boxes(npos), hi_boxes(npos), x_idx(npos);
  for (int t = 0; t < npos; ++t) {
    x_idx[t] = detail::local_index(x, t);
    const Slice s = x_idx[t][axis];
    const bool none = detail::box_empty(x_idx[t]);
    lo_boxes[t] = with_range(x_idx[t], axis, std::max<std::int64_t>(0, s.start - hl), none ? 0 : s.start);
    hi_boxes[t] = with_range(x_idx[t], axis, s.stop, none ? 0 : std::min(L, s.stop + hr));
  }
  std::vector<Buffer> lo_buf(npos), hi_buf(npos);
  if (!all_empty(lo_boxes)) lo_buf = detail::gather_boxes(x, lo_boxes, op);
  if (!all_empty(hi_boxes)) hi_buf = detail::gather_boxes(x, hi_boxes, op);
  if (all_empty(lo_boxes) && all_empty(hi_boxes)) detail::record_none(sh.mesh(), op);

  return detail::make_array(x.shape(), dt, sh, [&](int t, Buffer& out) {
    const Lines l = lines_of(detail::local_shape(x, t), axis);
    if (l.outer * l.len * l.inner == 0) return;
    const std::int64_t row = l.inner;
    const Slice s = x_idx[t][axis], lo = lo_boxes[t][axis], hi = hi_boxes[t][axis];
    const Segment mid{detail::local_data(x, t), x.dtype(), s.start, s.stop, s.size() * row};
    std::vector<Segment> segs;
    if (lo.size() > 0) segs.push_back(Segment{lo_buf[t].data(), x.dtype(), lo.start, lo.stop, lo.size() * row});
    segs.push_back(mid);
    if (hi.size() > 0) segs.push_back(Segment{hi_buf[t].data(), x.dtype(), hi.start, hi.stop, hi.size() * row});
    dispatch_float(dt, [&](auto tag) {
      using T = decltype(tag);
      convolve_block<T>(segs, mid, static_cast<T*>(out.data()), l, s.start, host_values<T>(w, t), hl);
    });
  });
}

// =============================================================== convolve2d

Array convolve2d(const Array& x, const Array& kernel) {
  const char* op = "convolve2d";
  detail::check_valid(x, op, "x");
  detail::check_valid(kernel, op, "kernel");
  detail::check_same_mesh({&x, &kernel}, op);
  if (kernel.ndim() != 2) throw ShapeError(msg(op, "kernel must be 2-d, got shape " + shape_str(kernel.shape())));
  if (kernel.size() == 0) throw ShapeError(msg(op, "kernel must not be empty, got shape " + shape_str(kernel.shape())));
  if (x.ndim() < 2) throw ShapeError(msg(op, "x must be at least 2-d, got shape " + shape_str(x.shape())));
  const DType dt = inexact(detail::promote(x.dtype(), kernel.dtype()));
  const int nd = x.ndim();
  const std::int64_t kr = kernel.shape()[0], kc = kernel.shape()[1];
  const std::int64_t R = x.shape()[nd - 2], C = x.shape()[nd - 1];
  const NamedSharding& sh = x.sharding();
  const int npos = sh.mesh().size();
  const Array w = replicate(kernel, op);

  // Each block widened by the halos (rows and columns, corners included),
  // clipped to the array; an empty block needs nothing.
  std::vector<std::vector<Slice>> boxes(npos), x_idx(npos);
  for (int t = 0; t < npos; ++t) {
    x_idx[t] = detail::local_index(x, t);
    boxes[t] = x_idx[t];
    if (detail::box_empty(x_idx[t])) {
      for (auto& s : boxes[t]) s = Slice{0, 0};
      continue;
    }
    auto& r = boxes[t][nd - 2];
    auto& c = boxes[t][nd - 1];
    r = Slice{std::max<std::int64_t>(0, r.start - kr / 2), std::min(R, r.stop + (kr - 1) / 2)};
    c = Slice{std::max<std::int64_t>(0, c.start - kc / 2), std::min(C, c.stop + (kc - 1) / 2)};
  }
  std::vector<Buffer> in(npos);
  if (!all_empty(boxes))
    in = detail::gather_boxes(x, boxes, op);
  else
    detail::record_none(sh.mesh(), op);

  return detail::make_array(x.shape(), dt, sh, [&](int t, Buffer& out) {
    if (detail::box_empty(x_idx[t])) return;
    dispatch_float(dt, [&](auto tag) {
      using T = decltype(tag);
      convolve2d_block<T>(in[t].data(), x.dtype(), boxes[t], static_cast<T*>(out.data()), x_idx[t],
                          host_values<T>(w, t), kr, kc);
    });
  });
}

// =================================================================== interp

Array interp(const Array& x, const Array& xp, const Array& fp) {
  const char* op = "interp";
  detail::check_valid(x, op, "x");
  detail::check_valid(xp, op, "xp");
  detail::check_valid(fp, op, "fp");
  detail::check_same_mesh({&x, &xp, &fp}, op);
  if (xp.ndim() != 1 || fp.ndim() != 1 || xp.shape() != fp.shape())
    throw ShapeError(msg(op, "xp and fp must be 1-d arrays of equal size, got xp " + shape_str(xp.shape()) +
                                 " and fp " + shape_str(fp.shape())));
  if (xp.size() == 0) throw ShapeError(msg(op, "xp and fp must not be empty, got shape (0,)"));
  // As jnp.interp: x and xp promoted together to inexact, fp on its own.
  const DType tx = inexact(detail::promote(x.dtype(), xp.dtype()));
  const DType tf = inexact(fp.dtype());
  const DType to = detail::promote(tx, tf);
  const Array xpr = replicate(xp, op), fpr = replicate(fp, op);
  return detail::make_array(x.shape(), to, x.sharding(), [&](int t, Buffer& out) {
    const std::int64_t n = detail::num_elements(detail::local_shape(x, t));
    if (n == 0) return;
    dispatch_float(tx, [&](auto xtag) {
      using Tx = decltype(xtag);
      const std::vector<Tx> xv = host_values<Tx>(xpr, t);
      dispatch_float(tf, [&](auto ftag) {
        using Tf = decltype(ftag);
        const std::vector<Tf> fv = host_values<Tf>(fpr, t);
        dispatch_float(to, [&](auto otag) {
          using To = decltype(otag);
          interp_values<Tx, Tf, To>(detail::local_data(x, t), x.dtype(), static_cast<To*>(out.data()), n, xv, fv);
        });
      });
    });
  });
}

}  // namespace tessera
