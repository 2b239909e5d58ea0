// Argument checks shared by the samplers' Key and key-array front ends
// (ops/random.cpp, ops/random_keys.cpp).
#pragma once

#include <utility>

#include "tessera/ops.hpp"

namespace tessera::detail {

/// Float dtype, sizes >= 0, a sharding of the right rank without unreduced
/// axes; the sampler's DTypeError/ShapeError/ShardingError otherwise.
void check_sample(const Shape& shape, DType dtype, const NamedSharding& sharding, const char* op);
/// uniform's bounds as values of `dtype` (f32 or f64); Error unless both are
/// finite there and lo < hi.
std::pair<double, double> uniform_bounds(DType dtype, double lo, double hi, const char* op);

}  // namespace tessera::detail
