#pragma once
#include <iosfwd>

namespace examples {
/// A plasma code's Jacobian, built in memory-bounded chunks across devices:
/// a residual of `params` parameters at each of `rows` grid rows (rows
/// sharded over every device, any count: 4099 divides by neither the
/// devices nor the chunk), differentiated per row with jacfwd and mapped
/// over the rows with vmap's chunk_size, so each device runs its own rows a
/// chunk at a time. Checks the Jacobian against central finite differences
/// and the chunked forms against the unchunked one (bitwise), and prints
/// time and peak memory per device for two chunk sizes.
/// Returns 0 when every check passes.
int chunked_jacobian(std::ostream& os, long rows = 4099, int params = 24);
}  // namespace examples
