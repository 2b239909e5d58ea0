// The kernels of dot_general on CUDA GPUs (gemm.hpp): the GEMM (cuBLAS, or
// the exact kernel), the gather that permutes or expands a block, and the
// sum over dims. Each kernel is a __host__ __device__ functor run by
// launch.cuh's for_each, so an emulated GPU runs the same source as a loop.
#include "kernels/wrapping.hpp"  // first: see launch.cuh

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/gemm.hpp"
#include "core/contraction.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "tessera/error.hpp"
#include "core/dispatch.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

constexpr const char* kOp = "dot_general";

using detail::dispatch;

// Calls f(E{}) for an unsigned type of `itemsize` bytes (elements that are
// only moved).
template <class F>
void dispatch_bytes(std::size_t itemsize, F&& f) {
  switch (itemsize) {
    case 1: return f(std::uint8_t{});
    case 2: return f(std::uint16_t{});
    case 4: return f(std::uint32_t{});
    case 8: return f(std::uint64_t{});
  }
  throw Error(std::string("[") + kOp + "] internal: unsupported item size " + std::to_string(itemsize));
}

[[noreturn]] void too_many_dims(int rank) {
  throw ShapeError(std::string("[") + kOp + "] CUDA kernels take arrays of at most " + std::to_string(kMaxRank) +
                   " dims, got " + std::to_string(rank) + " that do not merge");
}

// ---------------------------------------------------------------- gather

/// A row-major walk over up to kMaxRank dims: element i's offset is its
/// multi-index dotted with `strides`.
struct Walk {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  TESSERA_HD int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = i / dims[d];
      off += (i - q * dims[d]) * strides[d];
      i = q;
    }
    return off;
  }
};

// The walk of `shape` with `strides`, size-1 dims dropped and each dim
// merged into the one before it where the pair is one run of the source
// (a permutation keeps most runs of dims together, so few dims remain).
Walk make_walk(const Shape& shape, const std::vector<int64_t>& strides) {
  Walk w;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (w.rank > 0 && w.strides[w.rank - 1] == strides[d] * shape[d]) {
      w.dims[w.rank - 1] *= shape[d];
      w.strides[w.rank - 1] = strides[d];
      continue;
    }
    if (w.rank == kMaxRank) too_many_dims(static_cast<int>(shape.size()));
    w.dims[w.rank] = shape[d];
    w.strides[w.rank] = strides[d];
    ++w.rank;
  }
  return w;
}

template <class E>
struct GatherFn {
  const E* src;
  E* dst;
  Walk walk;
  TESSERA_HD void operator()(int64_t i) const { dst[i] = src[walk.offset(i)]; }
};

// -------------------------------------------------------------- sum_dims

/// Each dst element: the sum of its source elements, in the source's
/// row-major order. The kept (not summed) dims give the element's first
/// source element (`kept`, whose dims are dst's, row-major); the summed dims
/// are walked as an odometer, last dim fastest, so the additions come in
/// the order the CPU's sum_dims makes them (it adds the source in row-major
/// order into dst, which for one dst element is this order), from 0.
template <class T>
struct SumFn {
  const T* src;
  T* dst;
  Walk kept, summed;
  int64_t count = 1;  // source elements per dst element

  TESSERA_HD static T add(T a, T b) {
    if constexpr (TESSERA_STD::is_same_v<T, bool>) {
      return a || b;
    } else {
      return detail::wrapping_add(a, b);
    }
  }

  TESSERA_HD void operator()(int64_t i) const {
    const T* s = src + kept.offset(i);
    int64_t idx[kMaxRank] = {};
    int64_t off = 0;
    T acc = T{0};
    for (int64_t r = 0; r < count; ++r) {
      acc = add(acc, s[off]);
      // Next multi-index over the summed dims.
      for (int d = summed.rank - 1; d >= 0; --d) {
        off += summed.strides[d];
        if (++idx[d] < summed.dims[d]) break;
        off -= idx[d] * summed.strides[d];
        idx[d] = 0;
      }
    }
    dst[i] = acc;
  }
};

// ----------------------------------------------------------- exact GEMM

