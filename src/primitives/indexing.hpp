// Indexing primitives: take, scatter_add, segment_sum. The index arrays are
// operands (their values are read on the devices, never on the host).
//
// All three partition themselves: take drops index axes that x's other dims
// already use instead of letting a cost model pick a side, and the scatters
// reduce partial blocks that cover only part of the output (see
// spmd/lower_indexing.cpp).
//
// The classes are defined in parts, one per layer:
//   primitives/indexing.cpp          types, rules, layouts, parameters, factories
//   spmd/lower_indexing.cpp          eval_global (the partitioning)
//   backend/cpu/eval_indexing.cpp    the per-block kernels eval_global runs
//   backend/cuda/eval_indexing.cpp   the same on CUDA devices (the *_cuda ones)
//   transforms/rules/indexing.cpp    batching, JVP and transposition rules
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "primitives/primitive.hpp"

namespace tessera::detail {

/// An indexing primitive: it partitions itself; its per-device kernels run
/// from eval_global (eval_cpu and eval_cuda raise). The lowering moves data
/// only through the memory-space-aware copies and reads only index blocks
/// on the host, so it runs on GPUs.
class IndexingGlobal : public Primitive {
 public:
  bool lowers_itself() const override { return true; }
  bool lowers_on_cuda() const override { return true; }
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 protected:
  using AxisList = std::vector<std::string>;
  static bool disjoint(const AxisList& a, const AxisList& b);
  /// x's dims with `axis` whole: the layout take reads x in.
  static std::vector<AxisList> whole_along(const NamedSharding& x, int rank, int axis);
  /// The axes of `indices` that none of `xdims` uses.
  static AxisList free_index_axes(const std::vector<AxisList>& xdims, const NamedSharding& indices);
};

class Take final : public IndexingGlobal {
 public:
  explicit Take(int axis) : axis_(axis) {}
  std::string_view name() const override { return "take"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;
  TESSERA_DECLARE_EVAL_GLOBAL;

  /// Per block: the n index values at `data` (integer dtype `dtype`) as
  /// i64; u64 values past the i64 range become the i64 maximum.
  virtual std::vector<std::int64_t> load_indices(const void* data, DType dtype, std::int64_t n) const;
  /// Per block: `out` = x's block (whole along the axis) at the indices
  /// `idx`, already checked and made non-negative.
  virtual void take_block(const LocalIn& x, const std::vector<std::int64_t>& idx, void* out) const;
  /// take_block on a CUDA device: x and out in its memory, idx on the host.
  /// Returns once the device is done.
  virtual void take_block_cuda(const LocalIn& x, const std::vector<std::int64_t>& idx, void* out) const;

 private:
  int axis_;
};

/// scatter_add and segment_sum: rows of updates summed into the rows their
/// ids name (scatter_rows, spmd/lower_indexing.cpp).
class IndexingScatter : public IndexingGlobal {
 public:
  /// Per block: `partial` (a block of an output with n rows, rows
  /// partial.box[0]) set to zero, then every row i of `updates` (dtype =
  /// partial's) added, in order, at row ids[i] (plus n when negative and
  /// `wrap_negative`) where that row lies in the block.
  virtual void scatter_block(const LocalIn& updates, const LocalIn& ids, const LocalOut& partial, std::int64_t n,
                             bool wrap_negative) const;
  /// Per block: out = a + b over n elements of dtype t (integers wrap,
  /// bools or).
  virtual void add_block(DType t, const void* a, const void* b, void* out, std::int64_t n) const;
  /// The two on a CUDA device (pointers in its memory); each returns once
  /// the device is done. scatter_block_cuda reads the ids to the host to
  /// order the updates by row.
  virtual void scatter_block_cuda(const LocalIn& updates, const LocalIn& ids, const LocalOut& partial,
                                  std::int64_t n, bool wrap_negative) const;
  virtual void add_block_cuda(DType t, const void* a, const void* b, void* out, std::int64_t n) const;

 protected:
  /// The shared body of scatter_add and segment_sum: accumulate the rows of
  /// `updates` (dtype = output dtype) at rows `ids` of a zero array of
  /// `out_shape`, combine over the mesh axes sharding the rows, and add
  /// `base` when given (laid out as `out_s` then).
  Array scatter_rows(const ExecContext& ctx, const char* op, const Array* base, const Array& ids, const Array& updates, const Shape& out_shape,
                     const NamedSharding& out_s, bool wrap_negative) const;
};

class ScatterAdd final : public IndexingScatter {
 public:
  explicit ScatterAdd(std::optional<PartitionSpec> out_spec) : out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return "scatter_add"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;
  TESSERA_DECLARE_EVAL_GLOBAL;

 private:
  std::optional<PartitionSpec> out_spec_;
};

class SegmentSum final : public IndexingScatter {
 public:
  SegmentSum(std::int64_t num_segments, std::optional<PartitionSpec> out_spec)
      : num_segments_(num_segments), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return "segment_sum"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;
  TESSERA_DECLARE_EVAL_GLOBAL;

 private:
  std::int64_t num_segments_;
  std::optional<PartitionSpec> out_spec_;
};

/// take(x, indices, axis): operands x and a 1-d integer indices array.
PrimitivePtr make_take(int axis);

/// scatter_add(x, indices, updates): updates already in x's dtype; the
/// result is laid out as `out_spec`, else as x.
PrimitivePtr make_scatter_add(std::optional<PartitionSpec> out_spec);

/// segment_sum(data, ids): the result is laid out as `out_spec`, else
/// replicated along the segments and as data on the trailing dims.
PrimitivePtr make_segment_sum(std::int64_t num_segments, std::optional<PartitionSpec> out_spec);

}  // namespace tessera::detail
