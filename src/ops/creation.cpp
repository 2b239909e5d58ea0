// Creation ops: zeros, ones, full, arange, linspace, eye, scalar.
//
// Each front end validates its arguments and fixes the output type (shape,
// dtype, the caller's sharding) without touching data, then binds one
// primitive from primitives/creation: every device writes its own block,
// computed from the block's global index slices. Nothing crosses devices,
// and replicas compute their copy themselves. Under jit the same primitive
// becomes a kernel step of the program.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/convert.hpp"
#include "core/creation_op.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/creation.hpp"

namespace tessera {
namespace {

using detail::msg;

// ------------------------------------------------------------- validation

/// The checks every creation op makes on its output: sizes >= 0, an element
/// and byte count that fit int64, and a sharding that fits the rank.
void check_output(const Shape& shape, DType dtype, const NamedSharding& sharding, const char* op) {
  detail::checked_nbytes(shape, dtype, op);
  sharding.check_rank(static_cast<int>(shape.size()), op);
  // A pending sum over mesh axes has no meaning for a freshly filled array
  // (ones would count the replicas); ask for the plain layout instead.
  if (!sharding.spec().unreduced().empty())
    throw ShardingError(
        msg(op, "expected a sharding without unreduced axes for a created array, got " + sharding.spec().str()));
}

/// True when the integer part of `v` fits the integer dtype `dtype` (always
/// for bool and floats).
bool fits_dtype(double v, DType dtype) {
  return detail::dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return detail::trunc_fits<T>(v);
    else return true;
  });
}

/// The element of dtype `dtype` (C++ type T) that `v` converts to, like
/// numpy's astype; DTypeError when an integer dtype cannot hold it.
template <class T>
T element_of(const Scalar& v, DType dtype, const char* op) {
  auto too_big = [&](const std::string& text) {
    return DTypeError(msg(op, "value " + text + " does not fit dtype " + dtype_name(dtype)));
  };
  if constexpr (std::is_same_v<T, bool>) {
    return v.kind() == Scalar::Kind::Float ? detail::convert_one<T>(v.as_double()) : v.as_int() != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (v.kind() == Scalar::Kind::Float) {
      if (!detail::trunc_fits<T>(v.as_double())) throw too_big(detail::number_str(v.as_double()));
      return static_cast<T>(v.as_double());
    }
    if (!detail::scalar_fits(v, dtype)) throw too_big(detail::scalar_str(v));
    return static_cast<T>(v.as_int());  // a u64 value above i64 comes back from its bits
  } else if (v.kind() == Scalar::Kind::Float) {
    return static_cast<T>(v.as_double());
  } else {
    return v.above_i64() ? static_cast<T>(static_cast<std::uint64_t>(v.as_int())) : static_cast<T>(v.as_int());
  }
}

/// DTypeError for creation ops that have no meaning for bool.
void reject_bool(DType dtype, const char* op) {
  if (dtype == DType::bool_)
    throw DTypeError(msg(op, "expected a numeric dtype (u8, i8, u32, i32, u64, i64, f32, f64), got bool"));
}

/// The text of element `v` for the primitive's parameters: exact, so two
/// fills print alike only when they write the same bytes.
template <class T>
std::string element_text(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_floating_point_v<T>) return detail::number_str(static_cast<double>(v));
  else return std::to_string(v);
}

/// Every device fills its block with one value.
Array filled(const Shape& shape, DType dtype, const NamedSharding& sharding, const Scalar& value, const char* op) {
  check_output(shape, dtype, sharding, op);
  return detail::dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    const T v = element_of<T>(value, dtype, op);
    return detail::bind1(detail::make_fill(op, shape, dtype, sharding, &v, element_text(v)), {});
  });
}

}  // namespace

// -------------------------------------------------------------- front ends

Array zeros(const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  return filled(shape, dtype, sharding, Scalar(0), "zeros");
}

Array ones(const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  return filled(shape, dtype, sharding, Scalar(1), "ones");
}

Array full(const Shape& shape, Scalar value, DType dtype, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  return filled(shape, dtype, sharding, value, "full");
}

Array scalar(Scalar value, DType dtype, const Mesh& mesh, std::source_location loc) {
  detail::CallSite site(loc);
  return filled(Shape{}, dtype, NamedSharding(mesh, P()), value, "scalar");
}

Array arange(double start, double stop, double step, DType dtype, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "arange";
  reject_bool(dtype, op);
  if (!std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    throw ShapeError(msg(op, "expected finite start, stop and step, got start=" + detail::number_str(start) +
                                 ", stop=" + detail::number_str(stop) + ", step=" + detail::number_str(step)));
  if (step == 0.0) throw ShapeError(msg(op, "step must be nonzero, got step=0"));
  const double len = std::ceil((stop - start) / step);
  if (!(len < 0x1p62))
    throw ShapeError(msg(op, "the range start=" + detail::number_str(start) + ", stop=" + detail::number_str(stop) +
                                 ", step=" + detail::number_str(step) + " has too many elements (" + detail::number_str(len) + ")"));
  const std::int64_t n = len > 0 ? static_cast<std::int64_t>(len) : 0;
  const Shape shape{n};
  check_output(shape, dtype, sharding, op);
  if (n > 0) {
    // Values are monotone in i, so the ends bound them all.
    const double first = start, last = start + static_cast<double>(n - 1) * step;
    if (!fits_dtype(first, dtype) || !fits_dtype(last, dtype))
      throw DTypeError(
          msg(op, "values from " + detail::number_str(first) + " to " + detail::number_str(last) + " do not fit dtype " + dtype_name(dtype)));
  }
  return detail::bind1(detail::make_arange(n, start, step, dtype, sharding), {});
}

Array linspace(double start, double stop, std::int64_t num, DType dtype, const NamedSharding& sharding, bool endpoint, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "linspace";
  reject_bool(dtype, op);
  if (num < 0) throw ShapeError(msg(op, "num must be >= 0, got num=" + std::to_string(num)));
  const Shape shape{num};
  check_output(shape, dtype, sharding, op);
  const detail::LinspaceParams params{start, stop, num, endpoint};
  if (num > 0) {
    const double first = std::floor(detail::linspace_value(params, 0));
    const double last = std::floor(detail::linspace_value(params, num - 1));
    if (!fits_dtype(first, dtype) || !fits_dtype(last, dtype))
      throw DTypeError(
          msg(op, "values from " + detail::number_str(start) + " to " + detail::number_str(stop) + " do not fit dtype " + dtype_name(dtype)));
  }
  return detail::bind1(detail::make_linspace(params, dtype, sharding), {});
}

Array eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "eye";
  if (n < 0 || m < 0)
    throw ShapeError(msg(op, "n and m must be >= 0, got n=" + std::to_string(n) + ", m=" + std::to_string(m)));
  const Shape shape{n, m};
  check_output(shape, dtype, sharding, op);
  // Diagonals past either edge are empty; clamping keeps row + k from
  // overflowing (and the bounds themselves from overflowing for huge n, m).
  k = std::clamp<std::int64_t>(k, -n, m);
  return detail::bind1(detail::make_eye(n, m, k, dtype, sharding), {});
}

}  // namespace tessera
