// The indexing kernels on CUDA GPUs (indexing.hpp).
//
// scatter_rows sums without atomics, in the CPU's order: one thread per
// element of the partial block, which starts from zero and adds the updates
// landing on its row in increasing update-row order, the order the CPU's
// loop over the update rows adds them (backend/cpu/indexing.cpp). Which
// update rows land on which row (`row_start`, `order`: a stable bucketing by
// target row) is made by the caller; the sum of one element is then a
// sequential walk, so the result does not depend on the launch.
#include "kernels/wrapping.hpp"  // first: see launch.cuh

#include <cstdint>
#include <type_traits>

#include "backend/cuda/indexing.hpp"
#include "backend/cuda/launch.cuh"
#include "core/dispatch.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

// The unsigned integer of W bytes: what take moves.
template <int W>
using Bits = std::conditional_t<W == 1, std::uint8_t, std::conditional_t<W == 4, std::uint32_t, std::uint64_t>>;

/// acc += v as the CPU accumulates: bools or, integers wrap.
template <class T>
TESSERA_HD void accumulate(T& acc, T v) {
  if constexpr (std::is_same_v<T, bool>)
    acc = acc || v;
  else
    acc = detail::wrapping_add(acc, v);
}

template <int W>
struct TakeKernel {
  const Bits<W>* x;
  const int64_t* idx;
  int64_t n_axis, nidx, inner;
  Bits<W>* out;
  // e = (o * nidx + j) * inner + k
  TESSERA_HD void operator()(int64_t e) const {
    const int64_t q = e / inner, k = e - q * inner;
    const int64_t o = q / nidx, j = q - o * nidx;
    out[e] = x[(o * n_axis + idx[j]) * inner + k];
  }
};

template <class T>
struct ScatterKernel {
  T* partial;
  int64_t inner;
  const int64_t* row_start;
  const int64_t* order;
  const T* upd;
  // e = r * inner + k: one element of the partial, summed from zero.
  TESSERA_HD void operator()(int64_t e) const {
    const int64_t r = e / inner, k = e - r * inner;
    T acc = T(0);
    for (int64_t p = row_start[r]; p < row_start[r + 1]; ++p) accumulate(acc, upd[order[p] * inner + k]);
    partial[e] = acc;
  }
};

template <class T>
struct AddKernel {
  const T* a;
  const T* b;
  T* out;
  TESSERA_HD void operator()(int64_t i) const {
    T v = a[i];
    accumulate(v, b[i]);
    out[i] = v;
  }
};

using detail::dispatch;

}  // namespace

void take(const void* x, std::int64_t outer, std::int64_t n_axis, std::int64_t inner, std::size_t itemsize,
          const std::int64_t* idx, std::int64_t nidx, void* out) {
  const int64_t n = outer * nidx * inner;
  if (n <= 0) return;
  if (itemsize == 1)
    for_each("take", n, TakeKernel<1>{static_cast<const Bits<1>*>(x), idx, n_axis, nidx, inner, static_cast<Bits<1>*>(out)});
  else if (itemsize == 4)
    for_each("take", n, TakeKernel<4>{static_cast<const Bits<4>*>(x), idx, n_axis, nidx, inner, static_cast<Bits<4>*>(out)});
  else
    for_each("take", n, TakeKernel<8>{static_cast<const Bits<8>*>(x), idx, n_axis, nidx, inner, static_cast<Bits<8>*>(out)});
}

void scatter_rows(DType t, void* partial, std::int64_t rows, std::int64_t inner, const std::int64_t* row_start,
                  const std::int64_t* order, const void* upd) {
  if (rows <= 0 || inner <= 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for_each("scatter_rows", rows * inner,
             ScatterKernel<T>{static_cast<T*>(partial), inner, row_start, order, static_cast<const T*>(upd)});
  });
}

void add(DType t, const void* a, const void* b, void* out, std::int64_t n) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for_each("add", n, AddKernel<T>{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out)});
  });
}

}  // namespace tessera::cuda
