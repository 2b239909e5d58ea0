// What an elementwise op computes: the unary and binary operations, which
// of them give bool, and one operand of a binary or select (an array's data
// with its broadcast strides, or a scalar already in the op's dtype). The
// front ends (ops/elementwise) choose them, the primitives
// (primitives/elementwise) carry them, the kernels (backend/cpu/elementwise)
// run them: descriptions, not kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/dtype.hpp"

namespace tessera::detail {

enum class UnaryOp {
  Neg, Abs, Exp, Log, Log1p, Expm1, Sqrt, Rsqrt, Sin, Cos, Tanh, Sigmoid, Floor, Ceil, Round, Sign,
  IsNan, IsFinite, Not
};

enum class BinaryOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor };

/// True for ops whose result is bool whatever the operand dtype.
inline bool returns_bool(UnaryOp op) { return op == UnaryOp::IsNan || op == UnaryOp::IsFinite || op == UnaryOp::Not; }

inline bool returns_bool(BinaryOp op) {
  switch (op) {
    case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt:
    case BinaryOp::Ge: case BinaryOp::And: case BinaryOp::Or: case BinaryOp::Xor:
      return true;
    default:
      return false;
  }
}

/// One operand of a binary kernel: data plus per-dim strides in elements
/// (0 where the operand is broadcast), or a scalar already in the op's dtype.
struct Operand {
  const void* data = nullptr;
  std::vector<std::int64_t> strides;
  bool is_scalar = false;
  double f = 0;         // scalar value for float dtypes
  std::int64_t i = 0;   // scalar value for integer and bool dtypes
};

/// Row-major strides (elements) of a `local` block broadcast to `out`
/// (right-aligned; 0 for broadcast dims): an Operand's strides, on every
/// backend.
std::vector<std::int64_t> broadcast_strides(const std::vector<std::int64_t>& local, const std::vector<std::int64_t>& out);

/// What a fusable elementwise primitive computes on one element, for the
/// loops a backend generates for a fused group (backend/cpu/native): the
/// op, its dtypes and its scalar operand. Each one names a function of
/// kernels/scalar_math.hpp, the same the eager kernels call.
struct ElementExpr {
  enum class Kind { Unary, Binary, BinaryScalar, Select, SelectScalar, Convert };
  Kind kind = Kind::Unary;
  UnaryOp unary = UnaryOp::Neg;    // Unary
  BinaryOp binary = BinaryOp::Add;  // Binary, BinaryScalar
  DType t = DType::f32;             // the operands' dtype (Select: x and y; Convert: from)
  DType result = DType::f32;
  Operand scalar;                   // BinaryScalar, SelectScalar: already in dtype t
  bool scalar_first = false;        // BinaryScalar: the scalar is the left operand; SelectScalar: it is x
};

}  // namespace tessera::detail
