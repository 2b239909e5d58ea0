// Per-device kernels of the stencils and scans: diff, cumsum, convolve,
// convolve2d, gradient and interp. They see row-major local blocks, their
// shapes and global boxes only; which rows a device holds and which it
// received from its neighbours is decided by the partitioning engine
// (spmd/engine.cpp) from the primitives' rules, and eval_stencil.cpp hands
// them over.
//
// Most of them work on the lines of a block along one axis, seen as
// (outer, len, inner): `inner` elements make one "row" of the axis, so every
// inner loop runs over contiguous memory whatever the axis.
#pragma once

#include <cstdint>
#include <vector>

#include "core/lines.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail::cpu {

/// A block's sizes around `axis`: (outer, len, inner) (core/lines.hpp, the
/// GPU's too).
using detail::Lines;
using detail::lines_of;

/// Consecutive rows [start, stop) of a line sequence, for every outer index:
/// row r of outer index o starts at element o * outer_stride + (r - start) * inner.
/// A block received from a neighbour (a halo) or a part of the local block.
struct Segment {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t start = 0, stop = 0;
  std::int64_t outer_stride = 0;
};

/// The n-th difference along the len dim (as jnp.diff; bool differences are
/// not_equal, integers wrap). `segs` (dtype t, sorted, disjoint) cover rows
/// [0, ol.len + n) of the sequence relative to the block's first output row;
/// out (dtype t) is (ol.outer, ol.len, ol.inner).
void diff_block(DType t, const std::vector<Segment>& segs, void* out, const Lines& ol, int n);

/// Line totals of a block x (outer, len, inner) of dtype `in` into tot
/// (outer, inner) of dtype sum_dtype(in), summed in row order.
void line_totals(DType in, const void* x, void* tot, const Lines& l);

/// A block's scan offsets (outer, inner) from the totals of the `parts`
/// blocks before it, `before` (outer, parts, inner): summed in part order,
/// so every device adds the same numbers in the same order. Dtype
/// sum_dtype(in); parts >= 1.
void scan_offsets(DType in, const void* before, int parts, const Lines& l, void* offset);

/// Inclusive scan of x (dtype `in`) along its len dim into out (dtype
/// sum_dtype(in)), starting from `offset` (outer, inner) when not null.
void scan_block(DType in, const void* x, void* out, const Lines& l, const void* offset);

/// One block of a 'same' 1-d convolution with kernel w (K taps of dtype
/// `wdt`), computed in dtype t (f32 or f64) into out (l.outer, l.len,
/// l.inner). `segs` hold the input rows [first - hl, first + l.len + hr)
/// that exist, in global row numbers (rows outside the array are zero);
/// `mid` is the one holding the block's own rows, read in place when the
/// dtypes agree.
void convolve_block(DType t, const std::vector<Segment>& segs, const Segment& mid, void* out, const Lines& l,
                    std::int64_t first, const void* w, DType wdt, std::int64_t K, std::int64_t hl);

/// One block of a 'same' 2-d convolution over the last two dims, computed in
/// dtype t (f32 or f64). `in` is a row-major block covering `in_box` (the
/// output block widened by the kernel's halos, clipped to the array); out
/// covers `out_box`; w is kr x kc of dtype `wdt`.
void convolve2d_block(DType t, const void* in, DType in_dtype, const std::vector<Slice>& in_box, void* out,
                      const std::vector<Slice>& out_box, const void* w, DType wdt, std::int64_t kr, std::int64_t kc);

/// One block of jnp.gradient (edge_order 1, uniform spacing h) along the len
/// dim, in dtype t (f32 or f64): out (l.outer, l.len, l.inner) holds rows
/// [first, first + l.len) of the result; `segs` (sorted, one dtype, global
/// row numbers) cover the input rows [r0, r1) around them: the block widened
/// by one row each side, cut at the array's ends. A row with rows on both
/// sides takes ((x[i+1] - x[i-1]) * 0.5) / h, an end row the one-sided
/// (x[1] - x[0]) / h or (x[n-1] - x[n-2]) / h, as jnp.gradient; differences
/// are taken in the input dtype (integers wrap) and then converted. Every
/// row has a neighbour (n >= 2).
void gradient_block(DType t, const std::vector<Segment>& segs, std::int64_t r0, std::int64_t r1, void* out,
                    const Lines& l, std::int64_t first, double h);

/// jnp.interp of n values x (dtype xdt) into out (dtype `to`) on the table
/// xp (len values of dtype xpdt, computed in tx) and fp (dtype fpdt,
/// computed in tf). tx, tf and to are f32 or f64.
void interp(DType tx, DType tf, DType to, const void* x, DType xdt, void* out, std::int64_t n, const void* xp,
            DType xpdt, const void* fp, DType fpdt, std::int64_t len);

}  // namespace tessera::detail::cpu
