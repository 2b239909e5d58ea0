// The per-device kernel of resample_accumulate (primitives/spectra.hpp): one
// device's rows into its partial accumulator, by the kernel of
// backend/cpu/spectra.hpp.
#include <string>

#include "backend/cpu/spectra.hpp"
#include "primitives/spectra.hpp"

namespace tessera::detail {

namespace {

// The primal operands of a block (flux, wave, target, segment_ids, then
// weights and wave_scale where present); returns the index of the next one.
std::size_t read_primal(const LocalArgs& in, std::int64_t S, bool has_weights, bool has_scale, cpu::ResampleArgs& a) {
  a.n = in[0].shape[0];
  a.K = in[0].shape[1];
  a.T = in[2].shape[0];
  a.S = S;
  a.flux = in[0].data;
  a.flux_dt = in[0].dtype;
  a.wave = in[1].data;
  a.wave_dt = in[1].dtype;
  a.wave_per_row = in[1].shape.size() == 2;
  a.target = in[2].data;
  a.target_dt = in[2].dtype;
  a.seg = in[3].data;
  a.seg_dt = in[3].dtype;
  std::size_t k = 4;
  if (has_weights) a.weights = in[k].data, a.weights_dt = in[k].dtype, ++k;
  if (has_scale) a.scale = in[k].data, a.scale_dt = in[k].dtype, ++k;
  return k;
}

}  // namespace

void ResampleTangent::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::ResampleTangentArgs t;
  std::size_t k = read_primal(in, num_segments_, has_weights_, has_scale_, t.a);
  t.tflux = in[k].data, t.tflux_dt = in[k].dtype, ++k;
  if (has_weights_) t.tweights = in[k].data, t.tweights_dt = in[k].dtype, ++k;
  if (has_scale_) t.tscale = in[k].data, t.tscale_dt = in[k].dtype, ++k;
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
  const std::size_t k = read_primal(in, num_segments_, has_weights_, has_scale_, t.a);
  t.ct = static_cast<const double*>(in[k].data);
  std::size_t r = 0;
  t.gflux = static_cast<double*>(out[r++].data);
  if (has_weights_) t.gweights = static_cast<double*>(out[r++].data);
  if (has_scale_) t.gscale = static_cast<double*>(out[r++].data);
  cpu::resample_transpose(t);
}

void ResampleAccumulate::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::ResampleArgs a;
  const std::size_t k = read_primal(in, num_segments_, has_weights_, has_scale_, a);
  if (has_init_) a.init = static_cast<const double*>(in[k].data);
  a.max_abs = max_abs_;
  a.out = static_cast<double*>(out[0].data);
  const std::string err = cpu::resample_accumulate(a);
  if (!err.empty()) throw ValueError(err);
}

}  // namespace tessera::detail
