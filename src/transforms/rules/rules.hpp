// Helpers for the transformation rules of primitives (batching, JVP,
// transposition). Rules are written with ops, so these are ops too.
#pragma once

#include <vector>

#include "primitives/primitive.hpp"

namespace tessera::detail {

/// `x` with dim `from` moved to position `to` (the others keep their order).
Array move_dim(const Array& x, int from, int to);
/// `x` with its batch dim first; an unbatched `x` (bdim < 0) is broadcast
/// to `size` examples.
Array batch_first(const Array& x, int bdim, std::int64_t size);
/// A batched operand of an elementwise op whose examples have rank `rank`:
/// batch dim first, then size-1 dims so its example aligns right-justified
/// with the others (NumPy broadcasting inside each example).
Array batch_first_aligned(const Array& x, int bdim, int rank);

/// True for dtypes that carry tangents (floating point).
bool has_tangent(DType dtype);
/// Zeros of a type.
Array zeros_of(const AbstractArray& t);
/// `t`, or zeros of type `like` when `t` is a zero (empty) tangent.
Array instantiate(const Array& t, const AbstractArray& like);
/// a + b where an empty Array is zero.
Array add_tangents(const Array& a, const Array& b);
/// The cotangent of a broadcast operand: `ct` (of the broadcast result's
/// shape) summed over the dims broadcasting added or stretched, in `to`'s
/// dtype.
Array unbroadcast(const Array& ct, const AbstractArray& to);
/// The type of an array.
AbstractArray type_of(const Array& a);

/// JVP of a primitive linear in every operand: the primitive itself applied
/// to the tangents (zeros where absent); a zero when every tangent is.
std::vector<Array> linear_jvp(const Primitive& p, const std::vector<Array>& primals,
                              const std::vector<Array>& tangents, std::vector<Array>& tangents_out);

/// JVP of a primitive linear in each of its two operands separately
/// (products, convolutions): f(ta, b) + f(a, tb).
std::vector<Array> bilinear_jvp(const Primitive& p, const std::vector<Array>& primals,
                                const std::vector<Array>& tangents, std::vector<Array>& tangents_out);

/// An out_sharding for the batched primitive: `spec` with an unsharded dim
/// inserted at `at` (std::nullopt stays so).
std::optional<PartitionSpec> with_batch_dim(const std::optional<PartitionSpec>& spec, int at);


/// Batching rule of a primitive that acts on one operand's dims and leaves
/// the leading batch dim alone once it is first: `rebuild` makes the same
/// primitive for a batch-first operand.
std::vector<Array> batch_unary_first(const Array& x, int bdim, std::vector<int>& out_bdims,
                                     const std::function<PrimitivePtr()>& rebuild);

}  // namespace tessera::detail
