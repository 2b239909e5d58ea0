// The per-block copy of reshape (primitives/reshape.hpp): the input boxes
// the lowering (spmd/lower_reshape.cpp) brought a device, written at their
// flat positions in its output block by backend/cpu/shape.hpp's copy_flat.
#include "backend/cpu/shape.hpp"
#include "core/validate.hpp"
#include "primitives/reshape.hpp"

namespace tessera::detail {

void Reshape::eval_cpu(const LocalArgs&, LocalOuts&) const {
  throw Error(msg("reshape", "internal: a primitive that lowers itself has no per-device kernel"));
}

void Reshape::write_block(void* dst, const std::vector<Slice>& blk, const Shape& in, std::size_t isz,
                          std::span<const ReshapeCopy> copies) const {
  for (const ReshapeCopy& c : copies) cpu::copy_flat(c.src, c.sbox, c.box, in, dst, blk, out_, isz);
}

}  // namespace tessera::detail
