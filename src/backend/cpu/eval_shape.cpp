// The per-device kernels of the shape primitives but reshape
// (primitives/shape.hpp): transpose's and expand_dims's block copies, and
// the per-block copies the affine ops' lowering (spmd/lower_shape.cpp)
// hands each device. The copies themselves are backend/cpu/shape.hpp's.
#include <cstring>

#include "backend/cpu/shape.hpp"
#include "core/array_impl.hpp"
#include "core/validate.hpp"
#include "primitives/shape.hpp"

namespace tessera::detail {

void Transpose::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const std::size_t isz = itemsize(in[0].dtype);
  const auto is = static_cast<std::int64_t>(isz);
  const auto sst = cpu::strides_of(in[0].shape);
  auto dst = cpu::strides_of(out[0].shape);
  std::vector<std::int64_t> src(perm_.size());
  for (size_t j = 0; j < perm_.size(); ++j) {
    src[j] = sst[perm_[j]] * is;
    dst[j] *= is;
  }
  cpu::strided_copy(static_cast<const unsigned char*>(in[0].data), src, static_cast<unsigned char*>(out[0].data), dst,
                    out[0].shape, isz);
}

void ExpandDims::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const auto n = static_cast<std::size_t>(num_elements(in[0].shape)) * itemsize(in[0].dtype);
  if (n) std::memcpy(out[0].data, in[0].data, n);
}

void AffineOp::eval_cpu(const LocalArgs&, LocalOuts&) const {
  throw Error(msg(name_, "internal: a primitive that lowers itself has no per-device kernel"));
}

void AffineOp::write_block(void* dst, const std::vector<Slice>& blk, std::size_t isz,
                           std::span<const AffineCopy> copies) const {
  if (const std::vector<unsigned char>* f = fill())
    cpu::fill_bytes(static_cast<unsigned char*>(dst), num_elements(box_shape(blk)), *f);
  for (const AffineCopy& c : copies) cpu::copy_affine(c.map, c.src, c.sbox, dst, blk, c.region, isz);
}

}  // namespace tessera::detail
