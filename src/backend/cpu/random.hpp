// Per-device kernels of the counter-based random numbers (threefry-2x32, see
// kernels/threefry.hpp and ops/random.cpp for the definitions). Samplers fill one
// block of a result from the block's global index slices; key kernels
// transform the keys of one block. None of them knows the mesh.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/threefry.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::cpu {

/// The block `box` of uniform draws in [lo, hi) of dtype t (f32 or f64) for
/// an array of `shape` under key (k0, k1). lo and hi are already values of t.
void uniform(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
             std::uint32_t k0, std::uint32_t k1, double lo, double hi);

/// The block `box` of standard normal draws of dtype t (f32 or f64).
void normal(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
            std::uint32_t k0, std::uint32_t k1);

// The key kernels are host math too (the Key forms of split and fold_in
// call them): kernels/threefry.hpp.
using detail::fold_in_keys;
using detail::split_keys;

}  // namespace tessera::cpu
