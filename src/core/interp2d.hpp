// What interp2d computes, as data: the interpolation method, a parameter of
// the primitive (primitives/interp2d.hpp) that the kernel
// (backend/cpu/interp2d.hpp) reads.
#pragma once

namespace tessera::detail {

enum class Interp2dMethod { Linear, Cubic };

/// What an interp2d primitive evaluates: the interpolant, or its derivative
/// in the query's x or y coordinate (the rule of its JVP in xq, yq).
enum class Interp2dDeriv { Value, X, Y };

}  // namespace tessera::detail
