// The per-device kernels of the random primitives (primitives/random.hpp):
// the samplers draw a device's block of the result from the block's global
// box, key_data copies its block of the keys, and split and fold_in
// transform the keys a device holds, with the random kernels
// (backend/cpu/random).
#include "backend/cpu/random.hpp"
#include "core/array_impl.hpp"
#include "primitives/random.hpp"

namespace tessera::detail {

void Sample::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  std::uint32_t k0, k1;
  if (key_) {
    k0 = key_->k0, k1 = key_->k1;
  } else {
    const auto* w = static_cast<const std::uint32_t*>(in[0].data);  // the whole key: replicated
    k0 = w[0], k1 = w[1];
  }
  if (kind_ == Sampler::Uniform)
    cpu::uniform(dtype_, out[0].data, shape_, out[0].box, k0, k1, lo_, hi_);
  else
    cpu::normal(dtype_, out[0].data, shape_, out[0].box, k0, k1);
}

void KeyData::eval_cpu(const LocalArgs&, LocalOuts& out) const {
  if (num_elements(out[0].shape) == 0) return;
  copy_box(words_.data(), whole_box(shape_), out[0].data, out[0].box, out[0].box, sizeof(std::uint32_t));
}

void Split::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::split_keys(static_cast<const std::uint32_t*>(in[0].data), num_elements(in[0].shape) / 2, num_,
                  static_cast<std::uint32_t*>(out[0].data));
}

void FoldIn::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  const std::uint32_t* data = data_ ? &*data_ : static_cast<const std::uint32_t*>(in[1].data);
  const std::int64_t stride = data_ || in[1].shape.empty() ? 0 : 1;
  cpu::fold_in_keys(static_cast<const std::uint32_t*>(in[0].data), num_elements(in[0].shape) / 2, data, stride,
                    static_cast<std::uint32_t*>(out[0].data));
}

}  // namespace tessera::detail
