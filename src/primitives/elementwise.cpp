// Elementwise primitives (see elementwise.hpp).
#include "primitives/elementwise.hpp"

#include <cstring>

#include "ops/common.hpp"

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

 protected:
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

 private:
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
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const Shape& s = out[0].shape;
    cpu::select(t_, operand_of(in[0], s), operand_of(in[1], s), operand_of(in[2], s), out[0].data, s);
  }
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override {
    cpu::select_flat(t_, contiguous(in[0]), contiguous(in[1]), contiguous(in[2]), out, n);
  }

 private:
  DType t_;
};

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

 private:
  NamedSharding target_;
};

}  // namespace

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

}  // namespace tessera::detail
