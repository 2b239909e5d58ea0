// Random kernels (see random.hpp). Every value is a function of the key and
// the element's global row-major flat index alone, which is what makes the
// result the same for every mesh and layout; the value at an index is
// kernels/random.hpp's, shared with the GPU's kernels.
#include "backend/cpu/random.hpp"

#include <type_traits>

#include "core/array_impl.hpp"
#include "core/dispatch.hpp"
#include "core/nd_index.hpp"
#include "kernels/random.hpp"

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
    for_each_element(shape, box, [&](std::int64_t off, std::uint64_t i) { o[off] = detail::uniform_at(k0, k1, i, l, h); });
  });
}

void normal(DType t, void* out, const std::vector<std::int64_t>& shape, const std::vector<Slice>& box,
            std::uint32_t k0, std::uint32_t k1) {
  dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    T* o = static_cast<T*>(out);
    for_each_element(shape, box, [&](std::int64_t off, std::uint64_t i) { o[off] = detail::normal_at<T>(k0, k1, i); });
  });
}

}  // namespace tessera::cpu
