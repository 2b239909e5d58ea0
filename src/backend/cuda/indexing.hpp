// The CUDA kernels of the indexing primitives (primitives/indexing.hpp):
// the CPU's (backend/cpu/indexing.hpp) on device buffers, with the CPU's
// bits. The lowering (spmd/lower_indexing.cpp) decides which rows and
// indices a device holds; these see one device's blocks.
//
// Each function runs on the calling thread's GPU (cuda::current), queues its
// kernel on that GPU's stream and returns without waiting. All pointers are
// device pointers.
//
// Plain C++ (no CUDA headers); a build without CUDA defines these as raising
// DeviceError (no_cuda_indexing.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/dtype.hpp"

namespace tessera::cuda {

/// out[o, j, :] = x[o, idx[j], :] for o < outer, j < nidx, with rows of
/// `inner` elements of `itemsize` bytes (1, 4 or 8) and x's gathered dim of
/// size n_axis; idx (i64) already checked and made non-negative.
void take(const void* x, std::int64_t outer, std::int64_t n_axis, std::int64_t inner, std::size_t itemsize,
          const std::int64_t* idx, std::int64_t nidx, void* out);

/// The rows of a scatter's partial block, each summed from zero over its
/// updates in index order: partial[r, k] = sum over p in [row_start[r],
/// row_start[r + 1]) of upd[order[p], k], for r < rows and k < inner, in
/// dtype t (integers wrap, bools or). `order` lists, row by row, the update
/// rows that land on each row in increasing order (the CPU's order).
void scatter_rows(DType t, void* partial, std::int64_t rows, std::int64_t inner, const std::int64_t* row_start,
                  const std::int64_t* order, const void* upd);

/// out = a + b over n elements of dtype t (integers wrap, bools or).
void add(DType t, const void* a, const void* b, void* out, std::int64_t n);

}  // namespace tessera::cuda
