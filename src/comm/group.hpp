// One member's view of a group of devices: the only way code reaches other
// devices' data. Every member of the group runs the same sequence of calls on
// its own Group object, each from its own device's task, with its own local
// value; a call returns this member's result. Backends implement it (threads/
// now; mpi/ and nccl/ later) and are chosen by the Communicator that builds
// the group.
//
// What every backend guarantees:
// - Members are numbered 0..size()-1 (rank()) in a fixed order, and results
//   are defined in that order: reductions combine in member order, so every
//   run and every member gets bitwise the same result.
// - Members' calls must match (same collective, parameters and dtype; same
//   shape where the collective needs it). A mismatch raises CollectiveError
//   on every member, never a silent combination.
// - A member that waits longer than the session's timeout for the others
//   raises CollectiveError naming who arrived; when another member failed
//   (Session::abort) it raises PeerFailed.
// - Values are immutable: a result may share memory with a member's input.
#pragma once

#include <utility>
#include <vector>

#include "core/reduce_op.hpp"
#include "runtime/runtime.hpp"
#include "tessera/explain.hpp"

namespace tessera::detail {

/// A member's local value: a row-major block.
struct Local {
  Buffer data;
  Shape shape;
  DType dtype = DType::f32;
};

class Group {
 public:
  virtual ~Group() = default;
  /// This member's index in the group.
  virtual int rank() const = 0;
  /// Number of members.
  virtual int size() const = 0;

  /// Every member gets the elementwise reduction of all members' values
  /// (equal shapes), combined in member order.
  virtual Local all_reduce(const Local& in, ReduceOp op) = 0;
  /// Concatenation (tiled) or stack (not tiled) of the members' values along
  /// `axis`, in member order. Tiled pieces may differ in size along `axis`.
  virtual Local all_gather(const Local& in, int axis, bool tiled) = 0;
  /// Member r gets block r of the reduction along `dim` (tiled: balanced
  /// blocks; not tiled: the dim's size must equal size() and is removed).
  virtual Local reduce_scatter(const Local& in, int dim, bool tiled, ReduceOp op = ReduceOp::Sum) = 0;
  /// Member r gets block r (along split_axis, balanced) of every member's
  /// value, concatenated along concat_axis in member order.
  virtual Local all_to_all(const Local& in, int split_axis, int concat_axis) = 0;
  /// Member d gets the value of member s for each (s, d) in `perm` (each
  /// member sends at most once and receives at most once); zeros when no one
  /// sends to it.
  virtual Local permute(const Local& in, const std::vector<std::pair<int, int>>& perm) = 0;
  /// Returns once every member has called it.
  virtual void barrier() = 0;

  /// One member's part of a redistribution, for executors that run one task
  /// per device. The group must hold every device of the plan's mesh in mesh
  /// order (rank() == my_position); `mine` is this position's block under
  /// plan.source. Returns this position's box of plan.target_boxes: `mine`
  /// itself when the plan keeps the buffer (no piece for this position), an
  /// empty Buffer when the box is empty, else a new buffer filled with the
  /// plan's pieces for this position, copied straight out of the other
  /// members' blocks. Records nothing for explain (the plan carries the
  /// counts).
  virtual Buffer exchange(const ReshardPlan& plan, int my_position, const Buffer& mine) = 0;
};

}  // namespace tessera::detail
