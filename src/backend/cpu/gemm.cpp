// CPU kernels of the linear-algebra family (see gemm.hpp).
#include "backend/cpu/gemm.hpp"
#include "core/contraction.hpp"
#include "core/dispatch.hpp"
#include "core/nd_index.hpp"
#include "kernels/wrapping.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "tessera/error.hpp"

extern "C" void openblas_set_num_threads(int);

namespace tessera::detail::cpu {

namespace {

// Wrap-around arithmetic for integers (signed overflow is undefined in C++,
// JAX's int matmul wraps), plain arithmetic for floats.
template <class T>
T mul_add(T acc, T a, T b) {
  return detail::wrapping_add(acc, detail::wrapping_mul(a, b));
}

template <class T>
T add(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<T>((a != 0) || (b != 0));
  } else {
    return detail::wrapping_add(a, b);
  }
}

// C (m x n) = op(A) @ op(B) with a plain loop; i-p-j order keeps the inner
// loop contiguous in C (and in B when not transposed).
template <class T>
void gemm_loop(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b, T* c) {
  std::fill(c, c + m * n, T{0});
  for (std::int64_t i = 0; i < m; ++i) {
    T* crow = c + i * n;
    for (std::int64_t p = 0; p < k; ++p) {
      const T av = ta ? a[p * m + i] : a[i * k + p];
      if (av == T{0}) continue;
      if constexpr (std::is_same_v<T, bool>) {
        for (std::int64_t j = 0; j < n; ++j)
          if ((tb ? b[j * k + p] : b[p * n + j]) != 0) crow[j] = 1;
      } else if (!tb) {
        const T* brow = b + p * n;
        for (std::int64_t j = 0; j < n; ++j) crow[j] = mul_add(crow[j], av, brow[j]);
      } else {
        for (std::int64_t j = 0; j < n; ++j) crow[j] = mul_add(crow[j], av, b[j * k + p]);
      }
    }
  }
}

// A short float contraction in the order every backend uses
// (kOrderedContraction): C[i][j] = ((0 + a0 b0) + a1 b1) + ..., by rows of C
// (i-p-j: the inner loop runs along C's row, and B's when not transposed).
template <class T>
void gemm_ordered(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b, T* c) {
  std::fill(c, c + m * n, T{0});
  for (std::int64_t i = 0; i < m; ++i) {
    T* crow = c + i * n;
    for (std::int64_t p = 0; p < k; ++p) {
      const T av = ta ? a[p * m + i] : a[i * k + p];
      if (!tb) {
        const T* brow = b + p * n;
        for (std::int64_t j = 0; j < n; ++j) crow[j] = crow[j] + av * brow[j];
      } else {
        for (std::int64_t j = 0; j < n; ++j) crow[j] = crow[j] + av * b[j * k + p];
      }
    }
  }
}

int blas_int(std::int64_t v) {
  if (v > INT_MAX)
    throw ShapeError("[gemm] a local matrix dimension of " + std::to_string(v) +
                " exceeds the BLAS 32-bit index range; shard the operands over more devices");
  return static_cast<int>(v);
}

template <class T>
void gemm_one(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b, T* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + m * n, T{0});
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (k <= kOrderedContraction) return gemm_ordered(ta, tb, m, n, k, a, b, c);
    // A narrow product (a tall operand against a few columns, as a chunk of
    // Jacobian directions makes) runs in blocks of rows: OpenBLAS packs the
    // tall operand for the whole call, and blocks keep that packed copy in
    // cache (1.4x faster at n = 16, k = 512). Each element's sum over k is
    // the same whatever the rows around it, so the bits do not change. A
    // block keeps m*n*k >= 2^21, above the size where OpenBLAS switches to
    // its small-matrix kernels (another summation order: for a 848 x 512 by
    // 512 x 1 block they differ in the last bit).
    if (n <= 64 && !ta) {
      const std::int64_t rows = std::max<std::int64_t>(256, (std::int64_t{1} << 21) / std::max<std::int64_t>(1, n * k));
      if (m >= 2 * rows) {
        for (std::int64_t i = 0, len = 0; i < m; i += len) {
          len = m - i < 2 * rows ? m - i : rows;  // the last block takes the remainder: none is under `rows`
          gemm_one(ta, tb, len, n, k, a + i * k, b, c + i * n);
        }
        return;
      }
    }
    const int M = blas_int(m), N = blas_int(n), K = blas_int(k);
    const int lda = ta ? M : K, ldb = tb ? K : N;
    const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, N);
    else
      cblas_dgemm(CblasRowMajor, TA, TB, M, N, K, 1.0, a, lda, b, ldb, 0.0, c, N);
  } else {
    gemm_loop(ta, tb, m, n, k, a, b, c);
  }
}

