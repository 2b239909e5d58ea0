// Binary elementwise ops on any mix of Arrays, Python scalars (weakly
// typed, as the C++ Scalar) and NumPy values.
#include <type_traits>

#include "common.hpp"

namespace tessera_py {
namespace {

constexpr std::source_location kNoLoc{};

const char* bin_name(Bin op) {
  switch (op) {
    case Bin::add: return "add";
    case Bin::subtract: return "subtract";
    case Bin::multiply: return "multiply";
    case Bin::divide: return "divide";
    case Bin::floor_divide: return "floor_divide";
    case Bin::remainder: return "remainder";
    case Bin::pow: return "pow";
    case Bin::maximum: return "maximum";
    case Bin::minimum: return "minimum";
    case Bin::equal: return "equal";
    case Bin::not_equal: return "not_equal";
    case Bin::less: return "less";
    case Bin::less_equal: return "less_equal";
    case Bin::greater: return "greater";
    case Bin::greater_equal: return "greater_equal";
    case Bin::logical_and: return "logical_and";
    case Bin::logical_or: return "logical_or";
    case Bin::logical_xor: return "logical_xor";
  }
  return "?";
}

ts::Array aa(Bin op, const ts::Array& a, const ts::Array& b) {
  switch (op) {
#define TS_CASE(n) \
  case Bin::n: return ts::n(a, b, {}, kNoLoc);
    TS_CASE(add) TS_CASE(subtract) TS_CASE(multiply) TS_CASE(divide) TS_CASE(floor_divide) TS_CASE(remainder)
    TS_CASE(pow) TS_CASE(maximum) TS_CASE(minimum) TS_CASE(equal) TS_CASE(not_equal) TS_CASE(less)
    TS_CASE(less_equal) TS_CASE(greater) TS_CASE(greater_equal) TS_CASE(logical_and) TS_CASE(logical_or)
    TS_CASE(logical_xor)
#undef TS_CASE
  }
  throw std::logic_error("binary op");
}

// The weak default dtype of a lone Python scalar (JAX's: int32, float32).
ts::DType weak_dtype(const ts::Scalar& s) {
  switch (s.kind()) {
    case ts::Scalar::Kind::Bool: return ts::DType::bool_;
    case ts::Scalar::Kind::Int: return ts::DType::i32;
    case ts::Scalar::Kind::Float: return ts::DType::f32;
  }
  return ts::DType::f32;
}

ts::Array as_scalar_array(const ts::Scalar& s, const ts::Array& like) {
  const ts::DType t = like.dtype() == ts::DType::bool_ && s.kind() == ts::Scalar::Kind::Bool ? ts::DType::bool_
                                                                                              : weak_dtype(s);
  return ts::scalar(s, t, like.sharding().mesh(), kNoLoc);
}

// An array with a scalar on either side: the library's scalar overloads
// where it has one, else the scalar as an array of the other's mesh.
template <class A, class B>
ts::Array mixed(Bin op, const A& a, const B& b) {
  switch (op) {
#define TS_CASE(n) \
  case Bin::n: return ts::n(a, b, kNoLoc);
    TS_CASE(add) TS_CASE(subtract) TS_CASE(multiply) TS_CASE(divide) TS_CASE(floor_divide) TS_CASE(remainder)
    TS_CASE(pow) TS_CASE(maximum) TS_CASE(minimum) TS_CASE(equal) TS_CASE(not_equal) TS_CASE(less)
    TS_CASE(less_equal) TS_CASE(greater) TS_CASE(greater_equal)
#undef TS_CASE
    default:
      if constexpr (std::is_same_v<A, ts::Array>) return aa(op, a, as_scalar_array(b, a));
      else return aa(op, as_scalar_array(a, b), b);
  }
}

ts::Array as(Bin op, const ts::Array& a, const ts::Scalar& b) { return mixed(op, a, b); }

ts::Array sa(Bin op, const ts::Scalar& a, const ts::Array& b) { return mixed(op, a, b); }

}  // namespace

bool is_operand(nb::handle h) {
  if (nb::isinstance<ts::Array>(h) || as_scalar(h)) return true;
  nb::module_ np = nb::module_::import_("numpy");
  return nb::isinstance(h, np.attr("ndarray")) || nb::isinstance(h, np.attr("generic"));
}

ts::Array binary(Bin op, nb::handle a, nb::handle b) {
  const char* name = bin_name(op);
  auto sa_ = as_scalar(a), sb_ = as_scalar(b);
  const bool a_arr = nb::isinstance<ts::Array>(a), b_arr = nb::isinstance<ts::Array>(b);
  if (sa_ && sb_) {
    // Two Python scalars: the first as a weakly typed array on device 0.
    ts::Array x = ts::scalar(*sa_, weak_dtype(*sa_), default_sharding().mesh(), kNoLoc);
    return as(op, x, *sb_);
  }
  if (sb_) return as(op, to_array(a, nullptr, name), *sb_);
  if (sa_) return sa(op, *sa_, to_array(b, nullptr, name));
  if (a_arr) {
    ts::Array x = nb::cast<ts::Array>(a);
    return aa(op, x, to_array(b, &x, name));
  }
  if (b_arr) {
    ts::Array y = nb::cast<ts::Array>(b);
    return aa(op, to_array(a, &y, name), y);
  }
  ts::Array x = to_array(a, nullptr, name);
  return aa(op, x, to_array(b, &x, name));
}

}  // namespace tessera_py
