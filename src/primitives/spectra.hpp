// Spectra primitives: resample_accumulate (tessera/spectra.hpp).
//
// The class is defined in parts, one per layer: its type, sharding rule and
// parameters in primitives/spectra.cpp, its per-device kernels in
// backend/cpu/eval_spectra.cpp (eval_cpu) and backend/cuda/eval_spectra.cpp
// (eval_cuda), its JVP in transforms/rules/spectra.cpp
// (with the two primitives below, which only derivatives bind).
#pragma once

#include <cstdint>

#include "core/spectra_rows.hpp"
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
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_JVP;

 private:
  std::int64_t num_segments_;
  double max_abs_;
  bool has_weights_, has_scale_, has_init_;
};

/// The tangent of resample_accumulate's rows (backend/cpu/spectra.hpp,
/// resample_tangent). Operands: the primal's flux, wave, target,
/// segment_ids, weights and wave_scale (as present there), then the
/// tangents of flux (n, K), of weights (n,) if present and of wave_scale
/// (n,) if present; then, unless `rowmax`, the bound: an f64 scalar >= every
/// |tangent term|. Result: with `rowmax`, each row's largest |term| (n,) f64
/// (rows pass through); else the exact accumulator (3, S, T) of the terms
/// for that bound (rows reduced: partial accumulators summed exactly, as
/// for the primal). Linear in the tangents (the limbs' rounding aside, far
/// below the f64 total's), with resample_transpose as its transpose.
class ResampleTangent final : public Primitive {
 public:
  ResampleTangent(std::int64_t num_segments, bool has_weights, bool has_scale, bool rowmax)
      : num_segments_(num_segments), has_weights_(has_weights), has_scale_(has_scale), rowmax_(rowmax) {}
  std::string_view name() const override { return rowmax_ ? "resample_tangent_bound" : "resample_tangent"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  bool keeps_operand_layouts() const override { return true; }
  std::string params() const override;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_TRANSPOSE;

  int primal_count() const { return 4 + (has_weights_ ? 1 : 0) + (has_scale_ ? 1 : 0); }

 private:
  std::int64_t num_segments_;
  bool has_weights_, has_scale_, rowmax_;
};

/// The transpose of ResampleTangent: operands the primal's (as there), then
/// the accumulator's cotangent (3, S, T); results the cotangents of the
/// flux (n, K), and of weights (n,) and wave_scale (n,) where present, f64.
/// Rows pass through: each device computes its own rows' cotangents.
class ResampleTranspose final : public Primitive {
 public:
  ResampleTranspose(std::int64_t num_segments, bool has_weights, bool has_scale)
      : num_segments_(num_segments), has_weights_(has_weights), has_scale_(has_scale) {}
  std::string_view name() const override { return "resample_transpose"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  bool keeps_operand_layouts() const override { return true; }
  std::string params() const override;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  std::int64_t num_segments_;
  bool has_weights_, has_scale_;
};

/// A block's primal operands as the kernels take them (flux, wave, target,
/// segment_ids, then weights and wave_scale where present; S segments), for
/// every backend's eval; returns the index of the next operand.
std::size_t read_resample_rows(const LocalArgs& in, std::int64_t S, bool has_weights, bool has_scale, ResampleRows& a);

/// ResampleTangent's tangents from operand k on (of the flux, then of the
/// weights and wave_scale where present); returns the index of the next
/// operand.
std::size_t read_resample_tangents(const LocalArgs& in, std::size_t k, bool has_weights, bool has_scale,
                                   ResampleTangents& t);

/// Operands: flux (n, K), wave (K,) or (n, K), target (T,), segment_ids (n,),
/// then weights (n,) if has_weights, then wave_scale (n,) if has_scale, then
/// the initial accumulator (3, S, T) if has_init.
PrimitivePtr make_resample_accumulate(std::int64_t num_segments, double max_abs, bool has_weights, bool has_scale,
                                      bool has_init);

}  // namespace tessera::detail
