// searchsorted and median: front ends (see tessera/search.hpp).
//
// searchsorted binds one primitive (elementwise in the values, the sequence
// replicated). median converts x to its inexact dtype, binds median_middle
// (the two middle elements of every selection, found without moving the
// reduced data; src/primitives/search.cpp) and averages them elementwise.
#include "tessera/search.hpp"

#include <cstdint>
#include <limits>

#include "core/promote.hpp"
#include "primitives/elementwise.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/search.hpp"

namespace tessera {

using detail::msg;

Array searchsorted(const Array& sorted_sequence, const Array& values, Side side, DType dtype, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "searchsorted";
  detail::check_operand(sorted_sequence, op, "sorted_sequence");
  detail::check_operand(values, op, "values");
  if (sorted_sequence.ndim() != 1)
    throw ShapeError(msg(op, "sorted_sequence must be 1-d, got shape " + shape_str(sorted_sequence.shape())));
  if (dtype != DType::i32 && dtype != DType::i64)
    throw DTypeError(msg(op, "dtype must be i32 or i64, got " + dtype_name(dtype)));
  const std::int64_t len = sorted_sequence.shape()[0];
  if (dtype == DType::i32 && len > std::numeric_limits<std::int32_t>::max())
    throw DTypeError(msg(op, "sorted_sequence has " + std::to_string(len) +
                                 " elements, more than i32 indices can reach; pass dtype i64"));
  return detail::bind1(detail::make_searchsorted(side == Side::right, dtype), {sorted_sequence, values});
}

Array median(const Array& x, const Axes& axes, const MedianOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "median";
  detail::check_operand(x, op, "x");
  std::vector<int> ax = detail::normalize_axes(axes, x.ndim(), op);
  std::vector<Array> args{detail::cast(x, detail::is_float(x.dtype()) ? x.dtype() : DType::f32)};
  if (opt.where) {
    const Array& w = *opt.where;
    detail::check_operand(w, op, "where");
    if (w.dtype() != DType::bool_)
      throw DTypeError(msg(op, "where must be a bool array, got " + detail::describe(w)));
    bool fits = w.ndim() <= x.ndim();
    for (int d = 0; fits && d < w.ndim(); ++d) {
      const std::int64_t n = w.shape()[w.ndim() - 1 - d];
      fits = n == 1 || n == x.shape()[x.ndim() - 1 - d];
    }
    if (!fits)
      throw ShapeError(msg(op, "where of shape " + shape_str(w.shape()) + " does not broadcast to x's shape " +
                                   shape_str(x.shape())));
    args.push_back(w.shape() == x.shape() ? w : broadcast_to(w, x.shape(), {}));
  }
  const auto mid = detail::bind(detail::make_median_middle(std::move(ax), opt.keepdims, opt.where.has_value()),
                                std::move(args));
  const Array& lo = mid[0];
  const Array& hi = mid[1];
  // (lo + hi) * 0.5 rounds once (a sum that rounds is not tiny, so halving
  // it is exact; a tiny sum is exact) and gives lo back when lo == hi, inf
  // included; only a finite sum too large for the dtype needs the halves
  // added instead. NaN stays NaN.
  const std::source_location here{};
  const Array s = add(lo, hi, {}, here);
  const Array overflow =
      logical_and(logical_and(isfinite(lo, here), isfinite(hi, here), {}, here), logical_not(isfinite(s, here), here),
                  {}, here);
  return where(overflow, add(multiply(lo, 0.5, here), multiply(hi, 0.5, here), {}, here), multiply(s, 0.5, here), {},
               here);
}

}  // namespace tessera
