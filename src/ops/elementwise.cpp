// Elementwise ops: promotion, broadcasting, the elementwise sharding rule,
// then per-device kernels from backend/cpu/elementwise.
//
// Sharding rule. Operands are aligned to the output's dims (right-aligned, as
// in NumPy broadcasting). Dims an operand broadcasts (size 1 against n) carry
// no sharding. The output spec merges the operands' specs dim by dim: a dim
// sharded by one operand, or by both alike, keeps that sharding; then every
// operand is brought to the output layout, which needs only local slicing.
// When two operands shard a dim differently (or use one mesh axis on
// different dims) they conflict: Auto axes take the sharding of the largest
// operand (the first on ties) and reshard the others through the planner;
// Explicit axes raise ShardingError. `out_sharding` overrides the rule.
#include "backend/cpu/elementwise.hpp"

#include <algorithm>
#include <set>

#include "ops/common.hpp"

namespace tessera {

using cpu::BinaryOp;
using cpu::UnaryOp;
using detail::msg;

namespace {

// Per output dim, the axes of `a` (empty when `a` broadcasts or lacks the dim).
std::vector<std::vector<std::string>> aligned_axes(const Array& a, const Shape& out) {
  const int r = static_cast<int>(out.size()), ar = a.ndim();
  std::vector<std::vector<std::string>> axes(r);
  for (int d = 0; d < ar; ++d) {
    const int od = d + (r - ar);
    if (a.shape()[d] == out[od]) axes[od] = a.sharding().spec()[d].axes();
  }
  return axes;
}

// The sharding `a` must have so that its blocks line up with the output's.
NamedSharding operand_target(const Array& a, const NamedSharding& out_s, const Shape& out) {
  const int r = static_cast<int>(out.size()), ar = a.ndim();
  std::vector<std::vector<std::string>> dims(ar);
  for (int d = 0; d < ar; ++d) {
    const int od = d + (r - ar);
    if (a.shape()[d] == out[od]) dims[d] = out_s.spec()[od].axes();
  }
  return NamedSharding(a.sharding().mesh(), detail::make_spec(dims));
}

std::string spec_list(const std::vector<const Array*>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + typeof(*xs[i]);
  return s;
}

// The output sharding of an elementwise op over `xs` (see the rule on top).
NamedSharding elementwise_sharding(const std::vector<const Array*>& xs, const Shape& out, const OutOptions& opt,
                                   const char* op) {
  const Mesh& mesh = xs[0]->sharding().mesh();
  const int r = static_cast<int>(out.size());
  if (opt.out_sharding) return detail::resolve_spec(mesh, *opt.out_sharding, r, op);
  std::vector<std::vector<std::string>> merged(r);
  bool conflict = false;
  for (const Array* x : xs) {
    auto ax = aligned_axes(*x, out);
    for (int d = 0; d < r; ++d) {
      if (ax[d].empty()) continue;
      if (merged[d].empty())
        merged[d] = ax[d];
      else if (merged[d] != ax[d])
        conflict = true;
    }
  }
  std::set<std::string> used;
  for (const auto& dim : merged)
    for (const auto& a : dim) conflict = conflict || !used.insert(a).second;
  if (!conflict) return NamedSharding(mesh, detail::make_spec(merged));
  bool is_explicit = false;
  for (const Array* x : xs) is_explicit = is_explicit || detail::has_explicit_axes(x->sharding());
  if (is_explicit)
    throw ShardingError(msg(op, "incompatible shardings for broadcasting: " + spec_list(xs) +
                                    "; reshard an operand or pass out_sharding"));
  const Array* largest = xs[0];
  for (const Array* x : xs)
    if (x->size() > largest->size()) largest = x;
  return NamedSharding(mesh, detail::make_spec(aligned_axes(*largest, out)));
}

cpu::Operand operand_of(const Array& a, int pos, const Shape& out_local) {
  cpu::Operand o;
  o.data = detail::local_data(a, pos);
  o.strides = cpu::broadcast_strides(detail::local_shape(a, pos), out_local);
  return o;
}

// The scalar in compute dtype `t`. A weak int scalar must fit an integer
// dtype (JAX raises OverflowError for `u8 array + 300`); a u64 value above
// the i64 range travels in `i` as its bits.
cpu::Operand scalar_operand(const Scalar& s, DType t, const char* op) {
  cpu::Operand o;
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
      return {promoted, cpu::returns_bool(op) ? DType::bool_ : promoted};
  }
}

Array binary_op(BinaryOp op, const char* name, const Array& a, const Array& b, const OutOptions& opt) {
  detail::check_valid(a, name, "lhs");
  detail::check_valid(b, name, "rhs");
  detail::check_same_mesh({&a, &b}, name);
  const Shape out = detail::broadcast_shapes(a.shape(), b.shape(), name);
  const auto [compute, result] = binary_dtypes(op, detail::promote(a.dtype(), b.dtype()));
  detail::checked_nbytes(out, itemsize(compute) > itemsize(result) ? compute : result, name);
  const NamedSharding s = elementwise_sharding({&a, &b}, out, opt, name);
  const Array la = detail::cast(detail::reshard_for(a, operand_target(a, s, out), name), compute);
  const Array lb = detail::cast(detail::reshard_for(b, operand_target(b, s, out), name), compute);
  return detail::make_array(out, result, s, [&](int pos, detail::Buffer& buf) {
    const Shape local = s.shard_shape(out, pos);
    cpu::binary(op, compute, operand_of(la, pos, local), operand_of(lb, pos, local), buf.data(), local);
  });
}

Array binary_scalar(BinaryOp op, const char* name, const Array& a, const Scalar& b, bool scalar_left) {
  detail::check_valid(a, name);
  const auto [compute, result] = binary_dtypes(op, detail::promote_scalar(a.dtype(), b));
  const Array la = detail::cast(a, compute);
  const NamedSharding& s = a.sharding();
  const cpu::Operand sc = scalar_operand(b, compute, name);  // checked once, on the caller's thread
  return detail::make_array(a.shape(), result, s, [&](int pos, detail::Buffer& buf) {
    const Shape local = s.shard_shape(a.shape(), pos);
    const cpu::Operand arr = operand_of(la, pos, local);
    cpu::binary(op, compute, scalar_left ? sc : arr, scalar_left ? arr : sc, buf.data(), local);
  });
}

Array unary_op(UnaryOp op, const char* name, const Array& x, bool float_valued) {
  detail::check_valid(x, name);
  DType t = x.dtype();
  if (float_valued && !detail::is_float(t)) t = DType::f32;  // jnp.sin(int32) is float32
  const Array lx = detail::cast(x, t);
  const DType result = cpu::returns_bool(op) ? DType::bool_ : t;
  return detail::make_array(x.shape(), result, x.sharding(), [&](int pos, detail::Buffer& buf) {
    cpu::unary(op, t, detail::local_data(lx, pos), buf.data(), detail::num_elements(detail::local_shape(lx, pos)));
  });
}

}  // namespace

