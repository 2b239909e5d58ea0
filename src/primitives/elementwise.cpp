// Elementwise primitives (see elementwise.hpp): type inference, the
// broadcast rule, parameters, conflict messages and the factories. The
// kernels are in backend/cpu/eval_elementwise.cpp, the transformation rules
// in transforms/rules/elementwise.cpp.
#include "primitives/elementwise.hpp"

#include "core/promote.hpp"

namespace tessera::detail {

std::vector<TypeInfo> Elementwise::infer(std::span<const AbstractArray> in) const {
  Shape out;
  for (const auto& a : in) out = broadcast_shapes(out, a.shape, name_);
  return {TypeInfo{out, result_}};
}

ShardingRule Elementwise::rule(std::span<const AbstractArray> in) const {
  std::vector<Shape> shapes;
  for (const auto& a : in) shapes.push_back(a.shape);
  return elementwise_rule(shapes, Elementwise::infer(in)[0].shape);
}

std::string Elementwise::conflict_message(std::span<const AbstractArray> in) const {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + type_str(in[i]);
  return msg(name_, "incompatible shardings for broadcasting: " + s + "; reshard an operand or pass out_sharding");
}

PrimitivePtr Elementwise::rebuilt(PartitionSpec) const { return shared_from_this(); }

std::string Binary::params() const { return t_ == result_ ? "" : std::string("compute=") + dtype_name(t_); }

PrimitivePtr Binary::rebuilt(PartitionSpec s) const {
  return std::make_shared<Binary>(op_, name_, t_, result_, std::move(s));
}

std::string BinaryScalar::params() const {
  return std::string(left_ ? "lhs=" : "rhs=") + text_ + (t_ == result_ ? "" : std::string(" compute=") + dtype_name(t_));
}

PrimitivePtr Select::rebuilt(PartitionSpec s) const { return std::make_shared<Select>(t_, std::move(s)); }

std::string SelectScalar::params() const { return std::string(is_x_ ? "x=" : "y=") + text_; }

std::string Convert::params() const { return std::string("to=") + dtype_name(result_); }

// ------------------------------------------------------------ element_expr

namespace {
ElementExpr expr(ElementExpr::Kind kind, DType t, DType result) {
  ElementExpr e;
  e.kind = kind;
  e.t = t;
  e.result = result;
  return e;
}
}  // namespace

std::optional<ElementExpr> Unary::element_expr() const {
  ElementExpr e = expr(ElementExpr::Kind::Unary, t_, result_);
  e.unary = op_;
  return e;
}

std::optional<ElementExpr> Binary::element_expr() const {
  ElementExpr e = expr(ElementExpr::Kind::Binary, t_, result_);
  e.binary = op_;
  return e;
}

std::optional<ElementExpr> BinaryScalar::element_expr() const {
  ElementExpr e = expr(ElementExpr::Kind::BinaryScalar, t_, result_);
  e.binary = op_;
  e.scalar = s_;
  e.scalar_first = left_;
  return e;
}

std::optional<ElementExpr> Select::element_expr() const { return expr(ElementExpr::Kind::Select, t_, t_); }

std::optional<ElementExpr> SelectScalar::element_expr() const {
  ElementExpr e = expr(ElementExpr::Kind::SelectScalar, t_, t_);
  e.scalar = s_;
  e.scalar_first = is_x_;
  return e;
}

std::optional<ElementExpr> Convert::element_expr() const { return expr(ElementExpr::Kind::Convert, from_, result_); }

std::vector<TypeInfo> Constraint::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, in[0].dtype}};
}

std::string Constraint::params() const { return "sharding=" + target_.spec().str(); }

std::vector<TypeInfo> StopGradient::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, in[0].dtype}};
}

PrimitivePtr make_stop_gradient() { return std::make_shared<StopGradient>(); }
PrimitivePtr make_unary(UnaryOp op, const char* name, DType t) { return std::make_shared<Unary>(op, name, t); }
PrimitivePtr make_binary(BinaryOp op, const char* name, DType compute, DType result,
                         std::optional<PartitionSpec> out_spec) {
  return std::make_shared<Binary>(op, name, compute, result, std::move(out_spec));
}
PrimitivePtr make_binary_scalar(BinaryOp op, const char* name, DType compute, DType result, const Operand& scalar,
                                bool scalar_left, std::string text) {
  return std::make_shared<BinaryScalar>(op, name, compute, result, scalar, scalar_left, std::move(text));
}
PrimitivePtr make_select(DType t, std::optional<PartitionSpec> out_spec) {
  return std::make_shared<Select>(t, std::move(out_spec));
}
PrimitivePtr make_select_scalar(DType t, const Operand& scalar, bool scalar_is_x, std::string text) {
  return std::make_shared<SelectScalar>(t, scalar, scalar_is_x, std::move(text));
}
PrimitivePtr make_convert(DType from, DType to) { return std::make_shared<Convert>(from, to); }
PrimitivePtr make_constraint(const char* name, const NamedSharding& target) {
  return std::make_shared<Constraint>(name, target);
}

Array cast(const Array& a, DType dtype) {
  if (a.dtype() == dtype) return a;
  return bind1(make_convert(a.dtype(), dtype), {a});
}

}  // namespace tessera::detail
