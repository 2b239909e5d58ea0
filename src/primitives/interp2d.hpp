// The interp2d primitive: elementwise over the queries, grid and table whole
// on every device.
//
// The class is defined in parts, one per layer: its type, sharding rule and
// parameters in primitives/interp2d.cpp, its per-device kernel (eval_cpu) in
// backend/cpu/eval_interp2d.cpp, its batching rule in
// transforms/rules/interp2d.cpp.
#pragma once

#include <optional>

#include "core/interp2d.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

class Interp2d final : public Primitive {
 public:
  Interp2d(Interp2dMethod method, std::optional<double> fill) : method_(method), fill_(fill) {}

  std::string_view name() const override { return "interp2d"; }

  // Q + rest, in f's dtype (the front end has made it f32 or f64).
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const override;
  TESSERA_DECLARE_EVAL_CPU;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;

 private:
  Interp2dMethod method_;
  std::optional<double> fill_;
};

/// interp2d (operands xq, yq, x, y, f; f already of the result dtype, f32
/// or f64). No fill: extrapolate.
PrimitivePtr make_interp2d(Interp2dMethod method, std::optional<double> fill);

}  // namespace tessera::detail
