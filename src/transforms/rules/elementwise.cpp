// The transformation rules of the elementwise primitives
// (primitives/elementwise.hpp): batching, JVP and transposition, written
// with ops so that they bind to whatever trace is outside the
// transformation.
#include "primitives/elementwise.hpp"

#include <algorithm>
#include <cmath>

#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

namespace {

Operand zero_of(const Operand& s) {
  Operand z = s;
  z.f = 0;
  z.i = 0;
  return z;
}

}  // namespace

// ---------------------------------------------------------------- batching

// Batched operands go batch-first, padded with size-1 dims to the
// examples' common rank, so broadcasting inside each example still lines
// up; unbatched ones broadcast against the batch as they are.
std::vector<Array> Elementwise::batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t,
                                      std::vector<int>& out_bdims) const {
  int rank = 0;
  for (size_t i = 0; i < in.size(); ++i) rank = std::max(rank, in[i].ndim() - (bdims[i] >= 0 ? 1 : 0));
  std::vector<Array> args;
  for (size_t i = 0; i < in.size(); ++i) args.push_back(bdims[i] >= 0 ? batch_first_aligned(in[i], bdims[i], rank) : in[i]);
  out_bdims = {0};
  return bind(batched(), args);
}

PrimitivePtr Elementwise::batched() const {
  return out_spec_ ? rebuilt(*with_batch_dim(out_spec_, 0)) : shared_from_this();
}

// The batch dim keeps the layout it has.
std::vector<Array> Constraint::batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t,
                                     std::vector<int>& out_bdims) const {
  const Array x = move_dim(in[0], bdims[0], 0);
  std::vector<PartitionSpec::Entry> e = target_.spec().entries();
  const auto& xs = x.sharding().spec();
  e.insert(e.begin(), xs.size() > 0 ? xs[0] : PartitionSpec::Entry());
  out_bdims = {0};
  return {bind1(std::make_shared<Constraint>(name_, NamedSharding(target_.mesh(), PartitionSpec(std::move(e)))), {x})};
}

std::vector<Array> StopGradient::batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t,
                                       std::vector<int>& out_bdims) const {
  out_bdims = bdims;
  return {bind1(shared_from_this(), {in[0]})};
}

// ------------------------------------------------------------ JVP, transpose

std::vector<Array> Unary::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                              std::vector<Array>& t_out) const {
  using U = UnaryOp;
  if (op_ == U::Neg) return linear_jvp(*this, p, t, t_out);
  Array y = bind1(shared_from_this(), p);
  t_out = {Array()};
  if (!t[0].valid() || !has_tangent(y.dtype())) return {y};
  const Array& x = p[0];
  const Array& dx = t[0];
  switch (op_) {
    case U::Abs: t_out[0] = sign(x, {}) * dx; break;
    case U::Exp: t_out[0] = y * dx; break;
    case U::Log: t_out[0] = dx / x; break;
    case U::Log1p: t_out[0] = dx / (x + 1.0); break;
    case U::Expm1: t_out[0] = (y + 1.0) * dx; break;
    case U::Sqrt: t_out[0] = dx / (y * 2.0); break;
    case U::Rsqrt: t_out[0] = (y / x) * -0.5 * dx; break;
    case U::Sin: t_out[0] = cos(x, {}) * dx; break;
    case U::Cos: t_out[0] = -sin(x, {}) * dx; break;
    case U::Tanh: t_out[0] = (1.0 - y * y) * dx; break;
    case U::Sigmoid: t_out[0] = (y * (1.0 - y)) * dx; break;
    default: break;  // piecewise constant (floor, ceil, round, sign) or boolean: zero
  }
  return {y};
}

std::vector<Array> Unary::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                    const std::vector<AbstractArray>&, const std::vector<bool>&) const {
  if (op_ != UnaryOp::Neg) return Primitive::transpose(ct, {}, {}, {});
  return {ct[0].valid() ? -ct[0] : Array()};
}

