// Shape primitives. The front ends (src/ops/shape.cpp) check and normalise
// their arguments (axes in range, perms, slices resolved to start/step/size)
// and build these; nothing here raises a user error.
//
// transpose and expand_dims are plain factor rules: the engine keeps the
// operand's layout (permuted, or with an unsharded new dim) and the kernel
// copies each device's block. The others partition themselves (see
// shape.cpp and reshape.hpp): they move only the elements a device lacks,
// which a factor rule cannot say, or share the operand's buffers.
//
// Each class's parts live in their layers: type inference, rules, layouts
// and parameters in shape.cpp; the per-device kernels (eval_cpu, the
// per-block copies of the affine ops) in backend/cpu/eval_shape.cpp, and
// on CUDA devices in backend/cuda/eval_shape.cpp; the
// transformation rules (batch, jvp, transpose) in
// transforms/rules/shape.cpp; the lowering of the ops that partition
// themselves (eval_global) in spmd/lower_shape.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/shape_ops.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// `name` is transpose or swapaxes; perm normalised, not the identity.
PrimitivePtr make_transpose(const char* name, std::vector<int> perm);
/// A new size-1 dim at `axis` (in [0, rank]).
PrimitivePtr make_expand_dims(int axis);
/// Removes the size-1 dims flagged in `drop` (at least one).
PrimitivePtr make_squeeze(std::vector<bool> drop);
/// Broadcasts to `shape` (validated: trailing dims equal or 1).
PrimitivePtr make_broadcast_to(Shape shape);

/// One resolved dim of a slice: out index o reads start + step * o.
struct SliceDim {
  std::int64_t start = 0, step = 1, size = 0;
};
/// One SliceDim per operand dim.
PrimitivePtr make_slice(std::vector<SliceDim> dims);
/// (before, after) per dim (>= 0); `fill` is `value` already in the dtype.
PrimitivePtr make_pad(std::vector<std::pair<std::int64_t, std::int64_t>> widths, std::vector<unsigned char> fill,
                      std::string value_text);
/// Rolls by `shift` in (0, n) along `axis` (of size n > 0).
PrimitivePtr make_roll(std::int64_t shift, int axis);
/// Reverses `axis` (of size > 1).
PrimitivePtr make_flip(int axis);
/// Operands of one rank, equal but along `axis`, converted to `t`; `stack`:
/// each operand gets a new size-1 dim at `axis` first (named "stack").
PrimitivePtr make_concatenate(const char* name, int axis, bool stack, DType t);

/// The layout a reshape of an array of shape `in` laid out as `s` into
/// `out` keeps when it can (see reshape.hpp).
NamedSharding reshape_natural(const Shape& in, const NamedSharding& s, const Shape& out);
/// True when every device's block of the input and of the output in layout
/// `target` are the same flat indices: the reshape moves nothing.
bool reshape_is_local(const Shape& in, const NamedSharding& s, const Shape& out, const NamedSharding& target);
/// Reshape into `out` (same element count), laid out as `requested` or,
/// without one, as reshape_natural.
PrimitivePtr make_reshape(Shape out, std::optional<NamedSharding> requested);

// Shared by the shape primitives and their front ends.

/// "(1, 0, 2)": a list of ints as shape_str prints a shape.
template <class T>
std::string ints_str(const std::vector<T>& v) {
  return shape_str(Shape(v.begin(), v.end()));
}
/// The empty box of rank `rank`.
std::vector<Slice> empty_box(int rank);
/// A spec from per-dim entries (trailing none entries dropped) and unreduced axes.
PartitionSpec spec_of(std::vector<PartitionSpec::Entry> entries, const std::vector<std::string>& unreduced);
/// The first `rank` entries of a sharding's spec (none past its end).
std::vector<PartitionSpec::Entry> entries_of(const NamedSharding& s, int rank);
/// The layout of an array of rank `rank` laid out as `s` once it gets a new
/// unsharded size-1 dim at `axis` (stack's operands).
NamedSharding stacked_sharding(const NamedSharding& s, int rank, int axis);
/// The rank of a shape.
inline int rank_of(const Shape& s) { return static_cast<int>(s.size()); }

// ------------------------------------------------------ factor-rule primitives

