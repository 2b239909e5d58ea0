// Reduction primitives (see reduce.hpp): result types, sharding rules,
// layouts, parameters and the factories.
//
// A reduction is a factor rule: kept dims are pass-through factors, reduced
// dims reduction factors. Each device reduces its block locally
// (backend/cpu/reduce); where a reduced dim is sharded, every device of a
// reduction group (devices that differ only on the reduced dims' mesh axes)
// holds a partial result for the same box of the output, and the engine
// combines the partials with partial_op() over those axes: an all-reduce
// into the natural layout (the kept dims' axes, replicated over the reduced
// ones), or a reduce-scatter straight into a requested out_sharding whose
// blocks lie inside the partial ones; any other out_sharding is reached by
// a reshard afterwards. The operand is reduced where it lies (see
// keeps_operand_layouts in reduce.hpp).
//
// argmax/argmin need two cross-device reductions whose second depends on
// the first (the best value, then the lowest index holding it), so that
// primitive lowers itself (spmd/lower_reduce.cpp).
#include "primitives/reduce.hpp"

#include <algorithm>
#include <utility>

#include "core/array_impl.hpp"
#include "sharding/spec.hpp"

namespace tessera::detail {

namespace {

std::string axes_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

bool contains(const std::vector<int>& v, int d) { return std::find(v.begin(), v.end(), d) != v.end(); }

Shape result_shape(const Shape& shape, const std::vector<int>& axes, bool keepdims) {
  Shape out;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (!contains(axes, d))
      out.push_back(shape[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

std::string common_params(const std::vector<int>& axes, bool keepdims, const std::optional<PartitionSpec>& out_spec) {
  std::string s = "axes=";
  s += axes_str(axes);
  if (keepdims) s += " keepdims=true";
  if (out_spec) {
    s += " out_sharding=";
    s += out_spec->str();
  }
  return s;
}

}  // namespace

std::vector<TypeInfo> Reduce::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{result_shape(in[0].shape, axes_, keepdims_), t_}};
}

ShardingRule Reduce::rule(std::span<const AbstractArray> in) const {
  return reduce_rule(in[0].shape, axes_, keepdims_);
}

std::optional<PartitionSpec> Reduce::out_spec() const { return out_spec_; }

// Every operand element is read and combined once.
double Reduce::work(std::span<const AbstractArray> in, const std::vector<TypeInfo>&) const {
  return static_cast<double>(num_elements(in[0].shape));
}

std::string Reduce::params() const {
  // mean's sum is named "mean": say what it combines.
  std::string s = name_ == std::string_view(detail::name(op_)) ? "" : std::string("op=") + detail::name(op_) + " ";
  return s + common_params(axes_, keepdims_, out_spec_);
}

std::vector<bool> Reduce::reduced(size_t rank) const {
  std::vector<bool> r(rank, false);
  for (int a : axes_) r[a] = true;
  return r;
}

std::vector<TypeInfo> ArgReduce::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{result_shape(in[0].shape, {axis_}, keepdims_), DType::i32}};
}

ShardingRule ArgReduce::rule(std::span<const AbstractArray> in) const {
  return reduce_rule(in[0].shape, {axis_}, keepdims_);
}

std::optional<std::vector<NamedSharding>> ArgReduce::layouts(std::span<const AbstractArray> in,
                                                             const std::vector<TypeInfo>& out) const {
  const Mesh& mesh = in[0].sharding.mesh();
  if (out_spec_)
    return std::vector<NamedSharding>{resolve_spec(mesh, *out_spec_, static_cast<int>(out[0].shape.size()), name_)};
  return std::vector<NamedSharding>{natural(in[0], false)};
}

std::string ArgReduce::params() const { return common_params({axis_}, keepdims_, out_spec_); }

NamedSharding ArgReduce::natural(const AbstractArray& x, bool kform) const {
  const auto axes = spec_axes(x.sharding, static_cast<int>(x.shape.size()));
  std::vector<std::vector<std::string>> dims;
  for (int d = 0; d < static_cast<int>(x.shape.size()); ++d) {
    if (d != axis_)
      dims.push_back(axes[d]);
    else if (kform || keepdims_)
      dims.emplace_back();
  }
  return NamedSharding(x.sharding.mesh(), make_spec(dims));
}

ShardingRule reduce_rule(const Shape& shape, const std::vector<int>& axes, bool keepdims) {
  ShardingRule r;
  std::vector<int> dims, out;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    const bool red = contains(axes, d);
    r.factors.push_back(Factor{shape[d], red ? FactorKind::Reduction : FactorKind::PassThrough});
    dims.push_back(d);
    if (!red)
      out.push_back(d);
    else if (keepdims)
      out.push_back(-1);
  }
  r.operands = {dims};
  r.results = {out};
  return r;
}

PrimitivePtr make_reduce(const char* name, ReduceOp op, DType t, std::vector<int> axes, bool keepdims,
                         std::optional<PartitionSpec> out_spec) {
  return std::make_shared<Reduce>(name, op, t, std::move(axes), keepdims, std::move(out_spec));
}

PrimitivePtr make_arg_reduce(const char* name, bool is_max, int axis, bool keepdims,
                             std::optional<PartitionSpec> out_spec) {
  return std::make_shared<ArgReduce>(name, is_max, axis, keepdims, std::move(out_spec));
}

}  // namespace tessera::detail
