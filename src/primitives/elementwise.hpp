// Elementwise primitives: unary, binary (array-array and array-scalar),
// select, convert, and the identity that carries a sharding constraint.
// Operands arrive already in the compute dtype (the front ends bind a
// convert first); every one of them is fusable.
#pragma once

#include "backend/cpu/elementwise.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

PrimitivePtr make_unary(::tessera::cpu::UnaryOp op, const char* name, DType t);
/// `compute`: dtype of both operands; `result`: dtype of the result.
PrimitivePtr make_binary(::tessera::cpu::BinaryOp op, const char* name, DType compute, DType result,
                         std::optional<PartitionSpec> out_spec);
/// One array operand and a scalar already in `compute` (on the left when
/// `scalar_left`). `text` prints the scalar.
PrimitivePtr make_binary_scalar(::tessera::cpu::BinaryOp op, const char* name, DType compute, DType result,
                                const ::tessera::cpu::Operand& scalar, bool scalar_left, std::string text);
/// where(cond, x, y): operands bool, t, t.
PrimitivePtr make_select(DType t, std::optional<PartitionSpec> out_spec);
/// where with one side a scalar (x when `scalar_is_x`): operands bool, t.
PrimitivePtr make_select_scalar(DType t, const ::tessera::cpu::Operand& scalar, bool scalar_is_x, std::string text);
PrimitivePtr make_convert(DType from, DType to);
/// `a` converted to `dtype` (per device, no communication); `a` itself when
/// it has that dtype.
Array cast(const Array& a, DType dtype);
/// The value itself, laid out as `target` (with_sharding_constraint, reshard).
PrimitivePtr make_constraint(const char* name, const NamedSharding& target);
PrimitivePtr make_stop_gradient();

}  // namespace tessera::detail
