// Reading an element of any dtype as T, on the GPU or in its emulation:
// what kernels do with an operand whose dtype is known only at run time
// (interp's tables, search's sequences, spectra's weights).
#pragma once

#include <cstdint>

#include "kernels/convert.hpp"
#include "kernels/portable.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cuda {

/// Element i of a buffer of dtype dt, converted to T as detail::convert does.
template <class T>
TESSERA_HD T load_as(const void* p, DType dt, std::int64_t i) {
  switch (dt) {
    case DType::bool_: return detail::convert_one<T>(static_cast<const bool*>(p)[i]);
    case DType::u8: return detail::convert_one<T>(static_cast<const std::uint8_t*>(p)[i]);
    case DType::i8: return detail::convert_one<T>(static_cast<const std::int8_t*>(p)[i]);
    case DType::u32: return detail::convert_one<T>(static_cast<const std::uint32_t*>(p)[i]);
    case DType::i32: return detail::convert_one<T>(static_cast<const std::int32_t*>(p)[i]);
    case DType::u64: return detail::convert_one<T>(static_cast<const std::uint64_t*>(p)[i]);
    case DType::i64: return detail::convert_one<T>(static_cast<const std::int64_t*>(p)[i]);
    case DType::f32: return detail::convert_one<T>(static_cast<const float*>(p)[i]);
    case DType::f64: return detail::convert_one<T>(static_cast<const double*>(p)[i]);
  }
  return T{};
}

/// out[i] = element i of p (dtype dt) as T: a for_each functor.
template <class T>
struct LoadAsKernel {
  const void* p;
  DType dt;
  T* out;
  TESSERA_HD void operator()(std::int64_t i) const { out[i] = load_as<T>(p, dt, i); }
};

}  // namespace tessera::cuda
