// Integer arithmetic that wraps on overflow (two's complement, as XLA and JAX
// compute) instead of being undefined behaviour in C++. Floats pass through
// unchanged, so kernels can call these for every dtype.
#pragma once

#include "kernels/portable.hpp"

namespace tessera::detail {

/// The unsigned type an integer T is computed in: at least `unsigned`, so
/// that narrow types are not promoted back to (signed) int.
template <class T, bool Narrow = (sizeof(T) < sizeof(unsigned))>
struct WrapUnsigned {
  using type = TESSERA_STD::make_unsigned_t<T>;
};
template <class T>
struct WrapUnsigned<T, true> {
  using type = unsigned;
};

template <class T>
TESSERA_HD constexpr T wrapping_add(T a, T b) {
  if constexpr (TESSERA_STD::is_integral_v<T>) {
    using U = typename WrapUnsigned<T>::type;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <class T>
TESSERA_HD constexpr T wrapping_sub(T a, T b) {
  if constexpr (TESSERA_STD::is_integral_v<T>) {
    using U = typename WrapUnsigned<T>::type;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}

template <class T>
TESSERA_HD constexpr T wrapping_mul(T a, T b) {
  if constexpr (TESSERA_STD::is_integral_v<T>) {
    using U = typename WrapUnsigned<T>::type;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <class T>
TESSERA_HD constexpr T wrapping_neg(T a) {
  if constexpr (TESSERA_STD::is_integral_v<T>) {
    using U = typename WrapUnsigned<T>::type;
    return static_cast<T>(U(0) - static_cast<U>(a));
  } else {
    return -a;
  }
}

}  // namespace tessera::detail