/// C element i = (batch, row, col) of the strided batch: the dot product of
/// op(A)'s row and op(B)'s column, over p = 0..k-1 in order from 0. Integers
/// multiply and add with wrap-around (the CPU's gemm_loop), bool is OR over
/// p of (a AND b), floats add a * b unfused (--fmad=false).
template <class T>
struct GemmFn {
  const T* a;
  const T* b;
  T* c;
  int64_t m, n, k, stride_a, stride_b;
  bool trans_a, trans_b;

  TESSERA_HD void operator()(int64_t i) const {
    const int64_t r = i / n, col = i - r * n;
    const int64_t batch = r / m, row = r - batch * m;
    const T* pa = a + batch * stride_a;
    const T* pb = b + batch * stride_b;
    // Element p of the row and of the column: their offsets and steps.
    const int64_t a0 = trans_a ? row : row * k, da = trans_a ? m : 1;
    const int64_t b0 = trans_b ? col * k : col, db = trans_b ? 1 : n;
    T acc = T{0};
    for (int64_t p = 0; p < k; ++p) {
      const T av = pa[a0 + p * da], bv = pb[b0 + p * db];
      if constexpr (TESSERA_STD::is_same_v<T, bool>) {
        if (av && bv) {
          acc = true;
          break;
        }
      } else {
        acc = detail::wrapping_add(acc, detail::wrapping_mul(av, bv));
      }
    }
    c[i] = acc;
  }
};

// ---------------------------------------------------------------- cuBLAS

// Raises DeviceError "[dot_general] cuBLAS <call> on <device> failed:
// <status>" unless `s` is success.
void check_blas(cublasStatus_t s, const Current& cur, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(std::string("[") + kOp + "] cuBLAS " + call + " on CUDA device " + std::to_string(cur.device_id) +
                    " (GPU " + std::to_string(cur.ordinal) + ") failed: " + cublasGetStatusName(s));
}

/// The workspace each handle gets: NVIDIA's recommended size for Hopper
/// (32 MiB), so cuBLAS never allocates behind the stream's back. It is the
/// handle's for the thread's life, outside the device's memory pool.
constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

/// The cuBLAS handle of the calling thread: each Tessera CUDA device is one
/// worker thread driving one stream, so a thread-local handle is one handle
/// per device, used by one thread only (cuBLAS handles are not to be shared
/// between threads). Made on first use; destroyed when the thread ends.
struct BlasHandle {
  cublasHandle_t h = nullptr;
  void* workspace = nullptr;
  int ordinal = -1;
  void* stream = nullptr;

  BlasHandle() = default;
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  ~BlasHandle() { release(); }

  // Errors are not reported here: at the thread's (or the process's) end
  // the driver may be gone already.
  void release() {
    if (h) (void)cublasDestroy(h);
    if (workspace) (void)cudaFree(workspace);
    h = nullptr;
    workspace = nullptr;
    ordinal = -1;
    stream = nullptr;
  }

  // The handle for `cur`, on its stream. The settings that make results
  // reproducible and exactly FP32/FP64: no atomics (a sum's order does not
  // depend on timing), the default math mode (no TF32 and no emulated
  // tensor-op math: those need math modes set explicitly), and a fixed
  // workspace (cuBLAS picks the same algorithm run to run).
  cublasHandle_t get(const Current& cur) {
    if (h && ordinal != cur.ordinal) release();  // the thread moved to another GPU (tests)
    if (!h) {
      try {
        check_blas(cublasCreate(&h), cur, "cublasCreate");
        ordinal = cur.ordinal;
        check_blas(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED), cur, "cublasSetAtomicsMode");
        check_blas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), cur, "cublasSetMathMode");
        check(static_cast<int>(cudaMalloc(&workspace, kWorkspaceBytes)), kOp, "allocating cuBLAS's workspace");
        bind(cur);
      } catch (...) {
        release();
        throw;
      }
    } else if (stream != cur.stream) {
      bind(cur);
    }
    return h;
  }

  // cublasSetStream resets the workspace to cuBLAS's own pool: the
  // workspace is set again after it.
  void bind(const Current& cur) {
    check_blas(cublasSetStream(h, static_cast<cudaStream_t>(cur.stream)), cur, "cublasSetStream");
    check_blas(cublasSetWorkspace(h, workspace, kWorkspaceBytes), cur, "cublasSetWorkspace");
    stream = cur.stream;
  }
};

