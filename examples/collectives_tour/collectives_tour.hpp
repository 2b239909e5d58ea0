#pragma once
#include <iosfwd>

namespace examples {
/// A guided tour of manual mode (ts::shard_map) and its collectives on a 1-d
/// and a 2-d mesh over the available devices: axis_index, psum, pmean,
/// all_gather, psum_scatter, ppermute, all_to_all, per-device random keys,
/// a sharded matmul, and errors that replace hangs. Every step is checked
/// against a plain host computation and prints "... ok" or "... FAILED".
/// Returns the number of failed checks; `checks`, when given, receives how
/// many checks ran.
int collectives_tour(std::ostream& os, int* checks = nullptr);
}  // namespace examples
