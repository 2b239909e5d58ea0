// Element conversion with astype's semantics, shared by the dtype
// conversions (core/dtype.cpp) and the creation kernels.
#pragma once

#include "kernels/portable.hpp"

namespace tessera::detail {

// The float range [lo, end) whose truncation fits integer To. Both ends are
// powers of two (or zero), exact in every float type.
template <class To, class From>
constexpr From int_range_lo = static_cast<From>(TESSERA_STD::numeric_limits<To>::min());
template <class To, class From>
constexpr From int_range_end = From(2) * static_cast<From>(TESSERA_STD::numeric_limits<To>::max() / 2 + 1);

// One element, with the in-graph (astype) semantics of XLA's
// ConvertElementType: to bool, nonzero (and NaN) is true; float to integer
// truncates toward zero and saturates at the target's range, NaN giving 0
// (a plain static_cast is undefined there); integer to integer wraps
// modulo 2^bits; to float rounds to nearest (overflow gives inf).
template <class To, class From>
TESSERA_HD inline To convert_one(From v) {
  if constexpr (TESSERA_STD::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (TESSERA_STD::is_integral_v<To> && TESSERA_STD::is_floating_point_v<From>) {
    if (!(v == v)) return To(0);
    if (v <= int_range_lo<To, From>) return TESSERA_STD::numeric_limits<To>::min();
    if (v >= int_range_end<To, From>) return TESSERA_STD::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

/// True when the truncation of float `v` lies in integer To's range (false
/// for NaN and inf).
template <class To, class From>
TESSERA_HD bool trunc_fits(From v) {
  const From t = lm::trunc(v);
  return t >= int_range_lo<To, From> && t < int_range_end<To, From>;
}

}  // namespace tessera::detail
