// What the shape ops compute, as data the primitives (primitives/shape.hpp)
// and the copy kernels (backend/cpu/shape.hpp) share: the affine index map
// of the ops that copy with offsets and steps, row-major strides, and the
// bytes of pad's fill value.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/dtype.hpp"
#include "tessera/scalar.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail {

/// Row-major strides, in elements, of a block of shape `s`.
std::vector<std::int64_t> strides_of(const Shape& s);

/// The bytes of `v` converted to `dtype` (pad's fill value).
std::vector<unsigned char> scalar_bytes(const Scalar& v, DType dtype);

/// An affine index map: output dim j reads input dim src[j] at offset[j] +
/// step[j] * o_j (step 0 broadcasts); src[j] < 0 for a new dim. Input dims
/// no output dim reads have size 1 and are read at 0.
struct Affine {
  int in_rank = 0;
  std::vector<int> src;
  std::vector<std::int64_t> offset, step;
};

}  // namespace tessera::detail
