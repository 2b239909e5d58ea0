// Losses of a model cube against an observed one, with their gradients.
//
// Every sum over cube elements is exact (exact_limbs / exact_total), so a
// loss and its gradient have the same bits whatever mesh the cube is laid
// out on. With d = model - observed and w the mask (and, for nll, the
// elements of positive variance):
//   nll     0.5 sum w (d^2 / var + log(2 pi var))     d/dmodel = w d / var
//   cosine  1 - sum w m o / sqrt(sum w m^2 sum w o^2)
//   mse     sum w d^2 / sum w                         d/dmodel = 2 w d / sum w
#pragma once

#include <string>

#include "ifu/pipeline.hpp"

namespace tessera::ifu {

struct LossResult {
  double value = 0;
  Array grad;  // d loss / d model: f32, the model's shape and layout
};

/// The loss of `model` against `obs`, checked: the observation's cube (and
/// variance, mask) must have the model's shape and be finite; a mask must
/// leave some element. Errors name obs.source.
LossResult loss_value_and_grad(LossKind kind, const Array& model, const Observation& obs);

/// "nll", "cosine" or "mse".
LossKind parse_loss(const std::string& name);
const char* loss_name(LossKind kind);

}  // namespace tessera::ifu
