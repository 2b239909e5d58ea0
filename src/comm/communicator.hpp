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
