// The search and selection primitives (see search.hpp).
//
// searchsorted is elementwise in its values and needs its sequence whole on
// every device: a rule the engine expresses (a NeedReplication factor for
// the sequence, pass-through factors for the values), as for interp.
//
// The median primitive (make_median_middle; "median" in the IR) finds the
// two middle elements of every selection without moving the reduced data;
// it partitions itself (spmd/lower_search.cpp, where the algorithm is
// described): x stays where it lies, the results take x's axes on the kept
// dims.
//
// This file: the primitives' types, rules, layouts and parameters.
#include "primitives/search.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "core/array_impl.hpp"
#include "primitives/reduce.hpp"
#include "sharding/spec.hpp"

namespace tessera::detail {

namespace {

std::string axes_str(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

}  // namespace

// ============================================================ searchsorted

std::vector<TypeInfo> Searchsorted::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[1].shape, out_}};
}

// The sequence's one dim must be whole everywhere; the values' dims pass
// through to the result.
ShardingRule Searchsorted::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  r.factors.push_back(Factor{in[0].shape[0], FactorKind::NeedReplication});
  std::vector<int> vd;
  for (std::int64_t n : in[1].shape) {
    vd.push_back(static_cast<int>(r.factors.size()));
    r.factors.push_back(Factor{n, FactorKind::PassThrough});
  }
  r.operands = {{0}, vd};
  r.results = {vd};
  return r;
}

// A binary search per value.
double Searchsorted::work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const {
  return static_cast<double>(num_elements(out[0].shape)) * std::log2(static_cast<double>(in[0].shape[0]) + 2.0);
}

std::string Searchsorted::params() const {
  std::string s = right_ ? "side=right" : "side=left";
  s += " dtype=";
  s += dtype_name(out_);
  return s;
}

// =========================================================== median_middle

std::vector<TypeInfo> MedianMiddle::infer(std::span<const AbstractArray> in) const {
  const TypeInfo t{out_shape(in[0].shape, keepdims_), in[0].dtype};
  return {t, t};
}

// For the text forms: a reduction over the axes, the mask alike.
ShardingRule MedianMiddle::rule(std::span<const AbstractArray> in) const {
  ShardingRule r = reduce_rule(in[0].shape, axes_, keepdims_);
  if (masked_) r.operands.push_back(r.operands[0]);
  r.results.push_back(r.results[0]);
  return r;
}

std::optional<std::vector<NamedSharding>> MedianMiddle::layouts(std::span<const AbstractArray> in,
                                                                const std::vector<TypeInfo>&) const {
  const NamedSharding s = natural(in[0].sharding, static_cast<int>(in[0].shape.size()), keepdims_);
  return std::vector<NamedSharding>{s, s};
}

std::string MedianMiddle::params() const {
  std::string s = "axes=";
  s += axes_str(axes_);
  if (keepdims_) s += " keepdims=true";
  if (masked_) s += " where=true";
  return s;
}

Shape MedianMiddle::out_shape(const Shape& s, bool keep) const {
  Shape o;
  for (int d = 0; d < static_cast<int>(s.size()); ++d) {
    if (!reduced(d))
      o.push_back(s[d]);
    else if (keep)
      o.push_back(1);
  }
  return o;
}

bool MedianMiddle::reduced(int d) const { return std::find(axes_.begin(), axes_.end(), d) != axes_.end(); }

NamedSharding MedianMiddle::natural(const NamedSharding& xs, int rank, bool keep) const {
  const auto axes = spec_axes(xs, rank);
  std::vector<std::vector<std::string>> dims;
  for (int d = 0; d < rank; ++d) {
    if (!reduced(d))
      dims.push_back(axes[d]);
    else if (keep)
      dims.emplace_back();
  }
  return NamedSharding(xs.mesh(), make_spec(dims));
}

PrimitivePtr make_searchsorted(bool right, DType out) { return std::make_shared<Searchsorted>(right, out); }

PrimitivePtr make_median_middle(std::vector<int> axes, bool keepdims, bool masked) {
  return std::make_shared<MedianMiddle>(std::move(axes), keepdims, masked);
}

}  // namespace tessera::detail