std::vector<Array> Binary::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                               std::vector<Array>& t_out) const {
  using B = BinaryOp;
  Array y = bind1(shared_from_this(), p);
  t_out = {Array()};
  if ((!t[0].valid() && !t[1].valid()) || !has_tangent(y.dtype())) return {y};
  const Array &a = p[0], &b = p[1];
  // A tangent of one operand, stretched to the result's shape.
  auto full = [&](Array x) { return x.valid() && x.shape() != y.shape() ? broadcast_to(x, y.shape(), {}) : x; };
  auto scaled = [&](const Array& dx, const Array& f) { return dx.valid() ? full(dx * f) : Array(); };
  const Array &da = t[0], &db = t[1];
  switch (op_) {
    case B::Add: t_out[0] = full(add_tangents(da, db)); break;
    case B::Sub: t_out[0] = full(add_tangents(da, db.valid() ? -db : Array())); break;
    case B::Mul: t_out[0] = add_tangents(scaled(da, b), scaled(db, a)); break;
    // a / b and a ** b again rather than y: y may be laid out by the op's
    // out_sharding, unlike a and b, which it would meet here.
    case B::Div:
      t_out[0] = add_tangents(scaled(da, 1.0 / b), scaled(db, -(a / b) / b));
      break;
    case B::Pow:
      t_out[0] = add_tangents(scaled(da, b * pow(a, b - 1.0)),
                              scaled(db, where(a == 0.0, 0.0, pow(a, b) * log(where(a == 0.0, 1.0, a)))));
      break;
    case B::Max:
    case B::Min: {
      // Ties share the derivative equally, as in JAX.
      const Array pick_a = op_ == B::Max ? greater(a, b, {}, {}) : less(a, b, {}, {});
      const Array tie = equal(a, b, {}, {});
      const Array wa = astype(pick_a, y.dtype()) + astype(tie, y.dtype()) * 0.5;
      t_out[0] = add_tangents(scaled(da, wa), scaled(db, 1.0 - wa));
      break;
    }
    case B::Mod: t_out[0] = add_tangents(full(da), scaled(db, -floor_divide(a, b))); break;
    default: break;  // floor_divide, comparisons, logic: zero
  }
  return {y};
}

std::vector<Array> Binary::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                     const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const {
  using B = BinaryOp;
  std::vector<Array> r(2);
  if (!ct[0].valid()) return r;
  const Array& c = ct[0];
  switch (op_) {
    case B::Add:
    case B::Sub:
      if (linear[0]) r[0] = unbroadcast(c, types[0]);
      if (linear[1]) r[1] = unbroadcast(op_ == B::Sub ? -c : c, types[1]);
      return r;
    case B::Mul:
      if (linear[0] && linear[1]) break;
      if (linear[0]) r[0] = unbroadcast(c * in[1], types[0]);
      if (linear[1]) r[1] = unbroadcast(in[0] * c, types[1]);
      return r;
    case B::Div:
      if (linear[1]) break;
      r[0] = unbroadcast(c / in[1], types[0]);
      return r;
    default: break;
  }
  return Primitive::transpose(ct, in, types, linear);
}

std::vector<Array> BinaryScalar::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                     std::vector<Array>& t_out) const {
  using B = BinaryOp;
  const bool scales = op_ == B::Mul || (op_ == B::Div && !left_);
  if (scales) return linear_jvp(*this, p, t, t_out);
  Array y = bind1(shared_from_this(), p);
  t_out = {Array()};
  if (!t[0].valid() || !has_tangent(y.dtype())) return {y};
  const Array &x = p[0], &dx = t[0];
  const double s = s_.f;
  switch (op_) {
    case B::Add: t_out[0] = dx; break;
    case B::Sub: t_out[0] = left_ ? -dx : dx; break;
    case B::Div: t_out[0] = dx * (-y / x); break;  // s / x
    case B::Pow:
      t_out[0] = left_ ? dx * (y * std::log(s)) : dx * (pow(x, s - 1.0) * s);
      break;
    case B::Max:
    case B::Min:
      t_out[0] = dx * (astype(op_ == B::Max ? x > s : x < s, y.dtype()) + astype(x == s, y.dtype()) * 0.5);
      break;
    case B::Mod: t_out[0] = left_ ? Array() : dx; break;
    default: break;
  }
  return {y};
}

