// The per-device kernels of the elementwise primitives
// (primitives/elementwise.hpp): eval_cpu on a device's local blocks, with
// operands broadcast through their strides, and eval_tile on contiguous
// tiles of a fused loop. Both call the elementwise kernels
// (backend/cpu/elementwise).
#include <cstring>

#include "backend/cpu/elementwise.hpp"
#include "core/array_impl.hpp"
#include "primitives/elementwise.hpp"

namespace tessera::detail {

namespace {

Operand operand_of(const LocalIn& a, const Shape& out) {
  Operand o;
  o.data = a.data;
  o.strides = cpu::broadcast_strides(a.shape, out);
  return o;
}

Operand contiguous(const void* p) {
  Operand o;
  o.data = p;
  return o;  // binary_flat/select_flat read no strides
}

// The identities (constraint, stop_gradient): the block as it is.
void copy_block(const LocalArgs& in, LocalOuts& out) {
  std::memcpy(out[0].data, in[0].data, static_cast<std::size_t>(num_elements(out[0].shape)) * itemsize(out[0].dtype));
}

}  // namespace

void Unary::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::unary(op_, t_, in[0].data, out[0].data, num_elements(out[0].shape));
}
void Unary::eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const {
  cpu::unary(op_, t_, in[0], out, n);
}

void Binary::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::binary(op_, t_, operand_of(in[0], out[0].shape), operand_of(in[1], out[0].shape), out[0].data, out[0].shape);
}
void Binary::eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const {
  cpu::binary_flat(op_, t_, contiguous(in[0]), contiguous(in[1]), out, n);
}

void BinaryScalar::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const Operand a = operand_of(in[0], out[0].shape);
  cpu::binary(op_, t_, left_ ? s_ : a, left_ ? a : s_, out[0].data, out[0].shape);
}
void BinaryScalar::eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const {
  const Operand a = contiguous(in[0]);
  cpu::binary_flat(op_, t_, left_ ? s_ : a, left_ ? a : s_, out, n);
}

void Select::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const Shape& s = out[0].shape;
  cpu::select(t_, operand_of(in[0], s), operand_of(in[1], s), operand_of(in[2], s), out[0].data, s);
}
void Select::eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const {
  cpu::select_flat(t_, contiguous(in[0]), contiguous(in[1]), contiguous(in[2]), out, n);
}

void SelectScalar::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const Shape& s = out[0].shape;
  const Operand a = operand_of(in[1], s);
  cpu::select(t_, operand_of(in[0], s), is_x_ ? s_ : a, is_x_ ? a : s_, out[0].data, s);
}
void SelectScalar::eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const {
  const Operand a = contiguous(in[1]);
  cpu::select_flat(t_, contiguous(in[0]), is_x_ ? s_ : a, is_x_ ? a : s_, out, n);
}

void Convert::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  convert(in[0].data, from_, out[0].data, result_, num_elements(out[0].shape));
}
void Convert::eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const {
  convert(in[0], from_, out, result_, n);
}

void Constraint::eval_cpu(const LocalArgs& in, LocalOuts& out) const { copy_block(in, out); }

void StopGradient::eval_cpu(const LocalArgs& in, LocalOuts& out) const { copy_block(in, out); }

}  // namespace tessera::detail
