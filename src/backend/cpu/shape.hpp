// Per-device copy kernels of the shape ops. They see buffers, the boxes of
// global indices those buffers hold, and row-major shapes; nothing of meshes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/ops.hpp"

namespace tessera::detail::cpu {

using Box = std::vector<Slice>;

/// Row-major strides, in elements, of a block of shape `s`.
std::vector<std::int64_t> strides_of(const Shape& s);

/// Copies a box of `len` elements of `isz` bytes: element (i_0, ..., i_{r-1})
/// is read at src + sum i_j * sstr[j] and written at dst + sum i_j * dstr[j]
/// (byte strides, any sign, 0 broadcasts).
void strided_copy(const unsigned char* src, const std::vector<std::int64_t>& sstr, unsigned char* dst,
                  const std::vector<std::int64_t>& dstr, const Shape& len, std::size_t isz);

/// Fills `n` elements of `value.size()` bytes with `value`.
void fill_bytes(unsigned char* dst, std::int64_t n, const std::vector<unsigned char>& value);

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

/// Copies the output sub-box `r` (inside the output block `blk`, whose
/// buffer is `dst`) from a source buffer holding the input box `sbox`, which
/// must contain the image of `r` under `m`.
void copy_affine(const Affine& m, const void* src, const Box& sbox, void* dst, const Box& blk, const Box& r,
                 std::size_t isz);

/// Copies the input box `box` (global coordinates of an array of shape
/// `in`; the source buffer holds `sbox`) into the output block `blk` of an
/// array of shape `out`, element k of the row-major order of `in` going to
/// flat position k of `out` (a reshape).
void copy_flat(const void* src, const Box& sbox, const Box& box, const Shape& in, void* dst, const Box& blk,
               const Shape& out, std::size_t isz);

}  // namespace tessera::detail::cpu
