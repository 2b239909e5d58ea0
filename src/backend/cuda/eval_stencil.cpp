// The stencil and scan primitives (primitives/stencil.hpp) on a CUDA
// device: the blocks the engine (spmd/engine.cpp) hands over, in the GPU's
// memory, turned into the kernels of backend/cuda/stencil.hpp. The same
// reading of the blocks as eval_cpu's (backend/cpu/eval_stencil.cpp): diff,
// convolve and gradient read x's rows as segments (the device's own block
// where it lies and the halo rows gathered before and after it), convolve2d
// its widened block from one buffer, cumsum along a sharded axis runs as
// two passes. What the CPU converts on the host (the convolutions' taps,
// interp's tables) is converted by a kernel into scratch device memory,
// freed after the op in the stream's order.
#include <algorithm>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/stencil.hpp"
#include "core/array_impl.hpp"
#include "primitives/stencil.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

namespace {

// Scratch device memory of the calling thread's device (freed, in the
// stream's order, when the Buffer goes).
Buffer scratch(std::int64_t nbytes) { return Buffer(current_device(), static_cast<std::size_t>(nbytes)); }

// n values of dtype `from` at device pointer p as dtype `to`: p itself when
// they agree, else converted (as the CPU's values_as) into `keep`.
const void* values_as(const void* p, DType from, DType to, std::int64_t n, Buffer& keep) {
  if (from == to || n == 0) return p;
  keep = scratch(n * static_cast<std::int64_t>(itemsize(to)));
  cuda::convert(p, from, keep.device_data(), to, n);
  return keep.device_data();
}

}  // namespace

// ===================================================================== diff

void Diff::eval_cuda(const LocalArgs& in, LocalOuts& out) const { eval_halo_cuda(in, {}, out); }

// The rows the block reads (Diff::read_runs, as the CPU's), a rank-0
// prepend or append a broadcast segment of one row.
void Diff::eval_halo_cuda(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const {
  const LocalOut& res = out[0];
  const int n = n_;
  const cuda::Lines ol = lines_of(res.shape, axis_);
  if (ol.len == 0 || ol.outer * ol.inner == 0) return;
  const DType dt = res.dtype;
  const std::vector<cuda::Segment> segs = read_runs(in, pieces, res);
  const std::int64_t nscratch = cuda::diff_scratch_bytes(dt, ol, n);
  Buffer tmp = nscratch > 0 ? scratch(nscratch) : Buffer();
  cuda::diff(dt, segs, res.data, ol, n, tmp.device_data());
}

// =================================================================== cumsum

void Cumsum::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const cuda::Lines l = lines_of(in[0].shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  cuda::scan_block(in[0].dtype, in[0].data, out[0].data, l, nullptr);
}

void Cumsum::scan_totals_cuda(const LocalArgs& in, LocalOut& totals) const {
  cuda::line_totals(in[0].dtype, in[0].data, totals.data, lines_of(in[0].shape, axis_));
}

void Cumsum::eval_scan_cuda(const LocalArgs& in, const LocalIn& before, LocalOuts& out) const {
  const cuda::Lines l = lines_of(in[0].shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  const int parts = static_cast<int>(before.shape[axis_]);
  Buffer offset;
  if (parts > 0) {
    offset = scratch(l.outer * l.inner * static_cast<std::int64_t>(itemsize(out[0].dtype)));
    cuda::scan_offsets(in[0].dtype, before.data, parts, l, offset.device_data());
  }
  cuda::scan_block(in[0].dtype, in[0].data, out[0].data, l, parts > 0 ? offset.device_data() : nullptr);
}

// ================================================================= convolve

void Convolve::eval_cuda(const LocalArgs& in, LocalOuts& out) const { eval_halo_cuda(in, {}, out); }

void Convolve::eval_halo_cuda(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const {
  const LocalIn& x = in[0];
  const LocalIn& w = in[1];
  const LocalOut& res = out[0];
  const cuda::Lines l = lines_of(res.shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  const std::int64_t K = w.shape[0];
  Buffer taps;
  const void* wt = values_as(w.data, w.dtype, res.dtype, K, taps);
  cuda::convolve(res.dtype, row_segments<cuda::Segment>(x, held_of(pieces, 0), axis_, l.inner, 0), res.data, l,
                 res.box[axis_].start, wt, K, K / 2);
}

// =============================================================== convolve2d

void Convolve2d::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const LocalIn& x = in[0];
  const LocalIn& w = in[1];
  const LocalOut& res = out[0];
  if (box_empty(res.box)) return;
  Buffer taps;
  const void* wt = values_as(w.data, w.dtype, res.dtype, w.shape[0] * w.shape[1], taps);
  cuda::convolve2d(res.dtype, x.data, x.dtype, x.box, res.data, res.box, wt, w.shape[0], w.shape[1]);
}

// ================================================================= gradient

void Gradient::eval_cuda(const LocalArgs& in, LocalOuts& out) const { eval_halo_cuda(in, {}, out); }

void Gradient::eval_halo_cuda(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const {
  const LocalOut& res = out[0];
  const cuda::Lines l = lines_of(res.shape, axis_);
  if (l.outer * l.len * l.inner == 0) return;
  const Slice s = in[0].box[axis_];
  cuda::gradient(res.dtype, row_segments<cuda::Segment>(in[0], held_of(pieces, 0), axis_, l.inner, 0), s.start, s.stop,
                 res.data, l, res.box[axis_].start, spacing_);
}

// =================================================================== interp

// x, xp and fp converted to their computing types first (as the CPU does,
// chunk by chunk), then one thread per value.
void Interp::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const std::int64_t n = num_elements(out[0].shape);
  if (n == 0) return;
  const DType tx = x_type(in[0].dtype, in[1].dtype), tf = inexact(in[2].dtype);
  const std::int64_t len = in[1].shape[0];
  Buffer xs, xps, fps;
  const void* x = values_as(in[0].data, in[0].dtype, tx, n, xs);
  const void* xp = values_as(in[1].data, in[1].dtype, tx, len, xps);
  const void* fp = values_as(in[2].data, in[2].dtype, tf, len, fps);
  cuda::interp(tx, tf, out[0].dtype, x, out[0].data, n, xp, fp, len);
}

}  // namespace tessera::detail
