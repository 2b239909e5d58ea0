// The CUDA kernels of the shape ops: the block copies of transpose and the
// affine ops (slice, pad, roll, flip, concatenate, squeeze, broadcast_to)
// and reshape's flat copy. They only move bytes, so they give the CPU's
// kernels' (backend/cpu/shape.hpp) bits exactly; each element is copied as
// one word of its width.
//
// Each function runs on the calling thread's GPU (cuda::current), queues
// its kernel on that GPU's stream and returns without waiting: the caller
// synchronizes once per op. On an emulated GPU the kernel runs as a loop
// on the calling thread before the function returns. Pointers are device
// pointers (fill_bytes' `value` is host memory). `op` names the op in
// messages; a walk of more than kMaxRank dims (after merging the dims that
// are contiguous in both buffers) raises ShapeError "[op] CUDA kernels take
// arrays of at most 8 dims, got N".
//
// Plain C++ (no CUDA headers); a build without CUDA defines these as
// raising DeviceError (no_cuda_shape.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/sharding.hpp"

namespace tessera::cuda {

/// Copies a box of extents `len` of elements of `isz` bytes: element
/// (i_0, ..., i_{r-1}) is read at src + sum i_j * sstr[j] and written at
/// dst + sum i_j * dstr[j] (byte strides, any sign, 0 broadcasts), as
/// cpu::strided_copy. Size-1 dims are dropped and dims contiguous in both
/// buffers merged first; one contiguous run is a device memcpy.
void strided_copy(const char* op, const void* src, const std::vector<std::int64_t>& sstr, void* dst,
                  const std::vector<std::int64_t>& dstr, const std::vector<std::int64_t>& len, std::size_t isz);

/// Fills `n` elements of `value.size()` bytes with `value` (host memory).
void fill_bytes(const char* op, void* dst, std::int64_t n, const std::vector<unsigned char>& value);

/// Reshape's copy, as cpu::copy_flat: the input box `box` (global
/// coordinates of an array of shape `in`; the buffer `src` holds the box
/// `sbox`) into the output block `blk` (buffer `dst`) of an array of shape
/// `out`, element k of `in`'s row-major order going to flat position k of
/// `out`.
void flat_copy(const char* op, const void* src, const std::vector<Slice>& sbox, const std::vector<Slice>& box,
               const std::vector<std::int64_t>& in, void* dst, const std::vector<Slice>& blk,
               const std::vector<std::int64_t>& out, std::size_t isz);

}  // namespace tessera::cuda
