#pragma once
#include <iosfwd>

namespace examples {
/// Forward differences of f(x, y) = sin(x) cos(y) on an n x n grid with
/// ts::diff along and across the sharded axis, and along it in manual mode
/// (shard_map with a ppermute halo exchange, checked against ts::diff);
/// prints timings, the bytes each form moved, and the error against the
/// analytic derivative.
/// Returns 0 when every check passes.
int finite_difference(std::ostream& os, long n = 2048);
}  // namespace examples
