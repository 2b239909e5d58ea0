// The interp2d primitive (see interp2d.hpp).
//
// Every query is independent of the others, and each needs the whole grid
// and table (which cell it falls in depends on the data). So the query dims
// are pass-through factors shared by xq, yq and the result, and every dim of
// x, y and f is a NeedReplication factor: the engine brings the table whole
// to every device and leaves the queries where they are, and the result
// keeps the queries' layout (its rest dims, shared with f's, are unsharded).
// No algorithm of its own is needed: the kernel (backend/cpu/eval_interp2d.cpp)
// runs on each device's block of queries.
//
// This file: the primitive's type, rule and parameters.
#include "primitives/interp2d.hpp"

#include "core/array_impl.hpp"
#include "core/validate.hpp"

namespace tessera::detail {

std::vector<TypeInfo> Interp2d::infer(std::span<const AbstractArray> in) const {
  Shape s = in[0].shape;
  s.insert(s.end(), in[4].shape.begin() + 2, in[4].shape.end());
  return {TypeInfo{s, in[4].dtype}};
}

namespace {

// The factors both directions share: the query dims (of `kind`), the
// table's grid dims x and y and its trailing dims (whole on every device).
struct InterpFactors {
  ShardingRule r;
  std::vector<int> q, rest;
  int fx = 0, fy = 0;
};
InterpFactors interp_factors(const Shape& queries, std::int64_t nx, std::int64_t ny, std::span<const std::int64_t> rest,
                             FactorKind kind) {
  InterpFactors f;
  auto add = [&](std::int64_t n, FactorKind k) {
    f.r.factors.push_back(Factor{n, k});
    return static_cast<int>(f.r.factors.size()) - 1;
  };
  for (std::int64_t n : queries) f.q.push_back(add(n, kind));
  f.fx = add(nx, FactorKind::NeedReplication);
  f.fy = add(ny, FactorKind::NeedReplication);
  for (std::int64_t n : rest) f.rest.push_back(add(n, FactorKind::NeedReplication));
  return f;
}

std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

ShardingRule Interp2d::rule(std::span<const AbstractArray> in) const {
  const Shape& f = in[4].shape;
  InterpFactors k = interp_factors(in[0].shape, in[2].shape[0], in[3].shape[0],
                                   std::span<const std::int64_t>(f).subspan(2), FactorKind::PassThrough);
  k.r.operands = {k.q, k.q, {k.fx}, {k.fy}, cat({k.fx, k.fy}, k.rest)};
  k.r.results = {cat(k.q, k.rest)};
  return std::move(k.r);
}

// One weighted row per query: 4 or 16 multiply-adds per result element.
double Interp2d::work(std::span<const AbstractArray>, const std::vector<TypeInfo>& out) const {
  const double taps = method_ == Interp2dMethod::Cubic ? 16 : 4;
  return 2 * taps * static_cast<double>(num_elements(out[0].shape));
}

namespace {

std::string interp_params(Interp2dMethod method, const std::optional<double>& fill, Interp2dDeriv deriv) {
  std::string s = "method=";
  s += method == Interp2dMethod::Cubic ? "cubic" : "linear";
  s += " fill=";
  s += fill ? number_str(*fill) : std::string("extrapolate");
  if (deriv == Interp2dDeriv::X) s += " deriv=x";
  if (deriv == Interp2dDeriv::Y) s += " deriv=y";
  return s;
}

}  // namespace

std::string Interp2d::params() const { return interp_params(method_, fill_, deriv_); }

PrimitivePtr make_interp2d(Interp2dMethod method, std::optional<double> fill, Interp2dDeriv deriv) {
  return std::make_shared<Interp2d>(method, fill, deriv);
}

// ======================================================= interp2d_transpose

std::vector<TypeInfo> Interp2dTranspose::infer(std::span<const AbstractArray> in) const {
  Shape s{in[2].shape[0], in[3].shape[0]};
  s.insert(s.end(), in[4].shape.begin() + static_cast<std::ptrdiff_t>(in[0].shape.size()), in[4].shape.end());
  return {TypeInfo{s, in[4].dtype}};
}

// The queries are summed over (a reduction factor shared by xq, yq and ct);
// the table's dims are whole on every device, as in interp2d.
ShardingRule Interp2dTranspose::rule(std::span<const AbstractArray> in) const {
  const Shape& ct = in[4].shape;
  InterpFactors k = interp_factors(in[0].shape, in[2].shape[0], in[3].shape[0],
                                   std::span<const std::int64_t>(ct).subspan(in[0].shape.size()),
                                   FactorKind::Reduction);
  k.r.operands = {k.q, k.q, {k.fx}, {k.fy}, cat(k.q, k.rest)};
  k.r.results = {cat({k.fx, k.fy}, k.rest)};
  return std::move(k.r);
}

double Interp2dTranspose::work(std::span<const AbstractArray> in, const std::vector<TypeInfo>&) const {
  const double taps = method_ == Interp2dMethod::Cubic ? 16 : 4;
  return 2 * taps * static_cast<double>(num_elements(in[4].shape));
}

std::string Interp2dTranspose::params() const { return interp_params(method_, fill_, deriv_); }

}  // namespace tessera::detail
