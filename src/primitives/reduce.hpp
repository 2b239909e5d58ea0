// Reduction primitives: sum, prod, max, min, any, all (and mean's sum) over
// a set of dims, and argmax/argmin along one dim. Operands arrive in the
// reduction's dtype (the front ends bind a convert first).
#pragma once

#include <optional>
#include <vector>

#include "primitives/primitive.hpp"

namespace tessera::detail {

/// The rule of a reduction of `shape` over `axes` (sorted, unique): one
/// factor per operand dim, in dim order; the reduced ones are reduction
/// factors. Result dims are the kept dims' factors; with `keepdims` the
/// reduced dims stay as size-1 dims outside every factor.
ShardingRule reduce_rule(const Shape& shape, const std::vector<int>& axes, bool keepdims);

/// `op` over `axes` (normalised) of an operand of dtype `t` (the result's
/// dtype too). `name` is the front end's: errors, IR text and
/// communication records name it (mean binds a Sum named "mean").
PrimitivePtr make_reduce(const char* name, ReduceOp op, DType t, std::vector<int> axes, bool keepdims,
                         std::optional<PartitionSpec> out_spec);

/// argmax (`is_max`) or argmin along `axis` (normalised, of nonzero size):
/// i32 indices of the first best element, NaN first.
PrimitivePtr make_arg_reduce(const char* name, bool is_max, int axis, bool keepdims,
                             std::optional<PartitionSpec> out_spec);

}  // namespace tessera::detail
