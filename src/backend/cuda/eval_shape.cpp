// The shape primitives but reshape (primitives/shape.hpp) on a CUDA device:
// transpose's and expand_dims's block copies, and the per-block copies the
// affine ops' lowering (spmd/lower_shape.cpp) hands each device, with the
// copy kernels of backend/cuda/shape.cu. The same walks as the CPU's
// (backend/cpu/eval_shape.cpp), so the same bytes.
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/shape.hpp"
#include "backend/cuda/stream.hpp"
#include "core/array_impl.hpp"
#include "core/validate.hpp"
#include "primitives/shape.hpp"

namespace tessera::detail {

void Transpose::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const std::size_t isz = itemsize(in[0].dtype);
  const auto is = static_cast<std::int64_t>(isz);
  const auto sst = strides_of(in[0].shape);
  auto dst = strides_of(out[0].shape);
  std::vector<std::int64_t> src(perm_.size());
  for (size_t j = 0; j < perm_.size(); ++j) {
    src[j] = sst[perm_[j]] * is;
    dst[j] *= is;
  }
  cuda::strided_copy(name_, in[0].data, src, out[0].data, dst, out[0].shape, isz);
}

void ExpandDims::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::copy(out[0].data, in[0].data,
             static_cast<std::size_t>(num_elements(in[0].shape)) * itemsize(in[0].dtype));
}

void AffineOp::eval_cuda(const LocalArgs&, LocalOuts&) const {
  throw Error(msg(name_, "internal: a primitive that lowers itself has no per-device kernel"));
}

void AffineOp::write_block_cuda(void* dst, const std::vector<Slice>& blk, std::size_t isz,
                                std::span<const AffineCopy> copies) const {
  auto* d = static_cast<unsigned char*>(dst);
  if (const std::vector<unsigned char>* f = fill()) cuda::fill_bytes(name_, d, num_elements(box_shape(blk)), *f);
  for (const AffineCopy& c : copies) {
    const AffineWalk w = affine_walk(c.map, c.sbox, blk, c.region, isz);
    cuda::strided_copy(name_, static_cast<const unsigned char*>(c.src) + w.src_offset, w.src_strides,
                       d + w.dst_offset, w.dst_strides, w.extents, isz);
  }
  // The copies read buffers the lowering frees once the block is written.
  cuda::synchronize(name_);
}

}  // namespace tessera::detail