// Each output dim has the size and axes of its input dim, so the output
// block is the input block permuted: a local copy, no communication.
class Transpose final : public Primitive {
 public:
  Transpose(const char* name, std::vector<int> perm) : name_(name), perm_(std::move(perm)) {}
  std::string_view name() const override { return name_; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  const char* name_;
  std::vector<int> perm_;
};

// A new size-1 dim leaves the row-major data of every block as it is.
class ExpandDims final : public Primitive {
 public:
  explicit ExpandDims(int axis) : axis_(axis) {}
  std::string_view name() const override { return "expand_dims"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  int axis_;
};

// ------------------------------------------------ primitives that lower themselves

/// One operand's share of an affine op: the map, and the output box it
/// writes (clipped to each device's block by the lowering).
struct PartSpec {
  int operand = 0;
  Affine map;
  std::vector<Slice> limit;
};

/// One copy of an affine op's per-device work: the output sub-box `region`
/// read through `map` from `src`, a buffer holding the input box `sbox`
/// (which contains the image of `region`).
struct AffineCopy {
  const Affine& map;
  const void* src;
  const std::vector<Slice>& sbox;
  const std::vector<Slice>& region;
};

// The affine ops (see shape.cpp for the data movement): layouts() is the
// op's layout rule applied to the abstract operands; eval_global
// (spmd/lower_shape.cpp) brings each device the input boxes its parts read
// and hands them to write_block (backend/cpu/eval_shape.cpp).
class AffineOp : public Primitive {
 public:
  explicit AffineOp(const char* name) : name_(name) {}
  // Every affine op is linear in its operands (pad's fill aside: Pad
  // overrides this).
  TESSERA_DECLARE_JVP;
  std::string_view name() const override { return name_; }
  bool lowers_itself() const override { return true; }
  bool lowers_on_cuda() const override { return true; }
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  TESSERA_DECLARE_EVAL_GLOBAL;
  /// One device's output block `blk` (buffer `dst`, elements of `isz`
  /// bytes): fill() where set, then each of `copies` in order.
  virtual void write_block(void* dst, const std::vector<Slice>& blk, std::size_t isz,
                           std::span<const AffineCopy> copies) const;
  /// write_block on a CUDA device (backend/cuda/eval_shape.cpp), the same
  /// bytes: `dst` and the copies' sources are in the calling thread's GPU's
  /// memory. Returns once the block is written.
  virtual void write_block_cuda(void* dst, const std::vector<Slice>& blk, std::size_t isz,
                                std::span<const AffineCopy> copies) const;

 protected:
  virtual NamedSharding layout(std::span<const AbstractArray> in, const Shape& out) const = 0;
  virtual std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const = 0;
  /// The constant written where no part writes (pad), or nullptr.
  virtual const std::vector<unsigned char>* fill() const { return nullptr; }
  const char* name_;
};

// A dropped size-1 dim sharded over more than one part is held by part 0
// only: devices whose block of it is empty fetch the element. Otherwise the
// blocks keep their row-major data and the buffers are shared.
class Squeeze final : public AffineOp {
 public:
  explicit Squeeze(std::vector<bool> drop) : AffineOp("squeeze"), drop_(std::move(drop)) {}
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_TRANSPOSE;
  TESSERA_DECLARE_EVAL_GLOBAL;

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override;
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override;

 private:
  std::vector<bool> drop_;
};

// Kept dims keep their axes; a broadcast dim reads its one element (fetched
// by devices whose block of a sharded size-1 dim is empty). Only new leading
// size-1 dims: the blocks' row-major data is unchanged, buffers are shared.
class BroadcastTo final : public AffineOp {
 public:
  explicit BroadcastTo(Shape shape) : AffineOp("broadcast_to"), shape_(std::move(shape)) {}
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_TRANSPOSE;
  TESSERA_DECLARE_EVAL_GLOBAL;

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override;
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override;

 private:
  Shape shape_;
};

class SliceOp final : public AffineOp {
 public:
  explicit SliceOp(std::vector<SliceDim> dims) : AffineOp("slice"), dims_(std::move(dims)) {}
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_TRANSPOSE;

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override;
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override;

 private:
  std::vector<SliceDim> dims_;
};

class Pad final : public AffineOp {
 public:
  Pad(std::vector<std::pair<std::int64_t, std::int64_t>> widths, std::vector<unsigned char> fill, std::string text)
      : AffineOp("pad"), widths_(std::move(widths)), fill_(std::move(fill)), text_(std::move(text)) {}
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override;
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape&) const override;
  const std::vector<unsigned char>* fill() const override { return &fill_; }

 private:
  std::vector<std::pair<std::int64_t, std::int64_t>> widths_;
  std::vector<unsigned char> fill_;
  std::string text_;
};

// out[i] = in[i - shift] for i >= shift, in[i - shift + n] for i < shift:
// two parts of the one operand.
class Roll final : public AffineOp {
 public:
  Roll(std::int64_t shift, int axis) : AffineOp("roll"), shift_(shift), axis_(axis) {}
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_TRANSPOSE;

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override;
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape&) const override;

 private:
  std::int64_t shift_;
  int axis_;
};

class Flip final : public AffineOp {
 public:
  explicit Flip(int axis) : AffineOp("flip"), axis_(axis) {}
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_TRANSPOSE;

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override;
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override;

 private:
  int axis_;
};

// Each operand writes its slab of the concatenated dim. Operands are
// converted to the result dtype first (locally; their layouts, which choose
// the result's, as they came). stack gives every operand a new size-1 dim at
// `axis` (sharing its buffers), then concatenates those.
class Concatenate final : public AffineOp {
 public:
  Concatenate(const char* name, int axis, bool stack, DType t) : AffineOp(name), axis_(axis), stack_(stack), t_(t) {}
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_TRANSPOSE;
  TESSERA_DECLARE_EVAL_GLOBAL;

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override;
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override;

 private:
  int axis_;
  bool stack_;
  DType t_;
};

}  // namespace tessera::detail
