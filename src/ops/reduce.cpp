// Reductions: front ends. Each checks its arguments, casts the operand to
// the reduction's dtype and binds one primitive (primitives/reduce): sum,
// prod, max, min, any and all a Reduce, mean a Reduce (a sum named "mean")
// then a divide, argmax and argmin an ArgReduce.
//
// In keepdims form the reduced dims have size 1. Device t's partial covers
// the box of the output given by its input block on the kept dims (whole on
// the reduced ones); every device of a reduction group (devices that differ
// only on the reduced dims' mesh axes) covers the same box. The natural
// output sharding keeps the kept dims' axes and replicates over the reduced
// axes. A requested out_sharding whose blocks lie inside the partial boxes
// is served directly by the reduction (reduce-scatter); any other is reached
// by a reshard afterwards. (The sharding rule and the engine do this; see
// primitives/reduce.cpp.) argmax/argmin all-reduce, then reshard to
// out_sharding.
#include "core/promote.hpp"
#include "primitives/elementwise.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/reduce.hpp"

namespace tessera {

using detail::msg;
using detail::ReduceOp;

namespace {

DType result_dtype(ReduceOp r, DType in) {
  switch (r) {
    case ReduceOp::Sum: case ReduceOp::Prod: return detail::sum_dtype(in);
    case ReduceOp::Any: case ReduceOp::All: return DType::bool_;
    default: return in;
  }
}

// Validates `opt.out_sharding` for the result's rank.
void check_out_sharding(const Array& x, std::size_t num_reduced, const ReduceOptions& opt, const char* op) {
  if (!opt.out_sharding) return;
  const int out_rank = opt.keepdims ? x.ndim() : x.ndim() - static_cast<int>(num_reduced);
  detail::resolve_spec(x.sharding().mesh(), *opt.out_sharding, out_rank, op);
}

Array reduce(ReduceOp r, const char* op, const Array& x0, const Axes& axes_in, const ReduceOptions& opt) {
  detail::check_operand(x0, op);
  std::vector<int> axes = detail::normalize_axes(axes_in, x0.ndim(), op);
  const Array x = detail::cast(x0, result_dtype(r, x0.dtype()));
  check_out_sharding(x, axes.size(), opt, op);
  return detail::bind1(detail::make_reduce(op, r, x.dtype(), std::move(axes), opt.keepdims, opt.out_sharding), {x});
}

// max and min have no identity to give an empty reduction.
void check_nonempty(const Array& x, const Axes& axes, const char* op) {
  detail::check_operand(x, op);
  for (int a : detail::normalize_axes(axes, x.ndim(), op))
    if (x.shape()[a] == 0)
      throw ShapeError(msg(op, "cannot reduce over axis " + std::to_string(a) + " of size 0 (no identity)"));
}

Array arg_reduce(bool is_max, const char* op, const Array& x, int axis_in, const ReduceOptions& opt) {
  detail::check_operand(x, op);
  const int axis = detail::normalize_axis(axis_in, x.ndim(), op);
  if (x.shape()[axis] == 0)
    throw ShapeError(msg(op, "cannot take the " + std::string(is_max ? "argmax" : "argmin") + " of axis " +
                                 std::to_string(axis) + " of size 0"));
  check_out_sharding(x, 1, opt, op);
  return detail::bind1(detail::make_arg_reduce(op, is_max, axis, opt.keepdims, opt.out_sharding), {x});
}

}  // namespace

Array sum(const Array& x, const Axes& axes, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return reduce(ReduceOp::Sum, "sum", x, axes, opt);
}
Array prod(const Array& x, const Axes& axes, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return reduce(ReduceOp::Prod, "prod", x, axes, opt);
}
Array max(const Array& x, const Axes& axes, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  check_nonempty(x, axes, "max");
  return reduce(ReduceOp::Max, "max", x, axes, opt);
}
Array min(const Array& x, const Axes& axes, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  check_nonempty(x, axes, "min");
  return reduce(ReduceOp::Min, "min", x, axes, opt);
}
Array any(const Array& x, const Axes& axes, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return reduce(ReduceOp::Any, "any", x, axes, opt);
}
Array all(const Array& x, const Axes& axes, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return reduce(ReduceOp::All, "all", x, axes, opt);
}

Array mean(const Array& x, const Axes& axes, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  detail::check_operand(x, "mean");
  const std::vector<int> ax = detail::normalize_axes(axes, x.ndim(), "mean");
  std::int64_t count = 1;
  for (int a : ax) count *= x.shape()[a];
  const DType t = detail::is_float(x.dtype()) ? x.dtype() : DType::f32;
  Array s = reduce(ReduceOp::Sum, "mean", detail::cast(x, t), axes, opt);
  return divide(s, static_cast<double>(count));  // 0/0 gives NaN, like jnp.mean of nothing
}

Array argmax(const Array& x, int axis, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return arg_reduce(true, "argmax", x, axis, opt);
}
Array argmin(const Array& x, int axis, const ReduceOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  return arg_reduce(false, "argmin", x, axis, opt);
}

}  // namespace tessera
