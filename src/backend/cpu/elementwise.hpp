// Per-device elementwise kernels. They see raw buffers and local shapes only.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/dtype.hpp"

namespace tessera::cpu {

enum class UnaryOp {
  Neg, Abs, Exp, Log, Log1p, Expm1, Sqrt, Rsqrt, Sin, Cos, Tanh, Sigmoid, Floor, Ceil, Round, Sign,
  IsNan, IsFinite, Not
};

enum class BinaryOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor };

/// True for ops whose result is bool whatever the operand dtype.
bool returns_bool(UnaryOp op);
bool returns_bool(BinaryOp op);

/// y[i] = op(x[i]) for n elements of dtype t (y is bool for predicates).
void unary(UnaryOp op, DType t, const void* x, void* y, std::int64_t n);

/// One operand of a binary kernel: data plus per-dim strides in elements
/// (0 where the operand is broadcast), or a scalar already in the op's dtype.
struct Operand {
  const void* data = nullptr;
  std::vector<std::int64_t> strides;
  bool is_scalar = false;
  double f = 0;         // scalar value for float dtypes
  std::int64_t i = 0;   // scalar value for integer and bool dtypes
};

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

/// Row-major strides (elements) of `local` broadcast to `out` (right-aligned;
/// 0 for broadcast dims).
std::vector<std::int64_t> broadcast_strides(const std::vector<std::int64_t>& local, const std::vector<std::int64_t>& out);

}  // namespace tessera::cpu
