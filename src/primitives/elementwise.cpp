// Elementwise primitives (see elementwise.hpp).
#include "primitives/elementwise.hpp"

#include <cmath>
#include <cstring>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {


cpu::Operand operand_of(const LocalIn& a, const Shape& out) {
  cpu::Operand o;
  o.data = a.data;
  o.strides = cpu::broadcast_strides(a.shape, out);
  return o;
}

cpu::Operand contiguous(const void* p) {
  cpu::Operand o;
  o.data = p;
  return o;  // binary_flat/select_flat read no strides
}

// Base of the elementwise family: the broadcast rule, fusable.
class Elementwise : public Primitive {
 public:
  Elementwise(const char* name, DType result, std::optional<PartitionSpec> out_spec = std::nullopt)
      : name_(name), result_(result), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape out;
    for (const auto& a : in) out = broadcast_shapes(out, a.shape, name_);
    return {TypeInfo{out, result_}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    std::vector<Shape> shapes;
    for (const auto& a : in) shapes.push_back(a.shape);
    return elementwise_rule(shapes, Elementwise::infer(in)[0].shape);
  }
  std::optional<PartitionSpec> out_spec() const override { return out_spec_; }
  std::string conflict_message(std::span<const AbstractArray> in) const override {
    std::string s;
    for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + type_str(in[i]);
    return msg(name_, "incompatible shardings for broadcasting: " + s + "; reshard an operand or pass out_sharding");
  }
  bool fusable() const override { return true; }
  // Batched operands go batch-first, padded with size-1 dims to the
  // examples' common rank, so broadcasting inside each example still lines
  // up; unbatched ones broadcast against the batch as they are.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t,
                           std::vector<int>& out_bdims) const override {
    int rank = 0;
    for (size_t i = 0; i < in.size(); ++i) rank = std::max(rank, in[i].ndim() - (bdims[i] >= 0 ? 1 : 0));
    std::vector<Array> args;
    for (size_t i = 0; i < in.size(); ++i) args.push_back(bdims[i] >= 0 ? batch_first_aligned(in[i], bdims[i], rank) : in[i]);
    out_bdims = {0};
    return bind(batched(), args);
  }

 protected:
  // The primitive for batch-first operands: an out_sharding gains an
  // unsharded batch dim.
  PrimitivePtr batched() const { return out_spec_ ? rebuilt(*with_batch_dim(out_spec_, 0)) : shared_from_this(); }
  virtual PrimitivePtr rebuilt(PartitionSpec) const { return shared_from_this(); }

  const char* name_;
  DType result_;
  std::optional<PartitionSpec> out_spec_;
};

class Unary final : public Elementwise {
 public:
  Unary(cpu::UnaryOp op, const char* name, DType t)
      : Elementwise(name, cpu::returns_bool(op) ? DType::bool_ : t), op_(op), t_(t) {}
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    cpu::unary(op_, t_, in[0].data, out[0].data, num_elements(out[0].shape));
  }
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override {
    cpu::unary(op_, t_, in[0], out, n);
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    using U = cpu::UnaryOp;
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
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>&, const std::vector<bool>&) const override {
    if (op_ != cpu::UnaryOp::Neg) return Primitive::transpose(ct, {}, {}, {});
    return {ct[0].valid() ? -ct[0] : Array()};
  }

 private:
  cpu::UnaryOp op_;
  DType t_;
};

class Binary final : public Elementwise {
 public:
  Binary(cpu::BinaryOp op, const char* name, DType compute, DType result, std::optional<PartitionSpec> out_spec)
      : Elementwise(name, result, std::move(out_spec)), op_(op), t_(compute) {}
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    cpu::binary(op_, t_, operand_of(in[0], out[0].shape), operand_of(in[1], out[0].shape), out[0].data, out[0].shape);
  }
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override {
    cpu::binary_flat(op_, t_, contiguous(in[0]), contiguous(in[1]), out, n);
  }
  std::string params() const override { return t_ == result_ ? "" : std::string("compute=") + dtype_name(t_); }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    using B = cpu::BinaryOp;
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
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    using B = cpu::BinaryOp;
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

 private:
  PrimitivePtr rebuilt(PartitionSpec s) const override {
    return std::make_shared<Binary>(op_, name_, t_, result_, std::move(s));
  }
  cpu::BinaryOp op_;
  DType t_;
};

