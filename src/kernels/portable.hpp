// What the per-element math (kernels/scalar_math.hpp, with the conversions and
// the wrapping integer arithmetic it uses) needs from its compiler, for the
// two targets that compile it: the host compiler (the library's kernels, and
// the CPU loops jit generates at run time) and CUDA (the GPU loops jit
// generates, compiled by NVRTC against libcu++; .cu files compiled by nvcc).
// The functions of the C library it calls go through `lm`, which names
// CUDA's device functions in device code and the host's libm (through the
// GCC builtins the host kernels always used) in host code, nvcc's host pass
// included: a .cu file's host code gives the CPU's bits, signalling NaNs
// and all (tests/kernels/test_shared_math.cpp checks it). Only functions
// that every libm computes exactly are here (fma, sqrt, fmod, rounding to
// integers, sign and class tests): the transcendental ones are
// kernels/libm.hpp's, computed the same way by every compiler.
//
// Embedded as text in the generated loops' prelude (cmake/embed_prelude.cmake),
// first: it may include only standard headers.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#if !defined(__CUDACC_RTC__)
#include <cmath>  // lm's host code in nvcc's host pass
#endif
#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <cuda/std/type_traits>
#define TESSERA_STD ::cuda::std
#define TESSERA_HD __host__ __device__
#define TESSERA_SCALAR_FN __host__ __device__ __forceinline__
#else
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#define TESSERA_STD ::std
#define TESSERA_HD
// GNU attribute syntax: it may stand between `static` and the return type.
#define TESSERA_SCALAR_FN __attribute__((always_inline)) inline
#endif

namespace tessera::detail::lm {

// Chosen per compilation pass: nvcc preprocesses a .cu file once for the
// host and once per GPU architecture, with __CUDA_ARCH__ defined only for
// the latter (NVRTC compiles only device code).
#if defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__)
#define TESSERA_LM_1(name, f32, f64)                                   \
  TESSERA_SCALAR_FN float name(float x) { return ::f32(x); }         \
  TESSERA_SCALAR_FN double name(double x) { return ::f64(x); }
#define TESSERA_LM_2(name, f32, f64)                                          \
  TESSERA_SCALAR_FN float name(float x, float y) { return ::f32(x, y); }    \
  TESSERA_SCALAR_FN double name(double x, double y) { return ::f64(x, y); }
TESSERA_SCALAR_FN float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
TESSERA_SCALAR_FN double fma(double a, double b, double c) { return ::fma(a, b, c); }
TESSERA_LM_1(nearbyint, rintf, rint)  // the default rounding mode: ties to even
TESSERA_LM_1(fabs, fabsf, fabs)
TESSERA_LM_2(copysign, copysignf, copysign)
template <class T>
TESSERA_SCALAR_FN bool isnan(T x) { return ::isnan(x); }
template <class T>
TESSERA_SCALAR_FN bool isfinite(T x) { return ::isfinite(x); }
#else
#define TESSERA_LM_1(name, f32, f64)                                            \
  TESSERA_SCALAR_FN float name(float x) { return __builtin_##f32(x); }         \
  TESSERA_SCALAR_FN double name(double x) { return __builtin_##f64(x); }
#define TESSERA_LM_2(name, f32, f64)                                                   \
  TESSERA_SCALAR_FN float name(float x, float y) { return __builtin_##f32(x, y); }    \
  TESSERA_SCALAR_FN double name(double x, double y) { return __builtin_##f64(x, y); }
TESSERA_SCALAR_FN float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
TESSERA_SCALAR_FN double fma(double a, double b, double c) { return __builtin_fma(a, b, c); }
TESSERA_LM_1(nearbyint, nearbyintf, nearbyint)  // the default rounding mode: ties to even
TESSERA_LM_1(fabs, fabsf, fabs)
TESSERA_LM_2(copysign, copysignf, copysign)
template <class T>
TESSERA_SCALAR_FN bool isnan(T x) { return std::isnan(x); }
template <class T>
TESSERA_SCALAR_FN bool isfinite(T x) { return std::isfinite(x); }
#endif
TESSERA_LM_1(floor, floorf, floor)
TESSERA_LM_1(ceil, ceilf, ceil)
TESSERA_LM_1(trunc, truncf, trunc)
TESSERA_LM_1(sqrt, sqrtf, sqrt)
TESSERA_LM_2(fmod, fmodf, fmod)
#undef TESSERA_LM_1
#undef TESSERA_LM_2

}  // namespace tessera::detail::lm
