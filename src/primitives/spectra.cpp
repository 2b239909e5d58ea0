// resample_accumulate: rows are a reduction factor (each device sums its rows
// into a partial accumulator; the engine adds the partials over the mesh,
// which is exact for accumulators), the spectral and target dims must be
// whole on every device (a row's flux is conserved over the whole target).
//
// This file: the primitive's type, rule and parameters (the kernel is in
// backend/cpu/eval_spectra.cpp).
#include "primitives/spectra.hpp"

#include <array>
#include <cstdio>
#include <string>

namespace tessera::detail {

namespace {

int add_factor(ShardingRule& r, std::int64_t size, FactorKind kind) {
  r.factors.push_back(Factor{size, kind});
  return static_cast<int>(r.factors.size()) - 1;
}

}  // namespace

std::vector<TypeInfo> ResampleAccumulate::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{{3, num_segments_, in[2].shape[0]}, DType::f64}};
}

ShardingRule ResampleAccumulate::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const int rows = add_factor(r, in[0].shape[0], FactorKind::Reduction);
  const int spec = add_factor(r, in[0].shape[1], FactorKind::NeedReplication);
  const int tgt = add_factor(r, in[2].shape[0], FactorKind::NeedReplication);
  // The kernel writes whole accumulators: limbs and segments never sharded.
  const int limb = add_factor(r, 3, FactorKind::NeedReplication);
  const int seg = add_factor(r, num_segments_, FactorKind::NeedReplication);
  r.operands = {{rows, spec}, in[1].shape.size() == 2 ? std::vector<int>{rows, spec} : std::vector<int>{spec},
                {tgt}, {rows}};
  if (has_weights_) r.operands.push_back({rows});
  if (has_scale_) r.operands.push_back({rows});
  if (has_init_) r.operands.push_back({limb, seg, tgt});
  r.results = {{limb, seg, tgt}};
  return r;
}

std::string ResampleAccumulate::params() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "num_segments=%lld max_abs=%a", static_cast<long long>(num_segments_), max_abs_);
  std::string s = buf;
  if (has_weights_) s += " weights";
  if (has_scale_) s += " wave_scale";
  if (has_init_) s += " init";
  return s;
}

namespace {

// The factors of the primal operands (flux, wave, target, segment_ids,
// weights, wave_scale); `rows` of the given kind. Returns (rows, spec, tgt).
std::array<int, 3> primal_factors(ShardingRule& r, std::span<const AbstractArray> in, FactorKind rows_kind,
                                  bool has_weights, bool has_scale) {
  const int rows = add_factor(r, in[0].shape[0], rows_kind);
  const int spec = add_factor(r, in[0].shape[1], FactorKind::NeedReplication);
  const int tgt = add_factor(r, in[2].shape[0], FactorKind::NeedReplication);
  r.operands = {{rows, spec}, in[1].shape.size() == 2 ? std::vector<int>{rows, spec} : std::vector<int>{spec},
                {tgt}, {rows}};
  if (has_weights) r.operands.push_back({rows});
  if (has_scale) r.operands.push_back({rows});
  return {rows, spec, tgt};
}

std::string spectra_params(std::int64_t num_segments, bool has_weights, bool has_scale) {
  std::string s = "num_segments=" + std::to_string(num_segments);
  if (has_weights) s += " weights";
  if (has_scale) s += " wave_scale";
  return s;
}

}  // namespace

// ========================================================= resample_tangent

std::vector<TypeInfo> ResampleTangent::infer(std::span<const AbstractArray> in) const {
  if (rowmax_) return {TypeInfo{{in[0].shape[0]}, DType::f64}};
  return {TypeInfo{{3, num_segments_, in[2].shape[0]}, DType::f64}};
}

ShardingRule ResampleTangent::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const auto [rows, spec, tgt] = primal_factors(
      r, in, rowmax_ ? FactorKind::PassThrough : FactorKind::Reduction, has_weights_, has_scale_);
  r.operands.push_back({rows, spec});
  if (has_weights_) r.operands.push_back({rows});
  if (has_scale_) r.operands.push_back({rows});
  if (rowmax_) {
    r.results = {{rows}};
    return r;
  }
  r.operands.push_back({});  // the bound
  const int limb = add_factor(r, 3, FactorKind::NeedReplication);
  const int seg = add_factor(r, num_segments_, FactorKind::NeedReplication);
  r.results = {{limb, seg, tgt}};
  return r;
}

std::string ResampleTangent::params() const { return spectra_params(num_segments_, has_weights_, has_scale_); }

// ======================================================= resample_transpose

std::vector<TypeInfo> ResampleTranspose::infer(std::span<const AbstractArray> in) const {
  std::vector<TypeInfo> r{TypeInfo{in[0].shape, DType::f64}};
  const Shape rows{in[0].shape[0]};
  if (has_weights_) r.push_back(TypeInfo{rows, DType::f64});
  if (has_scale_) r.push_back(TypeInfo{rows, DType::f64});
  return r;
}

ShardingRule ResampleTranspose::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const auto [rows, spec, tgt] = primal_factors(r, in, FactorKind::PassThrough, has_weights_, has_scale_);
  const int limb = add_factor(r, 3, FactorKind::NeedReplication);
  const int seg = add_factor(r, num_segments_, FactorKind::NeedReplication);
  r.operands.push_back({limb, seg, tgt});
  r.results = {{rows, spec}};
  if (has_weights_) r.results.push_back({rows});
  if (has_scale_) r.results.push_back({rows});
  return r;
}

std::string ResampleTranspose::params() const { return spectra_params(num_segments_, has_weights_, has_scale_); }

PrimitivePtr make_resample_accumulate(std::int64_t num_segments, double max_abs, bool has_weights, bool has_scale,
                                      bool has_init) {
  return std::make_shared<ResampleAccumulate>(num_segments, max_abs, has_weights, has_scale, has_init);
}

std::size_t read_resample_rows(const LocalArgs& in, std::int64_t S, bool has_weights, bool has_scale, ResampleRows& a) {
  a.n = in[0].shape[0];
  a.K = in[0].shape[1];
  a.T = in[2].shape[0];
  a.S = S;
  a.flux = in[0].data;
  a.flux_dt = in[0].dtype;
  a.wave = in[1].data;
  a.wave_dt = in[1].dtype;
  a.wave_per_row = in[1].shape.size() == 2;
  a.target = in[2].data;
  a.target_dt = in[2].dtype;
  a.seg = in[3].data;
  a.seg_dt = in[3].dtype;
  std::size_t k = 4;
  if (has_weights) a.weights = in[k].data, a.weights_dt = in[k].dtype, ++k;
  if (has_scale) a.scale = in[k].data, a.scale_dt = in[k].dtype, ++k;
  return k;
}

std::size_t read_resample_tangents(const LocalArgs& in, std::size_t k, bool has_weights, bool has_scale,
                                   ResampleTangents& t) {
  t.tflux = in[k].data, t.tflux_dt = in[k].dtype, ++k;
  if (has_weights) t.tweights = in[k].data, t.tweights_dt = in[k].dtype, ++k;
  if (has_scale) t.tscale = in[k].data, t.tscale_dt = in[k].dtype, ++k;
  return k;
}

}  // namespace tessera::detail
