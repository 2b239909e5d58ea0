// The per-device kernel of dot_general: one local block of the result from
// local blocks of the two operands. It knows nothing about meshes; the
// blocks it sees are whatever the sharding engine handed this device.
//
// Each operand is brought to the layout the GEMM wants, (batch, summed, m, k)
// for the lhs and (batch, summed, k, n) for the rhs: summed dims are summed
// away first, a block already in that order (or its transpose) is used in
// place, any other order is permuted into scratch memory. The batched GEMM
// then writes the canonical result (batch, lhs free, rhs free), permuted
// into the output order when that moves data.
#pragma once

#include <vector>

#include "core/contraction.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail::cpu {

// The contraction itself is a description shared with the primitive and
// the front ends (core/contraction.hpp).
using detail::Contraction;
using detail::DotSide;

/// Writes the result block `out` (shape `out_shape`, in output order) from
/// the operand blocks `a` (shape `sa`) and `b` (shape `sb`), all of dtype
/// `dtype`, row-major. The blocks must agree: batch sizes equal or 1
/// (broadcast), contracting sizes equal. Scratch memory is taken on
/// `device` (counted in its memory statistics), or from the heap when
/// `device` is -1.
void dot_general(const Contraction& c, DType dtype, const void* a, const Shape& sa, const void* b, const Shape& sb,
                 void* out, const Shape& out_shape, int device);

}  // namespace tessera::detail::cpu
