// The stencil and scan primitives' per-block compute (see
// primitives/stencil.hpp): each eval_cpu turns the blocks the engine
// (spmd/engine.cpp) hands it into the kernels of backend/cpu/stencil.hpp.
//
// A stencil's operand block is its result block widened by the rule's halo
// and cut at the array's ends (LocalIn.box says which rows it holds). diff,
// convolve and gradient read it as segments of rows (eval_halo): the
// device's own block where it lies and the rows before and after it that
// the engine gathered; convolve2d reads it from one buffer. cumsum along a
// sharded axis runs as two passes (scan_totals, eval_scan); along a whole
// axis it is one block scan (eval_cpu).
#include <algorithm>

#include "backend/cpu/stencil.hpp"
#include "core/array_impl.hpp"
#include "core/dispatch.hpp"
#include "primitives/stencil.hpp"

namespace tessera::detail {

using cpu::Lines;
using cpu::lines_of;
using cpu::Segment;

namespace {

// Operand `a`'s rows along `axis`, numbered from `shift`, as segments (rows
// of `inner` elements): the buffers `held` holds it in (eval_halo's pieces),
// or its one buffer.
std::vector<Segment> row_segments(const LocalIn& a, const LocalArgs& held, int axis, std::int64_t inner,
                                  std::int64_t shift) {
  std::vector<Segment> segs;
  auto add = [&](const LocalIn& p) {
    const Slice r = p.box[axis];
    if (r.size() > 0) segs.push_back(Segment{p.data, p.dtype, r.start + shift, r.stop + shift, r.size() * inner});
  };
  if (held.empty())
    add(a);
  else
    for (const LocalIn& p : held) add(p);
  return segs;
}

// The pieces operand i is held in (none: its one buffer).
const LocalArgs& held_of(const std::vector<LocalArgs>& pieces, size_t i) {
  static const LocalArgs none;
  return i < pieces.size() ? pieces[i] : none;
}

}  // namespace

// ===================================================================== diff

void Diff::eval_cpu(const LocalArgs& in, LocalOuts& out) const { eval_halo(in, {}, out); }

// The rows of the virtual sequence prepend | x | append along the axis that
// the block's output rows [a, b) read, rows [a, b + n), as segments (sorted,
// disjoint, relative to a): prepend rows [0, np) (whole on every device),
// the x rows the engine brought (its box: x rows [a - np, b + n - np) cut at
// x's ends) at np + their index, and append rows after x. When the box is
// cut before it reaches b + n - np, x ends there (L = the box's stop) and
// the append follows; otherwise no append row is read.
void Diff::eval_halo(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const {
  const LocalOut& res = out[0];
  const int n = n_, axis = axis_;
  const Lines ol = lines_of(res.shape, axis);
  if (ol.len == 0 || ol.outer * ol.inner == 0) return;
  const DType dt = res.dtype;
  const std::int64_t a = res.box[axis].start, e = res.box[axis].stop + n;
  const std::int64_t row = ol.inner;
  const auto isz = static_cast<std::int64_t>(itemsize(dt));
  const LocalIn& x = in[0];
  const LocalIn* pre = pre_ ? &in[prepend_index()] : nullptr;
  const LocalIn* app = app_ ? &in[append_index()] : nullptr;
  const std::int64_t np = !pre ? 0 : pre->shape.empty() ? 1 : pre->box[axis].stop;
  const Slice xs = x.box[axis];
  const bool x_ends = xs.stop < e - np;  // the box was cut by x's end: L = xs.stop
  // Segments in sequence rows relative to a: the part of [s0, s1) inside
  // [a, e), of a block whose row s0 starts at `data`.
  std::vector<Segment> segs;
  auto add_seg = [&](const void* data, std::int64_t s0, std::int64_t s1, std::int64_t stride) {
    const std::int64_t c0 = std::max(s0, a), c1 = std::min(s1, e);
    if (c1 > c0)
      segs.push_back(
          Segment{static_cast<const unsigned char*>(data) + (c0 - s0) * row * isz, dt, c0 - a, c1 - a, stride});
  };
  // A rank-0 prepend/append broadcast to one row (one buffer each).
  std::vector<unsigned char> pre_row, app_row;
  auto broadcast_row = [&](const LocalIn& s, std::vector<unsigned char>& buf) {
    buf.resize(static_cast<size_t>(ol.outer * row * isz));
    dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      const T v = *static_cast<const T*>(s.data);
      std::fill_n(reinterpret_cast<T*>(buf.data()), ol.outer * row, v);
    });
    return static_cast<const void*>(buf.data());
  };
  if (pre) {
    if (pre->shape.empty()) {
      if (a < 1) add_seg(broadcast_row(*pre, pre_row), 0, 1, row);
    } else {
      add_seg(pre->data, 0, np, np * row);
    }
  }
  for (const Segment& g : row_segments(x, held_of(pieces, 0), axis, row, np))
    add_seg(g.data, g.start, g.stop, g.outer_stride);
  if (app && x_ends) {
    const std::int64_t s0 = np + xs.stop;
    if (app->shape.empty()) {
      add_seg(broadcast_row(*app, app_row), s0, s0 + 1, row);
    } else {
      const std::int64_t na = app->box[axis].stop;
      add_seg(app->data, s0, s0 + na, na * row);
    }
  }
  cpu::diff_block(dt, segs, res.data, ol, n);
}

