// Inside the threads backend: the rendezvous where a group's members meet
// (session.cpp) and the group built on it (group.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace tessera::detail {

/// One member's contribution to a collective.
struct Deposit {
  Buffer data;
  Shape shape;
  DType dtype = DType::f32;
  /// Everything that must agree across members (op, axes, parameters, dtype
  /// and the shape where it must match), e.g. "psum(f32[4])".
  std::string signature;
};

/// Who takes part in a group's collectives and how they find each other.
struct GroupSpec {
  Session* session = nullptr;
  std::string key;              // same for every member of the group
  std::string op;               // "psum", for messages
  std::string axes;             // "'x'" or "('x', 'y')", for messages
  std::vector<int> device_ids;  // device id of each member, in member order
  int rank = 0;                 // this device's index among the members
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

/// A session whose collectives wait `timeout_s` seconds; `poll`: spin
/// briefly before sleeping (when every device has a core).
std::shared_ptr<Session> make_threads_session(double timeout_s, bool poll);

/// Deposits `mine` for this member's next collective on `g` and blocks until
/// every member of `g` has deposited for theirs. Raises CollectiveError when
/// the members' signatures differ, when the group is incomplete after the
/// timeout (naming who arrived), or when the session was aborted
/// (PeerFailed). `g.session` must come from make_threads_session.
std::shared_ptr<Rendezvous> threads_meet(const GroupSpec& g, Deposit mine);

/// A member's Group over the rendezvous of `g.session`.
std::unique_ptr<Group> make_threads_group(GroupSpec g);

/// The communicator of meshes whose devices are all in this process.
Communicator& threads_communicator();

// What a collective's members must agree on, and each member's result
// computed from every member's deposit (in member order). The threads group
// uses them on its rendezvous; the MPI group on the deposits it assembled
// from every process.

/// "psum(f32[4,8], reduce=sum)": the op, dtype, shape (dim `free_dim` as "*"
/// unless with_shape) and parameters.
std::string collective_sig(const std::string& op, const Local& in, const std::string& params, bool with_shape,
                           int free_dim = -1);
std::string all_gather_params(int axis, bool tiled);
std::string reduce_scatter_params(int dim, bool tiled, ReduceOp op);
std::string permute_params(const std::vector<std::pair<int, int>>& perm);
std::string all_to_all_params(int split_axis, int concat_axis);
/// The signature of a redistribution's exchange (the global array and both
/// layouts: blocks may differ in size).
std::string exchange_sig(const std::string& op, const ReshardPlan& plan);
/// "" when every deposit's signature equals member 0's, else the message
/// (without the "[op] " prefix) naming the first member that differs:
/// "mismatched collectives on axis 'x': CPU 0 called ... but CPU 2 called ...".
std::string mismatch_text(const std::vector<Deposit>& d, const std::vector<int>& device_ids, const std::string& axes);

Local gather_deposits(const std::vector<Deposit>& d, int axis, bool tiled, int device);
Local reduce_scatter_deposits(const std::vector<Deposit>& d, int rank, int dim, bool tiled, ReduceOp op, int device);
Local permute_deposits(const std::vector<Deposit>& d, int rank, const std::vector<std::pair<int, int>>& perm,
                       int device);
Local all_to_all_deposits(const std::vector<Deposit>& d, int rank, int split_axis, int concat_axis, int device);
/// Where a piece of a plan is read from: a row-major block covering `box`.
struct PieceSource {
  const void* data = nullptr;
  std::vector<Slice> box;
  const Buffer* buffer = nullptr;  // when given, `data`'s buffer (in any memory space: a GPU's too)
};
/// Position `my_position`'s box of the plan's target, on `device`, each
/// piece copied from `source(index in plan.pieces)` (see Group::exchange).
Buffer exchange_deposits(const ReshardPlan& plan, int my_position, const Buffer& mine, int device,
                         const std::function<PieceSource(int piece)>& source);
/// CollectiveError unless the group is every device of the plan's mesh in
/// mesh order with this member at `my_position`.
void check_whole_mesh_group(const ReshardPlan& plan, int my_position, int rank, const std::vector<int>& device_ids,
                            const std::string& op);

}  // namespace tessera::detail
