// What the shape ops compute, as data the primitives (primitives/shape.hpp)
// and the copy kernels (backend/cpu/shape.hpp) share: the affine index map
// of the ops that copy with offsets and steps, row-major strides, and the
// bytes of pad's fill value.
#pragma once

#include <cstddef>
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

/// The strided copy that writes the output sub-box `r` (inside the output
/// block `blk`) from a buffer holding the input box `sbox`, which contains
/// the image of `r` under `m`: the byte offsets of r's first element in the
/// source buffer and in the block, and per dim of `r` its extent and byte
/// strides in both (0 where `m` broadcasts). Elements of `isz` bytes.
struct AffineWalk {
  std::int64_t src_offset = 0, dst_offset = 0;
  std::vector<std::int64_t> extents, src_strides, dst_strides;
};
AffineWalk affine_walk(const Affine& m, const std::vector<Slice>& sbox, const std::vector<Slice>& blk,
                       const std::vector<Slice>& r, std::size_t isz);

}  // namespace tessera::detail
