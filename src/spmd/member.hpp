// Member mode: global-view code run as one device's share of an SPMD
// program, told so by the execution context it is passed.
//
// A primitive that partitions itself (eval_global) is written for whole
// arrays: it plans pieces for every mesh position, moves them with
// gather_boxes / reduce_over and fills every device's block through
// make_array / for_each_device. A compiled jit program runs one task per
// device per call, so inside that task the same code runs once per member,
// all members at once, each given ExecContext(member):
//   - for_each_device and make_array run only this member's position
//     (other positions' buffers stay empty: their own members fill them);
//   - gather_boxes is this member's share of the exchange (Group::exchange)
//     and reduce_over its all-reduce within its group.
// Every member runs the same deterministic planning code, so members meet
// in the same collectives in the same order. Arrays that cross devices must
// lie on the member mesh (a plan on another mesh raises). The context is a
// value passed down, never thread state: code that is not handed a member
// context drives the whole mesh from the calling thread.
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

/// Where global-view lowering code runs: passed to the engine, the box
/// exchange and every eval_global.
class ExecContext {
 public:
  /// The calling thread drives every device of the mesh this process holds.
  static ExecContext whole() { return ExecContext(); }
  /// The calling thread is member `m.pos()` of a compiled program's one
  /// task per device, and does that device's share only.
  explicit ExecContext(MemberContext& m) : member_(&m) {}
  /// The member, or nullptr for the whole mesh.
  MemberContext* member() const { return member_; }

 private:
  ExecContext() = default;
  MemberContext* member_ = nullptr;
};

/// This member's box `out_box` of the reduction by `op` over its group `g`
/// of partial blocks covering `partial_box` (equal in the group).
Buffer reduce_member(Group& g, const Buffer& partial, const std::vector<Slice>& partial_box,
                     const std::vector<Slice>& out_box, DType dtype, ReduceOp op, int device_id);


}  // namespace tessera::detail
