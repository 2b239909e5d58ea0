// The CUDA kernels of searchsorted and the median's radix selection
// (primitives/search.hpp), giving the CPU kernels' bits
// (backend/cpu/search.cpp): the same branch-free binary search per value,
// and the same radix selection over the values' order keys, whose counts
// are integers (so the atomic increments a GPU uses cannot change them).
//
// Each function runs on the calling thread's GPU (cuda::current), queues
// its kernels on its stream and returns without waiting. All pointers are
// device pointers. Plain C++ (no CUDA headers); a build without CUDA
// defines these as raising DeviceError (no_cuda_search.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/dtype.hpp"

namespace tessera::cuda {

/// jnp.searchsorted of n values (dtype vdt) in the sorted sequence `seq`
/// (len elements of dtype sdt), compared in dtype t (bool compares as u8),
/// NaN last; indices of dtype out_dt (i32 or i64). `scratch`: device
/// memory of searchsorted_scratch(t, len) bytes.
void searchsorted(DType t, const void* seq, DType sdt, std::int64_t len, const void* values, DType vdt, std::int64_t n,
                  bool right, void* out, DType out_dt, void* scratch);
std::size_t searchsorted_scratch(DType t, std::int64_t len);

/// A block seen by a reduction over some of its dims (cpu::ReduceMap's
/// merged dims, at most 8 of them): element i, row-major over `extent`,
/// belongs to output sum_d coord_d * out_stride[d].
struct MedianWalk {
  int nd = 0;
  std::int64_t extent[8] = {};
  std::int64_t out_stride[8] = {};
  std::int64_t size = 0;
  std::int64_t outputs = 1;
};

/// The radix selection's state on the GPU (cpu::RadixSelect's), device
/// arrays: prefix and rank (2 x outputs each, index 2 * o + s), valid
/// (outputs), and `error` (one int, set when the summed counts of a
/// selection do not add up).
struct MedianState {
  std::uint64_t* prefix = nullptr;
  std::int64_t* rank = nullptr;
  unsigned char* valid = nullptr;
  int* error = nullptr;
};

/// Zeroes the state (before pass 0).
void median_reset(const MedianState& s, std::int64_t outputs);
/// Pass p's histogram of this block (outputs x hist_per_output, i64), as
/// cpu::RadixSelect::count. x is f32 or f64 (dtype t); mask may be null.
void median_count(DType t, int bits, int pass, const MedianWalk& w, const void* x, const bool* mask,
                  const MedianState& s, std::int64_t* hist);
/// Advances from pass p's histogram summed over the devices
/// (cpu::RadixSelect::advance).
void median_advance(DType t, int bits, int pass, std::int64_t outputs, const std::int64_t* hist, const MedianState& s);
/// The middle elements (dtype t) of every output after the last pass.
void median_finish(DType t, std::int64_t outputs, const MedianState& s, void* lo, void* hi);

}  // namespace tessera::cuda
