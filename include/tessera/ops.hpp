// Global-view ops on sharded arrays.
//
// Every op validates its inputs, computes the output shape, dtype and
// sharding and a communication plan without touching data, then runs
// per-device kernels. Sharding rules (see docs/semantics.md):
//   - Elementwise: the output keeps the operands' sharding. When operands
//     disagree, Auto axes reshard the smaller operands to the largest one's
//     sharding; Explicit axes raise ShardingError.
//   - Reductions over a sharded dim: local reduce, then all-reduce over the
//     mesh axes of the reduced dims (reduce-scatter when out_sharding is
//     sharded).
//   - Stencils, slices, pads, rolls, concatenations and scans along a sharded
//     dim move only boundary data (halos) or shard totals.
// Every op accepts arrays of any size on any mesh (uneven and empty shards).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "tessera/array.hpp"
#include "tessera/scalar.hpp"

namespace tessera {

/// Options of ops whose output layout the caller may choose.
struct OutOptions {
  /// The output's spec on the operands' mesh. Required in Explicit mode where
  /// the output layout would be ambiguous.
  std::optional<PartitionSpec> out_sharding = std::nullopt;
};

// ----------------------------------------------------------------- creation

/// Arrays filled on their devices; each device writes only its block.
Array zeros(const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
Array ones(const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
Array full(const Shape& shape, Scalar value, DType dtype, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
/// [start, stop) with `step`, 1-d.
Array arange(double start, double stop, double step, DType dtype, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
/// `num` evenly spaced values in [start, stop] (stop included when `endpoint`).
Array linspace(double start, double stop, std::int64_t num, DType dtype, const NamedSharding& sharding,
               bool endpoint = true, std::source_location loc = std::source_location::current());
/// n x m with ones on diagonal `k`.
Array eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
/// A replicated scalar (rank 0) on the given mesh.
Array scalar(Scalar value, DType dtype, const Mesh& mesh, std::source_location loc = std::source_location::current());

// -------------------------------------------------------------- elementwise

Array add(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array subtract(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array multiply(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// True division: integer operands give f32.
Array divide(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Division rounded toward minus infinity (jnp.floor_divide); integers stay
/// integers (unsigned: plain division), x // 0 gives 0 for integers.
Array floor_divide(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Remainder with the sign of the divisor (jnp.remainder, Python's %);
/// x % 0 gives 0 for integers.
Array remainder(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array pow(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array maximum(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array minimum(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array equal(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array not_equal(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array less(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array less_equal(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array greater(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array greater_equal(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Logical ops on truth values (nonzero is true); result bool.
Array logical_and(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array logical_or(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array logical_xor(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array logical_not(const Array& a, std::source_location loc = std::source_location::current());
/// Elementwise choice: cond ? x : y, broadcast together.
Array where(const Array& cond, const Array& x, const Array& y, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array where(const Array& cond, const Array& x, Scalar y, std::source_location loc = std::source_location::current());
Array where(const Array& cond, Scalar x, const Array& y, std::source_location loc = std::source_location::current());
Array clip(const Array& x, std::optional<Scalar> lo, std::optional<Scalar> hi, std::source_location loc = std::source_location::current());

Array negative(const Array& x, std::source_location loc = std::source_location::current());
Array abs(const Array& x, std::source_location loc = std::source_location::current());
Array exp(const Array& x, std::source_location loc = std::source_location::current());
Array log(const Array& x, std::source_location loc = std::source_location::current());
Array log1p(const Array& x, std::source_location loc = std::source_location::current());
Array expm1(const Array& x, std::source_location loc = std::source_location::current());
Array sqrt(const Array& x, std::source_location loc = std::source_location::current());
Array rsqrt(const Array& x, std::source_location loc = std::source_location::current());
Array sin(const Array& x, std::source_location loc = std::source_location::current());
Array cos(const Array& x, std::source_location loc = std::source_location::current());
Array tanh(const Array& x, std::source_location loc = std::source_location::current());
Array sigmoid(const Array& x, std::source_location loc = std::source_location::current());
Array floor(const Array& x, std::source_location loc = std::source_location::current());
Array ceil(const Array& x, std::source_location loc = std::source_location::current());
/// Rounds half to even, like jnp.round.
Array round(const Array& x, std::source_location loc = std::source_location::current());
Array sign(const Array& x, std::source_location loc = std::source_location::current());
Array isnan(const Array& x, std::source_location loc = std::source_location::current());
Array isfinite(const Array& x, std::source_location loc = std::source_location::current());
/// Converts to `dtype` as XLA does, never raising: float -> int truncates
/// toward zero and saturates (NaN -> 0); int -> int wraps; nonzero -> true.
Array astype(const Array& x, DType dtype, std::source_location loc = std::source_location::current());

// Binary ops with a weakly typed C++ scalar on either side.
#define TESSERA_SCALAR_BINARY(name)                                                            \
  Array name(const Array& a, Scalar b, std::source_location loc = std::source_location::current()); \
  Array name(Scalar a, const Array& b, std::source_location loc = std::source_location::current());
TESSERA_SCALAR_BINARY(add)
TESSERA_SCALAR_BINARY(subtract)
TESSERA_SCALAR_BINARY(multiply)
TESSERA_SCALAR_BINARY(divide)
TESSERA_SCALAR_BINARY(floor_divide)
TESSERA_SCALAR_BINARY(remainder)
TESSERA_SCALAR_BINARY(pow)
TESSERA_SCALAR_BINARY(maximum)
TESSERA_SCALAR_BINARY(minimum)
TESSERA_SCALAR_BINARY(equal)
TESSERA_SCALAR_BINARY(not_equal)
TESSERA_SCALAR_BINARY(less)
TESSERA_SCALAR_BINARY(less_equal)
TESSERA_SCALAR_BINARY(greater)
TESSERA_SCALAR_BINARY(greater_equal)
#undef TESSERA_SCALAR_BINARY

// Operators cannot take a call site (C++ gives them no default arguments), so
// they pass an empty one.
#define TESSERA_OPERATOR(op, name)                                                                             \
  inline Array operator op(const Array& a, const Array& b) { return name(a, b, {}, std::source_location{}); } \
  inline Array operator op(const Array& a, Scalar b) { return name(a, b, std::source_location{}); }           \
  inline Array operator op(Scalar a, const Array& b) { return name(a, b, std::source_location{}); }
TESSERA_OPERATOR(+, add)
TESSERA_OPERATOR(-, subtract)
TESSERA_OPERATOR(*, multiply)
TESSERA_OPERATOR(/, divide)
TESSERA_OPERATOR(%, remainder)
TESSERA_OPERATOR(==, equal)
TESSERA_OPERATOR(!=, not_equal)
TESSERA_OPERATOR(<, less)
TESSERA_OPERATOR(<=, less_equal)
TESSERA_OPERATOR(>, greater)
TESSERA_OPERATOR(>=, greater_equal)
#undef TESSERA_OPERATOR
inline Array operator-(const Array& a) { return negative(a, std::source_location{}); }
inline Array operator!(const Array& a) { return logical_not(a, std::source_location{}); }
inline Array operator&&(const Array& a, const Array& b) { return logical_and(a, b, {}, std::source_location{}); }
inline Array operator||(const Array& a, const Array& b) { return logical_or(a, b, {}, std::source_location{}); }

// --------------------------------------------------------------- reductions

struct ReduceOptions {
  bool keepdims = false;
  /// Output spec; a sharded dim here turns the all-reduce into a reduce-scatter.
  std::optional<PartitionSpec> out_sharding = std::nullopt;
};

/// sum and prod of bool and i8 give i32, of u8 give u32; other dtypes are kept.
Array sum(const Array& x, const Axes& axes = {}, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Integer and bool inputs give f32.
Array mean(const Array& x, const Axes& axes = {}, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
Array max(const Array& x, const Axes& axes = {}, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
Array min(const Array& x, const Axes& axes = {}, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
Array prod(const Array& x, const Axes& axes = {}, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
Array any(const Array& x, const Axes& axes = {}, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
Array all(const Array& x, const Axes& axes = {}, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Index (i32) of the first maximum / minimum along one axis (NaN wins, like
/// jnp.argmax).
Array argmax(const Array& x, int axis, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());
Array argmin(const Array& x, int axis, const ReduceOptions& opt = {}, std::source_location loc = std::source_location::current());

// ----------------------------------------------------------- linear algebra

/// Contracting and batch dims of a dot_general: ({lhs_contract}, {rhs_contract}),
/// ({lhs_batch}, {rhs_batch}). Output dims: batch, lhs free, rhs free.
struct DotDims {
  std::vector<int> lhs_contracting = {}, rhs_contracting = {};
  std::vector<int> lhs_batch = {}, rhs_batch = {};
};

/// NumPy matmul: 1-d operands are promoted and the added dim removed; leading
/// dims broadcast as batch dims. The local GEMM calls BLAS.
Array matmul(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// jnp.dot: matmul for rank <= 2; sum over the last dim of a and the
/// second-to-last of b otherwise.
Array dot(const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
Array dot_general(const Array& a, const Array& b, const DotDims& dims, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Two-operand einsum, e.g. "bij,bjk->bik"; every label appears in the output
/// or is summed.
Array einsum(const std::string& subscripts, const Array& a, const Array& b, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());

// -------------------------------------------------------------------- shape

Array reshape(const Array& x, const Shape& shape, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Permutes dims; empty `perm` reverses them.
Array transpose(const Array& x, const std::vector<int>& perm = {}, std::source_location loc = std::source_location::current());
Array swapaxes(const Array& x, int axis1, int axis2, std::source_location loc = std::source_location::current());
Array broadcast_to(const Array& x, const Shape& shape, std::source_location loc = std::source_location::current());
Array expand_dims(const Array& x, int axis, std::source_location loc = std::source_location::current());
/// Removes the given size-1 dims (all size-1 dims when empty).
Array squeeze(const Array& x, const std::vector<int>& axes = {}, std::source_location loc = std::source_location::current());

/// One dim of a slice: start/stop/step like Python (stop exclusive; negative
/// values count from the end; missing values take the defaults).
struct SliceSpec {
  std::optional<std::int64_t> start = std::nullopt, stop = std::nullopt;
  std::int64_t step = 1;
};
/// x[s0, s1, ...]; missing trailing dims are taken whole.
Array slice(const Array& x, const std::vector<SliceSpec>& slices, std::source_location loc = std::source_location::current());
Array concatenate(const std::vector<Array>& xs, int axis, std::source_location loc = std::source_location::current());
Array stack(const std::vector<Array>& xs, int axis, std::source_location loc = std::source_location::current());
/// Constant padding: (before, after) per dim.
Array pad(const Array& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths, Scalar value = 0, std::source_location loc = std::source_location::current());
Array roll(const Array& x, std::int64_t shift, int axis, std::source_location loc = std::source_location::current());
Array flip(const Array& x, int axis, std::source_location loc = std::source_location::current());

// ------------------------------------------------------- stencils and scans

struct DiffOptions {
  std::optional<Array> prepend = std::nullopt;
  std::optional<Array> append = std::nullopt;
};
/// n-th discrete difference along `axis` (jnp.diff).
Array diff(const Array& x, int n = 1, int axis = -1, const DiffOptions& opt = {}, std::source_location loc = std::source_location::current());
/// Inclusive prefix sum along `axis` (result dtype as for sum).
Array cumsum(const Array& x, int axis, std::source_location loc = std::source_location::current());
/// 1-d convolution of every line of `x` along `axis` with the 1-d `kernel`,
/// "same" mode, zero boundary (np.convolve flips the kernel).
Array convolve(const Array& x, const Array& kernel, int axis = -1, std::source_location loc = std::source_location::current());
/// 2-d convolution over the last two dims, "same" mode, zero boundary.
Array convolve2d(const Array& x, const Array& kernel, std::source_location loc = std::source_location::current());
/// jnp.gradient(f, spacing, axis=axis) with edge_order 1: central differences
/// ((f[i+1] - f[i-1]) * 0.5) / spacing inside, one-sided (f[1] - f[0]) /
/// spacing and (f[n-1] - f[n-2]) / spacing at the ends. Differences are taken
/// in f's dtype (integers wrap), the result is inexact (f32 for integers);
/// bool f, or fewer than 2 elements along `axis`, raise. Keeps f's sharding:
/// along a sharded axis only one row per block boundary moves.
Array gradient(const Array& f, int axis, double spacing = 1.0,
               std::source_location loc = std::source_location::current());
/// The gradient along every axis, in axis order (jnp.gradient(f) as a list,
/// one array also for a 1-d f), with spacing 1.
std::vector<Array> gradient(const Array& f, std::source_location loc = std::source_location::current());
/// 1-d linear interpolation (jnp.interp): xp increasing; values outside take
/// the end values.
Array interp(const Array& x, const Array& xp, const Array& fp, std::source_location loc = std::source_location::current());

// ----------------------------------------------------------------- indexing

/// Gathers along `axis`: out[..., i, ...] = x[..., indices[i], ...]
/// (indices 1-d, integer; out of range raises).
Array take(const Array& x, const Array& indices, int axis = 0, std::source_location loc = std::source_location::current());
/// x.at[indices].add(updates) along axis 0: out = x; out[indices[i]] += updates[i].
Array scatter_add(const Array& x, const Array& indices, const Array& updates, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());
/// out[s] = sum of data[i] with segment_ids[i] == s, for s in [0, num_segments);
/// ids out of range are dropped (as in JAX).
Array segment_sum(const Array& data, const Array& segment_ids, std::int64_t num_segments, const OutOptions& opt = {}, std::source_location loc = std::source_location::current());

// ---------------------------------------------------------------- sharding

/// Moves `x` to `sharding` (same as reshard; the name jit users know).
Array with_sharding_constraint(const Array& x, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
Array with_sharding_constraint(const Array& x, const PartitionSpec& spec, std::source_location loc = std::source_location::current());

// ------------------------------------------------------------------ random

/// A PRNG key (threefry-2x32 counter-based, like JAX's default).
struct Key {
  std::uint32_t k0 = 0, k1 = 0;
  bool operator==(const Key&) const = default;
};

namespace random {
Key key(std::uint64_t seed);
/// `num` independent keys.
std::vector<Key> split(const Key& key, int num = 2);
Key fold_in(const Key& key, std::uint32_t data);
/// Uniform in [lo, hi). A value depends only on the key and its global
/// index, so it is the same for every mesh and sharding.
Array uniform(const Key& key, const Shape& shape, DType dtype, const NamedSharding& sharding, double lo = 0.0,
              double hi = 1.0, std::source_location loc = std::source_location::current());
/// Standard normal, same guarantee.
Array normal(const Key& key, const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc = std::source_location::current());

// Key arrays. A key array holds keys as data: a u32 array whose last dim has
// size 2 (k0, k1), one key per position of the other dims -- what JAX's
// key_data gives. It shards, reshards and passes through shard_map in_specs
// like any array, so each device can receive its own keys; split, fold_in and
// the samplers accept it directly, inside shard_map bodies too. Results
// equal those of the Key forms bitwise.

/// `key` as a key array u32[2] laid out per `sharding` (rank 1).
Array key_data(const Key& key, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
/// `keys` as a key array u32[n, 2] laid out per `sharding` (rank 2).
Array key_data(std::span<const Key> keys, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
/// The one key of a key array of shape (2,) or (1, ..., 1, 2), read to the
/// host (JAX's wrap_key_data, giving a Key).
Key wrap_key_data(const Array& data);
/// Keys of shape (*B, 2) -> (*B, num, 2): `num` keys split from each, sharded
/// like the input over B.
Array split(const Array& keys, int num = 2, std::source_location loc = std::source_location::current());
/// Keys of shape (*B, 2) -> (*B, 2), each folded with `data`.
Array fold_in(const Array& keys, std::uint32_t data, std::source_location loc = std::source_location::current());
/// The same with the data as an integer array: a scalar (e.g. axis_index
/// inside a shard_map body) or one value per key (shape B). Values are taken
/// modulo 2^32, as JAX does.
Array fold_in(const Array& keys, const Array& data, std::source_location loc = std::source_location::current());
/// Samplers drawing from a key array holding one key; without a sharding the
/// result is replicated on the key's mesh (inside a shard_map body: local).
Array uniform(const Array& key, const Shape& shape, DType dtype, const NamedSharding& sharding, double lo = 0.0,
              double hi = 1.0, std::source_location loc = std::source_location::current());
Array uniform(const Array& key, const Shape& shape, DType dtype = DType::f32, double lo = 0.0, double hi = 1.0, std::source_location loc = std::source_location::current());
Array normal(const Array& key, const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc = std::source_location::current());
Array normal(const Array& key, const Shape& shape, DType dtype = DType::f32, std::source_location loc = std::source_location::current());
}  // namespace random

}  // namespace tessera
