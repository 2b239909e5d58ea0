// Spectra primitives: resample_accumulate (tessera/spectra.hpp).
//
// The class is defined in parts, one per layer: its type, sharding rule and
// parameters in primitives/spectra.cpp, its per-device kernel (eval_cpu) in
// backend/cpu/eval_spectra.cpp. It has no transformation rules.
#pragma once

#include <cstdint>

#include "primitives/primitive.hpp"

namespace tessera::detail {

class ResampleAccumulate final : public Primitive {
 public:
  ResampleAccumulate(std::int64_t num_segments, double max_abs, bool has_weights, bool has_scale, bool has_init)
      : num_segments_(num_segments),
        max_abs_(max_abs),
        has_weights_(has_weights),
        has_scale_(has_scale),
        has_init_(has_init) {}
  std::string_view name() const override { return "resample_accumulate"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  // Partial accumulators are combined, never the rows gathered: the sum is
  // exact either way, but gathering would move n x K values.
  bool keeps_operand_layouts() const override { return true; }
  std::string params() const override;
  TESSERA_DECLARE_EVAL_CPU;

 private:
  std::int64_t num_segments_;
  double max_abs_;
  bool has_weights_, has_scale_, has_init_;
};

/// Operands: flux (n, K), wave (K,) or (n, K), target (T,), segment_ids (n,),
/// then weights (n,) if has_weights, then wave_scale (n,) if has_scale, then
/// the initial accumulator (3, S, T) if has_init.
PrimitivePtr make_resample_accumulate(std::int64_t num_segments, double max_abs, bool has_weights, bool has_scale,
                                      bool has_init);

}  // namespace tessera::detail
