// Elementwise primitives: unary, binary (array-array and array-scalar),
// select, convert, and the identity that carries a sharding constraint.
// Operands arrive already in the compute dtype (the front ends bind a
// convert first); every one of them is fusable.
//
// The primitives' parts live in their layers: type inference, the sharding
// rule, parameters and conflict messages here (primitives/elementwise.cpp),
// the per-device kernels (eval_cpu, and eval_tile for fused tiles) in
// backend/cpu/eval_elementwise.cpp, the transformation rules (batching, JVP,
// transposition) in transforms/rules/elementwise.cpp.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/elementwise_op.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

PrimitivePtr make_unary(UnaryOp op, const char* name, DType t);
/// `compute`: dtype of both operands; `result`: dtype of the result.
PrimitivePtr make_binary(BinaryOp op, const char* name, DType compute, DType result,
                         std::optional<PartitionSpec> out_spec);
/// One array operand and a scalar already in `compute` (on the left when
/// `scalar_left`). `text` prints the scalar.
PrimitivePtr make_binary_scalar(BinaryOp op, const char* name, DType compute, DType result, const Operand& scalar,
                                bool scalar_left, std::string text);
/// where(cond, x, y): operands bool, t, t.
PrimitivePtr make_select(DType t, std::optional<PartitionSpec> out_spec);
/// where with one side a scalar (x when `scalar_is_x`): operands bool, t.
PrimitivePtr make_select_scalar(DType t, const Operand& scalar, bool scalar_is_x, std::string text);
PrimitivePtr make_convert(DType from, DType to);
/// `a` converted to `dtype` (per device, no communication); `a` itself when
/// it has that dtype.
Array cast(const Array& a, DType dtype);
/// The value itself, laid out as `target` (with_sharding_constraint, reshard).
PrimitivePtr make_constraint(const char* name, const NamedSharding& target);
PrimitivePtr make_stop_gradient();

// Base of the elementwise family: the broadcast rule, fusable.
class Elementwise : public Primitive {
 public:
  Elementwise(const char* name, DType result, std::optional<PartitionSpec> out_spec = std::nullopt)
      : name_(name), result_(result), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<PartitionSpec> out_spec() const override { return out_spec_; }
  std::string conflict_message(std::span<const AbstractArray> in) const override;
  bool fusable() const override { return true; }

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_BATCH;

 protected:
  // The primitive for batch-first operands: an out_sharding gains an
  // unsharded batch dim (transforms/rules/elementwise.cpp).
  PrimitivePtr batched() const;
  // The same primitive with out_sharding `s` (only those that take one).
  virtual PrimitivePtr rebuilt(PartitionSpec s) const;

  const char* name_;
  DType result_;
  std::optional<PartitionSpec> out_spec_;
};

class Unary final : public Elementwise {
 public:
  Unary(UnaryOp op, const char* name, DType t)
      : Elementwise(name, returns_bool(op) ? DType::bool_ : t), op_(op), t_(t) {}

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_EVAL_TILE;
  std::optional<ElementExpr> element_expr() const override;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  UnaryOp op_;
  DType t_;
};

class Binary final : public Elementwise {
 public:
  Binary(BinaryOp op, const char* name, DType compute, DType result, std::optional<PartitionSpec> out_spec)
      : Elementwise(name, result, std::move(out_spec)), op_(op), t_(compute) {}
  std::string params() const override;

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_EVAL_TILE;
  std::optional<ElementExpr> element_expr() const override;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  PrimitivePtr rebuilt(PartitionSpec s) const override;
  BinaryOp op_;
  DType t_;
};

class BinaryScalar final : public Elementwise {
 public:
  BinaryScalar(BinaryOp op, const char* name, DType compute, DType result, const Operand& s, bool left,
               std::string text)
      : Elementwise(name, result), op_(op), t_(compute), s_(s), left_(left), text_(std::move(text)) {}
  std::string params() const override;

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_EVAL_TILE;
  std::optional<ElementExpr> element_expr() const override;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  BinaryOp op_;
  DType t_;
  Operand s_;
  bool left_;
  std::string text_;
};

class Select final : public Elementwise {
 public:
  Select(DType t, std::optional<PartitionSpec> out_spec) : Elementwise("where", t, std::move(out_spec)), t_(t) {}

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_EVAL_TILE;
  std::optional<ElementExpr> element_expr() const override;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  PrimitivePtr rebuilt(PartitionSpec s) const override;
  DType t_;
};

class SelectScalar final : public Elementwise {
 public:
  SelectScalar(DType t, const Operand& s, bool is_x, std::string text)
      : Elementwise("where", t), t_(t), s_(s), is_x_(is_x), text_(std::move(text)) {}
  std::string params() const override;

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_EVAL_TILE;
  std::optional<ElementExpr> element_expr() const override;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  DType t_;
  Operand s_;
  bool is_x_;
  std::string text_;
};

class Convert final : public Elementwise {
 public:
  Convert(DType from, DType to) : Elementwise("convert", to), from_(from) {}
  std::string params() const override;

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_EVAL_TILE;
  std::optional<ElementExpr> element_expr() const override;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  DType from_;
};

class Constraint final : public Elementwise {
 public:
  Constraint(const char* name, NamedSharding target) : Elementwise(name, DType::f32), target_(std::move(target)) {}
  TESSERA_DECLARE_INFER;
  std::optional<PartitionSpec> out_spec() const override { return target_.spec(); }
  bool fusable() const override { return false; }
  bool identity() const override { return true; }
  std::string params() const override;

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  NamedSharding target_;
};

// stop_gradient: the value itself, with a zero tangent.
class StopGradient final : public Elementwise {
 public:
  StopGradient() : Elementwise("stop_gradient", DType::f32) {}
  TESSERA_DECLARE_INFER;
  bool fusable() const override { return false; }
  bool identity() const override { return true; }

  // backend/cpu/eval_elementwise.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

  // transforms/rules/elementwise.cpp
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
};

}  // namespace tessera::detail
