// The per-block copy of reshape (primitives/reshape.hpp) on a CUDA device:
// the input boxes the lowering (spmd/lower_reshape.cpp) brought a device,
// written at their flat positions in its output block by
// backend/cuda/shape.cu's flat_copy, as the CPU's copy_flat does
// (backend/cpu/eval_reshape.cpp).
#include "backend/cuda/shape.hpp"
#include "backend/cuda/stream.hpp"
#include "core/validate.hpp"
#include "primitives/reshape.hpp"

namespace tessera::detail {

void Reshape::eval_cuda(const LocalArgs&, LocalOuts&) const {
  throw Error(msg("reshape", "internal: a primitive that lowers itself has no per-device kernel"));
}

void Reshape::write_block_cuda(void* dst, const std::vector<Slice>& blk, const Shape& in, std::size_t isz,
                               std::span<const ReshapeCopy> copies) const {
  for (const ReshapeCopy& c : copies) cuda::flat_copy("reshape", c.src, c.sbox, c.box, in, dst, blk, out_, isz);
  // The copies read buffers the lowering frees once the block is written.
  cuda::synchronize("reshape");
}

}  // namespace tessera::detail
