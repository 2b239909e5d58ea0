// The CUDA kernels of interp2d and its transpose (primitives/interp2d.hpp),
// giving the CPU kernels' bits (backend/cpu/interp2d.cpp): the same cells,
// the same 1-d weights in f64 and the same sums in the same order.
//
// Each function runs on the calling thread's GPU (cuda::current), queues
// its kernels on its stream and returns without waiting. All pointers are
// device pointers; `scratch` is device memory of interp2d_scratch(...)
// bytes. Plain C++ (no CUDA headers); a build without CUDA defines these as
// raising DeviceError (no_cuda_interp2d.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/interp2d.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cuda {

using detail::Interp2dDeriv;
using detail::Interp2dGrid;
using detail::Interp2dMethod;

/// What an interp2d call computes (the primitive's parameters).
struct Interp2dParams {
  Interp2dMethod method = Interp2dMethod::Linear;
  bool has_fill = false;  // false: extrapolate
  double fill = 0.0;
  Interp2dDeriv deriv = Interp2dDeriv::Value;
};

/// Scratch bytes of a call over n queries (transposed: interp2d_transpose).
std::size_t interp2d_scratch(const Interp2dParams& p, const Interp2dGrid& g, std::int64_t n, bool transposed);

/// cpu::interp2d: out[q, :] (rest elements of dtype t, f32 or f64) = the
/// interpolant of f (nx, ny, rest) at (xq[q], yq[q]) for q in [0, n).
void interp2d(const Interp2dParams& p, const Interp2dGrid& g, const void* xq, DType xq_dtype, const void* yq,
              DType yq_dtype, std::int64_t n, const void* f, DType t, std::int64_t rest, void* out, void* scratch);

/// cpu::interp2d_transpose: table (nx, ny, rest) = the sum over the queries
/// of each tap's weight times ct[q, :], each table element's terms added in
/// the CPU's order (query, then tap), starting from 0.
void interp2d_transpose(const Interp2dParams& p, const Interp2dGrid& g, const void* xq, DType xq_dtype,
                        const void* yq, DType yq_dtype, std::int64_t n, const void* ct, DType t, std::int64_t rest,
                        void* table, void* scratch);

}  // namespace tessera::cuda
