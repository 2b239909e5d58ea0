// The collectives interface. Ops reach other devices only through a
// Communicator; each backend lives in its own directory (threads/ now; mpi/
// and nccl/ later).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/runtime.hpp"
#include "tessera/explain.hpp"

namespace tessera::detail {

/// One member's contribution to a collective inside a shard_map body.
struct Deposit {
  Buffer data;
  Shape shape;
  DType dtype = DType::f32;
  /// Everything that must agree across members (op, axes, parameters, dtype
  /// and the shape where it must match), e.g. "psum(f32[4])".
  std::string signature;
};

/// The state of one shard_map call that its collectives share: where members
/// meet, the timeout, and whether a member has failed.
class Session {
 public:
  virtual ~Session() = default;
  /// Marks the session failed: every waiting and later collective raises
  /// CollectiveError naming `device_id` and `what`.
  virtual void abort(int device_id, const std::string& what) = 0;
};

/// The members of one collective and how they find each other.
struct Group {
  Session* session = nullptr;
  std::string key;               // same for every member of the group
  long seq = 0;                  // per member: how many collectives it ran on `key` before
  std::string op;                // "psum", for messages
  std::string axes;              // "'x'" or "('x', 'y')", for messages
  std::vector<int> device_ids;   // device id of each member, in member order
  int rank = 0;                  // this device's index among the members
  int size() const { return static_cast<int>(device_ids.size()); }
};

/// The meeting of a group's members for one collective. Deposits stay alive
/// (and immutable) while any member holds the Rendezvous.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  /// Every member's deposit, in member order.
  virtual const std::vector<Deposit>& deposits() const = 0;
  /// A buffer shared by all members. Member 0 allocates it on its own device
  /// (so repeated calls reuse that device's cached block); the others wait.
  virtual Buffer shared(std::size_t nbytes, int rank, int device_id) = 0;
  /// Returns once every member has called it.
  virtual void barrier() = 0;
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
  /// partial[t] holds a row-major block covering `partial_boxes[t]` (equal
  /// within a group); dst[t] receives the box `out_boxes[t]` (inside the
  /// partial box) of the group's partials combined elementwise by
  /// combine(acc, in, count), always in group order (mesh position), so every
  /// run and every member gets bitwise the same result.
  /// A session for one shard_map call over `mesh`; collectives wait at most
  /// `timeout_s` seconds for their group.
  virtual std::shared_ptr<Session> open_session(const Mesh& mesh, double timeout_s) = 0;
  /// Deposits `mine` and blocks until every member of `g` has deposited.
  /// Raises CollectiveError when the members' signatures differ, when the
  /// group is incomplete after the timeout (naming who arrived), or when the
  /// session was aborted (PeerFailed).
  virtual std::shared_ptr<Rendezvous> meet(const Group& g, Deposit mine) = 0;

  virtual void reduce(const Mesh& mesh, const std::vector<std::string>& axes, std::size_t itemsize,
                      const std::function<void(void*, const void*, std::int64_t)>& combine,
                      const std::vector<Buffer>& partial, const std::vector<std::vector<Slice>>& partial_boxes,
                      const std::vector<std::vector<Slice>>& out_boxes, std::vector<Buffer>& dst) = 0;
};

/// Positions of the group of `pos` for a reduction over `axes`, in mesh order.
std::vector<int> group_of(const Mesh& mesh, const std::vector<std::string>& axes, int pos);

/// The communicator for a mesh's devices (threads backend for CPU devices).
Communicator& communicator_for(const Mesh& mesh);

}  // namespace tessera::detail
