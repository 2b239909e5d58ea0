// Shared machinery of the op front ends: validation, dtype promotion,
// broadcasting, sharding resolution, and the two ways ops communicate
// (gathering boxes through the planner, reducing over mesh axes).
#pragma once

#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "core/array_impl.hpp"
#include "core/checked.hpp"
#include "core/dispatch.hpp"
#include "core/reduce_op.hpp"
#include "tessera/explain.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

// ---------------------------------------------------------------- checks

/// "[op] " + msg.
std::string msg(const char* op, const std::string& text);
/// Raises Error "[op] the array is empty" for a default-constructed Array.
/// Accepts values traced by jit (ops built on primitives).
void check_operand(const Array& a, const char* op, const char* name = "operand");
/// check_operand, and an Error for a value traced by jit: ops not yet built
/// on primitives run eagerly only.
void check_valid(const Array& a, const char* op, const char* name = "operand");
/// Marks a public op's call. The outermost one on a thread remembers where
/// the user called it from; when the call raises, the site stays for
/// take_error_site() (jit appends it to errors raised while tracing). Sites
/// with line 0 (calls made by the library itself) are not remembered.
class CallSite {
 public:
  explicit CallSite(const std::source_location& loc) noexcept;
  ~CallSite();
  CallSite(const CallSite&) = delete;
  CallSite& operator=(const CallSite&) = delete;
};
/// The site of the outermost op call that raised on this thread since the
/// last take, if any (and forgets it).
std::optional<std::source_location> take_error_site();
/// Forgets any remembered site.
void clear_error_site();
/// Remembers `loc` as the site of the error being raised, unless an op
/// already did (or loc has line 0).
void note_error_site(const std::source_location& loc);

/// Axis in [-rank, rank) -> [0, rank); ShapeError otherwise.
int normalize_axis(int axis, int rank, const char* op);
/// Sorted, unique, normalised axes (all when axes.all()); ShapeError on repeats.
std::vector<int> normalize_axes(const Axes& axes, int rank, const char* op);
/// ShardingError unless every array is on the same mesh.
void check_same_mesh(const std::vector<const Array*>& arrays, const char* op);
/// "f32[8@x,4]" of an array, for messages.
std::string describe(const Array& a);

// ----------------------------------------------------------------- dtypes

bool is_float(DType t);
/// u8, i8, u32, i32, u64, i64 (not bool).
bool is_integer(DType t);
bool is_unsigned(DType t);  // u8, u32, u64
/// jnp.promote_types with x64 enabled, the join on JAX's lattice
/// (bool < u8 < u32 < u64 and bool < i8 < i32 < i64; u8 -> i16, u32 -> i64;
/// every integer < f32 < f64), with one deviation: JAX's i16 (u8 with i8)
/// becomes i32, the nearest wider type we have. u64 with a signed integer
/// gives f64, any integer with f32 gives f32.
DType promote(DType a, DType b);
/// Result of a weakly typed scalar with an array of dtype `a`: an int scalar
/// keeps an integer dtype (bool becomes i32), a float scalar keeps a float
/// dtype (others become f32).
DType promote_scalar(DType a, const Scalar& s);
/// True when an integer scalar's value lies in the range of integer dtype
/// `t` (bool and float scalars: always).
bool scalar_fits(const Scalar& s, DType t);
/// The scalar's value as text: "300", "18446744073709551615", "2.5".
std::string scalar_str(const Scalar& s);
/// DTypeError "[op] scalar V does not fit in T" unless scalar_fits(s, t).
void check_scalar_fits(const Scalar& s, DType t, const char* op);
/// JAX's _promote_integer_dtype for sum, prod and cumsum, with our default
/// integers i32 and u32: bool and narrower signed ints give i32, narrower
/// unsigned ints give u32; others are kept.
DType sum_dtype(DType t);

// ----------------------------------------------------------- broadcasting

/// NumPy broadcast of two shapes; ShapeError "[op] shapes ... cannot broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// ------------------------------------------------------------- shardings

