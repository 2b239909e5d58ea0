// Inside the threads backend: the rendezvous where a group's members meet
// (session.cpp) and the group built on it (group.cpp).
#pragma once

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

}  // namespace tessera::detail
