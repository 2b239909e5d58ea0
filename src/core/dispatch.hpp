// Calling typed code for a runtime dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tessera/dtype.hpp"

namespace tessera::detail {

/// Calls f(T{}) with T the C++ type that stores dtype `t`.
///
/// bool dispatches as C++ `bool` (one byte holding 0 or 1 on every ABI we
/// build for), not as uint8_t, so it stays distinct from u8. Any conversion
/// to `bool` yields 0 or 1, so generic kernels (copies, select, max/min,
/// `static_cast<T>(a + b)` as logical or) keep the 0/1 invariant without
/// special cases; kernels with bool-specific meaning test
/// `std::is_same_v<T, bool>`. Raw bytes written into a bool buffer from
/// outside (device_put_raw) are normalised to 0/1 first.
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    case DType::bool_: return f(bool{});
    case DType::u8: return f(std::uint8_t{});
    case DType::i8: return f(std::int8_t{});
    case DType::u32: return f(std::uint32_t{});
    case DType::i32: return f(std::int32_t{});
    case DType::u64: return f(std::uint64_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
  }
  return f(float{});
}

/// A typed scratch buffer for kernels, usable with T = bool, where
/// std::vector<bool> packs bits and has no data(). Elements start as T{};
/// growing with resize() discards the contents.
template <class T>
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(std::size_t n) { resize(n); }
  void resize(std::size_t n) {
    if (n > cap_) {
      p_ = std::make_unique<T[]>(n);
      cap_ = n;
    }
    n_ = n;
  }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  std::size_t size() const { return n_; }

 private:
  std::unique_ptr<T[]> p_;
  std::size_t n_ = 0, cap_ = 0;
};

}  // namespace tessera::detail
