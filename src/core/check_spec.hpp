#pragma once

#include "tessera/sharding.hpp"

namespace tessera::detail {
/// Raises ShardingError "[op] ..." if `spec` names an axis `mesh` lacks or
/// names an axis twice.
void check_spec(const Mesh& mesh, const PartitionSpec& spec, const char* op);
}  // namespace tessera::detail