class BinaryScalar final : public Elementwise {
 public:
  BinaryScalar(cpu::BinaryOp op, const char* name, DType compute, DType result, const cpu::Operand& s, bool left,
               std::string text)
      : Elementwise(name, result), op_(op), t_(compute), s_(s), left_(left), text_(std::move(text)) {}
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const cpu::Operand a = operand_of(in[0], out[0].shape);
    cpu::binary(op_, t_, left_ ? s_ : a, left_ ? a : s_, out[0].data, out[0].shape);
  }
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override {
    const cpu::Operand a = contiguous(in[0]);
    cpu::binary_flat(op_, t_, left_ ? s_ : a, left_ ? a : s_, out, n);
  }
  std::string params() const override {
    return std::string(left_ ? "lhs=" : "rhs=") + text_ + (t_ == result_ ? "" : std::string(" compute=") + dtype_name(t_));
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    using B = cpu::BinaryOp;
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
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    const bool scales = op_ == cpu::BinaryOp::Mul || (op_ == cpu::BinaryOp::Div && !left_);
    if (!scales) return Primitive::transpose(ct, in, types, linear);
    return {ct[0].valid() ? bind1(shared_from_this(), {ct[0]}) : Array()};
  }

 private:
  cpu::BinaryOp op_;
  DType t_;
  cpu::Operand s_;
  bool left_;
  std::string text_;
};

class Select final : public Elementwise {
 public:
  Select(DType t, std::optional<PartitionSpec> out_spec) : Elementwise("where", t, std::move(out_spec)), t_(t) {}
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    Array y = bind1(shared_from_this(), p);
    t_out = {Array()};
    if ((!t[1].valid() && !t[2].valid()) || !has_tangent(y.dtype())) return {y};
    t_out[0] = where(p[0], instantiate(t[1], type_of(p[1])), instantiate(t[2], type_of(p[2])), {}, {});
    if (t_out[0].shape() != y.shape()) t_out[0] = broadcast_to(t_out[0], y.shape(), {});
    return {y};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    std::vector<Array> r(3);
    if (!ct[0].valid()) return r;
    const Array zero = zeros_of(type_of(ct[0]));
    if (linear[1]) r[1] = unbroadcast(where(in[0], ct[0], zero, {}, {}), types[1]);
    if (linear[2]) r[2] = unbroadcast(where(in[0], zero, ct[0], {}, {}), types[2]);
    return r;
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const Shape& s = out[0].shape;
    cpu::select(t_, operand_of(in[0], s), operand_of(in[1], s), operand_of(in[2], s), out[0].data, s);
  }
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override {
    cpu::select_flat(t_, contiguous(in[0]), contiguous(in[1]), contiguous(in[2]), out, n);
  }

 private:
  PrimitivePtr rebuilt(PartitionSpec s) const override { return std::make_shared<Select>(t_, std::move(s)); }
  DType t_;
};

cpu::Operand zero_of(const cpu::Operand& s) {
  cpu::Operand z = s;
  z.f = 0;
  z.i = 0;
  return z;
}

class SelectScalar final : public Elementwise {
 public:
  SelectScalar(DType t, const cpu::Operand& s, bool is_x, std::string text)
      : Elementwise("where", t), t_(t), s_(s), is_x_(is_x), text_(std::move(text)) {}
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const Shape& s = out[0].shape;
    const cpu::Operand a = operand_of(in[1], s);
    cpu::select(t_, operand_of(in[0], s), is_x_ ? s_ : a, is_x_ ? a : s_, out[0].data, s);
  }
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override {
    const cpu::Operand a = contiguous(in[1]);
    cpu::select_flat(t_, contiguous(in[0]), is_x_ ? s_ : a, is_x_ ? a : s_, out, n);
  }
  std::string params() const override { return std::string(is_x_ ? "x=" : "y=") + text_; }
  // Linear in the array operand when the scalar is zero (the JVP's form);
  // affine otherwise, so the tangent is the array's where it is chosen.
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    Array y = bind1(shared_from_this(), p);
    t_out = {Array()};
    if (!t[1].valid() || !has_tangent(y.dtype())) return {y};
    t_out[0] = bind1(std::make_shared<SelectScalar>(t_, zero_of(s_), is_x_, "0"), {p[0], t[1]});
    if (t_out[0].shape() != y.shape()) t_out[0] = broadcast_to(t_out[0], y.shape(), {});
    return {y};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    if (s_.f != 0 || s_.i != 0) return Primitive::transpose(ct, in, types, linear);
    std::vector<Array> r(2);
    if (ct[0].valid() && linear[1]) r[1] = unbroadcast(bind1(shared_from_this(), {in[0], ct[0]}), types[1]);
    return r;
  }

 private:
  DType t_;
  cpu::Operand s_;
  bool is_x_;
  std::string text_;
};

