// Creation kernels (see creation.hpp).
#include "backend/cpu/creation.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/convert.hpp"
#include "core/dispatch.hpp"

namespace tessera::cpu {

void fill(DType t, void* out, std::int64_t n, const void* value) {
  detail::dispatch(t, [&](auto z) {
    using T = decltype(z);
    T v;
    std::memcpy(&v, value, sizeof(T));
    std::fill_n(static_cast<T*>(out), n, v);
  });
}

void arange(DType t, void* out, Slice index, double start, double step) {
  detail::dispatch(t, [&](auto z) {
    using T = decltype(z);
    T* o = static_cast<T*>(out);
    for (std::int64_t i = index.start; i < index.stop; ++i)
      o[i - index.start] = detail::convert_one<T>(start + static_cast<double>(i) * step);
  });
}

void linspace(DType t, void* out, Slice index, const LinspaceParams& p) {
  detail::dispatch(t, [&](auto z) {
    using T = decltype(z);
    T* o = static_cast<T*>(out);
    for (std::int64_t i = index.start; i < index.stop; ++i) {
      double y = linspace_value(p, i);
      if constexpr (std::is_integral_v<T>) y = std::floor(y);
      o[i - index.start] = detail::convert_one<T>(y);
    }
  });
}

void eye(DType t, void* out, Slice rows, Slice cols, std::int64_t k) {
  detail::dispatch(t, [&](auto z) {
    using T = decltype(z);
    T* o = static_cast<T*>(out);
    const std::int64_t width = cols.size();
    std::fill_n(o, rows.size() * width, T{0});
    // k is clamped to [-n, m] by the caller, so r + k cannot overflow.
    for (std::int64_t r = rows.start; r < rows.stop; ++r) {
      const std::int64_t c = r + k;
      if (c >= cols.start && c < cols.stop) o[(r - rows.start) * width + (c - cols.start)] = T{1};
    }
  });
}

}  // namespace tessera::cpu
