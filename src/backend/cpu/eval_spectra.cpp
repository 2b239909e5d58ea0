// The per-device kernel of resample_accumulate (primitives/spectra.hpp): one
// device's rows into its partial accumulator, by the kernel of
// backend/cpu/spectra.hpp.
#include <string>

#include "backend/cpu/spectra.hpp"
#include "primitives/spectra.hpp"

namespace tessera::detail {

void ResampleTangent::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::ResampleTangentArgs t;
  std::size_t k = read_resample_rows(in, num_segments_, has_weights_, has_scale_, t.a);
  k = read_resample_tangents(in, k, has_weights_, has_scale_, t);
  if (rowmax_) {
    t.rowmax = static_cast<double*>(out[0].data);
  } else {
    t.bound = *static_cast<const double*>(in[k].data);
    t.out = static_cast<double*>(out[0].data);
  }
  const std::string err = cpu::resample_tangent(t);
  if (!err.empty()) throw ValueError(err);
}

void ResampleTranspose::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::ResampleTransposeArgs t;
  const std::size_t k = read_resample_rows(in, num_segments_, has_weights_, has_scale_, t.a);
  t.ct = static_cast<const double*>(in[k].data);
  std::size_t r = 0;
  t.gflux = static_cast<double*>(out[r++].data);
  if (has_weights_) t.gweights = static_cast<double*>(out[r++].data);
  if (has_scale_) t.gscale = static_cast<double*>(out[r++].data);
  cpu::resample_transpose(t);
}

void ResampleAccumulate::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::ResampleArgs a;
  const std::size_t k = read_resample_rows(in, num_segments_, has_weights_, has_scale_, a);
  if (has_init_) a.init = static_cast<const double*>(in[k].data);
  a.max_abs = max_abs_;
  a.out = static_cast<double*>(out[0].data);
  const std::string err = cpu::resample_accumulate(a);
  if (!err.empty()) throw ValueError(err);
}

}  // namespace tessera::detail
