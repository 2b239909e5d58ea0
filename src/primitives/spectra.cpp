// resample_accumulate: rows are a reduction factor (each device sums its rows
// into a partial accumulator; the engine adds the partials over the mesh,
// which is exact for accumulators), the spectral and target dims must be
// whole on every device (a row's flux is conserved over the whole target).
#include "primitives/spectra.hpp"

#include <cstdio>

#include "backend/cpu/spectra.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {

int add_factor(ShardingRule& r, std::int64_t size, FactorKind kind) {
  r.factors.push_back(Factor{size, kind});
  return static_cast<int>(r.factors.size()) - 1;
}

class ResampleAccumulate final : public Primitive {
 public:
  ResampleAccumulate(std::int64_t num_segments, double max_abs, bool has_weights, bool has_scale, bool has_init)
      : num_segments_(num_segments),
        max_abs_(max_abs),
        has_weights_(has_weights),
        has_scale_(has_scale),
        has_init_(has_init) {}
  std::string_view name() const override { return "resample_accumulate"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{{3, num_segments_, in[2].shape[0]}, DType::f64}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
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
  // Partial accumulators are combined, never the rows gathered: the sum is
  // exact either way, but gathering would move n x K values.
  bool keeps_operand_layouts() const override { return true; }
  std::string params() const override {
    char buf[128];
    std::snprintf(buf, sizeof buf, "num_segments=%lld max_abs=%a", static_cast<long long>(num_segments_), max_abs_);
    std::string s = buf;
    if (has_weights_) s += " weights";
    if (has_scale_) s += " wave_scale";
    if (has_init_) s += " init";
    return s;
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    cpu::ResampleArgs a;
    a.n = in[0].shape[0];
    a.K = in[0].shape[1];
    a.T = in[2].shape[0];
    a.S = num_segments_;
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
    if (has_weights_) a.weights = in[k].data, a.weights_dt = in[k].dtype, ++k;
    if (has_scale_) a.scale = in[k].data, a.scale_dt = in[k].dtype, ++k;
    if (has_init_) a.init = static_cast<const double*>(in[k].data);
    a.max_abs = max_abs_;
    a.out = static_cast<double*>(out[0].data);
    const std::string err = cpu::resample_accumulate(a);
    if (!err.empty()) throw ValueError(err);
  }

 private:
  std::int64_t num_segments_;
  double max_abs_;
  bool has_weights_, has_scale_, has_init_;
};

}  // namespace

PrimitivePtr make_resample_accumulate(std::int64_t num_segments, double max_abs, bool has_weights, bool has_scale,
                                      bool has_init) {
  return std::make_shared<ResampleAccumulate>(num_segments, max_abs, has_weights, has_scale, has_init);
}

}  // namespace tessera::detail