// =================================================================== cumsum

void Cumsum::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const Lines l = lines_of(in[0].shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  cpu::scan_block(in[0].dtype, in[0].data, out[0].data, l, nullptr);
}

void Cumsum::scan_totals(const LocalArgs& in, LocalOut& totals) const {
  cpu::line_totals(in[0].dtype, in[0].data, totals.data, lines_of(in[0].shape, axis_));
}

void Cumsum::eval_scan(const LocalArgs& in, const LocalIn& before, LocalOuts& out) const {
  const Lines l = lines_of(in[0].shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  const int parts = static_cast<int>(before.shape[axis_]);
  // Offsets: the totals of the parts before this one (8 bytes hold any sum dtype).
  std::vector<std::int64_t> offset;
  if (parts > 0) {
    offset.resize(static_cast<size_t>(l.outer * l.inner));
    cpu::scan_offsets(in[0].dtype, before.data, parts, l, offset.data());
  }
  cpu::scan_block(in[0].dtype, in[0].data, out[0].data, l, offset.empty() ? nullptr : offset.data());
}

// ================================================================= convolve

void Convolve::eval_cpu(const LocalArgs& in, LocalOuts& out) const { eval_halo(in, {}, out); }

// The x rows the engine brought (the block widened by K/2 rows before and
// (K-1)/2 after, cut at the array's ends: rows beyond them are zero) in
// global row numbers; the largest segment, the device's own block, is read
// in place wherever a window lies inside it.
void Convolve::eval_halo(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const {
  const LocalIn& x = in[0];
  const LocalIn& w = in[1];
  const LocalOut& res = out[0];
  const Lines l = lines_of(res.shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  const std::int64_t K = w.shape[0];
  const std::vector<Segment> segs = row_segments(x, held_of(pieces, 0), axis_, l.inner, 0);
  Segment mid;
  for (const Segment& g : segs)
    if (g.stop - g.start > mid.stop - mid.start) mid = g;
  cpu::convolve_block(res.dtype, segs, mid, res.data, l, res.box[axis_].start, w.data, w.dtype, K, K / 2);
}

// =============================================================== convolve2d

// x's block widened by the kernel's halos on both dims, corners included.
void Convolve2d::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const LocalIn& x = in[0];
  const LocalIn& w = in[1];
  const LocalOut& res = out[0];
  if (box_empty(res.box)) return;
  cpu::convolve2d_block(res.dtype, x.data, x.dtype, x.box, res.data, res.box, w.data, w.dtype, w.shape[0], w.shape[1]);
}

// ================================================================= gradient

void Gradient::eval_cpu(const LocalArgs& in, LocalOuts& out) const { eval_halo(in, {}, out); }

// The x rows around the block (one each side, cut at the array's ends, where
// the kernel takes one-sided differences) in global row numbers.
void Gradient::eval_halo(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const {
  const LocalOut& res = out[0];
  const Lines l = lines_of(res.shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  const Slice s = in[0].box[axis_];
  cpu::gradient_block(res.dtype, row_segments(in[0], held_of(pieces, 0), axis_, l.inner, 0), s.start, s.stop, res.data,
                      l, res.box[axis_].start, spacing_);
}

// =================================================================== interp

void Interp::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const std::int64_t n = num_elements(out[0].shape);
  if (n == 0) return;
  cpu::interp(x_type(in[0].dtype, in[1].dtype), inexact(in[2].dtype), out[0].dtype, in[0].data, in[0].dtype,
              out[0].data, n, in[1].data, in[1].dtype, in[2].data, in[2].dtype, in[1].shape[0]);
}

}  // namespace tessera::detail
