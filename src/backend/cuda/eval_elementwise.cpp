// The elementwise primitives (primitives/elementwise.hpp) on a CUDA device:
// eval_cuda on a device's local blocks in GPU memory, operands broadcast
// through their strides, with the elementwise kernels
// (backend/cuda/elementwise.cu). The same shape as eval_cpu
// (backend/cpu/eval_elementwise.cpp), and the same bits.
#include "backend/cuda/kernels.hpp"
#include "core/array_impl.hpp"
#include "primitives/elementwise.hpp"

namespace tessera::detail {

namespace {

Operand operand_of(const LocalIn& a, const Shape& out) {
  Operand o;
  o.data = a.data;
  o.strides = broadcast_strides(a.shape, out);
  return o;
}

// The identities (constraint, stop_gradient): the block as it is.
void copy_block(const LocalArgs& in, LocalOuts& out) {
  cuda::copy(out[0].data, in[0].data, static_cast<std::size_t>(num_elements(out[0].shape)) * itemsize(out[0].dtype));
}

}  // namespace

void Unary::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::unary(op_, t_, in[0].data, out[0].data, num_elements(out[0].shape));
}

void Binary::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::binary(op_, t_, operand_of(in[0], out[0].shape), operand_of(in[1], out[0].shape), out[0].data, out[0].shape);
}

void BinaryScalar::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const Operand a = operand_of(in[0], out[0].shape);
  cuda::binary(op_, t_, left_ ? s_ : a, left_ ? a : s_, out[0].data, out[0].shape);
}

void Select::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const Shape& s = out[0].shape;
  cuda::select(t_, operand_of(in[0], s), operand_of(in[1], s), operand_of(in[2], s), out[0].data, s);
}

void SelectScalar::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const Shape& s = out[0].shape;
  const Operand a = operand_of(in[1], s);
  cuda::select(t_, operand_of(in[0], s), is_x_ ? s_ : a, is_x_ ? a : s_, out[0].data, s);
}

void Convert::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::convert(in[0].data, from_, out[0].data, result_, num_elements(out[0].shape));
}

void Constraint::eval_cuda(const LocalArgs& in, LocalOuts& out) const { copy_block(in, out); }

void StopGradient::eval_cuda(const LocalArgs& in, LocalOuts& out) const { copy_block(in, out); }

}  // namespace tessera::detail
