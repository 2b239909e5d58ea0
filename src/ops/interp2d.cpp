// interp2d: interpolation on a 2-d grid (interpax.interp2d, "linear" and
// "cubic"). The front end checks the operands, brings f to its inexact
// dtype and binds one primitive (src/primitives/interp2d), elementwise over
// the queries with the grid and table whole on every device.
#include "core/promote.hpp"
#include "primitives/elementwise.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/interp2d.hpp"
#include "tessera/interpolate.hpp"

namespace tessera {

using detail::msg;

Array interp2d(const Array& xq, const Array& yq, const Array& x, const Array& y, const Array& f,
               const Interp2dOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "interp2d";
  detail::check_operand(xq, op, "xq");
  detail::check_operand(yq, op, "yq");
  detail::check_operand(x, op, "x");
  detail::check_operand(y, op, "y");
  detail::check_operand(f, op, "f");

  detail::Interp2dMethod method;
  if (opt.method == "cubic") {
    method = detail::Interp2dMethod::Cubic;
  } else if (opt.method == "linear") {
    method = detail::Interp2dMethod::Linear;
  } else {
    std::string text = "unknown method \"";
    text += opt.method;
    text += "\"; expected \"linear\" or \"cubic\"";
    throw ValueError(msg(op, text));
  }

  auto check_knots = [&](const Array& k, const char* name) {
    if (k.ndim() != 1) {
      std::string text = name;
      text += " must be 1-d, got shape ";
      text += shape_str(k.shape());
      throw ShapeError(msg(op, text));
    }
    if (k.shape()[0] < 2) {
      std::string text = name;
      text += " needs at least 2 points, got shape ";
      text += shape_str(k.shape());
      throw ShapeError(msg(op, text));
    }
  };
  check_knots(x, "x");
  check_knots(y, "y");
  const std::int64_t nx = x.shape()[0], ny = y.shape()[0];
  if (f.ndim() < 2 || f.shape()[0] != nx || f.shape()[1] != ny) {
    std::string text = "f must have shape (nx, ny, ...) = (";
    text += std::to_string(nx);
    text += ", ";
    text += std::to_string(ny);
    text += ", ...) for x ";
    text += shape_str(x.shape());
    text += " and y ";
    text += shape_str(y.shape());
    text += ", got ";
    text += shape_str(f.shape());
    throw ShapeError(msg(op, text));
  }
  if (xq.shape() != yq.shape()) {
    std::string text = "xq and yq must have the same shape, got xq ";
    text += shape_str(xq.shape());
    text += " and yq ";
    text += shape_str(yq.shape());
    throw ShapeError(msg(op, text));
  }

  const DType dt = detail::is_float(f.dtype()) ? f.dtype() : DType::f32;
  Shape out_shape = xq.shape();
  out_shape.insert(out_shape.end(), f.shape().begin() + 2, f.shape().end());
  detail::checked_nbytes(out_shape, dt, op);
  return detail::bind1(detail::make_interp2d(method, opt.fill), {xq, yq, x, y, detail::cast(f, dt)});
}

}  // namespace tessera
