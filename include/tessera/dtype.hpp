// Element types.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace tessera {

/// Element type of an Array. bool is stored as one byte holding 0 or 1.
enum class DType : std::uint8_t { bool_, u8, i8, u32, i32, u64, i64, f32, f64 };

inline constexpr DType bool_ = DType::bool_;
inline constexpr DType u8 = DType::u8;
inline constexpr DType i8 = DType::i8;
inline constexpr DType u32 = DType::u32;
inline constexpr DType i32 = DType::i32;
inline constexpr DType u64 = DType::u64;
inline constexpr DType i64 = DType::i64;
inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;

/// Bytes per element.
constexpr std::size_t itemsize(DType t) {
  switch (t) {
    case DType::bool_: return 1;
    case DType::u8: return 1;
    case DType::i8: return 1;
    case DType::u32: return 4;
    case DType::i32: return 4;
    case DType::u64: return 8;
    case DType::i64: return 8;
    case DType::f32: return 4;
    case DType::f64: return 8;
  }
  return 0;
}

/// Short name as used in type strings: "bool", "u8", "i8", "u32", "i32",
/// "u64", "i64", "f32", "f64".
std::string dtype_name(DType t);

/// The DType that stores C++ type T (bool, uint8_t, int8_t, uint32_t,
/// int32_t, uint64_t, int64_t, float, double).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, bool>) return DType::bool_;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return DType::u8;
  else if constexpr (std::is_same_v<T, std::int8_t>) return DType::i8;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return DType::u32;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return DType::u64;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else static_assert(sizeof(T) == 0, "tessera: unsupported element type (use bool, uint8_t, int8_t, uint32_t, int32_t, "
                                     "uint64_t, int64_t, float or double)");
}

}  // namespace tessera
