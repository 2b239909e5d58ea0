// Inside shard_map (src/transforms/shard_map.cpp): what the library itself
// builds on, beyond the public collectives in tessera/shard_map.hpp.
#pragma once

#include "core/array_impl.hpp"
#include "core/reduce_op.hpp"
#include "tessera/shard_map.hpp"

namespace tessera::detail {

/// The all-reduce behind psum (Sum), pmax (Max), pmin (Min) and pmean, for
/// any ReduceOp; valid only inside a shard_map body. Booleans are summed or
/// multiplied as i32 (as psum does); Any and All read other dtypes as
/// nonzero or zero and return bool. The result no longer varies over `axes`.
/// `name` names the collective in errors and in explain.
Array preduce(const Array& x, const AxisNames& axes, ReduceOp op, const char* name);

/// True on a thread running a shard_map body.
bool in_manual_body();
/// The manual mesh axes a value of the current body varies over (sorted;
/// empty outside bodies). Kept by the body's trace, not by the value.
std::vector<std::string> varying_axes(const ArrayImpl& a);
/// Inside a shard_map body: the values as the body reads them. A global
/// array the body captured reads as this device's copy when it is
/// replicated on the body's device (ShardingError otherwise); the body's own
/// values are themselves. Elsewhere: `args` unchanged. The manual trace
/// applies it to every primitive's operands; transformations called inside
/// a body (jit, vmap, jvp, vjp) apply it to their arguments.
std::vector<Array> manual_inputs(std::vector<Array> args);
/// Inside a shard_map body: results of a computation that did not go
/// through the body's trace (a jitted call) vary over the union of its
/// inputs' axes. Does nothing elsewhere.
void manual_results(const std::vector<Array>& in, const std::vector<Array>& out);

}  // namespace tessera::detail
