// The CUDA kernels of the random primitives (primitives/random.hpp): the
// CPU's (backend/cpu/random.hpp) on device buffers, element for element the
// same bits, since both evaluate kernels/random.hpp's value at a global flat
// index and kernels/threefry.hpp's key functions.
//
// Each function runs on the calling thread's GPU (cuda::current), queues its
// kernel on that GPU's stream and returns without waiting (the caller
// synchronizes once per op). All pointers are device pointers.
//
// Plain C++ (no CUDA headers); a build without CUDA defines these as raising
// DeviceError (no_cuda_random.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::cuda {

/// A sampler's key: the two words, or a device pointer to them (a key array
/// operand, read by the kernel, so the host never waits for it).
struct SampleKey {
  const std::uint32_t* words = nullptr;  // device pointer; null: k0, k1
  std::uint32_t k0 = 0, k1 = 0;
};

/// The block `box` of uniform draws in [lo, hi) of dtype t (f32 or f64) for
/// an array of `shape` (at most 8 dims once the dims the block spans whole
/// are merged; ShapeError "[uniform] ..." beyond). lo, hi are values of t.
void uniform(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
             const SampleKey& key, double lo, double hi);

/// The block `box` of standard normal draws of dtype t (f32 or f64).
void normal(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
            const SampleKey& key);

/// n keys (word pairs) -> n * num keys: key j's i-th is at out[2 (j num + i)]
/// (detail::split_keys).
void split_keys(const std::uint32_t* keys, std::int64_t n, int num, std::uint32_t* out);

/// n keys each folded with data[j * data_stride], or with `value` for every
/// key when data is null (detail::fold_in_keys).
void fold_in_keys(const std::uint32_t* keys, std::int64_t n, const std::uint32_t* data, std::int64_t data_stride,
                  std::uint32_t value, std::uint32_t* out);

}  // namespace tessera::cuda
