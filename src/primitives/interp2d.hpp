// The interp2d primitive: elementwise over the queries, grid and table whole
// on every device.
//
// The class is defined in parts, one per layer: its type, sharding rule and
// parameters in primitives/interp2d.cpp, its per-device kernels in
// backend/cpu/eval_interp2d.cpp (eval_cpu) and backend/cuda/eval_interp2d.cpp
// (eval_cuda), its batching, JVP and transposition rules
// in transforms/rules/interp2d.cpp.
#pragma once

#include <optional>

#include "core/interp2d.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

class Interp2d final : public Primitive {
 public:
  Interp2d(Interp2dMethod method, std::optional<double> fill, Interp2dDeriv deriv = Interp2dDeriv::Value)
      : method_(method), fill_(fill), deriv_(deriv) {}

  std::string_view name() const override { return "interp2d"; }

  // Q + rest, in f's dtype (the front end has made it f32 or f64).
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const override;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  // Linear in f (transpose: Interp2dTranspose); in xq and yq through the
  // interpolant's slopes (the same primitive with deriv X or Y).
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

  Interp2dMethod method() const { return method_; }
  const std::optional<double>& fill() const { return fill_; }
  Interp2dDeriv deriv() const { return deriv_; }

 private:
  Interp2dMethod method_;
  std::optional<double> fill_;
  Interp2dDeriv deriv_;
};

/// The transpose of Interp2d in f (operands xq, yq, x, y, ct with ct of
/// shape Q + rest): the table's cotangent (nx, ny, rest), each query's row
/// scattered back to its taps with the same weights. The query dims are a
/// reduction factor: each device scatters its block of queries into a
/// partial table and the engine sums the partials, so sharded queries are
/// never gathered.
class Interp2dTranspose final : public Primitive {
 public:
  Interp2dTranspose(Interp2dMethod method, std::optional<double> fill, Interp2dDeriv deriv)
      : method_(method), fill_(fill), deriv_(deriv) {}

  std::string_view name() const override { return "interp2d_transpose"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  bool keeps_operand_layouts() const override { return true; }
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const override;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  // Linear in ct: its JVP is itself on the tangent, its transpose Interp2d.
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  Interp2dMethod method_;
  std::optional<double> fill_;
  Interp2dDeriv deriv_;
};

/// interp2d (operands xq, yq, x, y, f; f already of the result dtype, f32
/// or f64). No fill: extrapolate.
PrimitivePtr make_interp2d(Interp2dMethod method, std::optional<double> fill,
                           Interp2dDeriv deriv = Interp2dDeriv::Value);

}  // namespace tessera::detail
