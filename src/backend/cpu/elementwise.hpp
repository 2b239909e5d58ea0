// Per-device elementwise kernels. They see raw buffers and local shapes only.
#pragma once

#include <cstdint>
#include <vector>

#include "core/elementwise_op.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cpu {

// The ops and the operand form are descriptions shared with the primitives
// and the front ends (core/elementwise_op.hpp).
using detail::BinaryOp;
using detail::broadcast_strides;
using detail::Operand;
using detail::returns_bool;
using detail::UnaryOp;

/// y[i] = op(x[i]) for n elements of dtype t (y is bool for predicates).
void unary(UnaryOp op, DType t, const void* x, void* y, std::int64_t n);

/// out = op(a, b) over `shape` (row-major, contiguous out), operands in dtype t.
void binary(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out, const std::vector<std::int64_t>& shape);

/// binary() on n elements whose operands are contiguous runs (strides are
/// ignored) or scalars, not both scalars: the fused-tile form, no shape walk.
void binary_flat(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out, std::int64_t n);

/// out = cond ? x : y over `shape`; cond is bool, x/y/out dtype t.
void select(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out,
            const std::vector<std::int64_t>& shape);

/// select() on n elements of contiguous runs or scalars (fused tiles).
void select_flat(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out, std::int64_t n);


}  // namespace tessera::cpu