class Convert final : public Elementwise {
 public:
  Convert(DType from, DType to) : Elementwise("convert", to), from_(from) {}
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    convert(in[0].data, from_, out[0].data, result_, num_elements(out[0].shape));
  }
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override {
    convert(in[0], from_, out, result_, n);
  }
  std::string params() const override { return std::string("to=") + dtype_name(result_); }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    return linear_jvp(*this, p, has_tangent(from_) && has_tangent(result_) ? t : std::vector<Array>{Array()}, t_out);
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>&, const std::vector<bool>&) const override {
    return {ct[0].valid() ? astype(ct[0], from_, {}) : Array()};
  }

 private:
  DType from_;
};

class Constraint final : public Elementwise {
 public:
  Constraint(const char* name, NamedSharding target) : Elementwise(name, DType::f32), target_(std::move(target)) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, in[0].dtype}};
  }
  std::optional<PartitionSpec> out_spec() const override { return target_.spec(); }
  bool fusable() const override { return false; }
  bool identity() const override { return true; }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    std::memcpy(out[0].data, in[0].data, static_cast<std::size_t>(num_elements(out[0].shape)) * itemsize(out[0].dtype));
  }
  std::string params() const override { return "sharding=" + target_.spec().str(); }
  // The batch dim keeps the layout it has.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t,
                           std::vector<int>& out_bdims) const override {
    const Array x = move_dim(in[0], bdims[0], 0);
    std::vector<PartitionSpec::Entry> e = target_.spec().entries();
    const auto& xs = x.sharding().spec();
    e.insert(e.begin(), xs.size() > 0 ? xs[0] : PartitionSpec::Entry());
    out_bdims = {0};
    return {bind1(std::make_shared<Constraint>(name_, NamedSharding(target_.mesh(), PartitionSpec(std::move(e)))), {x})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    return linear_jvp(*this, p, t, t_out);
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>&, const std::vector<bool>&) const override {
    return {ct[0].valid() ? bind1(shared_from_this(), {ct[0]}) : Array()};
  }

 private:
  NamedSharding target_;
};

// stop_gradient: the value itself, with a zero tangent.
class StopGradient final : public Elementwise {
 public:
  StopGradient() : Elementwise("stop_gradient", DType::f32) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, in[0].dtype}};
  }
  bool fusable() const override { return false; }
  bool identity() const override { return true; }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    std::memcpy(out[0].data, in[0].data, static_cast<std::size_t>(num_elements(out[0].shape)) * itemsize(out[0].dtype));
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t,
                           std::vector<int>& out_bdims) const override {
    out_bdims = bdims;
    return {bind1(shared_from_this(), {in[0]})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>&,
                         std::vector<Array>& t_out) const override {
    t_out = {Array()};
    return {bind1(shared_from_this(), p)};
  }
};

}  // namespace

PrimitivePtr make_stop_gradient() { return std::make_shared<StopGradient>(); }
PrimitivePtr make_unary(cpu::UnaryOp op, const char* name, DType t) { return std::make_shared<Unary>(op, name, t); }
PrimitivePtr make_binary(cpu::BinaryOp op, const char* name, DType compute, DType result,
                         std::optional<PartitionSpec> out_spec) {
  return std::make_shared<Binary>(op, name, compute, result, std::move(out_spec));
}
PrimitivePtr make_binary_scalar(cpu::BinaryOp op, const char* name, DType compute, DType result,
                                const cpu::Operand& scalar, bool scalar_left, std::string text) {
  return std::make_shared<BinaryScalar>(op, name, compute, result, scalar, scalar_left, std::move(text));
}
PrimitivePtr make_select(DType t, std::optional<PartitionSpec> out_spec) {
  return std::make_shared<Select>(t, std::move(out_spec));
}
PrimitivePtr make_select_scalar(DType t, const cpu::Operand& scalar, bool scalar_is_x, std::string text) {
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
