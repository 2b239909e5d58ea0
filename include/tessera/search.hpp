// Searching and order statistics on sharded arrays: searchsorted, median.
//
//   auto ix = ts::clip(ts::searchsorted(edges, x, ts::Side::right) - 1, 0, 24);  // np.digitize
//   auto vc = ts::median(v, 0, {.where = inside});                               // per column
//
// searchsorted is elementwise in `values`: the result keeps their layout and
// the (small) sorted sequence is brought whole to every device. median never
// gathers the reduced dims: it selects the middle elements with a few rounds
// of global counts, so only per-output counts cross devices (see median).
#pragma once

#include <optional>
#include <source_location>

#include "tessera/array.hpp"
#include "tessera/ops.hpp"

namespace tessera {

/// Which index searchsorted returns for values equal to elements of the
/// sequence: before them (left) or after them (right).
enum class Side { left, right };

/// jnp.searchsorted / np.searchsorted: for each element v of `values`, the
/// index i at which v would be inserted into the ascending 1-d
/// `sorted_sequence` a to keep it sorted:
///   - Side::left: the first i with a[i] >= v (a[i-1] < v <= a[i]);
///   - Side::right: the first i with a[i] > v (a[i-1] <= v < a[i]).
/// NaN sorts after every number (as NumPy): the sequence may end in NaNs, and
/// a NaN value goes before the first NaN (left) or after the last (right).
/// -0.0 and 0.0 compare equal. The two are compared in their promoted dtype
/// (as jnp.searchsorted). The result has the shape and the sharding of
/// `values` and the integer dtype `dtype` (i32 or i64, else DTypeError); an
/// empty sequence gives zeros. The sequence is not checked for order: an
/// unsorted one gives unspecified indices, as in NumPy.
/// Errors: a sequence that is not 1-d (ShapeError), operands on different
/// meshes (ShardingError), a sequence longer than i32 can index with
/// dtype i32 (DTypeError).
Array searchsorted(const Array& sorted_sequence, const Array& values, Side side = Side::left, DType dtype = DType::i32,
                   std::source_location loc = std::source_location::current());

struct MedianOptions {
  /// Only the elements where this bool mask is true take part (its shape
  /// must broadcast to x's shape). A selection with no element gives NaN.
  std::optional<Array> where = std::nullopt;
  /// Keep the reduced dims as size-1 dims.
  bool keepdims = false;
};

/// jnp.median over `axes` (all by default; like sum's axes): the middle
/// element of each sorted selection, or for an even count the mean of the
/// two middle ones ((a + b) / 2, correctly rounded, without overflowing).
/// A selection holding a NaN gives NaN, and so does an empty one; -0.0
/// sorts before 0.0 (as jnp.sort orders them). Integer
/// and bool inputs are converted to f32 first (as jnp.median), so the
/// result dtype is f32 or f64.
///
/// The result is exact (the values sorting would pick) and bitwise the same
/// on every mesh and layout. It keeps x's axes on the kept dims and is
/// replicated over the reduced dims' axes. When a reduced dim is sharded,
/// the reduced data never moves: the middle elements are found by a radix
/// selection on their bit patterns, a pass over the local data per digit,
/// each pass combining per-output digit counts across devices: 8-bit
/// digits (4 passes for f32, 8 for f64) for long lines or few outputs,
/// narrower ones where 512 counts per output would outnumber the data; at
/// most 32 passes for f32 and 64 for f64. Works under jit, vmap and jvp
/// (ties share the derivative equally, as for max).
/// Errors: a bad or repeated axis (ShapeError), a `where` that is not bool
/// (DTypeError) or does not broadcast to x's shape (ShapeError), operands
/// on different meshes (ShardingError).
Array median(const Array& x, const Axes& axes = {}, const MedianOptions& opt = {},
             std::source_location loc = std::source_location::current());

}  // namespace tessera
