// The one N-d index walk under the kernels: strided copies, broadcasting,
// reductions, permutes and batched GEMMs all step their outer dims with it
// and leave the innermost (contiguous or strided) dim to a plain loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tessera::detail {

/// Walks the multi-indices of an N-d extent in row-major order (last dim
/// fastest), carrying K linear offsets: offset(k) is the sum over d of
/// index[d] * strides_k[d]. Strides may be any sign, and 0 for a broadcast
/// operand; offsets are in whatever unit the strides are (elements, bytes).
///
///   for (NdIndex it(outer, a_strides, b_strides); !it.done(); it.next())
///     inner_loop(a + it.offset(0), b + it.offset(1));
///
/// A rank-0 extent is visited once; an extent with a zero dim not at all.
/// Offsets start at 0: a walk over a box starting elsewhere adds the offset
/// of the box's first element itself. A stride list may be longer than the
/// extent (only its first extent.size() entries are read), so a caller can
/// pass full-rank strides with the outer dims as the extent. Extent and
/// strides are copied, so they may be temporaries.
///
/// next() updates the offsets incrementally (add the stride; on a carry,
/// take back extent * stride), so a step costs O(K) amortised and the
/// inner loop sees plain integers.
template <std::size_t K>
class NdIndex {
 public:
  template <class... S>
    requires(sizeof...(S) == K)
  explicit NdIndex(std::span<const std::int64_t> extent, const S&... strides) : dims_(extent.size()) {
    const std::array<std::span<const std::int64_t>, K> st{std::span<const std::int64_t>(strides)...};
    for (std::size_t d = 0; d < dims_.size(); ++d) {
      Dim& x = dims_[d];
      x.extent = extent[d];
      if (x.extent <= 0) done_ = true;
      for (std::size_t k = 0; k < K; ++k) {
        x.stride[k] = st[k][d];
        x.wrap[k] = st[k][d] * extent[d];
      }
    }
  }

  bool done() const { return done_; }
  std::int64_t offset(std::size_t k) const { return offset_[k]; }
  /// The current index along dim d.
  std::int64_t index(std::size_t d) const { return dims_[d].index; }

  /// Steps to the next multi-index (sets done() after the last). Always
  /// inlined: it runs once per row, and in files with many kernel
  /// instantiations the compiler would otherwise make it a call, with the
  /// offsets kept in memory instead of registers.
  [[gnu::always_inline]] void next() {
    for (std::size_t d = dims_.size(); d-- > 0;) {
      Dim& x = dims_[d];
      for (std::size_t k = 0; k < K; ++k) offset_[k] += x.stride[k];
      if (++x.index < x.extent) return;
      for (std::size_t k = 0; k < K; ++k) offset_[k] -= x.wrap[k];
      x.index = 0;
    }
    done_ = true;
  }

 private:
  struct Dim {
    std::int64_t index = 0, extent = 0;
    std::array<std::int64_t, K> stride{}, wrap{};  // wrap: stride * extent, taken back on a carry
  };
  std::vector<Dim> dims_;
  std::array<std::int64_t, K> offset_{};
  bool done_ = false;
};

template <class... S>
NdIndex(std::span<const std::int64_t>, const S&...) -> NdIndex<sizeof...(S)>;

/// The first n entries of `dims`: the outer dims a caller walks with NdIndex
/// while its inner loop takes the rest.
inline std::span<const std::int64_t> first_dims(std::span<const std::int64_t> dims, int n) {
  return dims.first(static_cast<std::size_t>(n));
}

}  // namespace tessera::detail
