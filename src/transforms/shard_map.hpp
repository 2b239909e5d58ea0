// Inside shard_map (src/transforms/shard_map.cpp): what the library itself
// builds on, beyond the public collectives in tessera/shard_map.hpp.
#pragma once

#include "core/reduce_op.hpp"
#include "tessera/shard_map.hpp"

namespace tessera::detail {

/// The all-reduce behind psum (Sum), pmax (Max), pmin (Min) and pmean, for
/// any ReduceOp; valid only inside a shard_map body. Booleans are summed or
/// multiplied as i32 (as psum does); Any and All read other dtypes as
/// nonzero or zero and return bool. The result no longer varies over `axes`.
/// `name` names the collective in errors and in explain.
Array preduce(const Array& x, const AxisNames& axes, ReduceOp op, const char* name);

/// Inside a shard_map body: results of a computation that did not go
/// through the body's trace (a jitted call) vary over the union of its
/// inputs' axes. Does nothing elsewhere.
void manual_results(const std::vector<Array>& in, const std::vector<Array>& out);

}  // namespace tessera::detail
