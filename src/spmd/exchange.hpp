// The box exchange and the executor: how a primitive's per-device work
// gets its data and runs. gather_boxes brings any box of an array to each
// mesh position (halos, reshards) through the reshard planner; reduce_over
// combines partial results over mesh axes; for_each_device runs a kernel on
// every device. Each takes the execution context (spmd/member.hpp): for a
// member of a compiled program it does that device's share.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/array_impl.hpp"
#include "core/reduce_op.hpp"
#include "spmd/member.hpp"
#include "tessera/explain.hpp"

namespace tessera::detail {


/// An Array from per-position buffers already laid out per `sharding`.
Array wrap(const Shape& shape, DType dtype, const NamedSharding& sharding, std::vector<Buffer> buffers);
/// The local block of `a` at mesh position `pos`.
inline const void* local_data(const Array& a, int pos) { return a.impl()->buffers[pos].data(); }
inline Shape local_shape(const Array& a, int pos) { return a.sharding().shard_shape(a.shape(), pos); }
inline std::vector<Slice> local_index(const Array& a, int pos) { return a.sharding().shard_index(a.shape(), pos); }
/// reshard(), recording the comm under `op` (no-op when already laid out).
Array reshard_for(const ExecContext& ctx, const Array& a, const NamedSharding& s, const char* op);
/// reshard_for over the whole mesh, from the calling thread.
inline Array reshard_for(const Array& a, const NamedSharding& s, const char* op) {
  return reshard_for(ExecContext::whole(), a, s, op);
}



/// Per position t, a buffer holding the box `boxes[t]` of `a` (row-major):
/// t copies what it holds and receives the rest from its holders through the
/// planner (e.g. a halo from a neighbour). Positions whose box equals their
/// block share the buffer. Records the traffic under `op`.
std::vector<Buffer> gather_boxes(const ExecContext& ctx, const Array& a, const std::vector<std::vector<Slice>>& boxes, const char* op);

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
std::vector<Buffer> reduce_over(const ExecContext& ctx, const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp reduction, DType dtype,
                                const std::vector<Buffer>& partial,
                                const std::vector<std::vector<Slice>>& partial_boxes,
                                const std::vector<std::vector<Slice>>& out_boxes, const char* op);


/// Runs fn(pos) on every device of the mesh (the executor); for a member,
/// on its own position only. `bytes`, when given, is what the kernels read
/// and write over all devices: small work runs one device after another on
/// the calling thread (run_on_devices_sized), since waking a thread per
/// device costs more than the work. fn must then need no collective.
void for_each_device(const ExecContext& ctx, const Mesh& mesh, const std::function<void(int)>& fn,
                     std::int64_t bytes = -1);

/// An array of `shape` laid out per `sharding` whose blocks fill(pos, b)
/// writes, on each device (for a member, its own block only).
Array make_array(const ExecContext& ctx, const Shape& shape, DType dtype, const NamedSharding& sharding,
                 const std::function<void(int, Buffer&)>& fill);

/// For checks only the devices holding the data can make (an index out of
/// range, say): `found[t]` is what position t found, filled for the
/// positions this thread runs (this process's devices; for a member, its
/// own). Returns the first finding of any position in mesh order. With
/// several processes every process (or every member) takes part and gets
/// the same answer; with one, the local findings are all there is.
std::optional<std::int64_t> first_over_processes(const ExecContext& ctx, const Mesh& mesh,
                                                 const std::vector<std::optional<std::int64_t>>& found,
                                                 const char* op);


}  // namespace tessera::detail
