// Visible communication: what an op moved between devices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/array.hpp"

namespace tessera {

/// Human-readable byte count: "280 B", "1.5 GiB".
std::string format_bytes(std::int64_t bytes);

/// One piece of a redistribution: a box of the global array copied from the
/// device at mesh position `src` to the one at `dst` (src == dst: local copy).
struct TransferPiece {
  int src = 0;
  int dst = 0;
  std::vector<Slice> box;
  std::int64_t bytes = 0;
};

/// The plan that moves an array from one layout to another on the same mesh.
/// Built without touching data; reshard() executes it.
struct ReshardPlan {
  Shape shape;
  DType dtype = DType::f32;
  NamedSharding source;
  NamedSharding target;
  /// The form the planner found: "none" (layouts equal), "local slice"
  /// (every device already holds what it needs), "all-gather", "all-to-all",
  /// "permute" (each device receives from at most two others) or
  /// "point-to-point".
  std::string kind;
  /// The box each mesh position ends up holding (the target sharding's
  /// blocks for a reshard; blocks widened by halos for stencils).
  std::vector<std::vector<Slice>> target_boxes;
  /// Every piece copied, grouped by destination in mesh order. Devices whose
  /// target block equals their source block are absent (they keep the buffer).
  std::vector<TransferPiece> pieces;
  /// Per mesh position: bytes received from other devices, sent to others,
  /// and copied locally.
  std::vector<std::int64_t> bytes_received;
  std::vector<std::int64_t> bytes_sent;
  std::vector<std::int64_t> bytes_local;

  /// Bytes that crossed between devices.
  std::int64_t bytes_moved() const;
  /// Number of pieces that crossed between devices.
  std::int64_t remote_pieces() const;
  /// One line: "reshard all-to-all: 4 pieces, 64 B moved; recv per device [..]".
  std::string str() const;

  ReshardPlan(NamedSharding src, NamedSharding dst) : source(std::move(src)), target(std::move(dst)) {}
};

/// Plans moving `array` to `target` (same mesh) without executing it.
ReshardPlan plan_reshard(const Array& array, const NamedSharding& target);
/// The same for any shape and dtype.
ReshardPlan plan_reshard(const Shape& shape, DType dtype, const NamedSharding& source, const NamedSharding& target);
/// The general form: mesh position t must end up holding `target_boxes[t]`
/// (any box of the global array, e.g. its block widened by a halo).
ReshardPlan plan_boxes(const Shape& shape, DType dtype, const NamedSharding& source,
                       std::vector<std::vector<Slice>> target_boxes);

/// The communication of every op run inside an explain() call.
struct CommRecord {
  std::string op;    // "reshard", ...
  std::string kind;  // as ReshardPlan::kind, or the collective's name
  std::int64_t pieces = 0;
  std::vector<std::int64_t> bytes_received;  // per mesh position
  std::vector<std::int64_t> bytes_local;     // per mesh position
  std::int64_t bytes_moved() const;
  std::string str() const;
};

struct Explanation {
  std::vector<CommRecord> records;
  std::int64_t bytes_moved() const;
  /// One line per record.
  std::string str() const;
};

namespace detail {
/// Called by ops: adds `r` to every active scope of this thread.
void record_comm(const CommRecord& r);

/// While alive, record_comm on this thread appends to `to` instead of the
/// scopes (nullptr: drops the records). For a device's share of an SPMD
/// program, whose records the caller's thread reports.
class RecordRedirect {
 public:
  explicit RecordRedirect(std::vector<CommRecord>* to);
  ~RecordRedirect();
  RecordRedirect(const RecordRedirect&) = delete;
  RecordRedirect& operator=(const RecordRedirect&) = delete;

 private:
  std::vector<CommRecord>* prev_to_;
  bool prev_active_;
};

/// Records CommRecords of ops run on this thread while alive (nestable).
class ExplainScope {
 public:
  ExplainScope();
  ~ExplainScope();
  ExplainScope(const ExplainScope&) = delete;
  ExplainScope& operator=(const ExplainScope&) = delete;
  Explanation take();

 private:
  friend void record_comm(const CommRecord& r);
  Explanation result_;
  ExplainScope* parent_;
};
}  // namespace detail

/// Runs `f` and returns what the ops inside it moved between devices:
///   auto ex = ts::explain([&] { b = ts::reshard(a, ts::P("y")); });
template <class F>
Explanation explain(F&& f) {
  detail::ExplainScope scope;
  f();
  return scope.take();
}

}  // namespace tessera
