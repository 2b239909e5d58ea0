// jit's fused elementwise groups on GPUs: the CUDA source of a group's loop
// (generated with the CPU's loops, backend/cpu/native.cpp, target CUDA: the
// same member expressions over the same shared math, src/kernels/)
// compiled at run time by NVRTC for the GPU at hand, loaded with the CUDA
// runtime's library API, and launched as one kernel per group.
//
// NVRTC is opened with dlopen when the first group is compiled, so nothing
// links it: without it (or when it fails) fused_kernel says why and jit
// runs the group's members one by one. Compiled kernels are cached in
// memory, and their cubins on disk in the kernel cache (TESSERA_KERNEL_CACHE,
// as the CPU's loops) under a hash of the source, the GPU's architecture and
// NVRTC's version, so a later process loads them without compiling.
//
// Plain C++ (no CUDA headers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace tessera::cuda {

/// A loaded kernel `tessera_fused(args, n, slot)`, with its fix-up
/// `tessera_fused_fix` where the source has one (cpu::CudaLoopShape);
/// opaque.
struct FusedKernel;

/// The kernel of CUDA `source` for the calling thread's GPU, compiled (or
/// found in a cache); nullptr with *why set when it cannot be built here
/// (no NVRTC, a compile error, an emulated GPU, which runs no CUDA code).
/// `cache_dir`: the disk cache ("" for none).
std::shared_ptr<const FusedKernel> fused_kernel(const std::string& source, const std::string& cache_dir,
                                                std::string* why);

/// Launches `k` over n elements on the calling thread's stream, its
/// argument struct given as `words` 8-byte words (the layout the source
/// declares), of which the first `inputs` words (at least one) are the
/// input pointers and the next `outputs` the output pointers. `slot`: the
/// calling device's mark in the kernel (cpu::cuda_fix_slot), for kernels
/// split in two. Does not wait. Raises DeviceError naming `op` if the
/// launch fails.
void launch_fused(const FusedKernel& k, const std::uint64_t* words, std::size_t nwords, std::size_t inputs,
                  std::size_t outputs, int slot, std::int64_t n, const char* op);

/// For benchmarks comparing register budgets in one run: with `registers`
/// > 0, kernels compiled from then on are held to that many registers per
/// thread (NVRTC's --maxrregcount; more threads fit on an SM, at the price
/// of spills), and cached apart from the others; 0 restores the compiler's
/// choice. Kernels already compiled keep theirs.
void set_fused_max_registers(int registers);

/// Counters for tests: kernels compiled by NVRTC, loaded from the disk
/// cache, found in memory, and failed builds (with the last reason).
struct FusedStats {
  std::int64_t compiled = 0, loaded = 0, reused = 0, failed = 0;
  std::string last_error;
};
FusedStats fused_stats();

}  // namespace tessera::cuda
