// The sharding propagation engine: from a primitive's factor rule and its
// operands' shardings to the layout every operand must take, the layout of
// every result, and the reduction the results still need.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sharding/rule.hpp"

namespace tessera::detail {

/// How one application of a primitive runs on the mesh.
struct Partition {
  /// The layout each operand is brought to before the kernel runs.
  std::vector<NamedSharding> operands;
  /// The layout of each result as the per-device kernel produces it.
  std::vector<NamedSharding> local;
  /// Mesh axes of the reduction factors that were sharded: the kernel's
  /// results are partial over them and must be combined (empty: none).
  std::vector<std::string> reduce_axes;
  /// The layout partial results are combined into: `results` when its
  /// blocks lie inside the local ones (a reduce-scatter), else `local`.
  /// Equal to `local` when nothing is partial.
  std::vector<NamedSharding> combined;
  /// The layout of each result once combined (and resharded to out_spec).
  std::vector<NamedSharding> results;
  /// Estimated cost, and the bytes moved per device (for `explain`-like text).
  double cost = 0;
  double bytes = 0;

  /// An operand dim mapped to a Halo factor (stencils): each device reads
  /// the operand rows [a - lo, b + hi) of that dim, clipped to the array,
  /// for its block [a, b) of the result dim on the same factor (laid out
  /// as `local`); spmd/engine.cpp gathers them.
  struct HaloDim {
    int operand = 0, dim = 0;
    int result = 0, result_dim = 0;
    std::int64_t lo = 0, hi = 0;
  };
  std::vector<HaloDim> halos;
  /// An operand dim mapped to a scanned Halo factor (Factor::scan): along
  /// it the engine carries the totals of the parts before each block.
  struct ScanDim {
    int operand = 0, dim = 0;
    int result = 0;
  };
  std::optional<ScanDim> scan;
  /// True when the rule has Halo factors, sharded or not: the engine runs
  /// steps of its own around the kernel (halo exchanges, carried totals),
  /// so a compiled program runs this application through eval_partitioned.
  bool has_engine_steps() const { return !halos.empty() || scan.has_value(); }
};

/// Chooses the factor-to-axes assignment for `prim` over `in` (see
/// propagate.cpp for the algorithm and the cost model). Raises ShardingError
/// (the primitive's conflict message) when Explicit axes conflict and no
/// out_spec resolves it.
///
/// `result_layout`, when given, is the layout a later use needs the (single)
/// result in (jit's backward pass): the engine then treats it as the
/// primitive's out_spec, choosing the cheapest way to produce it, which may
/// be computing the natural layout and resharding afterwards.
Partition partition(const Partitionable& prim, std::span<const AbstractArray> in, const std::vector<TypeInfo>& out,
                    const std::optional<NamedSharding>& result_layout = std::nullopt);

/// Estimated bytes one device receives to go from layout `from` to `to`.
double reshard_bytes(const Shape& shape, DType dtype, const NamedSharding& from, const NamedSharding& to);

}  // namespace tessera::detail
