// The CUDA kernels of the stencils and scans (diff, cumsum, convolve,
// convolve2d, gradient, interp): the CPU kernels' signatures
// (backend/cpu/stencil.hpp) on device buffers, giving their bits element
// for element. Each output element is computed by one thread with the CPU
// kernel's operations in the CPU kernel's order: diff's passes (first
// differences of everything, then differences of those), cumsum's running
// sum along the axis row by row, the convolutions' sums tap by tap from a
// zero start, gradient's (difference * 0.5) / h. So a scan is sequential
// along its axis (one thread per line), as the CPU's is.
//
// Blocks are seen as (outer, len, inner) around the axis (Lines). A block
// read from several buffers (the device's own rows and the halo rows its
// neighbours sent) is a list of Segments, as on the CPU.
//
// Each function runs on the calling thread's GPU (cuda::current) and
// queues its kernels on its stream without waiting (the caller
// synchronizes once per op). All pointers are device pointers. Plain C++
// (no CUDA headers); a build without CUDA defines these as raising
// DeviceError (no_cuda_stencil.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/lines.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::cuda {

/// A block's sizes around its axis: (outer, len, inner) (core/lines.hpp,
/// the CPU's too).
using detail::Lines;

/// The most segments one block is read from (prepend, the rows before,
/// the own block, the rows after, append).
inline constexpr int kMaxSegments = 8;

/// Rows [start, stop) of a line sequence, a broadcast one of a rank-0
/// prepend or append (core/lines.hpp).
using Segment = detail::RowRun;

/// The n-th difference along the len dim (as jnp.diff; bool differences are
/// not_equal, integers wrap) into out (dtype t, (ol.outer, ol.len,
/// ol.inner)). `segs` (dtype t, sorted, disjoint, at most kMaxSegments)
/// cover rows [0, ol.len + n) of the sequence relative to the block's
/// first output row. For n > kDiffWindow the passes run over the whole
/// block in `scratch` (diff_scratch_bytes of device memory; unused, and
/// may be null, for smaller n).
void diff(DType t, const std::vector<Segment>& segs, void* out, const Lines& ol, int n, void* scratch);

/// The largest n whose differences one thread takes in registers.
inline constexpr int kDiffWindow = 16;

/// The scratch diff needs: two blocks of (ol.outer, ol.len + n, ol.inner)
/// elements of dtype t for n > kDiffWindow, else 0.
inline std::int64_t diff_scratch_bytes(DType t, const Lines& ol, int n) {
  if (n <= kDiffWindow) return 0;
  return 2 * ol.outer * (ol.len + n) * ol.inner * static_cast<std::int64_t>(itemsize(t));
}

/// Line totals of a block x (outer, len, inner) of dtype `in` into tot
/// (outer, inner) of dtype sum_dtype(in), summed in row order.
void line_totals(DType in, const void* x, void* tot, const Lines& l);

/// A block's scan offsets (outer, inner) from the totals of the `parts`
/// blocks before it, `before` (outer, parts, inner), summed in part order.
/// Dtype sum_dtype(in); parts >= 1.
void scan_offsets(DType in, const void* before, int parts, const Lines& l, void* offset);

/// Inclusive scan of x (dtype `in`) along its len dim into out (dtype
/// sum_dtype(in)), starting from `offset` (outer, inner) when not null.
void scan_block(DType in, const void* x, void* out, const Lines& l, const void* offset);

/// One block of a 'same' 1-d convolution in dtype t (f32 or f64) into out
/// (l.outer, l.len, l.inner): `segs` (one dtype, global row numbers) hold
/// the input rows [first - hl, first + l.len + hr) that exist (rows
/// outside the array are zero); w holds the K taps, already in dtype t.
void convolve(DType t, const std::vector<Segment>& segs, void* out, const Lines& l, std::int64_t first,
              const void* w, std::int64_t K, std::int64_t hl);

/// One block of a 'same' 2-d convolution over the last two dims in dtype t
/// (f32 or f64): `in` (dtype in_dtype) is a row-major block covering in_box
/// (the output block widened by the kernel's halos, clipped to the array);
/// out covers out_box; w is kr x kc, already in dtype t.
void convolve2d(DType t, const void* in, DType in_dtype, const std::vector<Slice>& in_box, void* out,
                const std::vector<Slice>& out_box, const void* w, std::int64_t kr, std::int64_t kc);

/// One block of jnp.gradient (edge_order 1, uniform spacing h) along the len
/// dim in dtype t (f32 or f64), as cpu::gradient_block: out holds rows
/// [first, first + l.len); `segs` (one dtype, global row numbers) cover
/// the input rows [r0, r1).
void gradient(DType t, const std::vector<Segment>& segs, std::int64_t r0, std::int64_t r1, void* out,
              const Lines& l, std::int64_t first, double h);

/// jnp.interp of n values x (already in dtype tx) into out (dtype `to`) on
/// the table xp (len values in tx) and fp (len values in tf); tx, tf and
/// to are f32 or f64.
void interp(DType tx, DType tf, DType to, const void* x, void* out, std::int64_t n, const void* xp, const void* fp,
            std::int64_t len);

}  // namespace tessera::cuda
