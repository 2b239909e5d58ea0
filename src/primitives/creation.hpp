// Creation primitives: zeros, ones, full, scalar (one fill), arange,
// linspace, eye. They have no operands, so nothing tells the engine a mesh:
// each fixes its result layout itself (layouts() returns the sharding the
// caller asked for), and every device fills its own block from the block's
// global box. Nothing crosses devices.
//
// The primitives' parts live in their layers: type, rule, layout and
// parameters here (primitives/creation.cpp), the per-device kernels in
// backend/cpu/eval_creation.cpp. They have no transformation rules of their
// own (no operands: nothing to batch or differentiate).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/creation_op.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// `value` points to one element already of dtype `dtype`; `text` prints it.
/// `name` is the front end's (zeros, ones, full, scalar).
PrimitivePtr make_fill(const char* name, const Shape& shape, DType dtype, const NamedSharding& sharding,
                       const void* value, std::string text);
PrimitivePtr make_arange(std::int64_t n, double start, double step, DType dtype, const NamedSharding& sharding);
PrimitivePtr make_linspace(const LinspaceParams& p, DType dtype, const NamedSharding& sharding);
/// `k` already clamped to [-n, m].
PrimitivePtr make_eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, const NamedSharding& sharding);

/// The rule of a primitive without operands: one pass-through factor per
/// result dim, "()->([i,j]) {i=13,j=7}".
ShardingRule creation_rule(const Shape& shape);

// Base: no operands, the result's type and layout are parameters.
class Creation : public Primitive {
 public:
  Creation(const char* name, Shape shape, DType dtype, NamedSharding sharding)
      : name_(name), shape_(std::move(shape)), dtype_(dtype), sharding_(std::move(sharding)) {}
  std::string_view name() const override { return name_; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray>) const override { return {TypeInfo{shape_, dtype_}}; }
  ShardingRule rule(std::span<const AbstractArray>) const override { return creation_rule(shape_); }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray>,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{sharding_};
  }

 protected:
  const char* name_;
  Shape shape_;
  DType dtype_;
  NamedSharding sharding_;
};

class Fill final : public Creation {
 public:
  Fill(const char* name, Shape shape, DType dtype, NamedSharding sharding, const void* value, std::string text);
  std::string params() const override { return "value=" + text_; }
  // backend/cpu/eval_creation.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  alignas(8) unsigned char value_[8] = {};
  std::string text_;
};

class Arange final : public Creation {
 public:
  Arange(std::int64_t n, double start, double step, DType dtype, NamedSharding sharding)
      : Creation("arange", Shape{n}, dtype, std::move(sharding)), start_(start), step_(step) {}
  std::string params() const override;
  // backend/cpu/eval_creation.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  double start_, step_;
};

class Linspace final : public Creation {
 public:
  Linspace(const LinspaceParams& p, DType dtype, NamedSharding sharding)
      : Creation("linspace", Shape{p.num}, dtype, std::move(sharding)), p_(p) {}
  std::string params() const override;
  // backend/cpu/eval_creation.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  LinspaceParams p_;
};

class Eye final : public Creation {
 public:
  Eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, NamedSharding sharding)
      : Creation("eye", Shape{n, m}, dtype, std::move(sharding)), k_(k) {}
  std::string params() const override { return "k=" + std::to_string(k_); }
  // backend/cpu/eval_creation.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  std::int64_t k_;
};

}  // namespace tessera::detail
