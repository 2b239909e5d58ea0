// Per-device CPU kernels of the linear-algebra family: (batched) GEMM on
// row-major blocks, local permutation of dims and local sums over dims
// (partial products are combined across devices as a ReduceOp::Sum). They
// know nothing about meshes.
//
// f32/f64 GEMMs call OpenBLAS, single-threaded: every device already has its
// own worker thread, so BLAS threads would only oversubscribe the cores.
// Integer GEMMs use a plain loop with wrap-around arithmetic (JAX's int
// matmul wraps); bool GEMM is OR over k of (a AND b), as jnp.matmul on bools.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail::cpu {

/// Limits BLAS to one thread per call. Idempotent and thread-safe; call it
/// before the first GEMM (batched_gemm does).
void init_blas();

/// A batch of GEMMs C[b] = op(A[b]) @ op(B[b]) over the multi-index b of
/// `batch` (row-major). op(A) is m x k, stored (m, k) row-major or, with
/// `trans_a`, (k, m); op(B) is k x n, stored (k, n) or, with `trans_b`,
/// (n, k). Batch strides are in elements (0 broadcasts one matrix over a
/// batch dim). C is contiguous: (batch..., m, n). k == 0 gives zeros.
struct GemmBatch {
  DType dtype = DType::f32;
  Shape batch;
  std::vector<std::int64_t> a_stride, b_stride;
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
};
void batched_gemm(const GemmBatch& g, const void* a, const void* b, void* c);

/// Copies a row-major block of `shape` into `dst` with its dims permuted:
/// dst dim i is src dim perm[i].
void permute(const void* src, const Shape& shape, const std::vector<int>& perm, void* dst, std::size_t itemsize);

/// Sums a row-major block of `shape` over the dims flagged in `summed`
/// (sizes become 1 in `dst`), in row-major order of the source (bool: OR).
void sum_dims(DType dtype, const void* src, const Shape& shape, const std::vector<bool>& summed, void* dst);

}  // namespace tessera::detail::cpu
