// Collective algorithms over a Communicator's rendezvous, for shard_map
// bodies. Each takes this member's local value and returns its result.
#pragma once

#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace tessera::detail {

struct Local {
  Buffer data;
  Shape shape;
  DType dtype = DType::f32;
};

enum class ReduceOp { Sum, Max, Min };

/// Every member gets the elementwise reduction of all members' values
/// (equal shapes), combined in member order.
Local all_reduce(Communicator& c, const Group& g, const Local& in, ReduceOp op);
/// Concatenation (tiled) or stack (not tiled) of the members' values along
/// `axis`, in member order.
Local all_gather(Communicator& c, const Group& g, const Local& in, int axis, bool tiled);
/// Member r gets block r of the sum along `dim` (tiled: balanced blocks;
/// not tiled: dim size must equal the group size and is removed).
Local reduce_scatter(Communicator& c, const Group& g, const Local& in, int dim, bool tiled);
/// Member d gets the value of member s for each (s, d) in `perm`; zeros when
/// no one sends to it.
Local permute(Communicator& c, const Group& g, const Local& in, const std::vector<std::pair<int, int>>& perm);
/// Member r gets block r (along split_axis, balanced) of every member's
/// value, concatenated along concat_axis in member order.
Local all_to_all(Communicator& c, const Group& g, const Local& in, int split_axis, int concat_axis);

}  // namespace tessera::detail
