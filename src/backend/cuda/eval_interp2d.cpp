// The per-device kernels of interp2d and its transpose
// (primitives/interp2d.hpp) on a CUDA device: one device's block of queries
// against the whole grid and table, by the kernels of
// backend/cuda/interp2d.hpp, as eval_cpu does on the CPU
// (backend/cpu/eval_interp2d.cpp).
#include "backend/cuda/interp2d.hpp"
#include "core/array_impl.hpp"
#include "primitives/interp2d.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

namespace {

cuda::Interp2dParams params_of(Interp2dMethod method, const std::optional<double>& fill, Interp2dDeriv deriv) {
  return {method, fill.has_value(), fill.value_or(0.0), deriv};
}

}  // namespace

void Interp2d::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const std::int64_t n = num_elements(in[0].shape);
  const std::int64_t rest = num_elements(Shape(in[4].shape.begin() + 2, in[4].shape.end()));
  const cuda::Interp2dGrid grid{in[2].data, in[2].dtype, in[2].shape[0], in[3].data, in[3].dtype, in[3].shape[0]};
  const cuda::Interp2dParams p = params_of(method_, fill_, deriv_);
  const Buffer scratch(current_device(), cuda::interp2d_scratch(p, grid, n, false));
  cuda::interp2d(p, grid, in[0].data, in[0].dtype, in[1].data, in[1].dtype, n, in[4].data, out[0].dtype, rest,
                 out[0].data, scratch.device_data());
}

void Interp2dTranspose::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const std::int64_t n = num_elements(in[0].shape);
  const std::int64_t rest = num_elements(Shape(out[0].shape.begin() + 2, out[0].shape.end()));
  const cuda::Interp2dGrid grid{in[2].data, in[2].dtype, in[2].shape[0], in[3].data, in[3].dtype, in[3].shape[0]};
  const cuda::Interp2dParams p = params_of(method_, fill_, deriv_);
  const Buffer scratch(current_device(), cuda::interp2d_scratch(p, grid, n, true));
  cuda::interp2d_transpose(p, grid, in[0].data, in[0].dtype, in[1].data, in[1].dtype, n, in[4].data, out[0].dtype,
                           rest, out[0].data, scratch.device_data());
}

}  // namespace tessera::detail
