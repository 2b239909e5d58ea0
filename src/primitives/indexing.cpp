// The indexing primitives (see indexing.hpp).
//
//   take(x, indices, axis)
//     Each device needs the whole of x along `axis`, so a sharded `axis` is
//     first gathered (along that dim only; the front end refuses Explicit
//     axes there). The output is x's layout with dim `axis` taking the
//     layout of the indices; index axes that x's other dims already use
//     cannot shard the output twice, so they are dropped from the indices (a
//     gather of a small 1-d integer array). Indices out of range raise
//     ShapeError on the device that holds them.
//
//   scatter_add(x, indices, updates) / segment_sum(data, ids, num_segments)
//     The update rows stay where they are, sharded over mesh axes R (the
//     axes of updates' dim 0; the indices, a small 1-d array, are moved to
//     match). Every device accumulates its rows, in order, into a zero
//     partial of the output, and reduce_over combines the partials over R in
//     mesh order: an all-reduce where the output is replicated over R, a
//     reduce-scatter where the output shards a dim over R. For a dim that the
//     output shards over axes outside R, the partial covers only the device's
//     own output block (rows that fall elsewhere are another group's work),
//     and the updates are laid out alike on the trailing dims, so no device
//     computes what it then throws away. scatter_add then adds x, laid out
//     like the output.
//
// This file: the primitives' types, rules, layouts and parameters (the
// partitioning above is spmd/lower_indexing.cpp).
#include "primitives/indexing.hpp"

#include <algorithm>

#include "sharding/spec.hpp"

namespace tessera::detail {

namespace {

using AxisList = std::vector<std::string>;

bool contains(const AxisList& v, const std::string& a) { return std::find(v.begin(), v.end(), a) != v.end(); }

/// One factor per dim of `shape` (pass-through), mapped to the dims in order.
std::vector<int> add_dims(ShardingRule& r, const Shape& shape) {
  std::vector<int> dims;
  for (std::int64_t n : shape) {
    dims.push_back(static_cast<int>(r.factors.size()));
    r.factors.push_back(Factor{n, FactorKind::PassThrough});
  }
  return dims;
}

int add_factor(ShardingRule& r, std::int64_t size, FactorKind kind) {
  r.factors.push_back(Factor{size, kind});
  return static_cast<int>(r.factors.size()) - 1;
}

std::string out_spec_param(const std::optional<PartitionSpec>& spec) {
  std::string s;
  if (spec) s += "out_sharding=", s += spec->str();
  return s;
}

}  // namespace

bool IndexingGlobal::disjoint(const AxisList& a, const AxisList& b) {
  return std::none_of(a.begin(), a.end(), [&](const std::string& s) { return contains(b, s); });
}

std::vector<AxisList> IndexingGlobal::whole_along(const NamedSharding& x, int rank, int axis) {
  auto dims = spec_axes(x, rank);
  dims[axis].clear();
  return dims;
}

AxisList IndexingGlobal::free_index_axes(const std::vector<AxisList>& xdims, const NamedSharding& indices) {
  AxisList kept;
  for (const auto& a : indices.spec()[0].axes())
    if (std::none_of(xdims.begin(), xdims.end(), [&](const AxisList& d) { return contains(d, a); }))
      kept.push_back(a);
  return kept;
}

// ===================================================================== take

std::vector<TypeInfo> Take::infer(std::span<const AbstractArray> in) const {
  Shape s = in[0].shape;
  s[axis_] = in[1].shape[0];
  return {TypeInfo{s, in[0].dtype}};
}

// x's gathered dim must be whole; the indices' dim becomes the output's.
ShardingRule Take::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  r.factors[xd[axis_]].kind = FactorKind::NeedReplication;
  const int f = add_factor(r, in[1].shape[0], FactorKind::PassThrough);
  std::vector<int> od = xd;
  od[axis_] = f;
  r.operands = {xd, {f}};
  r.results = {od};
  return r;
}

// take's result layout: x's, with dim `axis` taking the axes of the indices
// that x's other dims leave free.
std::optional<std::vector<NamedSharding>> Take::layouts(std::span<const AbstractArray> in,
                                                        const std::vector<TypeInfo>&) const {
  const NamedSharding& x = in[0].sharding;
  auto dims = whole_along(x, static_cast<int>(in[0].shape.size()), axis_);
  dims[axis_] = free_index_axes(dims, in[1].sharding);
  return std::vector<NamedSharding>{NamedSharding(x.mesh(), make_spec(dims))};
}

std::string Take::params() const {
  std::string s = "axis=";
  s += std::to_string(axis_);
  return s;
}

// ================================================================ scatters

std::vector<TypeInfo> ScatterAdd::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, in[0].dtype}};
}

// The update rows are summed into the rows the indices name.
ShardingRule ScatterAdd::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  const int k = add_factor(r, in[1].shape[0], FactorKind::Reduction);
  std::vector<int> ud = xd;
  ud[0] = k;
  r.operands = {xd, {k}, ud};
  r.results = {xd};
  return r;
}

std::optional<std::vector<NamedSharding>> ScatterAdd::layouts(std::span<const AbstractArray> in,
                                                              const std::vector<TypeInfo>&) const {
  const NamedSharding& x = in[0].sharding;
  if (!out_spec_) return std::vector<NamedSharding>{x};
  return std::vector<NamedSharding>{
      resolve_spec(x.mesh(), *out_spec_, static_cast<int>(in[0].shape.size()), "scatter_add")};
}

std::string ScatterAdd::params() const { return out_spec_param(out_spec_); }

std::vector<TypeInfo> SegmentSum::infer(std::span<const AbstractArray> in) const {
  Shape s = in[0].shape;
  s[0] = num_segments_;
  return {TypeInfo{s, in[0].dtype}};
}

// The data rows are summed into the segments the ids name.
ShardingRule SegmentSum::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  Shape out = in[0].shape;
  out[0] = num_segments_;
  const std::vector<int> od = add_dims(r, out);
  const int k = add_factor(r, in[0].shape[0], FactorKind::Reduction);
  std::vector<int> dd = od;
  dd[0] = k;
  r.operands = {dd, {k}};
  r.results = {od};
  return r;
}

std::optional<std::vector<NamedSharding>> SegmentSum::layouts(std::span<const AbstractArray> in,
                                                              const std::vector<TypeInfo>&) const {
  const NamedSharding& data = in[0].sharding;
  const int rank = static_cast<int>(in[0].shape.size());
  if (out_spec_) return std::vector<NamedSharding>{resolve_spec(data.mesh(), *out_spec_, rank, "segment_sum")};
  // Replicated along the segments, data's layout on the trailing dims.
  auto dims = spec_axes(data, rank);
  dims[0].clear();
  return std::vector<NamedSharding>{NamedSharding(data.mesh(), make_spec(dims))};
}

std::string SegmentSum::params() const {
  std::string s = "num_segments=";
  s += std::to_string(num_segments_);
  if (out_spec_) s += ' ', s += out_spec_param(out_spec_);
  return s;
}

PrimitivePtr make_take(int axis) { return std::make_shared<Take>(axis); }
PrimitivePtr make_scatter_add(std::optional<PartitionSpec> out_spec) {
  return std::make_shared<ScatterAdd>(std::move(out_spec));
}
PrimitivePtr make_segment_sum(std::int64_t num_segments, std::optional<PartitionSpec> out_spec) {
  return std::make_shared<SegmentSum>(num_segments, std::move(out_spec));
}

}  // namespace tessera::detail
