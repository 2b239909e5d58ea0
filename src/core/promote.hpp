// Dtype promotion and broadcasting, as jnp does them.
#pragma once

#include "core/dispatch.hpp"
#include "core/validate.hpp"

namespace tessera::detail {


bool is_float(DType t);
/// u8, i8, u32, i32, u64, i64 (not bool).
bool is_integer(DType t);
bool is_unsigned(DType t);  // u8, u32, u64
/// jnp.promote_types with x64 enabled, the join on JAX's lattice
/// (bool < u8 < u32 < u64 and bool < i8 < i32 < i64; u8 -> i16, u32 -> i64;
/// every integer < f32 < f64), with one deviation: JAX's i16 (u8 with i8)
/// becomes i32, the nearest wider type we have. u64 with a signed integer
/// gives f64, any integer with f32 gives f32.
DType promote(DType a, DType b);
/// Result of a weakly typed scalar with an array of dtype `a`: an int scalar
/// keeps an integer dtype (bool becomes i32), a float scalar keeps a float
/// dtype (others become f32).
DType promote_scalar(DType a, const Scalar& s);
/// True when an integer scalar's value lies in the range of integer dtype
/// `t` (bool and float scalars: always).
bool scalar_fits(const Scalar& s, DType t);
/// The scalar's value as text: "300", "18446744073709551615", "2.5".
std::string scalar_str(const Scalar& s);
/// DTypeError "[op] scalar V does not fit in T" unless scalar_fits(s, t).
void check_scalar_fits(const Scalar& s, DType t, const char* op);
/// JAX's _promote_integer_dtype for sum, prod and cumsum, with our default
/// integers i32 and u32: bool and narrower signed ints give i32, narrower
/// unsigned ints give u32; others are kept.
DType sum_dtype(DType t);

// ----------------------------------------------------------- broadcasting

/// NumPy broadcast of two shapes; ShapeError "[op] shapes ... cannot broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);


}  // namespace tessera::detail
