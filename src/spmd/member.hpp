// Member mode: global-view code run as one device's share of an SPMD
// program.
//
// A primitive that partitions itself (eval_global) is written for whole
// arrays: it plans pieces for every mesh position, moves them with
// gather_boxes / reduce_over and fills every device's block through
// make_array / for_each_device. A compiled jit program runs one task per
// device per call, so inside that task the same code runs once per member,
// all members at once, each under a MemberScope:
//   - run_on_devices runs only the entries of this member's device, so
//     make_array and for_each_device fill only this member's blocks (other
//     positions' buffers stay empty: their own members fill them);
//   - gather_boxes is this member's share of the exchange (Group::exchange)
//     and reduce_over its all-reduce within its group;
//   - communication records go to the caller (member 0's) or nowhere.
// Every member runs the same deterministic planning code, so members meet
// in the same collectives in the same order. Arrays that cross devices must
// lie on the member mesh (a plan on another mesh raises).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace tessera::detail {

class MemberContext {
 public:
  MemberContext(Mesh mesh, int pos, Session& session) : mesh_(std::move(mesh)), pos_(pos), session_(session) {}
  const Mesh& mesh() const { return mesh_; }
  int pos() const { return pos_; }
  Session& session() const { return session_; }
  /// This member's group over `axes` (made once per set of axes).
  Group& over(const std::vector<std::string>& axes, const std::string& op);
  /// The group over every axis of the mesh: ranks are mesh positions.
  Group& whole(const std::string& op) { return over(mesh_.axis_names(), op); }

 private:
  Mesh mesh_;
  int pos_;
  Session& session_;
  std::vector<std::pair<std::vector<std::string>, std::unique_ptr<Group>>> groups_;
};

/// The member context of this thread, or nullptr.
MemberContext* current_member();

/// Runs this thread as member `ctx.pos()` while alive. `records` receives the
/// communication records of the ops run meanwhile (nullptr: dropped).
class MemberScope {
 public:
  MemberScope(MemberContext& ctx, std::vector<CommRecord>* records);
  ~MemberScope();
  MemberScope(const MemberScope&) = delete;
  MemberScope& operator=(const MemberScope&) = delete;

 private:
  MemberContext* prev_;
  int prev_device_;
  RecordRedirect redirect_;
};

/// Leaves member mode while alive (this thread runs as itself: a
/// shard_map body's ops on its device's local values).
class MemberPause {
 public:
  MemberPause();
  ~MemberPause();
  MemberPause(const MemberPause&) = delete;
  MemberPause& operator=(const MemberPause&) = delete;

 private:
  MemberContext* prev_;
  int prev_device_;
  RecordRedirect redirect_;  // a body's records come from its collectives' log instead
};

/// This member's box `out_box` of the reduction by `op` over its group `g`
/// of partial blocks covering `partial_box` (equal in the group).
Buffer reduce_member(Group& g, const Buffer& partial, const std::vector<Slice>& partial_box,
                     const std::vector<Slice>& out_box, DType dtype, ReduceOp op, int device_id);


}  // namespace tessera::detail
