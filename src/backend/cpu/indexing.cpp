// The indexing kernels (see indexing.hpp).
#include "backend/cpu/indexing.hpp"

#include <cstring>
#include <type_traits>

#include "core/dispatch.hpp"
#include "kernels/wrapping.hpp"

namespace tessera::detail::cpu {

namespace {

template <class T>
inline void accumulate(T& acc, T v) {
  if constexpr (std::is_same_v<T, bool>)
    acc = acc || v;  // bool: logical or
  else
    acc = detail::wrapping_add(acc, v);  // integers wrap like XLA instead of UB
}

/// Calls f(I{}) with I the C++ type of an integer dtype (the index dtypes).
template <class F>
decltype(auto) dispatch_index(DType t, F&& f) {
  switch (t) {
    case DType::u8: return f(std::uint8_t{});
    case DType::i8: return f(std::int8_t{});
    case DType::u32: return f(std::uint32_t{});
    case DType::i32: return f(std::int32_t{});
    case DType::u64: return f(std::uint64_t{});
    default: return f(std::int64_t{});
  }
}

template <class I>
inline std::int64_t index_value(I v) {
  if constexpr (std::is_same_v<I, std::uint64_t>)
    return v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
  else
    return static_cast<std::int64_t>(v);
}

/// take with rows of a compile-time size (a constant memcpy compiles to one
/// load and store).
template <std::size_t B>
void take_fixed(const unsigned char* x, std::int64_t outer, std::int64_t n_axis, const std::vector<std::int64_t>& idx,
                unsigned char* out) {
  const auto nidx = static_cast<std::int64_t>(idx.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < nidx; ++j) std::memcpy(out + (o * nidx + j) * B, x + (o * n_axis + idx[j]) * B, B);
}

template <class T, class I>
void scatter_rows_kernel(T* partial, Slice rows, std::int64_t inner, const I* idx, const T* upd, std::int64_t nrows,
                         std::int64_t n, bool wrap_negative) {
  for (std::int64_t i = 0; i < nrows; ++i) {
    std::int64_t r = index_value(idx[i]);
    if (wrap_negative && r < 0) r += n;
    if (r < rows.start || r >= rows.stop) continue;
    T* dst = partial + (r - rows.start) * inner;
    const T* src = upd + i * inner;
    for (std::int64_t k = 0; k < inner; ++k) accumulate(dst[k], src[k]);
  }
}

template <class T>
void add_kernel(const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    T v = a[i];
    accumulate(v, b[i]);
    out[i] = v;
  }
}

}  // namespace

std::vector<std::int64_t> load_indices(const void* p, DType t, std::int64_t n) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  dispatch_index(t, [&](auto tag) {
    using I = decltype(tag);
    const I* q = static_cast<const I*>(p);
    for (std::int64_t i = 0; i < n; ++i) out[i] = index_value(q[i]);
  });
  return out;
}

void take(const void* xp, std::int64_t outer, std::int64_t n_axis, std::int64_t row_bytes,
          const std::vector<std::int64_t>& idx, void* outp) {
  const auto* x = static_cast<const unsigned char*>(xp);
  auto* out = static_cast<unsigned char*>(outp);
  const auto nidx = static_cast<std::int64_t>(idx.size());
  if (row_bytes == 0 || nidx == 0) return;
  if (row_bytes == 8) return take_fixed<8>(x, outer, n_axis, idx, out);
  if (row_bytes == 4) return take_fixed<4>(x, outer, n_axis, idx, out);
  if (row_bytes == 1) return take_fixed<1>(x, outer, n_axis, idx, out);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < nidx; ++j)
      std::memcpy(out + (o * nidx + j) * row_bytes, x + (o * n_axis + idx[j]) * row_bytes,
                  static_cast<std::size_t>(row_bytes));
}

void scatter_rows(DType t, void* partial, Slice rows, std::int64_t inner, DType it, const void* idx, const void* upd,
                  std::int64_t nrows, std::int64_t n, bool wrap_negative) {
  detail::dispatch(t, [&](auto ttag) {
    using T = decltype(ttag);
    dispatch_index(it, [&](auto itag) {
      using I = decltype(itag);
      scatter_rows_kernel(static_cast<T*>(partial), rows, inner, static_cast<const I*>(idx),
                          static_cast<const T*>(upd), nrows, n, wrap_negative);
    });
  });
}

void add(DType t, const void* a, const void* b, void* out, std::int64_t n) {
  detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    add_kernel(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n);
  });
}

}  // namespace tessera::detail::cpu
