// What interp2d computes, as data: the interpolation method, a parameter of
// the primitive (primitives/interp2d.hpp) that the kernel
// (backend/cpu/interp2d.hpp) reads.
#pragma once

namespace tessera::detail {

enum class Interp2dMethod { Linear, Cubic };

}  // namespace tessera::detail
