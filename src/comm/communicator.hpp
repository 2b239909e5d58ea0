// The communication backend of a mesh: whole-mesh redistribution and
// reduction for the op front ends, and the factory of per-member Groups for
// code that runs one task per device (shard_map bodies, executors). Each
// backend lives in its own directory (threads/ now; mpi/ and nccl/ later).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/group.hpp"
#include "core/reduce_op.hpp"
#include "runtime/runtime.hpp"
#include "tessera/explain.hpp"

namespace tessera::detail {

/// The state of one shard_map call (or one executor run) that its
/// collectives share: where members meet, the timeout, and whether a member
/// has failed.
class Session {
 public:
  virtual ~Session() = default;
  /// Marks the session failed: every waiting and later collective raises
  /// CollectiveError naming `device_id` and `what`.
  virtual void abort(int device_id, const std::string& what) = 0;
  /// "" while the session stands; after abort, the message its waits raise
  /// (without the "[op] " prefix). For waits outside the backend's own: a
  /// transport's (comm/direct.hpp).
  virtual std::string abort_reason() = 0;
};

/// Raised in a member whose collective was cut short because another device
/// failed; shard_map reports the other device's error instead.
class PeerFailed : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// "threads", "mpi", ...
  virtual std::string backend() const = 0;
  /// Executes a redistribution plan: for every mesh position t, fills dst[t]
  /// (already allocated, or left empty when the plan keeps the buffer) with
  /// the pieces whose destination is t, read from src[piece.src].
  /// `piece_begin[t]..piece_begin[t+1]` indexes t's pieces in plan.pieces.
  virtual void exchange(const ReshardPlan& plan, const std::vector<int>& piece_begin, const std::vector<Buffer>& src,
                        std::vector<Buffer>& dst) = 0;

  /// Reduction over mesh axes (all-reduce, or reduce-scatter when each
  /// device asks for part of the result). Position t's group is every
  /// position that shares its coordinates on the mesh axes not in `axes`.
  /// partial[t] holds a row-major block of `dtype` covering
  /// `partial_boxes[t]` (equal within a group); dst[t] receives the box
  /// `out_boxes[t]` (inside the partial box) of the group's partials combined
  /// elementwise by `op`, always in group order (mesh position), so every run
  /// and every member gets bitwise the same result.
  virtual void reduce(const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp op, DType dtype,
                      const std::vector<Buffer>& partial, const std::vector<std::vector<Slice>>& partial_boxes,
                      const std::vector<std::vector<Slice>>& out_boxes, std::vector<Buffer>& dst) = 0;

  /// A session for one shard_map call (or executor run) over `mesh`;
  /// collectives wait at most `timeout_s` seconds for their group.
  virtual std::shared_ptr<Session> open_session(const Mesh& mesh, double timeout_s) = 0;
  /// Mesh position `pos`'s view of its group over mesh `axes` in `session`:
  /// the positions that share its coordinates on the other axes, ranked by
  /// their index on `axes` (the first named axis major). With every axis in
  /// mesh order the group is the whole mesh and ranks are positions. `axes`
  /// must be distinct names of mesh axes; `op` names the collective in
  /// messages ("psum"). The group may be used for any number of collectives.
  virtual std::unique_ptr<Group> group(Session& session, const Mesh& mesh, const std::vector<std::string>& axes,
                                       int pos, const std::string& op) = 0;
};

/// Positions of the group of `pos` for a reduction over `axes`, in mesh order.
std::vector<int> group_of(const Mesh& mesh, const std::vector<std::string>& axes, int pos);

/// Positions of the group of `pos` over `axes`, ranked as Communicator::group
/// ranks them (by index on `axes`, the first named axis major).
std::vector<int> members_of(const Mesh& mesh, const std::vector<std::string>& axes, int pos);

/// Mesh axes as messages name them: "'x'" or "('x', 'y')".
std::string axes_text(const std::vector<std::string>& axes);

/// The communicator for a mesh's devices (threads backend for CPU devices).
Communicator& communicator_for(const Mesh& mesh);

}  // namespace tessera::detail
