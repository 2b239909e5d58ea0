// Atomics on int64 counters and minima, on the GPU or in its emulation:
// integers only (an integer result does not depend on the order the
// threads reach it; float sums keep a fixed order instead, sort_pairs.cuh).
#pragma once

#include <cstdint>

#include "kernels/portable.hpp"

namespace tessera::cuda {

/// *p = min(*p, v), atomically on a GPU (both non-negative: the GPU
/// compares them unsigned).
TESSERA_HD inline void atomic_min(std::int64_t* p, std::int64_t v) {
#if defined(__CUDA_ARCH__)
  atomicMin(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  if (v < *p) *p = v;
#endif
}

/// *p += v, atomically on a GPU.
TESSERA_HD inline void atomic_add(std::int64_t* p, std::int64_t v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  *p += v;
#endif
}

}  // namespace tessera::cuda
