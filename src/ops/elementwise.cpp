// Elementwise front ends: argument checks, dtype promotion, then one
// primitive from primitives/elementwise bound in the current trace.
//
// Sharding (the elementwise rule, applied by sharding/propagate). Operands
// are aligned to the output's dims (right-aligned, as in NumPy
// broadcasting); dims an operand broadcasts (size 1 against n) carry no
// sharding. A dim sharded by one operand, or by all alike, keeps that
// sharding and the others slice locally. When operands shard a dim
// differently (or use one mesh axis on different dims) they conflict: Auto
// axes take the layout that moves the fewest bytes (the largest operand's;
// the first on ties); Explicit axes raise ShardingError. `out_sharding`
// fixes the result's layout.
#include "primitives/elementwise.hpp"

#include <algorithm>
#include <set>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"

namespace tessera {

using detail::BinaryOp;
using detail::UnaryOp;
using detail::msg;

namespace {

// The scalar in compute dtype `t`. A weak int scalar must fit an integer
// dtype (JAX raises OverflowError for `u8 array + 300`); a u64 value above
// the i64 range travels in `i` as its bits.
detail::Operand scalar_operand(const Scalar& s, DType t, const char* op) {
  detail::Operand o;
  o.is_scalar = true;
  if (t == DType::bool_) {
    o.i = s.as_double() != 0;
  } else {
    detail::check_scalar_fits(s, t, op);
    o.f = s.as_double();
    o.i = s.kind() == Scalar::Kind::Float ? static_cast<std::int64_t>(s.as_double()) : s.as_int();
  }
  return o;
}

// Dtype the kernel computes in, and the result dtype.
std::pair<DType, DType> binary_dtypes(BinaryOp op, DType promoted) {
  switch (op) {
    case BinaryOp::Div:
      return {detail::is_float(promoted) ? promoted : DType::f32, detail::is_float(promoted) ? promoted : DType::f32};
    case BinaryOp::FloorDiv: case BinaryOp::Mod:
      // bool counts as 0/1 integers here (jnp gives an integer too).
      return {promoted == DType::bool_ ? DType::i32 : promoted, promoted == DType::bool_ ? DType::i32 : promoted};
    case BinaryOp::And: case BinaryOp::Or: case BinaryOp::Xor:
      return {promoted, DType::bool_};
    default:
      return {promoted, detail::returns_bool(op) ? DType::bool_ : promoted};
  }
}

Array binary_op(BinaryOp op, const char* name, const Array& a, const Array& b, const OutOptions& opt) {
  detail::check_operand(a, name, "lhs");
  detail::check_operand(b, name, "rhs");
  const Shape out = detail::broadcast_shapes(a.shape(), b.shape(), name);
  const auto [compute, result] = binary_dtypes(op, detail::promote(a.dtype(), b.dtype()));
  detail::checked_nbytes(out, itemsize(compute) > itemsize(result) ? compute : result, name);
  if (opt.out_sharding) detail::resolve_spec(a.sharding().mesh(), *opt.out_sharding, static_cast<int>(out.size()), name);
  return detail::bind1(detail::make_binary(op, name, compute, result, opt.out_sharding),
                       {detail::cast(a, compute), detail::cast(b, compute)});
}

Array binary_scalar(BinaryOp op, const char* name, const Array& a, const Scalar& b, bool scalar_left) {
  detail::check_operand(a, name);
  const auto [compute, result] = binary_dtypes(op, detail::promote_scalar(a.dtype(), b));
  const detail::Operand sc = scalar_operand(b, compute, name);
  return detail::bind1(detail::make_binary_scalar(op, name, compute, result, sc, scalar_left, detail::scalar_str(b)),
                       {detail::cast(a, compute)});
}

Array unary_op(UnaryOp op, const char* name, const Array& x, bool float_valued) {
  detail::check_operand(x, name);
  DType t = x.dtype();
  if (float_valued && !detail::is_float(t)) t = DType::f32;  // jnp.sin(int32) is float32
  return detail::bind1(detail::make_unary(op, name, t), {detail::cast(x, t)});
}

}  // namespace

#define TESSERA_BINARY(fn, OP)                                                              \
  Array fn(const Array& a, const Array& b, const OutOptions& opt, std::source_location loc) { \
    detail::CallSite site(loc);                                                             \
    return binary_op(OP, #fn, a, b, opt);                                                   \
  }                                                                                         \
  Array fn(const Array& a, Scalar b, std::source_location loc) {                            \
    detail::CallSite site(loc);                                                             \
    return binary_scalar(OP, #fn, a, b, false);                                             \
  }                                                                                         \
  Array fn(Scalar a, const Array& b, std::source_location loc) {                            \
    detail::CallSite site(loc);                                                             \
    return binary_scalar(OP, #fn, b, a, true);                                              \
  }
TESSERA_BINARY(add, BinaryOp::Add)
TESSERA_BINARY(subtract, BinaryOp::Sub)
TESSERA_BINARY(multiply, BinaryOp::Mul)
TESSERA_BINARY(divide, BinaryOp::Div)
TESSERA_BINARY(floor_divide, BinaryOp::FloorDiv)
TESSERA_BINARY(remainder, BinaryOp::Mod)
TESSERA_BINARY(pow, BinaryOp::Pow)
TESSERA_BINARY(maximum, BinaryOp::Max)
TESSERA_BINARY(minimum, BinaryOp::Min)
TESSERA_BINARY(equal, BinaryOp::Eq)
TESSERA_BINARY(not_equal, BinaryOp::Ne)
TESSERA_BINARY(less, BinaryOp::Lt)
TESSERA_BINARY(less_equal, BinaryOp::Le)
TESSERA_BINARY(greater, BinaryOp::Gt)
TESSERA_BINARY(greater_equal, BinaryOp::Ge)
#undef TESSERA_BINARY

Array logical_and(const Array& a, const Array& b, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return binary_op(BinaryOp::And, "logical_and", a, b, opt);
}
Array logical_or(const Array& a, const Array& b, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return binary_op(BinaryOp::Or, "logical_or", a, b, opt);
}
Array logical_xor(const Array& a, const Array& b, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return binary_op(BinaryOp::Xor, "logical_xor", a, b, opt);
}
Array logical_not(const Array& a, std::source_location loc) {
  detail::CallSite site(loc);
  return unary_op(UnaryOp::Not, "logical_not", a, false);
}

#define TESSERA_UNARY(fn, OP, FLOAT)                    \
  Array fn(const Array& x, std::source_location loc) { \
    detail::CallSite site(loc);                        \
    return unary_op(OP, #fn, x, FLOAT);                \
  }
TESSERA_UNARY(negative, UnaryOp::Neg, false)
TESSERA_UNARY(abs, UnaryOp::Abs, false)
TESSERA_UNARY(exp, UnaryOp::Exp, true)
TESSERA_UNARY(log, UnaryOp::Log, true)
TESSERA_UNARY(log1p, UnaryOp::Log1p, true)
TESSERA_UNARY(expm1, UnaryOp::Expm1, true)
TESSERA_UNARY(sqrt, UnaryOp::Sqrt, true)
TESSERA_UNARY(rsqrt, UnaryOp::Rsqrt, true)
TESSERA_UNARY(sin, UnaryOp::Sin, true)
TESSERA_UNARY(cos, UnaryOp::Cos, true)
TESSERA_UNARY(tanh, UnaryOp::Tanh, true)
TESSERA_UNARY(sigmoid, UnaryOp::Sigmoid, true)
TESSERA_UNARY(floor, UnaryOp::Floor, false)
TESSERA_UNARY(ceil, UnaryOp::Ceil, false)
TESSERA_UNARY(round, UnaryOp::Round, false)
TESSERA_UNARY(sign, UnaryOp::Sign, false)
TESSERA_UNARY(isnan, UnaryOp::IsNan, false)
TESSERA_UNARY(isfinite, UnaryOp::IsFinite, false)
#undef TESSERA_UNARY

Array astype(const Array& x, DType dtype, std::source_location loc) {
  detail::CallSite site(loc);
  detail::check_operand(x, "astype");
  detail::checked_nbytes(x.shape(), dtype, "astype");
  return detail::cast(x, dtype);
}

Array where(const Array& cond, const Array& x, const Array& y, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* name = "where";
  detail::check_operand(cond, name, "cond");
  detail::check_operand(x, name, "x");
  detail::check_operand(y, name, "y");
  const Shape out = detail::broadcast_shapes(detail::broadcast_shapes(cond.shape(), x.shape(), name), y.shape(), name);
  const DType t = detail::promote(x.dtype(), y.dtype());
  detail::checked_nbytes(out, t, name);
  if (opt.out_sharding) detail::resolve_spec(x.sharding().mesh(), *opt.out_sharding, static_cast<int>(out.size()), name);
  return detail::bind1(detail::make_select(t, opt.out_sharding),
                       {detail::cast(cond, DType::bool_), detail::cast(x, t), detail::cast(y, t)});
}

namespace {
Array where_scalar(const Array& cond, const Array& arr, const Scalar& sc, bool scalar_is_x) {
  const char* name = "where";
  detail::check_operand(cond, name, "cond");
  detail::check_operand(arr, name, scalar_is_x ? "y" : "x");
  const Shape out = detail::broadcast_shapes(cond.shape(), arr.shape(), name);
  const DType t = detail::promote_scalar(arr.dtype(), sc);
  detail::checked_nbytes(out, t, name);
  const detail::Operand b = scalar_operand(sc, t, name);
  return detail::bind1(detail::make_select_scalar(t, b, scalar_is_x, detail::scalar_str(sc)),
                       {detail::cast(cond, DType::bool_), detail::cast(arr, t)});
}
}  // namespace

Array where(const Array& cond, const Array& x, Scalar y, std::source_location loc) {
  detail::CallSite site(loc);
  return where_scalar(cond, x, y, false);
}
Array where(const Array& cond, Scalar x, const Array& y, std::source_location loc) {
  detail::CallSite site(loc);
  return where_scalar(cond, y, x, true);
}

Array clip(const Array& x, std::optional<Scalar> lo, std::optional<Scalar> hi, std::source_location loc) {
  detail::CallSite site(loc);
  detail::check_operand(x, "clip");
  Array r = x;
  if (lo) r = maximum(r, *lo);
  if (hi) r = minimum(r, *hi);
  return r;
}

Array with_sharding_constraint(const Array& x, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  detail::check_operand(x, "with_sharding_constraint");
  if (!(x.sharding().mesh() == sharding.mesh()))
    throw ShardingError(msg("with_sharding_constraint", "the sharding is on " + sharding.mesh().str() +
                                                            " but the array is on " + x.sharding().mesh().str()));
  sharding.check_rank(x.ndim(), "with_sharding_constraint");
  if (x.sharding() == sharding) return x;
  return detail::bind1(detail::make_constraint("with_sharding_constraint", sharding), {x});
}

Array with_sharding_constraint(const Array& x, const PartitionSpec& spec, std::source_location loc) {
  detail::CallSite site(loc);
  detail::check_operand(x, "with_sharding_constraint");
  return with_sharding_constraint(
      x, detail::resolve_spec(x.sharding().mesh(), spec, x.ndim(), "with_sharding_constraint"));
}

}  // namespace tessera
