// Overflow-checked size arithmetic. Every shape computation that multiplies
// or adds sizes goes through these, so a shape whose element count (or byte
// count) does not fit int64 raises ShapeError instead of wrapping around to
// a small or negative size.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/array.hpp"

namespace tessera::detail {

/// "[op] <what> has more elements than fit in int64".
[[noreturn]] void throw_too_many_elements(const char* op, const std::string& what);

/// a * b for sizes >= 0; on overflow ShapeError naming `what()`, which is
/// only called then (so callers build the description lazily).
template <class Describe>
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* op, Describe&& what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]]
    throw_too_many_elements(op, what());
  return r;
}

/// a + b for sizes >= 0; same error.
template <class Describe>
std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* op, Describe&& what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]]
    throw_too_many_elements(op, what());
  return r;
}

// checked_numel(shape, op) is declared in tessera/array.hpp (the device_put
// templates use it).

/// checked_numel(shape, op) * itemsize(dtype): the byte size of an array of
/// `shape` and `dtype`; ShapeError when it does not fit int64.
std::int64_t checked_nbytes(const Shape& shape, DType dtype, const char* op);

}  // namespace tessera::detail
