// What one device's rows of resample_accumulate (primitives/spectra.hpp)
// are, as the kernels take them: the operands' pointers, dtypes and sizes,
// and the tangents' for its derivative. One description for every
// backend's kernels (backend/cpu/spectra.hpp, backend/cuda/spectra.hpp)
// and the per-device code that fills it from a primitive's operands.
#pragma once

#include <cstdint>

#include "tessera/dtype.hpp"

namespace tessera::detail {

/// flux (n, K), wave (K,) or (n, K), target (T,), segment ids (n,)
/// integer, weights and wave scales (n,) or null; S segments. Local
/// blocks, row-major.
struct ResampleRows {
  std::int64_t n = 0, K = 0, T = 0, S = 0;
  const void* flux = nullptr;  // (n, K)
  DType flux_dt = DType::f32;
  const void* wave = nullptr;  // (K,) or (n, K)
  DType wave_dt = DType::f32;
  bool wave_per_row = false;
  const void* scale = nullptr;  // (n,) or null
  DType scale_dt = DType::f32;
  const void* weights = nullptr;  // (n,) or null
  DType weights_dt = DType::f32;
  const void* target = nullptr;  // (T,)
  DType target_dt = DType::f32;
  const void* seg = nullptr;  // (n,) integer
  DType seg_dt = DType::i32;
};

/// The tangents of the flux (n, K), the weights (n,) and the wave scales
/// (n,), each of dtype *_dt, null where zero.
struct ResampleTangents {
  const void* tflux = nullptr;
  DType tflux_dt = DType::f64;
  const void* tweights = nullptr;
  DType tweights_dt = DType::f64;
  const void* tscale = nullptr;
  DType tscale_dt = DType::f64;
};

}  // namespace tessera::detail
