// The interp2d primitive (see interp2d.hpp).
//
// Every query is independent of the others, and each needs the whole grid
// and table (which cell it falls in depends on the data). So the query dims
// are pass-through factors shared by xq, yq and the result, and every dim of
// x, y and f is a NeedReplication factor: the engine brings the table whole
// to every device and leaves the queries where they are, and the result
// keeps the queries' layout (its rest dims, shared with f's, are unsharded).
// No algorithm of its own is needed: the kernel runs on each device's block
// of queries.
#include "primitives/interp2d.hpp"

#include <cmath>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"

namespace tessera::detail {

namespace {

class Interp2d final : public Primitive {
 public:
  Interp2d(cpu::Interp2dMethod method, std::optional<double> fill) : method_(method), fill_(fill) {}

  std::string_view name() const override { return "interp2d"; }

  // Q + rest, in f's dtype (the front end has made it f32 or f64).
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape s = in[0].shape;
    s.insert(s.end(), in[4].shape.begin() + 2, in[4].shape.end());
    return {TypeInfo{s, in[4].dtype}};
  }

  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    auto add = [&](std::int64_t n, FactorKind kind) {
      r.factors.push_back(Factor{n, kind});
      return static_cast<int>(r.factors.size()) - 1;
    };
    std::vector<int> q;
    for (std::int64_t n : in[0].shape) q.push_back(add(n, FactorKind::PassThrough));
    const int fx = add(in[2].shape[0], FactorKind::NeedReplication);
    const int fy = add(in[3].shape[0], FactorKind::NeedReplication);
    std::vector<int> fdims{fx, fy}, out = q;
    for (size_t d = 2; d < in[4].shape.size(); ++d) {
      const int k = add(in[4].shape[d], FactorKind::NeedReplication);
      fdims.push_back(k);
      out.push_back(k);
    }
    r.operands = {q, q, {fx}, {fy}, fdims};
    r.results = {out};
    return r;
  }

  // One weighted row per query: 4 or 16 multiply-adds per result element.
  double work(std::span<const AbstractArray>, const std::vector<TypeInfo>& out) const override {
    const double taps = method_ == cpu::Interp2dMethod::Cubic ? 16 : 4;
    return 2 * taps * static_cast<double>(num_elements(out[0].shape));
  }

  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const std::int64_t n = num_elements(in[0].shape);
    const std::int64_t rest = num_elements(Shape(in[4].shape.begin() + 2, in[4].shape.end()));
    const cpu::Interp2dGrid grid{in[2].data, in[2].dtype, in[2].shape[0], in[3].data, in[3].dtype, in[3].shape[0]};
    cpu::interp2d(method_, fill_, grid, in[0].data, in[0].dtype, in[1].data, in[1].dtype, n, in[4].data,
                  out[0].dtype, rest, out[0].data);
  }

  std::string params() const override {
    std::string s = "method=";
    s += method_ == cpu::Interp2dMethod::Cubic ? "cubic" : "linear";
    s += " fill=";
    s += fill_ ? number_str(*fill_) : std::string("extrapolate");
    return s;
  }

  // Queries batched, grid and table shared: one call over more queries (the
  // batch dim becomes the first query dim). A table per example falls back
  // to one call per example.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    if (bd[2] >= 0 || bd[3] >= 0 || bd[4] >= 0) return Primitive::batch(in, bd, size, ob);
    ob = {0};
    return {bind1(shared_from_this(), {batch_first(in[0], bd[0], size), batch_first(in[1], bd[1], size), in[2],
                                       in[3], in[4]})};
  }

 private:
  cpu::Interp2dMethod method_;
  std::optional<double> fill_;
};

}  // namespace

PrimitivePtr make_interp2d(cpu::Interp2dMethod method, std::optional<double> fill) {
  return std::make_shared<Interp2d>(method, fill);
}

}  // namespace tessera::detail
