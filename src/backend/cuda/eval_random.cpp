// The random primitives (primitives/random.hpp) on a CUDA device, as eval_cpu
// does on the CPU (backend/cpu/eval_random.cpp): the samplers draw the
// device's block from its global box, split and fold_in transform the keys
// the device holds, with the kernels of backend/cuda/random.hpp; key_data
// copies its block of the keys (a parameter, on the host) to the device.
#include <cstdint>
#include <vector>

#include "backend/cuda/random.hpp"
#include "core/array_impl.hpp"
#include "primitives/random.hpp"
#include "runtime/gpus.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

void Sample::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::SampleKey k;
  if (key_)
    k.k0 = key_->k0, k.k1 = key_->k1;
  else
    k.words = static_cast<const std::uint32_t*>(in[0].data);  // the whole key, replicated: read by the kernel
  if (kind_ == Sampler::Uniform)
    cuda::uniform(dtype_, out[0].data, shape_, out[0].box, k, lo_, hi_);
  else
    cuda::normal(dtype_, out[0].data, shape_, out[0].box, k);
}

void KeyData::eval_cuda(const LocalArgs&, LocalOuts& out) const {
  const std::int64_t n = num_elements(out[0].shape);
  if (n == 0) return;
  std::vector<std::uint32_t> block(static_cast<std::size_t>(n));
  copy_box(words_.data(), whole_box(shape_), block.data(), out[0].box, out[0].box, sizeof(std::uint32_t));
  gpu_copy(*Runtime::get().gpu(current_device()), out[0].data, block.data(), block.size() * sizeof(std::uint32_t),
           CopyKind::HostToDevice, "key_data");
}

void Split::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::split_keys(static_cast<const std::uint32_t*>(in[0].data), num_elements(in[0].shape) / 2, num_,
                   static_cast<std::uint32_t*>(out[0].data));
}

void FoldIn::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const std::uint32_t* data = data_ ? nullptr : static_cast<const std::uint32_t*>(in[1].data);
  const std::int64_t stride = data_ || in[1].shape.empty() ? 0 : 1;
  cuda::fold_in_keys(static_cast<const std::uint32_t*>(in[0].data), num_elements(in[0].shape) / 2, data, stride,
                     data_ ? *data_ : 0u, static_cast<std::uint32_t*>(out[0].data));
}

}  // namespace tessera::detail