/// True when any mesh axis named by the spec is Explicit.
bool has_explicit_axes(const NamedSharding& s);
/// True when any axis of the mesh is Explicit.
bool mesh_is_explicit(const Mesh& mesh);
/// A NamedSharding on `mesh` from an out_sharding spec, validated for `rank`
/// with errors naming `op`.
NamedSharding resolve_spec(const Mesh& mesh, const PartitionSpec& spec, int rank, const char* op);
/// The spec of `s` as per-dim axis lists, padded with empty lists to `rank`.
std::vector<std::vector<std::string>> spec_axes(const NamedSharding& s, int rank);
/// A spec entry for `axes`: none, one axis written plainly, or a group.
PartitionSpec::Entry entry_of(const std::vector<std::string>& axes);
/// A spec from per-dim axis lists (single axes written plainly).
PartitionSpec make_spec(const std::vector<std::vector<std::string>>& dims);

// ---------------------------------------------------------------- arrays

/// An Array from per-position buffers already laid out per `sharding`.
Array wrap(const Shape& shape, DType dtype, const NamedSharding& sharding, std::vector<Buffer> buffers);
/// The local block of `a` at mesh position `pos`.
inline const void* local_data(const Array& a, int pos) { return a.impl()->buffers[pos].data(); }
inline Shape local_shape(const Array& a, int pos) { return a.sharding().shard_shape(a.shape(), pos); }
inline std::vector<Slice> local_index(const Array& a, int pos) { return a.sharding().shard_index(a.shape(), pos); }
/// reshard(), recording the comm under `op` (no-op when already laid out).
Array reshard_for(const Array& a, const NamedSharding& s, const char* op);
/// Converts dtype (per device, no communication); returns `a` if equal.
Array cast(const Array& a, DType dtype);

// --------------------------------------------------------- communication

/// Per position t, a buffer holding the box `boxes[t]` of `a` (row-major):
/// t copies what it holds and receives the rest from its holders through the
/// planner (e.g. a halo from a neighbour). Positions whose box equals their
/// block share the buffer. Records the traffic under `op`.
std::vector<Buffer> gather_boxes(const Array& a, const std::vector<std::vector<Slice>>& boxes, const char* op);

/// What a plan moves, as explain shows it under `op`.
CommRecord plan_record(const ReshardPlan& plan, const char* op);
/// What a reduction over mesh `axes` moves (see reduce_over), under `op`.
CommRecord reduce_record(const Mesh& mesh, const std::vector<std::string>& axes, DType dtype,
                         const std::vector<std::vector<Slice>>& partial_boxes,
                         const std::vector<std::vector<Slice>>& out_boxes, const char* op);

/// Records that `op` ran on `mesh` without moving anything (for explain).
void record_none(const Mesh& mesh, const char* op);

/// Combines per-position partials of dtype `dtype` by `reduction` over mesh
/// `axes` (see Communicator::reduce); records the traffic under `op`.
std::vector<Buffer> reduce_over(const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp reduction, DType dtype,
                                const std::vector<Buffer>& partial,
                                const std::vector<std::vector<Slice>>& partial_boxes,
                                const std::vector<std::vector<Slice>>& out_boxes, const char* op);

/// Shortest text that reads back as `v` ("0.1", "1e+300", "inf").
std::string number_str(double v);

/// Runs fn(pos) on every device of the mesh (the executor).
void for_each_device(const Mesh& mesh, const std::function<void(int)>& fn);

/// For checks only the devices holding the data can make (an index out of
/// range, say): `found[t]` is what position t found, filled for the
/// positions this thread runs (this process's devices; in member mode, the
/// member's). Returns the first finding of any position in mesh order. With
/// several processes every process (or every member) takes part and gets
/// the same answer; with one, the local findings are all there is.
std::optional<std::int64_t> first_over_processes(const Mesh& mesh,
                                                 const std::vector<std::optional<std::int64_t>>& found,
                                                 const char* op);

}  // namespace tessera::detail
