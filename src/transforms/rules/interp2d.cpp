// interp2d's transformation rules (primitives/interp2d.hpp): batching, JVP
// and transposition.
//
// Derivatives. The interpolant is linear in the table f, so its JVP in f is
// interp2d of the tangent table, and its transpose (interp2d_transpose)
// scatters each query's cotangent row back to the knots with the same
// weights. In the query points it is differentiated as interpax's
// interpolant is under JAX: the slope of the piecewise polynomial of the
// query's cell (the cell searchsorted picks, so at a knot the right-hand
// cell's slope), and zero where the fill replaces the value (the fill is a
// constant). These slopes come from the same primitive with deriv X or Y:
// the weights' derivatives along one axis, the same taps. The grid x, y is
// not differentiated: its tangents raise (see grid_error).
#include <memory>
#include <string>

#include "core/validate.hpp"
#include "primitives/interp2d.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

namespace {

[[noreturn]] void grid_error(const std::vector<Array>& t) {
  std::string which = t[2].valid() && t[3].valid() ? "x and y" : t[2].valid() ? "x" : "y";
  throw Error(msg("interp2d", "is not differentiable with respect to the grid x/y: expected tangents for xq, yq "
                              "and f only, got a tangent for " +
                                  which + " (apply stop_gradient to the grid)"));
}

[[noreturn]] void second_order_error() {
  throw Error(msg("interp2d", "second derivatives with respect to the query points xq, yq are not supported: "
                              "expected tangents for f only at this order, got a tangent for xq or yq"));
}

// The tangent of a query coordinate laid over the result's rows: shape Q +
// (1, ...) for the rest dims, in the result's dtype.
Array over_rows(const Array& t, const Array& like) {
  Array r = t.dtype() == like.dtype() ? t : astype(t, like.dtype(), {});
  while (r.ndim() < like.ndim()) r = expand_dims(r, r.ndim(), {});
  return r;
}

}  // namespace

// Queries batched, grid and table shared: one call over more queries (the
// batch dim becomes the first query dim). A table per example falls back
// to one call per example.
std::vector<Array> Interp2d::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                   std::vector<int>& ob) const {
  if (bd[2] >= 0 || bd[3] >= 0 || bd[4] >= 0) return Primitive::batch(in, bd, size, ob);
  ob = {0};
  return {bind1(shared_from_this(), {batch_first(in[0], bd[0], size), batch_first(in[1], bd[1], size), in[2],
                                     in[3], in[4]})};
}

std::vector<Array> Interp2d::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                 std::vector<Array>& to) const {
  if (t[2].valid() || t[3].valid()) grid_error(t);
  if (deriv_ != Interp2dDeriv::Value && (t[0].valid() || t[1].valid())) second_order_error();
  const Array y = bind1(shared_from_this(), p);
  to = {Array()};
  if (t[4].valid()) {
    const Array tf = t[4].dtype() == y.dtype() ? t[4] : astype(t[4], y.dtype(), {});
    to[0] = bind1(shared_from_this(), {p[0], p[1], p[2], p[3], tf});
  }
  const Interp2dDeriv axes[2] = {Interp2dDeriv::X, Interp2dDeriv::Y};
  for (int a = 0; a < 2; ++a) {
    if (!t[a].valid()) continue;
    const Array slope = bind1(make_interp2d(method_, fill_, axes[a]), p);
    to[0] = add_tangents(to[0], multiply(slope, over_rows(t[a], slope), {}, {}));
  }
  return {y};
}

namespace {

// interp2d and interp2d_transpose are each other's transposes in their last
// operand (the table, the cotangent), with the same queries and grid.
std::vector<Array> transpose_last(const std::vector<Array>& ct, const std::vector<Array>& in,
                                  const std::vector<AbstractArray>& types, const std::vector<bool>& linear,
                                  const char* operand, const PrimitivePtr& other) {
  if (linear[0] || linear[1] || linear[2] || linear[3])
    throw Error(msg("interp2d", std::string("internal: transposed in an operand other than ") + operand));
  std::vector<Array> r(5);
  if (!ct[0].valid()) return r;
  const Array c = ct[0].dtype() == types[4].dtype ? ct[0] : astype(ct[0], types[4].dtype, {});
  r[4] = bind1(other, {in[0], in[1], in[2], in[3], c});
  return r;
}

}  // namespace

// Only f is ever a linear operand: the JVP above binds interp2d on a
// tangent table alone (the slopes multiply the query tangents outside it).
std::vector<Array> Interp2d::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                       const std::vector<AbstractArray>& types,
                                       const std::vector<bool>& linear) const {
  return transpose_last(ct, in, types, linear, "the table f",
                        std::make_shared<Interp2dTranspose>(method_, fill_, deriv_));
}

// Queries and grid shared, a cotangent per example: the batch rides along
// as the first rest dim (the weights do not depend on it). Anything else
// changes the weights per example: one call per example.
std::vector<Array> Interp2dTranspose::batch(const std::vector<Array>& in, const std::vector<int>& bd,
                                            std::int64_t size, std::vector<int>& ob) const {
  if (bd[0] >= 0 || bd[1] >= 0 || bd[2] >= 0 || bd[3] >= 0) return Primitive::batch(in, bd, size, ob);
  ob = {2};
  return {bind1(shared_from_this(), {in[0], in[1], in[2], in[3], move_dim(in[4], bd[4], in[0].ndim())})};
}

std::vector<Array> Interp2dTranspose::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                          std::vector<Array>& to) const {
  if (t[2].valid() || t[3].valid()) grid_error(t);
  if (t[0].valid() || t[1].valid()) second_order_error();
  const Array y = bind1(shared_from_this(), p);
  to = {t[4].valid() ? bind1(shared_from_this(), {p[0], p[1], p[2], p[3], t[4]}) : Array()};
  return {y};
}

std::vector<Array> Interp2dTranspose::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                                const std::vector<AbstractArray>& types,
                                                const std::vector<bool>& linear) const {
  return transpose_last(ct, in, types, linear, "the cotangent", make_interp2d(method_, fill_, deriv_));
}

}  // namespace tessera::detail
