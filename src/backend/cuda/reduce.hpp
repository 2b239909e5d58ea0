// The CUDA kernels of the reductions (primitives/reduce.hpp) and of the
// cross-device combine (comm/tree.hpp): the signatures of the CPU's
// (backend/cpu/reduce.hpp, comm/tree.hpp's tree_combine), on device
// buffers, giving the CPU's bits element for element (reduce.cu says in
// which order each one combines, and why that is the CPU's).
//
// Each function runs on the calling thread's GPU (cuda::current), queues its
// kernel on that GPU's stream and returns without waiting: the caller
// synchronizes once per op. All pointers are device pointers. Shapes have
// at most kMaxRank dims (ShapeError beyond).
//
// Plain C++ (no CUDA headers); a build without CUDA defines these as
// raising DeviceError (no_cuda_reduce.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/reduce_op.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cuda {

using detail::ReduceOp;

/// `op` over the dims marked `reduced` of the row-major block `in` of
/// `shape` into `out` (the kept dims, row-major), as cpu::reduce computes it:
/// f32 sums accumulate in f64, sums of a reduced last dim in pieces of eight
/// lanes. Kinds the CPU kernel does not run in dtype t (reduce_runs) write
/// nothing. `scratch` (device memory of reduce_scratch bytes, or nullptr)
/// lets long sums run their pieces in parallel; the bits are the same
/// without it.
void reduce(ReduceOp op, DType t, const void* in, const std::vector<std::int64_t>& shape,
            const std::vector<bool>& reduced, void* out, void* scratch = nullptr);
/// The scratch bytes reduce() puts to use for these arguments (0: none).
std::size_t reduce_scratch(ReduceOp op, DType t, const std::vector<std::int64_t>& shape,
                           const std::vector<bool>& reduced);

/// argmax (`is_max`) / argmin of the lines of `in` along `axis`: per element
/// of the block with that dim of size 1, the first best value to `value`
/// (dtype t) and its index plus `base` to `index` (-1 for an empty line), as
/// cpu::arg_best.
void arg_best(bool is_max, DType t, const void* in, const std::vector<std::int64_t>& shape, int axis,
              std::int64_t base, void* value, std::int64_t* index);

/// out[k] = index[k] when index[k] >= 0 and value[k] is `best[k]`'s class
/// (equal, or both NaN), else INT64_MAX; as cpu::arg_candidates.
void arg_candidates(DType t, const void* value, const std::int64_t* index, const void* best, std::int64_t n,
                    std::int64_t* out);

/// out[k] = first[k] as i32 (the winning indices, as jnp.argmax returns them).
void arg_indices(const std::int64_t* first, std::int64_t n, std::int32_t* out);

/// out[i] = the n values parts[r * count + i], r = 0..n-1, combined by `op`
/// in dtype t in the reduction tree's order (comm/tree.hpp), as
/// tree_combine over n members gives it. The calling thread must drive
/// device `device` (DeviceError otherwise). `op_name` names the collective
/// in messages.
void tree_combine(ReduceOp op, DType t, int n, const void* parts, void* out, std::int64_t count, int device,
                  const char* op_name);

}  // namespace tessera::cuda
