// The CPU's loop for a fused group of elementwise primitives (jit's fused
// steps): one pass over the result block, tile by tile, every member
// evaluated on the tile while its operands are in cache.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/cpu/native.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// One device's block of a fused group, as jit's compiled program lays it
/// out. Members run in order on each tile; a member reads external operands
/// (blocks in memory, broadcast to the result's block shape when theirs
/// differs) or the results of earlier members.
struct FusedLoop {
  struct Arg {
    int member = -1;                     // >= 0: the result of this earlier member
    const unsigned char* data = nullptr;  // member < 0: the operand's block
    const Shape* shape = nullptr;         // member < 0: the block's shape
    std::size_t isz = 0;
  };
  struct Member {
    const Primitive* prim = nullptr;  // fusable()
    std::vector<Arg> args;
    unsigned char* out = nullptr;  // the result's block when materialised, else nullptr (kept in a tile)
    std::size_t isz = 0;
  };
  const Shape* shape = nullptr;  // every member's result block
  std::vector<Member> members;
  TileSink* sink = nullptr;  // fed member sink_from's tiles; the caller finishes it
  int sink_from = -1;
  // The group's native loop (backend/cpu/native.hpp), or nullptr for the
  // tile loop. Its inputs are the members' external args in member order;
  // its outputs the members with `out` or feeding the sink, in member order.
  const cpu::NativeKernel* native = nullptr;
};

/// Runs the loop over the whole block (nothing for an empty one).
void run_fused_loop(const FusedLoop& loop);

}  // namespace tessera::detail
