// Indexing primitives: take, scatter_add, segment_sum. The index arrays are
// operands (their values are read on the devices, never on the host).
//
// All three partition themselves: take drops index axes that x's other dims
// already use instead of letting a cost model pick a side, and the scatters
// reduce partial blocks that cover only part of the output (see
// indexing.cpp).
#pragma once

#include "backend/cpu/indexing.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// take(x, indices, axis): operands x and a 1-d integer indices array.
PrimitivePtr make_take(int axis);

/// scatter_add(x, indices, updates): updates already in x's dtype; the
/// result is laid out as `out_spec`, else as x.
PrimitivePtr make_scatter_add(std::optional<PartitionSpec> out_spec);

/// segment_sum(data, ids): the result is laid out as `out_spec`, else
/// replicated along the segments and as data on the trailing dims.
PrimitivePtr make_segment_sum(std::int64_t num_segments, std::optional<PartitionSpec> out_spec);

}  // namespace tessera::detail
