// What interp2d computes, as data: the interpolation method, a parameter of
// the primitive (primitives/interp2d.hpp) that the kernels
// (backend/cpu/interp2d.hpp, backend/cuda/interp2d.hpp) read, and the
// knots a kernel call takes.
#pragma once

#include <cstdint>

#include "tessera/dtype.hpp"

namespace tessera::detail {

enum class Interp2dMethod { Linear, Cubic };

/// What an interp2d primitive evaluates: the interpolant, or its derivative
/// in the query's x or y coordinate (the rule of its JVP in xq, yq).
enum class Interp2dDeriv { Value, X, Y };

/// The knots of one kernel call, each axis in its own dtype (any real
/// dtype; read as f64).
struct Interp2dGrid {
  const void* x = nullptr;
  DType x_dtype = DType::f64;
  std::int64_t nx = 0;  // >= 2
  const void* y = nullptr;
  DType y_dtype = DType::f64;
  std::int64_t ny = 0;  // >= 2
};

}  // namespace tessera::detail
