// The one set of reductions. Array reductions (sum, max, any, ...), the
// cross-device combine of their partials, the sums inside matmul and
// scatter_add, and the manual collectives (psum, pmax, ...) all name a
// ReduceOp and combine elements with combine1, so a value reduced on one
// device, across a mesh or inside shard_map follows one rule per kind.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/combine.hpp"  // ReduceOp and combine1, shared with the GPU kernels
#include "tessera/dtype.hpp"

namespace tessera::detail {

/// "sum", "prod", "max", "min", "any", "all" (collective signatures, messages).
const char* name(ReduceOp op);

/// Calls f(std::integral_constant<ReduceOp, op>{}): the kind becomes a
/// template argument, so inner loops carry no switch and vectorise.
template <class F>
decltype(auto) with_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::Sum: return f(std::integral_constant<ReduceOp, ReduceOp::Sum>{});
    case ReduceOp::Prod: return f(std::integral_constant<ReduceOp, ReduceOp::Prod>{});
    case ReduceOp::Max: return f(std::integral_constant<ReduceOp, ReduceOp::Max>{});
    case ReduceOp::Min: return f(std::integral_constant<ReduceOp, ReduceOp::Min>{});
    case ReduceOp::Any: return f(std::integral_constant<ReduceOp, ReduceOp::Any>{});
    case ReduceOp::All: return f(std::integral_constant<ReduceOp, ReduceOp::All>{});
  }
  return f(std::integral_constant<ReduceOp, ReduceOp::Sum>{});
}

/// acc[i] = combine1<op>(acc[i], in[i]) for i in [0, count), on elements of
/// dtype `t`: how partials from two devices (or two members of a group) are
/// combined. Callers combine in a fixed order (mesh or member order), which
/// is what makes results bitwise reproducible.
void combine(ReduceOp op, DType t, void* acc, const void* in, std::int64_t count);

}  // namespace tessera::detail
