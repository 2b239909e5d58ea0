// Reduction primitives: sum, prod, max, min, any, all (and mean's sum) over
// a set of dims, and argmax/argmin along one dim. Operands arrive in the
// reduction's dtype (the front ends bind a convert first).
//
// The primitives' parts live in their layers: type inference, sharding
// rules and parameters here (primitives/reduce.cpp), the per-device kernels
// and sinks in backend/cpu/eval_reduce.cpp (on CUDA devices
// backend/cuda/eval_reduce.cpp), argmax/argmin's partitioning in
// spmd/lower_reduce.cpp, the transformation rules (batching, JVP,
// transposition) in transforms/rules/reduce.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "primitives/primitive.hpp"

namespace tessera::detail {

/// The rule of a reduction of `shape` over `axes` (sorted, unique): one
/// factor per operand dim, in dim order; the reduced ones are reduction
/// factors. Result dims are the kept dims' factors; with `keepdims` the
/// reduced dims stay as size-1 dims outside every factor.
ShardingRule reduce_rule(const Shape& shape, const std::vector<int>& axes, bool keepdims);

/// `op` over `axes` (normalised) of an operand of dtype `t` (the result's
/// dtype too). `name` is the front end's: errors, IR text and
/// communication records name it (mean binds a Sum named "mean").
PrimitivePtr make_reduce(const char* name, ReduceOp op, DType t, std::vector<int> axes, bool keepdims,
                         std::optional<PartitionSpec> out_spec);

/// argmax (`is_max`) or argmin along `axis` (normalised, of nonzero size):
/// i32 indices of the first best element, NaN first.
PrimitivePtr make_arg_reduce(const char* name, bool is_max, int axis, bool keepdims,
                             std::optional<PartitionSpec> out_spec);

/// `op` over `axes` (see make_reduce).
class Reduce final : public Primitive {
 public:
  Reduce(const char* name, ReduceOp op, DType t, std::vector<int> axes, bool keepdims,
         std::optional<PartitionSpec> out_spec)
      : name_(name), op_(op), t_(t), axes_(std::move(axes)), keepdims_(keepdims), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<PartitionSpec> out_spec() const override;
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const override;
  std::string params() const override;
  bool sinkable() const override { return true; }
  ReduceOp partial_op() const override { return op_; }
  bool keeps_operand_layouts() const override { return true; }

  // backend/cpu/eval_reduce.cpp
  std::unique_ptr<TileSink> sink(const LocalIn& in, const LocalOut& out) const override;
  TESSERA_DECLARE_EVAL_CPU;
  // backend/cuda/eval_reduce.cpp
  TESSERA_DECLARE_EVAL_CUDA;

  // transforms/rules/reduce.cpp
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  // A result with the reduced dims back as size-1 dims
  // (transforms/rules/reduce.cpp).
  Array expanded(const Array& y) const;
  // reduced[d]: whether dim d of an operand block of rank `rank` is reduced.
  std::vector<bool> reduced(size_t rank) const;

  const char* name_;
  ReduceOp op_;
  DType t_;
  std::vector<int> axes_;
  bool keepdims_;
  std::optional<PartitionSpec> out_spec_;
};

// argmax/argmin. Each device finds the first best element of its lines
// (value and global index); across devices the best pair is then found by
// two reductions over the mesh axes of the reduced dim: the best value (Max
// or Min, NaN winning), then the lowest index among the devices whose best
// value equals it. That is the order the local kernel uses (NaN first, then
// the value, ties to the lower index), and each device's pair is already
// the first best of its block. A device with nothing on the axis offers the
// worst value and no index. The second reduction reads the first one's
// result, which a single partial_op cannot express, so the primitive
// partitions itself: the operand stays where it lies, the result takes the
// natural layout (the kept dims' axes) and then out_sharding, if any.
class ArgReduce final : public Primitive {
 public:
  ArgReduce(const char* name, bool is_max, int axis, bool keepdims, std::optional<PartitionSpec> out_spec)
      : name_(name), is_max_(is_max), axis_(axis), keepdims_(keepdims), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  std::string params() const override;
  bool lowers_itself() const override { return true; }
  // The lowering moves data only through reduce_over and runs each per-block
  // step as the device's kernel (the _cuda ones on GPUs).
  bool lowers_on_cuda() const override { return true; }

  // spmd/lower_reduce.cpp
  TESSERA_DECLARE_EVAL_GLOBAL;

  // backend/cpu/eval_reduce.cpp: eval_cpu raises (the primitive runs on
  // whole arrays); the per-block steps of eval_global are these.
  TESSERA_DECLARE_EVAL_CPU;
  /// The first best element of each line of the block `x` along the axis:
  /// per element of the block with the axis of size 1, the best value (x's
  /// dtype) to `value` and its global index (x.box places the block) to
  /// `index`.
  void block_best(const LocalIn& x, void* value, std::int64_t* index) const;
  /// For n elements of the first step's `value` and `index` (dtype `t`):
  /// the index where the value is the best one found across devices
  /// (`best`), else INT64_MAX.
  void block_candidates(DType t, const void* value, const std::int64_t* index, const void* best, std::int64_t n,
                        std::int64_t* out) const;
  /// The n winning indices as i32, as jnp.argmax returns them.
  void block_indices(const std::int64_t* first, std::int64_t n, std::int32_t* out) const;

  // backend/cuda/eval_reduce.cpp: eval_cuda raises as eval_cpu does; the
  // three steps on a CUDA device, over device pointers, queued on the
  // device's stream (the caller waits for it).
  TESSERA_DECLARE_EVAL_CUDA;
  void block_best_cuda(const LocalIn& x, void* value, std::int64_t* index) const;
  void block_candidates_cuda(DType t, const void* value, const std::int64_t* index, const void* best,
                             std::int64_t n, std::int64_t* out) const;
  void block_indices_cuda(const std::int64_t* first, std::int64_t n, std::int32_t* out) const;

  // transforms/rules/reduce.cpp
  TESSERA_DECLARE_BATCH;

 private:
  // The kept dims' axes; the reduced dim whole (size 1) in keepdims form
  // (`kform`) or dropped.
  NamedSharding natural(const AbstractArray& x, bool kform) const;

  const char* name_;
  bool is_max_;
  int axis_;
  bool keepdims_;
  std::optional<PartitionSpec> out_spec_;
};

}  // namespace tessera::detail
