// The linear-algebra primitive: dot_general, the one contraction under
// matmul, dot, einsum and dot_general itself. Operands arrive in the compute
// dtype (the front ends bind a convert first).
//
// The primitive's parts live in their layers: type inference, the sharding
// rule, parameters and conflict messages here (primitives/linalg.cpp), the
// per-device kernels in backend/cpu/eval_linalg.cpp and
// backend/cuda/eval_linalg.cpp, the transformation rules (batching, JVP,
// transposition) in transforms/rules/linalg.cpp.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/contraction.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// The result shape of `c` on operands of shapes `sa` and `sb` (validated by
/// the front end): canonical (batch, lhs free, rhs free), then permuted.
Shape dot_shape(const Contraction& c, const Shape& sa, const Shape& sb);

/// The factors of `c`: batch pairs, lhs free, rhs free (pass-through), then
/// contracting pairs and summed dims (reduction); a size-1 batch dim
/// broadcast against a larger one maps to none.
ShardingRule dot_rule(const Contraction& c, const Shape& sa, const Shape& sb);

/// `name` is the front end's (errors and communication records name it);
/// `t` is the dtype of both operands and of the result.
PrimitivePtr make_dot_general(const char* name, Contraction c, DType t, std::optional<PartitionSpec> out_spec);

/// dot_general of the contraction `c` (see make_dot_general).
class DotGeneral final : public Primitive {
 public:
  DotGeneral(const char* name, Contraction c, DType t, std::optional<PartitionSpec> out_spec)
      : name_(name), c_(std::move(c)), t_(t), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<PartitionSpec> out_spec() const override;
  std::string conflict_message(std::span<const AbstractArray> in) const override;
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const override;
  std::string params() const override;

  // backend/cpu/eval_linalg.cpp, backend/cuda/eval_linalg.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

  // transforms/rules/linalg.cpp
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

  /// The product with a basis direction (transforms/rules/linalg.cpp):
  /// operand `side` is the one-hot vector with 1 at `index` (a 1-element
  /// i32 array), contracted whole against one unsharded dim of `other`.
  /// That product is `other`'s slice at `index` along the dim: a gather,
  /// no multiplications. Empty when the contraction has another form.
  Array with_basis(int side, const Array& other, const Array& index) const;

 private:
  // The cotangent of one operand (transforms/rules/linalg.cpp).
  Array transpose_side(const Array& ct, const Array& other, const AbstractArray& me_t, bool lhs) const;

  const char* name_;
  Contraction c_;
  DType t_;
  std::optional<PartitionSpec> out_spec_;
};

}  // namespace tessera::detail
