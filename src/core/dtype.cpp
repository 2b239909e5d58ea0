#include "tessera/dtype.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/convert.hpp"
#include "core/dispatch.hpp"
#include "tessera/array.hpp"

namespace tessera {

std::string dtype_name(DType t) {
  switch (t) {
    case DType::bool_: return "bool";
    case DType::u8: return "u8";
    case DType::i8: return "i8";
    case DType::u32: return "u32";
    case DType::i32: return "i32";
    case DType::u64: return "u64";
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
  for (std::int64_t i = 0; i < n; ++i) dst[i] = convert_one<To>(src[i]);
}

// True when `v` reaches the host as To without losing its magnitude: any
// value to bool (a truth test); integers in To's range; finite floats whose
// truncation is in an integer To's range; finite floats that stay finite in
// a narrower float To. Rounding (fractions to integers, digits past f32's
// precision) is not a loss of range and passes.
template <class To, class From>
bool fits(From v) {
  if constexpr (std::is_same_v<To, bool> || std::is_same_v<From, bool> || std::is_same_v<To, From>) {
    return true;
  } else if constexpr (std::is_floating_point_v<To>) {
    if constexpr (std::is_floating_point_v<From> && sizeof(From) > sizeof(To))
      return !std::isfinite(v) || std::isfinite(static_cast<To>(v));
    else
      return true;
  } else if constexpr (std::is_floating_point_v<From>) {
    return trunc_fits<To>(v);
  } else {
    return std::in_range<To>(v);
  }
}

template <class T>
std::string value_str(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, res.ptr);
  } else if constexpr (std::is_signed_v<T>) {
    return std::to_string(static_cast<long long>(v));
  } else {
    return std::to_string(static_cast<unsigned long long>(v));
  }
}

}  // namespace

void convert(const void* src, DType from, void* dst, DType to, std::int64_t n) {
  if (n <= 0) return;
  if (from == to) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * itemsize(from));
    return;
  }
  dispatch(from, [&](auto f) {
    using From = decltype(f);
    dispatch(to, [&](auto t) {
      using To = decltype(t);
      convert_typed(static_cast<const From*>(src), static_cast<To*>(dst), n);
    });
  });
}

void convert_checked(const void* src, DType from, void* dst, DType to, std::int64_t n, const char* op) {
  if (n <= 0) return;
  if (from != to) {
    dispatch(from, [&](auto f) {
      using From = decltype(f);
      dispatch(to, [&](auto t) {
        using To = decltype(t);
        const From* s = static_cast<const From*>(src);
        for (std::int64_t i = 0; i < n; ++i)
          if (!fits<To>(s[i]))
            throw DTypeError(std::string("[") + op + "] value " + value_str(s[i]) + " at index " + std::to_string(i) +
                             " does not fit in " + dtype_name(to));
      });
    });
  }
  convert(src, from, dst, to, n);
}

}  // namespace detail
}  // namespace tessera
