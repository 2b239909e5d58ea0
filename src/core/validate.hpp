// Argument checks every layer shares: the "[op] ..." message form, the
// user's call site of a failing op, axis normalisation, and short
// descriptions of arrays and numbers for messages.
#pragma once

#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "core/array_impl.hpp"
#include "core/checked.hpp"
#include "tessera/scalar.hpp"

namespace tessera::detail {


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
/// ShardingError unless two operands' meshes `a` and `b` are the same. The
/// partitioner checks every primitive's operands (sharding/propagate.cpp),
/// after the trace has read them (a shard_map body's captured arrays as
/// local copies); front ends that lay operands out themselves check first.
void check_same_mesh(const Mesh& a, const Mesh& b, const char* op);
/// "f32[8@x,4]" of an array, for messages.
std::string describe(const Array& a);


/// Shortest text that reads back as `v` ("0.1", "1e+300", "inf").
std::string number_str(double v);

}  // namespace tessera::detail
