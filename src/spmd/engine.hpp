// The partitioning engine (engine.cpp): one primitive on concrete arrays.
#pragma once

#include <vector>

#include "primitives/primitive.hpp"
#include "sharding/propagate.hpp"
#include "spmd/member.hpp"

namespace tessera::detail {

/// Abstract values of concrete or traced arrays.
std::vector<AbstractArray> abstract_of(const std::vector<Array>& args);

/// Eager evaluation: partition, move operands, exchange halos and carry
/// scan totals (stencils and scans), run the kernel on every device,
/// combine partial results. `ctx` says whether this thread drives the whole
/// mesh or is one member of a compiled program (spmd/member.hpp).
std::vector<Array> eval_eager(const ExecContext& ctx, const Primitive& prim, const std::vector<Array>& args);

/// The same with the partition already chosen (shard_map bodies; a compiled
/// program's applications whose partition has engine steps, run as each
/// member's share).
std::vector<Array> eval_partitioned(const ExecContext& ctx, const Primitive& prim, const std::vector<Array>& args,
                                    const std::vector<TypeInfo>& types, const Partition& part);

}  // namespace tessera::detail
