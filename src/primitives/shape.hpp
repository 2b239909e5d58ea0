// Shape primitives. The front ends (src/ops/shape.cpp) check and normalise
// their arguments (axes in range, perms, slices resolved to start/step/size)
// and build these; nothing here raises a user error.
//
// transpose and expand_dims are plain factor rules: the engine keeps the
// operand's layout (permuted, or with an unsharded new dim) and the kernel
// copies each device's block. The others partition themselves (see
// shape.cpp and reshape.cpp): they move only the elements a device lacks,
// which a factor rule cannot say, or share the operand's buffers.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

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
/// `out` keeps when it can (see reshape.cpp).
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

}  // namespace tessera::detail
