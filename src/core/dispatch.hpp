// Calling typed code for a runtime dtype.
#pragma once

#include <cstdint>

#include "tessera/dtype.hpp"

namespace tessera::detail {

/// Calls f(T{}) with T the C++ type that stores dtype `t` (bool as uint8_t).
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    case DType::bool_: return f(std::uint8_t{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
  }
  return f(float{});
}

}  // namespace tessera::detail
