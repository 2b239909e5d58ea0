// interp2d's transformation rules (primitives/interp2d.hpp): batching.
#include "primitives/interp2d.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

// Queries batched, grid and table shared: one call over more queries (the
// batch dim becomes the first query dim). A table per example falls back
// to one call per example.
std::vector<Array> Interp2d::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                   std::vector<int>& ob) const {
  if (bd[2] >= 0 || bd[3] >= 0 || bd[4] >= 0) return Primitive::batch(in, bd, size, ob);
  ob = {0};
  return {bind1(shared_from_this(), {batch_first(in[0], bd[0], size), batch_first(in[1], bd[1], size), in[2],
                                     in[3], in[4]})};
}

}  // namespace tessera::detail
