// Per-device reduction kernels: a local block reduced over some of its dims,
// and the local steps of argmax/argmin. They see raw buffers and local
// shapes only; combining partial results across devices is the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/reduce_op.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail::cpu {

/// True when `op` runs on operands of dtype `t`: sums and products in the
/// promoted dtypes (32- and 64-bit integers, floats), any/all on bool,
/// max/min on every dtype. The front ends cast operands so that it holds.
bool reduce_runs(ReduceOp op, DType t);

/// A reduction of one block fed piece by piece in row-major order (the end
/// of a fused loop). Any split of the block into pieces gives bitwise the
/// result reduce() gives.
class Reducer {
 public:
  virtual ~Reducer() = default;
  /// The next n elements of the block.
  virtual void feed(const void* piece, std::int64_t n) = 0;
  /// Writes the result (after the whole block was fed).
  virtual void finish() = 0;
};

/// A Reducer of a block of `shape` over the dims with reduced[d] into `out`
/// (as reduce()); nullptr when `op` does not run on `t`.
std::unique_ptr<Reducer> make_reducer(ReduceOp op, DType t, const Shape& shape, const std::vector<bool>& reduced,
                                      void* out);

/// Reduces the row-major block `in` of `shape` (dtype `t`) over the dims
/// with reduced[d] into `out`, laid out as the block with those dims of size
/// 1. An empty reduced extent gives the identity of `op`. f32 sums
/// accumulate in f64 (eight independent lanes combined in a fixed order),
/// so a block's sum does not depend on how it is walked.
void reduce(ReduceOp op, DType t, const void* in, const Shape& shape, const std::vector<bool>& reduced, void* out);

/// The first best element of each line of `in` (shape `shape`, dtype `t`)
/// along `axis`: the largest (`is_max`) or smallest, NaN before any number,
/// ties to the lower index. For each output element (the block with `axis`
/// of size 1) writes the best value to `value` (dtype `t`) and its global
/// index, `base` plus the local one, to `index`. A block with nothing along
/// `axis` writes index -1 and the identity of Max (Min) as the value, so it
/// never wins a cross-device Max (Min).
void arg_best(bool is_max, DType t, const void* in, const Shape& shape, int axis, std::int64_t base, void* value,
              std::int64_t* index);

/// For n elements: index[k] where value[k] is the best value `best[k]`
/// found across devices (equal, or both NaN), else INT64_MAX, so the lowest
/// index holding the best value wins a cross-device Min.
void arg_candidates(DType t, const void* value, const std::int64_t* index, const void* best, std::int64_t n,
                    std::int64_t* out);

}  // namespace tessera::detail::cpu
