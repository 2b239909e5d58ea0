// The per-device kernels of the spectra primitives (primitives/spectra.hpp)
// on a CUDA device: one device's rows, by the kernels of
// backend/cuda/spectra.hpp, with the checks and messages of the CPU's
// (backend/cpu/eval_spectra.cpp, backend/cpu/spectra.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "backend/cuda/spectra.hpp"
#include "core/exact_limbs.hpp"
#include "primitives/spectra.hpp"
#include "runtime/runtime.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace {

bool empty(const cuda::ResampleRows& a) { return a.n == 0 || a.T == 0 || a.S == 0 || a.K == 0; }

}  // namespace

void ResampleAccumulate::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::ResampleRows a;
  const std::size_t k = read_resample_rows(in, num_segments_, has_weights_, has_scale_, a);
  const double* init = has_init_ ? static_cast<const double*>(in[k].data) : nullptr;
  const ExactLimbs limbs(max_abs_);
  const Buffer scratch(current_device(), empty(a) ? 8 : cuda::resample_scratch(a));
  const std::string err = cuda::resample_accumulate(a, max_abs_, limbs.sigma, init, static_cast<double*>(out[0].data),
                                                    scratch.device_data());
  if (!err.empty()) throw ValueError(err);
}

void ResampleTangent::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::ResampleRows a;
  cuda::ResampleTangents t;
  std::size_t k = read_resample_rows(in, num_segments_, has_weights_, has_scale_, a);
  k = read_resample_tangents(in, k, has_weights_, has_scale_, t);
  auto* o = static_cast<double*>(out[0].data);
  // cpu::resample_tangent's checks of the bound, in its order.
  const std::int64_t size = rowmax_ ? a.n : 3 * a.S * a.T;
  cuda::fill_f64(o, size, 0.0);
  if (empty(a)) return;
  double bound = 0.0;
  if (!rowmax_) {
    bound = cuda::read_f64(static_cast<const double*>(in[k].data));
    if (!std::isfinite(bound)) {
      cuda::fill_f64(o, size, std::numeric_limits<double>::quiet_NaN());
      return;
    }
    if (bound == 0.0) return;  // every term is 0
    if (bound > 0x1p900) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "[resample_accumulate] a tangent term of %.6g is too large for an exact accumulator (expected at "
                    "most 2^900)",
                    bound);
      throw ValueError(buf);
    }
  }
  const ExactLimbs limbs(std::max(bound, 0x1p-900));
  const Buffer scratch(current_device(), cuda::resample_scratch(a));
  cuda::resample_tangent(a, t, limbs.sigma, rowmax_ ? o : nullptr, rowmax_ ? nullptr : o, scratch.device_data());
}

void ResampleTranspose::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::ResampleRows a;
  const std::size_t k = read_resample_rows(in, num_segments_, has_weights_, has_scale_, a);
  std::size_t r = 0;
  auto* gflux = static_cast<double*>(out[r++].data);
  double* gweights = has_weights_ ? static_cast<double*>(out[r++].data) : nullptr;
  double* gscale = has_scale_ ? static_cast<double*>(out[r++].data) : nullptr;
  const Buffer scratch(current_device(), empty(a) ? 8 : cuda::resample_scratch(a));
  cuda::resample_transpose(a, static_cast<const double*>(in[k].data), gflux, gweights, gscale, scratch.device_data());
}

}  // namespace tessera::detail
