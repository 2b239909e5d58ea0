// How a contraction (core/contraction.hpp) becomes GEMMs: which dims each
// operand sums away, whether its block is used as is, transposed or must be
// permuted first, its batch strides, and the GEMM's m, n, k over the result
// block in canonical order. Host planning over shapes only, shared by every
// backend's dot_general kernel (backend/cpu/dot.cpp, backend/cuda/gemm.cpp),
// which move the data their own way: the same plan on both gives the same
// layout decisions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/contraction.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail {

/// The product of s[from, to).
std::int64_t shape_product(const Shape& s, std::size_t from, std::size_t to);

/// True when the dims of `order` whose size is not 1 are increasing: the
/// row-major block of `shape` is then already laid out in that order.
bool already_ordered(const Shape& shape, const std::vector<int>& order);

/// Row-major strides (elements) of `shape` permuted by `order`, indexed by
/// the original dim.
std::vector<std::int64_t> strides_in(const Shape& shape, const std::vector<int>& order);

/// One operand's way to the GEMM. Its dims are ordered (batch, summed, m, k)
/// for the lhs and (batch, summed, k, n) for the rhs, or the transposed
/// form (the last two swapped).
struct DotOperandPlan {
  /// Non-empty when the operand has summed dims: flag[d] for each summed
  /// dim d, to be summed away first (to the block of `shape`).
  std::vector<bool> sum_flag;
  /// The block's shape once summed (the given shape when nothing is).
  Shape shape;
  /// Non-empty when neither the plain nor the transposed order matches the
  /// block's layout: the block of `shape` must be permuted to this order
  /// (dst dim i is dim permute[i]), and is then used plain.
  std::vector<int> permute;
  /// The block is used as the transposed matrix.
  bool trans = false;
  /// Elements of one matrix (rows x cols).
  std::int64_t matrix = 0;
  /// Per batch pair: the step between matrices in elements, 0 where the
  /// operand lacks the dim or broadcasts a size-1 dim against a larger one.
  std::vector<std::int64_t> batch_stride;
};

/// The plan of the operand of shape `shape` with dim roles `side`;
/// `out_batch` are the result's batch sizes.
DotOperandPlan plan_dot_operand(const Shape& shape, const DotSide& side, bool is_lhs,
                                const std::vector<std::int64_t>& out_batch);

/// The result block's side: the GEMM writes the canonical block (batch,
/// lhs free, rhs free), then permuted into the output order.
struct DotResultPlan {
  std::vector<int> perm;  // output dim i is canonical dim perm[i]
  Shape local;            // the block in canonical order
  /// The permutation keeps the dims of size > 1 in order: it moves no data,
  /// and the canonical block is the output block.
  bool in_place = false;
  std::vector<std::int64_t> batch;  // the result's batch sizes
  std::int64_t m = 0, n = 0, k = 0;
};

/// The plan of the result block of `out_shape` from an lhs of shape `sa`.
DotResultPlan plan_dot_result(const Contraction& c, const Shape& sa, const Shape& out_shape);

}  // namespace tessera::detail
