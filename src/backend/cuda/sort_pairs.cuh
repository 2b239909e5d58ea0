// Grouping entries by key without float atomics: a stable sort of (key,
// entry) pairs (a radix sort on the GPU, a counting sort on an emulated
// one, whose memory is host memory), then each key's run of entries found
// by a binary search. Every key's entries stay in increasing entry order,
// so a kernel that adds them in run order adds them in the CPU's order:
// interp2d's transpose (entries by table row) and spectra's segments
// (rows by segment) use it.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/launch.cuh"
#include "kernels/portable.hpp"

namespace tessera::cuda {

/// The key bits a radix sort of keys in [0, max_key] looks at.
inline int sort_key_bits(std::uint64_t max_key) {
  int b = 1;
  while (b < 64 && (max_key >> b) != 0) ++b;
  return b;
}

/// Scratch bytes sort_pairs needs for m pairs with keys in [0, max_key] on
/// the calling thread's GPU (0 on an emulated one, or for no pairs).
inline std::size_t sort_pairs_bytes(const char* op, std::int64_t m, std::uint64_t max_key) {
  std::size_t bytes = 0;
  if (!current(op).emulated && m > 0)
    cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::uint64_t*>(nullptr),
                                    static_cast<std::uint64_t*>(nullptr), static_cast<const std::int64_t*>(nullptr),
                                    static_cast<std::int64_t*>(nullptr), m, 0, sort_key_bits(max_key));
  return bytes;
}

/// (key_out, val_out) = the m pairs (key, val), keys in [0, max_key],
/// sorted by key stably (equal keys keep their order). `temp` is
/// sort_pairs_bytes(...) bytes of device memory.
inline void sort_pairs(const char* op, const std::uint64_t* key, std::uint64_t* key_out, const std::int64_t* val,
                       std::int64_t* val_out, std::int64_t m, std::uint64_t max_key, void* temp,
                       std::size_t temp_bytes) {
  const Current& c = current(op);
  if (c.emulated) {
    run_emulated([=] {
      std::vector<std::int64_t> next(static_cast<std::size_t>(max_key) + 2, 0);
      for (std::int64_t e = 0; e < m; ++e) ++next[key[e] + 1];
      for (std::uint64_t r = 0; r <= max_key; ++r) next[r + 1] += next[r];
      for (std::int64_t e = 0; e < m; ++e) {
        const std::int64_t to = next[key[e]]++;
        key_out[to] = key[e];
        val_out[to] = val[e];
      }
    });
    return;
  }
  check(static_cast<int>(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, key, key_out, val, val_out, m, 0,
                                                         sort_key_bits(max_key), static_cast<cudaStream_t>(c.stream))),
        op, "a radix sort");
}

/// start[row] = the first of the m sorted keys that is >= row (a binary
/// search per row): row's entries are [start[row], start[row + 1]).
struct RunStartKernel {
  const std::uint64_t* key;
  std::int64_t m;
  std::int64_t* start;
  TESSERA_HD void operator()(std::int64_t row) const {
    std::int64_t lo = 0, hi = m;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (key[mid] < static_cast<std::uint64_t>(row))
        lo = mid + 1;
      else
        hi = mid;
    }
    start[row] = lo;
  }
};

}  // namespace tessera::cuda
