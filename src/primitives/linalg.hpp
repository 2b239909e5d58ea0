// The linear-algebra primitive: dot_general, the one contraction under
// matmul, dot, einsum and dot_general itself. Operands arrive in the compute
// dtype (the front ends bind a convert first).
#pragma once

#include "backend/cpu/dot.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// The result shape of `c` on operands of shapes `sa` and `sb` (validated by
/// the front end): canonical (batch, lhs free, rhs free), then permuted.
Shape dot_shape(const cpu::Contraction& c, const Shape& sa, const Shape& sb);

/// The factors of `c`: batch pairs, lhs free, rhs free (pass-through), then
/// contracting pairs and summed dims (reduction); a size-1 batch dim
/// broadcast against a larger one maps to none.
ShardingRule dot_rule(const cpu::Contraction& c, const Shape& sa, const Shape& sb);

/// `name` is the front end's (errors and communication records name it);
/// `t` is the dtype of both operands and of the result.
PrimitivePtr make_dot_general(const char* name, cpu::Contraction c, DType t, std::optional<PartitionSpec> out_spec);

}  // namespace tessera::detail
