#pragma once
#include <iosfwd>

namespace examples {
/// sigmoid(x @ w + b) with x sharded by rows and w by columns, in automatic
/// and explicit mode and with shard_map; checks all three give the same
/// numbers as one device.
/// Returns 0 when every check passes.
int mlp_layer(std::ostream& os, long batch = 512, long features = 256);
}  // namespace examples
