// Per-device kernels of the indexing ops (take, scatter_add, segment_sum):
// plain loops over row-major local blocks. Which rows and indices a device
// holds is decided by the primitives' lowering (src/spmd/lower_indexing.cpp),
// which runs these through the primitives' per-block methods
// (backend/cpu/eval_indexing.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail::cpu {

/// n index values of integer dtype t as i64; u64 values past the i64 range
/// become the i64 maximum, which is out of range for every array (not a
/// negative index).
std::vector<std::int64_t> load_indices(const void* p, DType t, std::int64_t n);

/// out[o, j, :] = x[o, idx[j], :] for o < outer, with rows of `row_bytes`
/// and x's gathered dim of size n_axis; idx already checked and made
/// non-negative.
void take(const void* x, std::int64_t outer, std::int64_t n_axis, std::int64_t row_bytes,
          const std::vector<std::int64_t>& idx, void* out);

/// partial[r - rows.start, :] += upd[i, :] (rows of `inner` elements of
/// dtype t) for every local row i < nrows, in order, whose target r = idx[i]
/// (index dtype `it`; plus n when negative and `wrap_negative`) lies in
/// `rows`; the others are dropped or belong to another device's block.
/// Integers wrap, bools or.
void scatter_rows(DType t, void* partial, Slice rows, std::int64_t inner, DType it, const void* idx, const void* upd,
                  std::int64_t nrows, std::int64_t n, bool wrap_negative);

/// out = a + b over n elements of dtype t (integers wrap, bools or).
void add(DType t, const void* a, const void* b, void* out, std::int64_t n);

}  // namespace tessera::detail::cpu