thread_local BlasHandle t_blas;

// The row-major GEMM C = op(A) op(B) as cuBLAS's column-major one: a
// row-major (r, c) matrix is the column-major (c, r) matrix, its transpose,
// so C^T (n x m, leading dim n) = op(B)^T op(A)^T: B first, then A, each
// with its own transpose flag. Column-major B^T is B stored (k, n) (no
// transpose, leading dim n) or B stored (n, k) transposed (leading dim k);
// A^T likewise (leading dim k, or m transposed).
template <class T>
void gemm_cublas(const StridedGemm& g, const T* a, const T* b, T* c, const Current& cur) {
  cublasHandle_t h = t_blas.get(cur);
  constexpr bool f32 = TESSERA_STD::is_same_v<T, float>;
  const cudaDataType type = f32 ? CUDA_R_32F : CUDA_R_64F;
  const cublasComputeType_t compute = f32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F;
  const T one = 1, zero = 0;
  check_blas(cublasGemmStridedBatchedEx_64(h, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           g.n, g.m, g.k, &one, b, type, g.trans_b ? g.k : g.n, g.stride_b, a, type,
                                           g.trans_a ? g.m : g.k, g.stride_a, &zero, c, type, g.n, g.m * g.n, g.batch,
                                           compute, CUBLAS_GEMM_DEFAULT),
             cur, "cublasGemmStridedBatchedEx");
}

}  // namespace

void gemm(const StridedGemm& g, const void* a, const void* b, void* c) {
  const Current& cur = current(kOp);
  if (g.batch <= 0 || g.m <= 0 || g.n <= 0) return;
  // Short float sums in the order the CPU uses too (kOrderedContraction).
  if (cur.emulated || (g.dtype != DType::f32 && g.dtype != DType::f64) || g.k <= detail::kOrderedContraction)
    return gemm_exact(g, a, b, c);
  if (g.dtype == DType::f32)
    gemm_cublas(g, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(c), cur);
  else
    gemm_cublas(g, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(c), cur);
}

void gemm_exact(const StridedGemm& g, const void* a, const void* b, void* c) {
  dispatch(g.dtype, [&](auto tag) {
    using T = decltype(tag);
    const GemmFn<T> f{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c), g.m, g.n, g.k,
                      g.stride_a, g.stride_b, g.trans_a, g.trans_b};
    for_each(kOp, g.batch * g.m * g.n, f);
  });
}

void gather(const void* src, const Shape& shape, const std::vector<int64_t>& strides, void* dst,
            std::size_t itemsize) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n == 0) return;
  const Walk w = make_walk(shape, strides);
  dispatch_bytes(itemsize, [&](auto tag) {
    using E = decltype(tag);
    for_each(kOp, n, GatherFn<E>{static_cast<const E*>(src), static_cast<E*>(dst), w});
  });
}

void sum_dims(DType dtype, const void* src, const Shape& shape, const std::vector<bool>& summed, void* dst) {
  // Row-major source strides; the kept and the summed dims each become a
  // walk, merged where adjacent dims of the same kind form one run.
  const int r = static_cast<int>(shape.size());
  std::vector<int64_t> st(shape.size());
  int64_t acc = 1, total = 1;
  for (int d = r - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= shape[d];
  }
  total = acc;
  Shape kept_shape, summed_shape;
  std::vector<int64_t> kept_st, summed_st;
  int64_t out_n = 1, count = 1;
  for (int d = 0; d < r; ++d) {
    (summed[d] ? summed_shape : kept_shape).push_back(shape[d]);
    (summed[d] ? summed_st : kept_st).push_back(st[d]);
    (summed[d] ? count : out_n) *= shape[d];
  }
  if (out_n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    SumFn<T> f{static_cast<const T*>(src), static_cast<T*>(dst), make_walk(kept_shape, kept_st),
               make_walk(summed_shape, summed_st), total == 0 ? 0 : count};
    for_each(kOp, out_n, f);
  });
}

bool emulated_gpu() { return current(kOp).emulated; }

}  // namespace tessera::cuda
