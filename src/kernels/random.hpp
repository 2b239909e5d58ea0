// The samplers' value at one element: a function of the key and the
// element's global row-major flat index alone (see ops/random.cpp for the
// definitions), so the CPU's kernels (backend/cpu/random) and the GPU's
// (backend/cuda/random) evaluate the same source per element and differ
// only in how they walk a block. __host__ __device__ (kernels/portable.hpp).
#pragma once

#include "kernels/erfinv.hpp"
#include "kernels/portable.hpp"
#include "kernels/threefry.hpp"

namespace tessera::detail {

/// std::nextafter(from, to) for finite float or double `from` (what the
/// samplers step from), by the bits: the libm function is host code.
template <class T>
TESSERA_HD T next_after(T from, T to) {
  using U = TESSERA_STD::conditional_t<sizeof(T) == 4, TESSERA_STD::uint32_t, TESSERA_STD::uint64_t>;
  if (lm::isnan(from) || lm::isnan(to)) return from + to;
  if (from == to) return to;
  if (from == T(0)) {  // the smallest subnormal toward `to`
    const T tiny = __builtin_bit_cast(T, U(1));
    return to > T(0) ? tiny : -tiny;
  }
  U bits = __builtin_bit_cast(U, from);
  // Away from zero when moving in from's direction, else toward it.
  if ((to > from) == (from > T(0)))
    ++bits;
  else
    --bits;
  return __builtin_bit_cast(T, bits);
}

/// A uniform draw in [0, 1) of dtype T (float or double) at flat index i.
template <class T>
TESSERA_HD T unit_at(TESSERA_STD::uint32_t k0, TESSERA_STD::uint32_t k1, TESSERA_STD::uint64_t i) {
  if constexpr (TESSERA_STD::is_same_v<T, float>)
    return unit_float(random_bits32(k0, k1, i));
  else
    return unit_double(random_bits64(k0, k1, i));
}

/// u in [0, 1) scaled to [lo, hi) (computed in double, rounded once to T,
/// then held inside the interval against rounding up to hi).
template <class T>
TESSERA_HD T scale_to(T u, T lo, T hi) {
  T y = static_cast<T>(static_cast<double>(u) * (static_cast<double>(hi) - static_cast<double>(lo)) +
                       static_cast<double>(lo));
  y = lo < y ? y : lo;  // std::max(lo, y)
  if (y >= hi) y = next_after(hi, lo);
  return y;
}

/// The uniform draw in [lo, hi) at flat index i (lo, hi values of T).
template <class T>
TESSERA_HD T uniform_at(TESSERA_STD::uint32_t k0, TESSERA_STD::uint32_t k1, TESSERA_STD::uint64_t i, T lo, T hi) {
  return scale_to(unit_at<T>(k0, k1, i), lo, hi);
}

/// The standard normal draw at flat index i. As JAX: u = max(lo, unit *
/// (hi - lo) + lo) in T with lo the first value above -1 and hi = 1 (every
/// step is exact: hi - lo rounds to 2), then sqrt(2) * erfinv(u) with XLA's
/// erfinv, all in T.
template <class T>
TESSERA_HD T normal_at(TESSERA_STD::uint32_t k0, TESSERA_STD::uint32_t k1, TESSERA_STD::uint64_t i) {
  // next_after(T(-1), T(0)), spelled out: 1 - 2^-24 (f32) or 1 - 2^-53 (f64).
  const T lo = TESSERA_STD::is_same_v<T, float> ? T(-0x1.fffffep-1f) : T(-0x1.fffffffffffffp-1);
  const T hi = T(1);
  const T scale = hi - lo;
  const T sqrt2 = static_cast<T>(1.41421356237309504880);
  const T v = unit_at<T>(k0, k1, i) * scale + lo;
  const T u = lo < v ? v : lo;  // std::max(lo, v)
  if constexpr (TESSERA_STD::is_same_v<T, float>)
    return sqrt2 * erfinv_f32(u);
  else
    return sqrt2 * erfinv_f64(u);
}

}  // namespace tessera::detail
