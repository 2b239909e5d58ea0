// The CUDA kernels of the spectra primitives (primitives/spectra.hpp):
// resample_accumulate, its tangent and the tangent's transpose, giving the
// CPU kernels' bits (backend/cpu/spectra.cpp).
//
// Each function runs on the calling thread's GPU (cuda::current) and
// queues its kernels on its stream; those that may report an error wait
// for them (the message is read back) and return it, else "". All pointers
// are device pointers; `scratch` is device memory of resample_scratch(...)
// bytes. Plain C++ (no CUDA headers); a build without CUDA defines these as
// raising DeviceError (no_cuda_spectra.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/spectra_rows.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cuda {

/// One device's rows and their tangents (core/spectra_rows.hpp, the
/// CPU's too).
using detail::ResampleRows;
using detail::ResampleTangents;

/// Scratch bytes for any of the three kernels over these rows.
std::size_t resample_scratch(const ResampleRows& a);

/// cpu::resample_accumulate: out (3, S, T) f64 = init (or zeros) plus the
/// limbs of every row's terms (sigma: ExactLimbs(max_abs).sigma).
std::string resample_accumulate(const ResampleRows& a, double max_abs, const double sigma[3], const double* init,
                                double* out, void* scratch);

/// cpu::resample_tangent's rows after its checks of the bound: with rowmax,
/// each row's largest |term|; else out (3, S, T) gets the limbs (sigma) of
/// the terms.
void resample_tangent(const ResampleRows& a, const ResampleTangents& t, const double sigma[3], double* rowmax,
                      double* out, void* scratch);

/// cpu::resample_transpose: each row's cotangents (gflux (n, K), gweights
/// and gscale (n,), null where not wanted) from ct (3, S, T).
void resample_transpose(const ResampleRows& a, const double* ct, double* gflux, double* gweights, double* gscale,
                        void* scratch);

/// out[0..n) = v (f64), on the current stream.
void fill_f64(double* out, std::int64_t n, double v);

/// The f64 at device pointer p (waits for the stream).
double read_f64(const double* p);

}  // namespace tessera::cuda