template <class T>
void batched(const GemmBatch& g, const T* a, const T* b, T* c) {
  if (g.m == 0 || g.n == 0) return;
  const std::int64_t csize = g.m * g.n;
  for (NdIndex it(g.batch, g.a_stride, g.b_stride); !it.done(); it.next(), c += csize)
    gemm_one(g.trans_a, g.trans_b, g.m, g.n, g.k, a + it.offset(0), b + it.offset(1), c);
}

template <class E>
void permute_typed(const E* src, const Shape& shape, const std::vector<int>& perm, E* dst) {
  const int r = static_cast<int>(shape.size());
  std::int64_t total = 1;
  for (auto s : shape) total *= s;
  if (total == 0) return;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  std::vector<std::int64_t> sstride(r);
  std::int64_t acc = 1;
  for (int d = r - 1; d >= 0; --d) {
    sstride[d] = acc;
    acc *= shape[d];
  }
  // Walk dst in row-major order; src stride per dst dim.
  std::vector<std::int64_t> dsz(r), dst_src_stride(r);
  for (int i = 0; i < r; ++i) {
    dsz[i] = shape[perm[i]];
    dst_src_stride[i] = sstride[perm[i]];
  }
  const std::int64_t inner = dsz[r - 1], istride = dst_src_stride[r - 1];
  E* out = dst;
  for (NdIndex it(first_dims(dsz, r - 1), dst_src_stride); !it.done(); it.next(), out += inner) {
    const E* s = src + it.offset(0);
    for (std::int64_t j = 0; j < inner; ++j) out[j] = s[j * istride];
  }
}

}  // namespace

void init_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void batched_gemm(const GemmBatch& g, const void* a, const void* b, void* c) {
  init_blas();
  detail::dispatch(g.dtype, [&](auto t) {
    using T = decltype(t);
    batched(g, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c));
  });
}

void permute(const void* src, const Shape& shape, const std::vector<int>& perm, void* dst, std::size_t itemsize) {
  switch (itemsize) {
    case 1: return permute_typed(static_cast<const std::uint8_t*>(src), shape, perm, static_cast<std::uint8_t*>(dst));
    case 2: return permute_typed(static_cast<const std::uint16_t*>(src), shape, perm, static_cast<std::uint16_t*>(dst));
    case 4: return permute_typed(static_cast<const std::uint32_t*>(src), shape, perm, static_cast<std::uint32_t*>(dst));
    case 8: return permute_typed(static_cast<const std::uint64_t*>(src), shape, perm, static_cast<std::uint64_t*>(dst));
    default: throw Error("[permute] unsupported item size " + std::to_string(itemsize));
  }
}

void sum_dims(DType dtype, const void* src, const Shape& shape, const std::vector<bool>& summed, void* dst) {
  detail::dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    const T* s = static_cast<const T*>(src);
    T* d = static_cast<T*>(dst);
    const int r = static_cast<int>(shape.size());
    std::int64_t total = 1, out_total = 1;
    for (int i = 0; i < r; ++i) {
      total *= shape[i];
      if (!summed[i]) out_total *= shape[i];
    }
    std::fill(d, d + out_total, T{0});
    if (total == 0) return;
    // Destination stride per source dim (0 for summed dims).
    std::vector<std::int64_t> dstride(r, 0);
    std::int64_t acc = 1;
    for (int i = r - 1; i >= 0; --i) {
      if (summed[i]) continue;
      dstride[i] = acc;
      acc *= shape[i];
    }
    // The source is read in order, a row of the last dim at a time.
    const std::int64_t inner = r > 0 ? shape[r - 1] : 1, istride = r > 0 ? dstride[r - 1] : 0;
    for (NdIndex it(first_dims(shape, std::max(r - 1, 0)), dstride); !it.done(); it.next(), s += inner) {
      T* row = d + it.offset(0);
      for (std::int64_t j = 0; j < inner; ++j) row[j * istride] = add(row[j * istride], s[j]);
    }
  });
}

}  // namespace tessera::detail::cpu
