// The collectives interface. Ops reach other devices only through a
// Communicator; each backend lives in its own directory (threads/ now; mpi/
// and nccl/ later).
#pragma once

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
};

/// The communicator for a mesh's devices (threads backend for CPU devices).
Communicator& communicator_for(const Mesh& mesh);

}  // namespace tessera::detail
