#include "core/promote.hpp"

#include <algorithm>
#include <utility>

#include "tessera/error.hpp"

namespace tessera::detail {

bool is_float(DType t) { return t == DType::f32 || t == DType::f64; }
bool is_integer(DType t) { return t != DType::bool_ && !is_float(t); }
bool is_unsigned(DType t) { return t == DType::u8 || t == DType::u32 || t == DType::u64; }

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::bool_) return b;
  if (b == DType::bool_) return a;
  // Floats: the wider one; an integer joins a float at that float.
  if (is_float(a) || is_float(b)) {
    if (is_float(a) && is_float(b)) return itemsize(a) >= itemsize(b) ? a : b;
    return is_float(a) ? a : b;
  }
  // Same signedness: the wider one.
  if (is_unsigned(a) == is_unsigned(b)) return itemsize(a) >= itemsize(b) ? a : b;
  // Mixed: the signed type that holds both, i.e. the wider of the signed
  // operand and twice the unsigned one's width (JAX's u8 -> i16 -> our i32,
  // u32 -> i64); past 64 bits (u64) the lattice goes to floats.
  const DType u = is_unsigned(a) ? a : b, s = is_unsigned(a) ? b : a;
  if (u == DType::u64) return DType::f64;
  const std::size_t need = std::max(itemsize(s), 2 * itemsize(u));
  return need <= 4 ? DType::i32 : DType::i64;
}

DType promote_scalar(DType a, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return a;
    case Scalar::Kind::Int: return a == DType::bool_ ? DType::i32 : a;
    case Scalar::Kind::Float: return is_float(a) ? a : DType::f32;
  }
  return a;
}

bool scalar_fits(const Scalar& s, DType t) {
  if (s.kind() != Scalar::Kind::Int || !is_integer(t)) return true;
  if (s.above_i64()) return t == DType::u64;
  return dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return std::in_range<T>(s.as_int());
    else return true;
  });
}

std::string scalar_str(const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return s.as_int() ? "true" : "false";
    case Scalar::Kind::Int:
      return s.above_i64() ? std::to_string(static_cast<unsigned long long>(s.as_int())) : std::to_string(s.as_int());
    case Scalar::Kind::Float: return number_str(s.as_double());
  }
  return "?";
}

void check_scalar_fits(const Scalar& s, DType t, const char* op) {
  if (!scalar_fits(s, t))
    throw DTypeError(msg(op, "scalar " + scalar_str(s) + " does not fit in " + dtype_name(t)));
}

DType sum_dtype(DType t) {
  switch (t) {
    case DType::bool_: case DType::i8: return DType::i32;
    case DType::u8: return DType::u32;
    default: return t;
  }
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(msg(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast together"));
    out[i] = da == 1 ? db : da;
  }
  // (2^40, 1) with (1, 2^40): both fit, the broadcast does not.
  checked_numel(out, op);
  return out;
}

}  // namespace tessera::detail
