// Stencils and scans: diff, cumsum, convolve, convolve2d, gradient, interp.
//
// The front ends check their arguments and bind one primitive each
// (src/primitives/stencil). The engine partitions them from their rules:
// diff, gradient and the convolutions exchange halos with their neighbours
// and cumsum carries the totals of the blocks before each one, so none of
// them gathers a sharded operand; interp is elementwise in x with its tables
// replicated. Every result keeps x's sharding.
#include "primitives/stencil.hpp"

#include <algorithm>

#include "core/promote.hpp"
#include "primitives/elementwise.hpp"
#include "tessera/ops.hpp"

namespace tessera {

using detail::msg;

// ===================================================================== diff

Array diff(const Array& x, int n, int axis, const DiffOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "diff";
  detail::check_operand(x, op, "x");
  if (n < 0) throw ShapeError(msg(op, "n must be >= 0, got " + std::to_string(n)));
  if (x.ndim() == 0) throw ShapeError(msg(op, "x must be at least 1-d, got shape " + shape_str(x.shape())));
  axis = detail::normalize_axis(axis, x.ndim(), op);
  const Shape& xs = x.shape();
  // prepend / append: x's shape except along axis, or rank 0 (one row).
  auto check_extra = [&](const std::optional<Array>& e, const char* name) -> std::int64_t {
    if (!e) return 0;
    detail::check_operand(*e, op, name);
    if (e->ndim() == 0) return 1;
    bool ok = e->ndim() == x.ndim();
    for (int d = 0; ok && d < x.ndim(); ++d) ok = d == axis || e->shape()[d] == xs[d];
    if (!ok)
      throw ShapeError(msg(op, std::string(name) + " must have x's shape " + shape_str(xs) + " except along axis " +
                                   std::to_string(axis) + " (or be a scalar), got " + shape_str(e->shape())));
    return e->shape()[axis];
  };
  const std::int64_t np = check_extra(opt.prepend, "prepend");
  const std::int64_t na = check_extra(opt.append, "append");
  if (n == 0) return x;  // as jnp.diff: the input, prepend/append ignored

  DType dt = x.dtype();
  if (opt.prepend) dt = detail::promote(dt, opt.prepend->dtype());
  if (opt.append) dt = detail::promote(dt, opt.append->dtype());
  const auto what = [&] { return "prepend, x and append along axis " + std::to_string(axis); };
  const std::int64_t S = detail::checked_add(detail::checked_add(np, xs[axis], op, what), na, op, what);
  Shape out_shape = xs;
  out_shape[axis] = std::max<std::int64_t>(S - n, 0);
  detail::checked_nbytes(out_shape, dt, op);

  std::vector<Array> args{detail::cast(x, dt)};
  if (opt.prepend) args.push_back(detail::cast(*opt.prepend, dt));
  if (opt.append) args.push_back(detail::cast(*opt.append, dt));
  return detail::bind1(detail::make_diff(n, axis, opt.prepend.has_value(), opt.append.has_value()), std::move(args));
}

// =================================================================== cumsum

Array cumsum(const Array& x, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "cumsum";
  detail::check_operand(x, op, "x");
  axis = detail::normalize_axis(axis, x.ndim(), op);
  return detail::bind1(detail::make_cumsum(axis), {x});
}

// ================================================================= convolve

Array convolve(const Array& x, const Array& kernel, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "convolve";
  detail::check_operand(x, op, "x");
  detail::check_operand(kernel, op, "kernel");
  if (kernel.ndim() != 1) throw ShapeError(msg(op, "kernel must be 1-d, got shape " + shape_str(kernel.shape())));
  if (kernel.size() == 0) throw ShapeError(msg(op, "kernel must not be empty, got shape (0,)"));
  if (x.ndim() == 0) throw ShapeError(msg(op, "x must be at least 1-d, got shape " + shape_str(x.shape())));
  axis = detail::normalize_axis(axis, x.ndim(), op);
  return detail::bind1(detail::make_convolve(axis), {x, kernel});
}

// =============================================================== convolve2d

Array convolve2d(const Array& x, const Array& kernel, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "convolve2d";
  detail::check_operand(x, op, "x");
  detail::check_operand(kernel, op, "kernel");
  if (kernel.ndim() != 2) throw ShapeError(msg(op, "kernel must be 2-d, got shape " + shape_str(kernel.shape())));
  if (kernel.size() == 0) throw ShapeError(msg(op, "kernel must not be empty, got shape " + shape_str(kernel.shape())));
  if (x.ndim() < 2) throw ShapeError(msg(op, "x must be at least 2-d, got shape " + shape_str(x.shape())));
  return detail::bind1(detail::make_convolve2d(), {x, kernel});
}

// ================================================================= gradient

Array gradient(const Array& f, int axis, double spacing, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "gradient";
  detail::check_operand(f, op, "f");
  if (f.ndim() == 0) throw ShapeError(msg(op, "f must be at least 1-d, got shape " + shape_str(f.shape())));
  axis = detail::normalize_axis(axis, f.ndim(), op);
  if (f.dtype() == bool_)
    throw DTypeError(msg(op,
                         "f must be numeric, got bool (differences of booleans are not defined, as in "
                         "numpy.gradient); cast it with astype first"));
  if (f.shape()[axis] < 2)
    throw ShapeError(msg(op, "f is too small to calculate a numerical gradient along axis " + std::to_string(axis) +
                                 ": at least 2 elements are required (edge_order 1), got shape " +
                                 shape_str(f.shape())));
  return detail::bind1(detail::make_gradient(axis, spacing), {f});
}

std::vector<Array> gradient(const Array& f, std::source_location loc) {
  detail::CallSite site(loc);
  detail::check_operand(f, "gradient", "f");
  std::vector<Array> out;
  for (int axis = 0; axis < f.ndim(); ++axis) out.push_back(gradient(f, axis, 1.0, loc));
  if (out.empty()) throw ShapeError(msg("gradient", "f must be at least 1-d, got shape " + shape_str(f.shape())));
  return out;
}

// =================================================================== interp

Array interp(const Array& x, const Array& xp, const Array& fp, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "interp";
  detail::check_operand(x, op, "x");
  detail::check_operand(xp, op, "xp");
  detail::check_operand(fp, op, "fp");
  if (xp.ndim() != 1 || fp.ndim() != 1 || xp.shape() != fp.shape())
    throw ShapeError(msg(op, "xp and fp must be 1-d arrays of equal size, got xp " + shape_str(xp.shape()) +
                                 " and fp " + shape_str(fp.shape())));
  if (xp.size() == 0) throw ShapeError(msg(op, "xp and fp must not be empty, got shape (0,)"));
  return detail::bind1(detail::make_interp(), {x, xp, fp});
}

}  // namespace tessera
