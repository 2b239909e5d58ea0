// The one set of reductions. Array reductions (sum, max, any, ...), the
// cross-device combine of their partials, the sums inside matmul and
// scatter_add, and the manual collectives (psum, pmax, ...) all name a
// ReduceOp and combine elements with combine1, so a value reduced on one
// device, across a mesh or inside shard_map follows one rule per kind.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/wrapping.hpp"
#include "tessera/dtype.hpp"

namespace tessera::detail {

enum class ReduceOp { Sum, Prod, Max, Min, Any, All };

/// "sum", "prod", "max", "min", "any", "all" (collective signatures, messages).
const char* name(ReduceOp op);

/// One step of a reduction: the running value `acc` combined with `v`.
/// - Sum and Prod wrap on integer overflow, as XLA does (signed overflow is
///   undefined in C++); on bool they are logical or and logical and.
/// - Max and Min return NaN when either side is NaN, so NaN wins whatever
///   the order; equal values (0.0 and -0.0) keep `acc`.
/// - Any and All treat every nonzero value as true and return 0 or 1.
template <ReduceOp r, class A>
inline A combine1(A acc, A v) {
  if constexpr (r == ReduceOp::Sum) {
    return wrapping_add(acc, v);
  } else if constexpr (r == ReduceOp::Prod) {
    return wrapping_mul(acc, v);
  } else if constexpr (r == ReduceOp::Max) {
    if constexpr (std::is_floating_point_v<A>)
      if (std::isnan(v) || std::isnan(acc)) return std::numeric_limits<A>::quiet_NaN();
    return v > acc ? v : acc;
  } else if constexpr (r == ReduceOp::Min) {
    if constexpr (std::is_floating_point_v<A>)
      if (std::isnan(v) || std::isnan(acc)) return std::numeric_limits<A>::quiet_NaN();
    return v < acc ? v : acc;
  } else if constexpr (r == ReduceOp::Any) {
    return static_cast<A>(acc != A(0) || v != A(0));
  } else {
    return static_cast<A>(acc != A(0) && v != A(0));
  }
}

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
