// custom_jvp and custom_vjp: user functions with their own derivative
// rules.
//
// Called on concrete arrays, or inside jit (which traces straight through
// the function), the function just runs. Called on values of vmap, jvp or
// grad, it is bound as a primitive, so those traces apply its rules instead
// of differentiating the function's ops:
//   - custom_jvp: its JVP is the user's rule;
//   - custom_vjp: its JVP runs the user's forward function (primal results
//     and residuals) and gives a tangent through a linear primitive whose
//     transpose is the user's backward function. Reverse mode records that
//     primitive and transposes it; forward mode would have to evaluate it,
//     which custom_vjp cannot, and says so (as JAX does).
// Batching runs the function once per example (the default rule).
#include <mutex>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"
#include "tessera/autodiff.hpp"
#include "transforms/trace.hpp"

namespace tessera::detail {

namespace {

class CustomVjpLinear final : public Primitive {
 public:
  CustomVjpLinear(CustomBwd bwd, std::vector<Array> residuals, AbstractArray out)
      : bwd_(std::move(bwd)), res_(std::move(residuals)), out_(std::move(out)) {}
  std::string_view name() const override { return "custom_vjp_bwd"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray>) const override { return {TypeInfo{out_.shape, out_.dtype}}; }
  ShardingRule rule(std::span<const AbstractArray> in) const override { return own_factor_rule(in, infer(in)); }
  bool lowers_itself() const override { return true; }
  bool runs_per_member() const override { return false; }
  // Raises its own error (fail) on every platform.
  bool lowers_on_cuda() const override { return true; }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray>,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{out_.sharding};
  }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override { fail(); }
  std::vector<Array> eval_global(const ExecContext&, const std::vector<Array>&, const std::vector<TypeInfo>&,
                                 const std::vector<NamedSharding>&) const override {
    fail();
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    std::vector<Array> r(types.size());
    if (!ct[0].valid()) return r;
    std::vector<Array> got = bwd_(res_, ct[0]);
    if (got.size() != types.size())
      throw ShapeError(msg("custom_vjp", "the backward function returned " + std::to_string(got.size()) +
                                             " cotangents for " + std::to_string(types.size()) + " inputs"));
    for (size_t i = 0; i < got.size(); ++i) {
      if (!linear[i] || !got[i].valid()) continue;
      if (got[i].shape() != types[i].shape)
        throw ShapeError(msg("custom_vjp", "the backward function's cotangent " + std::to_string(i) + " is " +
                                               typeof(got[i]) + " but input " + std::to_string(i) + " is " +
                                               type_str(types[i])));
      r[i] = got[i];
    }
    return r;
  }

 private:
  [[noreturn]] static void fail() {
    throw Error("[custom_vjp] forward-mode differentiation (jvp, jacfwd, hessian) of a custom_vjp function is not "
                "supported; give it a custom_jvp rule instead");
  }
  CustomBwd bwd_;
  std::vector<Array> res_;
  AbstractArray out_;
};

class CustomFn final : public Primitive {
 public:
  CustomFn(const char* name, CustomFnBody fn, CustomJvpRule jvp, CustomFwd fwd, CustomBwd bwd)
      : name_(name), fn_(std::move(fn)), jvp_(std::move(jvp)), fwd_(std::move(fwd)), bwd_(std::move(bwd)) {}
  std::string_view name() const override { return name_; }
  // The result's type: the function run once on zeros (as shard_map's
  // probe), eagerly.
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!probed_) {
      TraceScope eager(nullptr);
      std::vector<Array> zs;
      for (const auto& a : in) zs.push_back(zeros_of(a));
      const Array r = fn_(zs);
      type_ = AbstractArray{r.shape(), r.dtype(), r.sharding()};
      probed_ = true;
    }
    return {TypeInfo{type_->shape, type_->dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override { return own_factor_rule(in, infer(in)); }
  bool lowers_itself() const override { return true; }
  bool runs_per_member() const override { return false; }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    infer(in);
    return std::vector<NamedSharding>{type_->sharding};
  }
  // fn_'s ops run on GPUs as their own ops do.
  bool lowers_on_cuda() const override { return true; }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg(name_, "internal: runs on whole arrays (eval_global)"));
  }
  // Runs between a compiled program's tasks (runs_per_member is false), so
  // `ctx` is the whole mesh: fn_ binds its ops as any caller does.
  std::vector<Array> eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>&,
                                 const std::vector<NamedSharding>& layouts) const override {
    Array r = fn_(in);
    if (!(r.sharding() == layouts[0])) r = reshard_for(ctx, r, layouts[0], name_);
    return {r};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& t_out) const override {
    std::vector<Array> ts;
    for (size_t i = 0; i < p.size(); ++i) ts.push_back(instantiate(t[i], type_of(p[i])));
    if (jvp_) {
      auto [y, ty] = jvp_(p, ts);
      if (ty.valid() && (ty.shape() != y.shape() || ty.dtype() != y.dtype()))
        throw ShapeError(msg("custom_jvp", "the rule's tangent is " + typeof(ty) + " but its result is " + typeof(y)));
      t_out = {ty};
      return {y};
    }
    auto [y, res] = fwd_(p);
    t_out = {bind1(std::make_shared<CustomVjpLinear>(bwd_, std::move(res), type_of(y)), ts)};
    return {y};
  }

 private:
  const char* name_;
  CustomFnBody fn_;
  CustomJvpRule jvp_;
  CustomFwd fwd_;
  CustomBwd bwd_;
  mutable std::mutex mu_;
  mutable bool probed_ = false;
  mutable std::optional<AbstractArray> type_;
};

}  // namespace

Array custom_call(const char* name, const CustomFnBody& fn, const CustomJvpRule& jvp, const CustomFwd& fwd,
                  const CustomBwd& bwd, const std::vector<Array>& args) {
  bool traced = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].valid()) throw Error(msg(name, "argument " + std::to_string(i) + " is an empty array"));
    traced = traced || args[i].impl()->trace;
  }
  // Nothing to transform here: the function runs (or is traced by jit).
  if (!traced || tracing_jit()) return fn(args);
  return bind1(std::make_shared<CustomFn>(name, fn, jvp, fwd, bwd), args);
}

}  // namespace tessera::detail
