// The linear-algebra family on CUDA GPUs: dot_general's per-device kernel,
// the GPU counterpart of backend/cpu/dot (same contraction, same layout
// decisions), and the kernels it is made of.
//
// dot_general (gemm.cpp, plain C++) brings each operand to GEMM form on the
// GPU: summed dims summed away (sum_dims), blocks already in (batch, m, k) /
// (batch, k, n) order or its transpose used in place, any other order
// permuted by a gather kernel; batch dims are merged into the one stride a
// strided-batched GEMM takes (operands whose batch dims do not merge, e.g.
// broadcast over one batch dim of two, are gathered into contiguous
// batches); the GEMM writes the canonical (batch, lhs free, rhs free)
// result, gathered into the output order when that moves data. Nothing
// touches the data on the host.
//
// The GEMM (gemm.cu): f32 and f64 on a GPU through cuBLAS
// (cublasGemmStridedBatchedEx, FP32/FP64 compute, no TF32 or emulated
// tensor-op math, atomics not allowed, so a result is the same run to run),
// one cuBLAS handle per device worker thread on its stream. Integer and bool
// GEMMs, and every GEMM on an emulated GPU (where cuBLAS cannot run), take
// the exact kernel: each output element one dot product over k in order,
// integers with wrap-around arithmetic and bool as OR of ANDs, as the CPU's
// loop (backend/cpu/gemm.cpp) computes them. Float results agree with the
// CPU's (OpenBLAS) within rounding, not bit for bit.
//
// Each function runs on the calling thread's GPU (cuda::current), queues its
// kernels on that GPU's stream and returns without waiting. All pointers
// are device pointers. Plain C++ (no CUDA headers); a build without CUDA
// defines the kernels as raising DeviceError (no_cuda_gemm.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/contraction.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::cuda {

/// Writes the result block `out` (shape `out_shape`, in output order) of the
/// contraction `c` from the operand blocks `a` (shape `sa`) and `b` (shape
/// `sb`), all of dtype `dtype`, row-major, as cpu::dot_general does. Scratch
/// memory is taken on `device` (the Tessera device whose worker calls), or,
/// with `device` -1, from the heap, which only an emulated GPU can use.
/// Raises DeviceError "[dot_general] cuBLAS <call> failed: <status>" when
/// cuBLAS fails, ShapeError when a block has more than 8 dims that do not
/// merge.
void dot_general(const detail::Contraction& c, DType dtype, const void* a, const Shape& sa, const void* b,
                 const Shape& sb, void* out, const Shape& out_shape, int device);

// ------------------------------------------------------------ the kernels

/// A strided batch of row-major GEMMs C[i] = op(A[i]) @ op(B[i]) for i in
/// [0, batch): op(A) is m x k, stored (m, k) or, with trans_a, (k, m); op(B)
/// is k x n, stored (k, n) or, with trans_b, (n, k); each matrix contiguous,
/// A[i] at a + i * stride_a elements (0: one matrix for the whole batch),
/// B[i] likewise, C[i] at c + i * m * n. k >= 1.
struct StridedGemm {
  DType dtype = DType::f32;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  std::int64_t stride_a = 0, stride_b = 0;
  bool trans_a = false, trans_b = false;
};

/// The GEMM of `g`: cuBLAS for f32/f64 on a GPU when k exceeds
/// kOrderedContraction (core/contraction.hpp), else gemm_exact.
void gemm(const StridedGemm& g, const void* a, const void* b, void* c);

/// The GEMM of `g` with the exact kernel (every dtype; on a GPU too): each
/// C element a sum over p = 0..k-1 in order, starting from 0.
void gemm_exact(const StridedGemm& g, const void* a, const void* b, void* c);

/// dst (contiguous, row-major, `shape`) = the elements of src at offset
/// sum(index[d] * strides[d]) (elements of `itemsize` bytes; a stride may
/// be 0, to broadcast). A permutation of a block, or its expansion.
void gather(const void* src, const Shape& shape, const std::vector<std::int64_t>& strides, void* dst,
            std::size_t itemsize);

/// Sums a row-major block of `shape` over the dims flagged in `summed`
/// (sizes become 1 in `dst`), as cpu::sum_dims: each dst element adds its
/// source elements in their row-major order, from 0 (bool: OR; integers
/// wrap).
void sum_dims(DType dtype, const void* src, const Shape& shape, const std::vector<bool>& summed, void* dst);

/// True when the calling thread's GPU is emulated (its memory is the
/// host's); DeviceError when the thread drives no GPU.
bool emulated_gpu();

}  // namespace tessera::cuda
