// Random kernels (see random.hpp). Every value is a function of the key and
// the element's global row-major flat index alone, which is what makes the
// result the same for every mesh and layout.
#include "backend/cpu/random.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/erfinv.hpp"
#include "core/array_impl.hpp"
#include "core/dispatch.hpp"
#include "core/nd_index.hpp"
#include "kernels/threefry.hpp"

namespace tessera::cpu {

namespace {

/// Calls f(offset, i) for each element of the block `index` of an array of
/// `shape`: offset in the row-major block, i the global row-major flat index.
template <class F>
void for_each_element(const std::vector<std::int64_t>& shape, const std::vector<Slice>& index, F&& f) {
  const int r = static_cast<int>(shape.size());
  for (const auto& s : index)
    if (s.size() <= 0) return;
  if (r == 0) {
    f(std::int64_t{0}, std::uint64_t{0});
    return;
  }
  std::vector<std::int64_t> stride(r, 1);
  for (int d = r - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  std::int64_t first = 0;  // global flat index of the block's first row
  for (int d = 0; d < r - 1; ++d) first += index[d].start * stride[d];
  const Shape size = detail::box_shape(index);
  const Slice inner = index[r - 1];
  std::int64_t offset = 0;
  for (detail::NdIndex it(detail::first_dims(size, r - 1), stride); !it.done(); it.next()) {
    const std::int64_t row = first + it.offset(0);
    for (std::int64_t j = inner.start; j < inner.stop; ++j) f(offset++, static_cast<std::uint64_t>(row + j));
  }
}

/// A uniform draw in [0, 1) of dtype T at flat index i.
template <class T>
T unit_at(std::uint32_t k0, std::uint32_t k1, std::uint64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return detail::unit_float(detail::random_bits32(k0, k1, i));
  else
    return detail::unit_double(detail::random_bits64(k0, k1, i));
}

/// u in [0, 1) scaled to [lo, hi) (computed in double, rounded once to T,
/// then held inside the interval against rounding up to hi).
template <class T>
T scale_to(T u, T lo, T hi) {
  T y = static_cast<T>(static_cast<double>(u) * (static_cast<double>(hi) - static_cast<double>(lo)) +
                       static_cast<double>(lo));
  y = std::max(lo, y);
  if (y >= hi) y = std::nextafter(hi, lo);
  return y;
}

/// Calls f(T{}) for the float dtypes the samplers draw.
template <class F>
void dispatch_float(DType t, F&& f) {
  detail::dispatch(t, [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<T>) f(z);
  });
}

}  // namespace

void uniform(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
             std::uint32_t k0, std::uint32_t k1, double lo, double hi) {
  dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    T* o = static_cast<T*>(out);
    const T l = static_cast<T>(lo), h = static_cast<T>(hi);
    for_each_element(shape, box, [&](std::int64_t off, std::uint64_t i) { o[off] = scale_to(unit_at<T>(k0, k1, i), l, h); });
  });
}

void normal(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
            std::uint32_t k0, std::uint32_t k1) {
  dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    T* o = static_cast<T*>(out);
    // As JAX: u = max(lo, unit * (hi - lo) + lo) in T with lo the first value
    // above -1 and hi = 1 (every step is exact: hi - lo rounds to 2), then
    // sqrt(2) * erfinv(u) with XLA's erfinv, all in T.
    const T lo = std::nextafter(T(-1), T(0));
    const T hi = T(1);
    const T scale = hi - lo;
    const T sqrt2 = static_cast<T>(1.41421356237309504880);
    for_each_element(shape, box, [&](std::int64_t off, std::uint64_t i) {
      const T u = std::max(lo, unit_at<T>(k0, k1, i) * scale + lo);
      if constexpr (std::is_same_v<T, float>)
        o[off] = sqrt2 * detail::erfinv_f32(u);
      else
        o[off] = sqrt2 * detail::erfinv_f64(u);
    });
  });
}

}  // namespace tessera::cpu
