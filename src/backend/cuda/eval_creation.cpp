// The creation primitives (primitives/creation.hpp) on a CUDA device: each
// device writes its block of the result from the block's global box, with
// the creation kernels (backend/cuda/creation.cu), as eval_cpu does on the
// CPU (backend/cpu/eval_creation.cpp).
#include "backend/cuda/kernels.hpp"
#include "core/array_impl.hpp"
#include "primitives/creation.hpp"

namespace tessera::detail {

void Fill::eval_cuda(const LocalArgs&, LocalOuts& out) const {
  cuda::fill(dtype_, out[0].data, num_elements(out[0].shape), value_);
}

void Arange::eval_cuda(const LocalArgs&, LocalOuts& out) const {
  cuda::arange(dtype_, out[0].data, out[0].box[0], start_, step_);
}

void Linspace::eval_cuda(const LocalArgs&, LocalOuts& out) const {
  cuda::linspace(dtype_, out[0].data, out[0].box[0], p_);
}

void Eye::eval_cuda(const LocalArgs&, LocalOuts& out) const {
  cuda::eye(dtype_, out[0].data, out[0].box[0], out[0].box[1], k_);
}

}  // namespace tessera::detail
