// The derivatives of resample_accumulate (primitives/spectra.hpp).
//
// What a tangent of an exact accumulator is. The primal is an exact
// accumulator: limbs whose sum over any grouping of rows has the same bits.
// Its tangent is one too: the exact accumulator of the rows' tangent terms,
// so exact_total of it (exact_total is linear: its JVP is itself) is the
// derivative of the total, and the sum over rows behind it has the same
// bits on every mesh, sharding and chunking, as the primal's does. Limbs
// need a bound on the terms, and the caller's max_abs bounds the primal
// terms only, so the tangent's bound is measured: each row's largest
// |term| (resample_tangent_bound), then their max over every row (a max
// is order-independent, so every device count finds the same bound). The
// tangent of init, when given, is added limb by limb (exact when it was
// built with the same bound).
//
// Reverse mode reads the accumulator's cotangent from its first limb:
// exact_total, the accumulator's reader, hands the value's cotangent to
// every limb (it sums them), and exact_limbs' own transpose reads limb 0
// (its tangent's value lies there). Each row's cotangent is then computed
// from that alone (resample_transpose), so gradients of per-row inputs
// have the same bits whatever the layout. The bound computation never
// receives a cotangent (the transpose gives the bound operand none), so its
// non-linear max is never transposed.
//
// vmap: these primitives keep the default rule (one call per example): the
// examples' rows would need segments of their own to share one call.
#include <memory>
#include <string>

#include "core/validate.hpp"
#include "primitives/spectra.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

std::vector<Array> ResampleAccumulate::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                           std::vector<Array>& to) const {
  for (int k : {1, 2})
    if (t[k].valid())
      throw Error(msg("resample_accumulate",
                      std::string("is not differentiable with respect to the wavelength grids: expected tangents for "
                                  "flux, weights, wave_scale and init only, got a tangent for ") +
                          (k == 1 ? "wave" : "target") + " (differentiate through wave_scale, or apply "
                                                         "stop_gradient)"));
  const Array y = bind1(shared_from_this(), p);
  to = {Array()};
  const int pc = 4 + (has_weights_ ? 1 : 0) + (has_scale_ ? 1 : 0);
  bool rows = t[0].valid();
  for (int k = 4; k < pc; ++k) rows = rows || t[k].valid();
  if (rows && p[0].shape()[0] > 0) {
    std::vector<Array> args(p.begin(), p.begin() + pc);
    args.push_back(instantiate(t[0], type_of(p[0])));
    for (int k = 4; k < pc; ++k)
      args.push_back(has_tangent(p[k].dtype()) ? instantiate(t[k], type_of(p[k])) : zeros_of(
                                                                                        AbstractArray{p[k].shape(), DType::f64, p[k].sharding()}));
    const Array rowmax = bind1(std::make_shared<ResampleTangent>(num_segments_, has_weights_, has_scale_, true), args);
    args.push_back(max(rowmax, {}, {}, {}));
    to[0] = bind1(std::make_shared<ResampleTangent>(num_segments_, has_weights_, has_scale_, false), args);
  }
  if (has_init_ && t[pc].valid()) to[0] = add_tangents(t[pc], to[0]);
  return {y};
}

std::vector<Array> ResampleTangent::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                              const std::vector<AbstractArray>& types,
                                              const std::vector<bool>& linear) const {
  const int pc = primal_count();
  if (rowmax_) throw Error(msg("resample_accumulate", "internal: the tangent's bound was transposed"));
  for (int k = 0; k < pc; ++k)
    if (linear[k]) throw Error(msg("resample_accumulate", "internal: transposed in a primal operand"));
  std::vector<Array> r(types.size());
  if (!ct[0].valid()) return r;
  std::vector<Array> args(in.begin(), in.begin() + pc);
  args.push_back(ct[0]);
  const auto g = detail::bind(std::make_shared<ResampleTranspose>(num_segments_, has_weights_, has_scale_), args);
  const int ntan = 1 + (has_weights_ ? 1 : 0) + (has_scale_ ? 1 : 0);
  for (int k = 0; k < ntan; ++k) {
    const size_t at = static_cast<size_t>(pc + k);
    if (!linear[at]) continue;
    r[at] = g[static_cast<size_t>(k)].dtype() == types[at].dtype ? g[static_cast<size_t>(k)]
                                                                  : astype(g[static_cast<size_t>(k)], types[at].dtype, {});
  }
  return r;
}

}  // namespace tessera::detail
