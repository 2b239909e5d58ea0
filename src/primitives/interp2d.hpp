// The interp2d primitive: elementwise over the queries, grid and table whole
// on every device.
#pragma once

#include <optional>

#include "backend/cpu/interp2d.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// interp2d (operands xq, yq, x, y, f; f already of the result dtype, f32
/// or f64). No fill: extrapolate.
PrimitivePtr make_interp2d(cpu::Interp2dMethod method, std::optional<double> fill);

}  // namespace tessera::detail
