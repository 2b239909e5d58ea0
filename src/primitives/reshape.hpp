// The reshape primitive (made by make_reshape, primitives/shape.hpp) and
// what its parts share: the groups of dims a reshape merges or splits, its
// natural layout, and the input boxes an output block is made of.
//
// Its parts live in their layers: type inference, rule, layouts and
// parameters in reshape.cpp; the per-block copy in
// backend/cpu/eval_reshape.cpp (on CUDA devices,
// backend/cuda/eval_reshape.cpp); batch, jvp and transpose in
// transforms/rules/reshape.cpp; the lowering (eval_global) in
// spmd/lower_reshape.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "primitives/shape.hpp"

namespace tessera::detail {

/// Consecutive input dims [in0, in1) and output dims [out0, out1) with the
/// same number of elements.
struct ReshapeGroup {
  int in0, in1, out0, out1;
};

/// The groups of a reshape of `in` into `out` (see reshape.cpp).
std::vector<ReshapeGroup> reshape_groups(const Shape& in, const Shape& out);

/// Per group, the input axes (in order) on the group's first output dim of
/// size != 1 (or its first output dim): the layout a reshape keeps when it
/// can. `balanced`: on the first output dim with at least as many elements as
/// parts instead, when there is one (for layouts that must move anyway: no
/// device left empty that need not be).
NamedSharding reshape_natural_sharding(const NamedSharding& xs, const Shape& out,
                                       const std::vector<ReshapeGroup>& groups, bool balanced = false);

/// The input boxes (exactly) holding the elements of the output box `blk`;
/// nullopt when more than `cap` would be needed.
std::optional<std::vector<std::vector<Slice>>> reshape_sources(const Shape& in, const Shape& out,
                                                               const std::vector<ReshapeGroup>& groups,
                                                               const std::vector<Slice>& blk, std::size_t cap);

// Input boxes per device beyond which reshape.cpp does not choose the
// balanced layout, and spmd/lower_reshape.cpp reaches a requested layout
// through the natural one.
inline constexpr std::size_t kReshapeMaxBoxes = 16;

/// One copy of a reshape's per-device work: the input box `box` (global
/// coordinates) from `src`, a buffer holding the input box `sbox`.
struct ReshapeCopy {
  const void* src;
  const std::vector<Slice>& sbox;
  const std::vector<Slice>& box;
};

class Reshape final : public Primitive {
 public:
  Reshape(Shape out, std::optional<NamedSharding> requested) : out_(std::move(out)), requested_(std::move(requested)) {}
  std::string_view name() const override { return "reshape"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;
  bool lowers_itself() const override { return true; }
  bool lowers_on_cuda() const override { return true; }
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override;
  TESSERA_DECLARE_EVAL_GLOBAL;
  /// One device's output block `blk` (buffer `dst`, elements of `isz`
  /// bytes) of the reshape of an array of shape `in`: each of `copies`
  /// written at its flat positions.
  virtual void write_block(void* dst, const std::vector<Slice>& blk, const Shape& in, std::size_t isz,
                           std::span<const ReshapeCopy> copies) const;
  /// write_block on a CUDA device (backend/cuda/eval_reshape.cpp), the
  /// same bytes: `dst` and the copies' sources are in the calling thread's
  /// GPU's memory. Returns once the block is written.
  virtual void write_block_cuda(void* dst, const std::vector<Slice>& blk, const Shape& in, std::size_t isz,
                                std::span<const ReshapeCopy> copies) const;

 private:
  Shape out_;
  std::optional<NamedSharding> requested_;
};

}  // namespace tessera::detail