std::vector<Array> BinaryScalar::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                           const std::vector<AbstractArray>& types,
                                           const std::vector<bool>& linear) const {
  const bool scales = op_ == BinaryOp::Mul || (op_ == BinaryOp::Div && !left_);
  if (!scales) return Primitive::transpose(ct, in, types, linear);
  return {ct[0].valid() ? bind1(shared_from_this(), {ct[0]}) : Array()};
}

std::vector<Array> Select::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                               std::vector<Array>& t_out) const {
  Array y = bind1(shared_from_this(), p);
  t_out = {Array()};
  if ((!t[1].valid() && !t[2].valid()) || !has_tangent(y.dtype())) return {y};
  t_out[0] = where(p[0], instantiate(t[1], type_of(p[1])), instantiate(t[2], type_of(p[2])), {}, {});
  if (t_out[0].shape() != y.shape()) t_out[0] = broadcast_to(t_out[0], y.shape(), {});
  return {y};
}

std::vector<Array> Select::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                     const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const {
  std::vector<Array> r(3);
  if (!ct[0].valid()) return r;
  const Array zero = zeros_of(type_of(ct[0]));
  if (linear[1]) r[1] = unbroadcast(where(in[0], ct[0], zero, {}, {}), types[1]);
  if (linear[2]) r[2] = unbroadcast(where(in[0], zero, ct[0], {}, {}), types[2]);
  return r;
}

// Linear in the array operand when the scalar is zero (the JVP's form);
// affine otherwise, so the tangent is the array's where it is chosen.
std::vector<Array> SelectScalar::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                     std::vector<Array>& t_out) const {
  Array y = bind1(shared_from_this(), p);
  t_out = {Array()};
  if (!t[1].valid() || !has_tangent(y.dtype())) return {y};
  t_out[0] = bind1(std::make_shared<SelectScalar>(t_, zero_of(s_), is_x_, "0"), {p[0], t[1]});
  if (t_out[0].shape() != y.shape()) t_out[0] = broadcast_to(t_out[0], y.shape(), {});
  return {y};
}

std::vector<Array> SelectScalar::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                           const std::vector<AbstractArray>& types,
                                           const std::vector<bool>& linear) const {
  if (s_.f != 0 || s_.i != 0) return Primitive::transpose(ct, in, types, linear);
  std::vector<Array> r(2);
  if (ct[0].valid() && linear[1]) r[1] = unbroadcast(bind1(shared_from_this(), {in[0], ct[0]}), types[1]);
  return r;
}

std::vector<Array> Convert::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                std::vector<Array>& t_out) const {
  return linear_jvp(*this, p, has_tangent(from_) && has_tangent(result_) ? t : std::vector<Array>{Array()}, t_out);
}

std::vector<Array> Convert::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                      const std::vector<AbstractArray>&, const std::vector<bool>&) const {
  return {ct[0].valid() ? astype(ct[0], from_, {}) : Array()};
}

std::vector<Array> Constraint::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                   std::vector<Array>& t_out) const {
  return linear_jvp(*this, p, t, t_out);
}

std::vector<Array> Constraint::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                         const std::vector<AbstractArray>&, const std::vector<bool>&) const {
  return {ct[0].valid() ? bind1(shared_from_this(), {ct[0]}) : Array()};
}

std::vector<Array> StopGradient::jvp(const std::vector<Array>& p, const std::vector<Array>&,
                                     std::vector<Array>& t_out) const {
  t_out = {Array()};
  return {bind1(shared_from_this(), p)};
}

}  // namespace tessera::detail
