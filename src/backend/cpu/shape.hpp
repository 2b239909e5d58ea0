// Per-device copy kernels of the shape ops. They see buffers, the boxes of
// global indices those buffers hold, and row-major shapes; nothing of meshes.
// What they compute (the affine map, strides) is described in
// core/shape_ops.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/shape_ops.hpp"

namespace tessera::detail::cpu {

using Box = std::vector<Slice>;
using detail::Affine;
using detail::strides_of;

/// Copies a box of `len` elements of `isz` bytes: element (i_0, ..., i_{r-1})
/// is read at src + sum i_j * sstr[j] and written at dst + sum i_j * dstr[j]
/// (byte strides, any sign, 0 broadcasts).
void strided_copy(const unsigned char* src, const std::vector<std::int64_t>& sstr, unsigned char* dst,
                  const std::vector<std::int64_t>& dstr, const Shape& len, std::size_t isz);

/// Fills `n` elements of `value.size()` bytes with `value`.
void fill_bytes(unsigned char* dst, std::int64_t n, const std::vector<unsigned char>& value);

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
