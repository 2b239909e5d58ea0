// Running a kernel body f(i) for i in [0, n) on the calling thread's GPU
// (stream.hpp): a grid-stride CUDA kernel on its stream, or, on an emulated
// GPU, a plain loop on the calling thread over the same functor. The body is
// written once, as a __host__ __device__ functor (a struct with a const
// operator()(std::int64_t)) holding device pointers and small fixed-size
// arrays by value, so the GPU and its emulation run the same source.
//
// Launches are asynchronous: the caller synchronizes once per op
// (cuda::synchronize), not for_each.
//
// Include the headers of src/kernels/ before this one: they spell libcu++'s
// namespace `cuda::std`, which inside namespace tessera would name
// tessera::cuda once stream.hpp has declared it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/stream.hpp"
#include "kernels/portable.hpp"

namespace tessera::cuda {

namespace launch_detail {

/// Threads per block; a launch has at most one full wave of blocks, each
/// thread striding over the rest (grid_blocks).
inline constexpr int kThreads = kLaunchThreads;

template <class F>
__global__ void __launch_bounds__(kThreads) for_each_kernel(std::int64_t n, F f) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

/// Elements a thread of for_each_batched takes per step of its
/// grid-stride loop, a grid stride apart, all loaded before any is stored.
inline constexpr int kBatch = 4;

template <class F>
__global__ void __launch_bounds__(kThreads) for_each_batched_kernel(std::int64_t n, F f) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kBatch - 1) * stride < n; i += kBatch * stride) {
    decltype(f.load(i)) v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[u] = f.load(i + u * stride);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) f.store(i + u * stride, v[u]);
  }
  for (; i < n; i += stride) f.store(i, f.load(i));
}

}  // namespace launch_detail

/// a / b and a % b for a >= 0, b > 0, in 32-bit arithmetic when both fit:
/// a GPU divides 64-bit integers in software, several times slower, and
/// kernels that split a flat index into coordinates do it per element.
struct DivMod {
  std::int64_t q, r;
};
TESSERA_HD inline DivMod divmod(std::int64_t a, std::int64_t b) {
  if (((a | b) >> 32) == 0) {
    const auto q = static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b);
    return {q, static_cast<std::int64_t>(static_cast<std::uint32_t>(a) - q * static_cast<std::uint32_t>(b))};
  }
  const std::int64_t q = a / b;
  return {q, a - q * b};
}

/// Runs f(i) for every i in [0, n) on the calling thread's GPU, in no
/// particular order (each i must write only its own elements). Raises
/// DeviceError "[op] ..." when the thread drives no GPU or the launch fails.
/// n <= 0 does nothing.
template <class F>
void for_each(const char* op, std::int64_t n, F f) {
  if (n <= 0) return;
  const Current& c = current(op);
  if (c.emulated) {
    // Last element first: a GPU runs the elements in no particular order,
    // so a kernel that reads what an earlier element wrote is wrong, and
    // the ascending order is the one that would hide it.
    run_emulated([n, f] {
      for (std::int64_t i = n - 1; i >= 0; --i) f(i);
    });
    return;
  }
  const auto kernel = launch_detail::for_each_kernel<F>;
  kernel<<<grid_blocks(reinterpret_cast<const void*>(kernel), n), launch_detail::kThreads, 0,
           static_cast<cudaStream_t>(c.stream)>>>(n, f);
  check(static_cast<int>(cudaGetLastError()), op, "a kernel launch");
}

/// for_each for memory-bound bodies split in two: f.load(i) reads what
/// element i needs (and returns it by value), f.store(i, v) computes from it
/// and writes element i. A thread issues the loads of kBatch elements
/// before its first store: in one f(i), the compiler may not move the next
/// element's loads above this one's store (they might alias), so a thread
/// would have one element's loads in flight, too few bytes per SM to cover
/// memory latency at full bandwidth. f.load must not read what any
/// f.store writes.
template <class F>
void for_each_batched(const char* op, std::int64_t n, F f) {
  if (n <= 0) return;
  const Current& c = current(op);
  if (c.emulated) {
    run_emulated([n, f] {
      for (std::int64_t i = n - 1; i >= 0; --i) f.store(i, f.load(i));  // last first, as for_each
    });
    return;
  }
  const auto kernel = launch_detail::for_each_batched_kernel<F>;
  kernel<<<grid_blocks(reinterpret_cast<const void*>(kernel), n), launch_detail::kThreads, 0,
           static_cast<cudaStream_t>(c.stream)>>>(n, f);
  check(static_cast<int>(cudaGetLastError()), op, "a kernel launch");
}

}  // namespace tessera::cuda