#define TESSERA_BINARY(fn, OP)                                                                              \
  Array fn(const Array& a, const Array& b, const OutOptions& opt) { return binary_op(OP, #fn, a, b, opt); } \
  Array fn(const Array& a, Scalar b) { return binary_scalar(OP, #fn, a, b, false); }                        \
  Array fn(Scalar a, const Array& b) { return binary_scalar(OP, #fn, b, a, true); }
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

Array logical_and(const Array& a, const Array& b, const OutOptions& opt) {
  return binary_op(BinaryOp::And, "logical_and", a, b, opt);
}
Array logical_or(const Array& a, const Array& b, const OutOptions& opt) {
  return binary_op(BinaryOp::Or, "logical_or", a, b, opt);
}
Array logical_xor(const Array& a, const Array& b, const OutOptions& opt) {
  return binary_op(BinaryOp::Xor, "logical_xor", a, b, opt);
}
Array logical_not(const Array& a) { return unary_op(UnaryOp::Not, "logical_not", a, false); }

#define TESSERA_UNARY(fn, OP, FLOAT) \
  Array fn(const Array& x) { return unary_op(OP, #fn, x, FLOAT); }
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

Array astype(const Array& x, DType dtype) {
  detail::check_valid(x, "astype");
  detail::checked_nbytes(x.shape(), dtype, "astype");
  return detail::cast(x, dtype);
}

Array where(const Array& cond, const Array& x, const Array& y, const OutOptions& opt) {
  const char* name = "where";
  detail::check_valid(cond, name, "cond");
  detail::check_valid(x, name, "x");
  detail::check_valid(y, name, "y");
  detail::check_same_mesh({&cond, &x, &y}, name);
  const Shape out = detail::broadcast_shapes(detail::broadcast_shapes(cond.shape(), x.shape(), name), y.shape(), name);
  const DType t = detail::promote(x.dtype(), y.dtype());
  detail::checked_nbytes(out, t, name);
  const NamedSharding s = elementwise_sharding({&cond, &x, &y}, out, opt, name);
  const Array lc = detail::cast(detail::reshard_for(cond, operand_target(cond, s, out), name), DType::bool_);
  const Array lx = detail::cast(detail::reshard_for(x, operand_target(x, s, out), name), t);
  const Array ly = detail::cast(detail::reshard_for(y, operand_target(y, s, out), name), t);
  return detail::make_array(out, t, s, [&](int pos, detail::Buffer& buf) {
    const Shape local = s.shard_shape(out, pos);
    cpu::select(t, operand_of(lc, pos, local), operand_of(lx, pos, local), operand_of(ly, pos, local), buf.data(),
                local);
  });
}

namespace {
Array where_scalar(const Array& cond, const Array& arr, const Scalar& sc, bool scalar_is_x) {
  const char* name = "where";
  detail::check_valid(cond, name, "cond");
  detail::check_valid(arr, name, scalar_is_x ? "y" : "x");
  detail::check_same_mesh({&cond, &arr}, name);
  const Shape out = detail::broadcast_shapes(cond.shape(), arr.shape(), name);
  const DType t = detail::promote_scalar(arr.dtype(), sc);
  detail::checked_nbytes(out, t, name);
  const NamedSharding s = elementwise_sharding({&cond, &arr}, out, {}, name);
  const Array lc = detail::cast(detail::reshard_for(cond, operand_target(cond, s, out), name), DType::bool_);
  const Array la = detail::cast(detail::reshard_for(arr, operand_target(arr, s, out), name), t);
  const cpu::Operand b = scalar_operand(sc, t, name);
  return detail::make_array(out, t, s, [&](int pos, detail::Buffer& buf) {
    const Shape local = s.shard_shape(out, pos);
    const cpu::Operand a = operand_of(la, pos, local);
    cpu::select(t, operand_of(lc, pos, local), scalar_is_x ? b : a, scalar_is_x ? a : b, buf.data(), local);
  });
}
}  // namespace

Array where(const Array& cond, const Array& x, Scalar y) { return where_scalar(cond, x, y, false); }
Array where(const Array& cond, Scalar x, const Array& y) { return where_scalar(cond, y, x, true); }

Array clip(const Array& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  detail::check_valid(x, "clip");
  Array r = x;
  if (lo) r = maximum(r, *lo);
  if (hi) r = minimum(r, *hi);
  return r;
}

Array with_sharding_constraint(const Array& x, const NamedSharding& sharding) {
  detail::check_valid(x, "with_sharding_constraint");
  if (!(x.sharding().mesh() == sharding.mesh()))
    throw ShardingError(msg("with_sharding_constraint", "the sharding is on " + sharding.mesh().str() +
                                                            " but the array is on " + x.sharding().mesh().str()));
  sharding.check_rank(x.ndim(), "with_sharding_constraint");
  return detail::reshard_for(x, sharding, "with_sharding_constraint");
}

Array with_sharding_constraint(const Array& x, const PartitionSpec& spec) {
  detail::check_valid(x, "with_sharding_constraint");
  return with_sharding_constraint(
      x, detail::resolve_spec(x.sharding().mesh(), spec, x.ndim(), "with_sharding_constraint"));
}

}  // namespace tessera
