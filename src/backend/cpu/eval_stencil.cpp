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

using cpu::Segment;

// ===================================================================== diff

void Diff::eval_cpu(const LocalArgs& in, LocalOuts& out) const { eval_halo(in, {}, out); }

// The rows the block reads (Diff::read_runs), a rank-0 prepend or append
// broadcast into a row of its own.
void Diff::eval_halo(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const {
  const LocalOut& res = out[0];
  const Lines ol = lines_of(res.shape, axis_);
  if (ol.len == 0 || ol.outer * ol.inner == 0) return;
  const DType dt = res.dtype;
  std::vector<Segment> segs;
  std::vector<std::vector<unsigned char>> rows;  // the broadcast rows
  for (const RowRun& r : read_runs(in, pieces, res)) {
    if (!r.broadcast) {
      segs.push_back(Segment{r.data, dt, r.start, r.stop, r.outer_stride});
      continue;
    }
    std::vector<unsigned char>& buf = rows.emplace_back(static_cast<size_t>(ol.outer * ol.inner) * itemsize(dt));
    dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      const T v = *static_cast<const T*>(r.data);
      std::fill_n(reinterpret_cast<T*>(buf.data()), ol.outer * ol.inner, v);
    });
    segs.push_back(Segment{buf.data(), dt, r.start, r.stop, ol.inner});
  }
  cpu::diff_block(dt, segs, res.data, ol, n_);
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
  const std::vector<Segment> segs = row_segments<Segment>(x, held_of(pieces, 0), axis_, l.inner, 0);
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
  cpu::gradient_block(res.dtype, row_segments<Segment>(in[0], held_of(pieces, 0), axis_, l.inner, 0), s.start, s.stop,
                      res.data, l, res.box[axis_].start, spacing_);
}

// =================================================================== interp

void Interp::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const std::int64_t n = num_elements(out[0].shape);
  if (n == 0) return;
  cpu::interp(x_type(in[0].dtype, in[1].dtype), inexact(in[2].dtype), out[0].dtype, in[0].data, in[0].dtype,
              out[0].data, n, in[1].data, in[1].dtype, in[2].data, in[2].dtype, in[1].shape[0]);
}

}  // namespace tessera::detail
