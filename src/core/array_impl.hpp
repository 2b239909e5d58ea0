// Internal representation of an Array.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/runtime.hpp"
#include "tessera/array.hpp"

namespace tessera::detail {

struct ArrayImpl {
  Shape shape;
  DType dtype;
  NamedSharding sharding;
  /// One buffer per mesh position (devices()[i] holds buffers[i]), each the
  /// row-major block given by sharding.shard_index(shape, i).
  std::vector<Buffer> buffers;
  /// A value being traced by jit: the trace that owns it (compared by
  /// address, never dereferenced outside src/transforms) and its value
  /// number there. Traced values have no buffers.
  const void* trace = nullptr;
  int value = -1;
  /// What a trace other than jit's carries with its value (vmap: the
  /// batched array and its batch dim; jvp: the primal and the tangent). It
  /// dies with the value, so a transformation keeps no intermediate alive.
  std::shared_ptr<const void> payload;
  /// The transformation that traces the value, for messages.
  const char* traced_by = "jit";

  ArrayImpl(Shape s, DType t, NamedSharding sh) : shape(std::move(s)), dtype(t), sharding(std::move(sh)) {}
};

/// typeof(a) as if it varied over `vma` ("f32[4,1]{V:y}"): typeof inside a
/// body, and messages written after one.
std::string typeof_varying(const Array& a, const std::vector<std::string>& vma);

/// Number of elements of a shape.
std::int64_t num_elements(const Shape& shape);
/// Shape of a box of slices.
Shape box_shape(const std::vector<Slice>& box);

/// Calls fn(src_offset, dst_offset, bytes) for each contiguous run of the
/// sub-box `box` (global indices) inside a row-major block covering `src_box`
/// and one covering `dst_box`; offsets are in bytes. Trailing dims whole in
/// both blocks are merged into one run.
void for_each_run(const std::vector<Slice>& src_box, const std::vector<Slice>& dst_box, const std::vector<Slice>& box,
                  std::size_t itemsize, const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn);

/// Copies the sub-box `box` (global indices) from a row-major block that
/// covers `src_box` into a row-major block covering `dst_box`. Contiguous
/// trailing dimensions are merged so whole runs go through one memcpy.
void copy_box(const void* src, const std::vector<Slice>& src_box, void* dst, const std::vector<Slice>& dst_box,
              const std::vector<Slice>& box, std::size_t itemsize);

/// copy_box between buffers in any memory space (host, or a GPU's: the
/// GPU port copies each run, then waits once). Host to host is copy_box.
void copy_box(const Buffer& src, const std::vector<Slice>& src_box, const Buffer& dst,
              const std::vector<Slice>& dst_box, const std::vector<Slice>& box, std::size_t itemsize, const char* op);
/// copy_box between host memory and a buffer in any memory space: the
/// sub-box `box` of the host block `src` (covering `src_box`) into `dst`
/// (covering `dst_box`). On a GPU, a box that is one contiguous run in both
/// goes over in one copy straight from `src` (staged through page-locked
/// memory by the GPU port); other boxes are gathered on the host first.
void write_box(const void* src, const std::vector<Slice>& src_box, const Buffer& dst,
               const std::vector<Slice>& dst_box, const std::vector<Slice>& box, std::size_t itemsize,
               const char* op);
/// The same from a buffer in any memory space into host memory.
void read_box(const Buffer& src, const std::vector<Slice>& src_box, void* dst, const std::vector<Slice>& dst_box,
              const std::vector<Slice>& box, std::size_t itemsize, const char* op);
/// The first `nbytes` of `dst` from host memory, in whatever space `dst`
/// is; read_buffer the other way.
void write_buffer(const Buffer& dst, const void* host, std::size_t nbytes, const char* op);
void read_buffer(const Buffer& src, void* host, std::size_t nbytes, const char* op);
/// The first `nbytes` of `src` into `dst`, buffers in any memory spaces.
void copy_buffer(const Buffer& dst, const Buffer& src, std::size_t nbytes, const char* op);

/// The part of a row-major block covering `block` that is the box `box`
/// (inside it), as a view of `buffer` without copying, when that part is
/// contiguous: `box` spans the block whole on every dim after the first one
/// where they differ, and is one index wide on the dims before it (rows of a
/// matrix, a slab of a 3-d block). An empty Buffer when it is not.
Buffer contiguous_view(const Buffer& buffer, const std::vector<Slice>& block, const std::vector<Slice>& box,
                       std::size_t itemsize);

/// The box [0, shape[d]) on every dim.
std::vector<Slice> whole_box(const Shape& shape);

/// Intersection of two boxes; empty() of the result tells if they are disjoint.
std::vector<Slice> intersect(const std::vector<Slice>& a, const std::vector<Slice>& b);
bool box_empty(const std::vector<Slice>& box);

/// A new array whose buffer i is filled by fill(i, buffer) on device i's worker.
Array make_array(const Shape& shape, DType dtype, const NamedSharding& sharding,
                 const std::function<void(int, Buffer&)>& fill);
/// make_array with the positions run by `each(fn)` (fn(pos) for the
/// positions to fill; the others stay empty).
Array make_array_on(const Shape& shape, DType dtype, const NamedSharding& sharding,
                    const std::function<void(int, Buffer&)>& fill,
                    const std::function<void(const std::function<void(int)>&)>& each);

}  // namespace tessera::detail
