#include "tessera/dtype.hpp"

#include <cstring>

#include "tessera/array.hpp"

namespace tessera {

std::string dtype_name(DType t) {
  switch (t) {
    case DType::bool_: return "bool";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
  }
  return "?";
}

namespace detail {

namespace {
template <class To, class From>
void convert_typed(const From* src, To* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<To, std::uint8_t>)
      dst[i] = src[i] != From(0) ? 1 : 0;  // bool: nonzero is true
    else
      dst[i] = static_cast<To>(src[i]);
  }
}

template <class From>
void convert_from(const From* src, void* dst, DType to, std::int64_t n) {
  switch (to) {
    case DType::bool_: convert_typed(src, static_cast<std::uint8_t*>(dst), n); break;
    case DType::i32: convert_typed(src, static_cast<std::int32_t*>(dst), n); break;
    case DType::i64: convert_typed(src, static_cast<std::int64_t*>(dst), n); break;
    case DType::f32: convert_typed(src, static_cast<float*>(dst), n); break;
    case DType::f64: convert_typed(src, static_cast<double*>(dst), n); break;
  }
}
}  // namespace

void convert(const void* src, DType from, void* dst, DType to, std::int64_t n) {
  if (n <= 0) return;
  if (from == to) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * itemsize(from));
    return;
  }
  switch (from) {
    case DType::bool_: convert_from(static_cast<const std::uint8_t*>(src), dst, to, n); break;
    case DType::i32: convert_from(static_cast<const std::int32_t*>(src), dst, to, n); break;
    case DType::i64: convert_from(static_cast<const std::int64_t*>(src), dst, to, n); break;
    case DType::f32: convert_from(static_cast<const float*>(src), dst, to, n); break;
    case DType::f64: convert_from(static_cast<const double*>(src), dst, to, n); break;
  }
}

}  // namespace detail
}  // namespace tessera
