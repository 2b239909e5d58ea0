// Per-device kernels of the spectra ops (resample_accumulate).
#pragma once

#include <cstdint>
#include <string>

#include "core/exact_limbs.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cpu {

/// The limbs of an exact accumulator (core/exact_limbs.hpp).
using detail::ExactLimbs;

/// One device's rows of resample_accumulate. Arrays are local blocks,
/// row-major; `out` is the f64 (3, S, T) accumulator, written whole.
struct ResampleArgs {
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
  double max_abs = 1.0;
  const double* init = nullptr;  // (3, S, T) or null: out starts as a copy of it, else zeros
  double* out = nullptr;
};

/// Fills a.out. Returns an empty string, or the message of a term larger
/// than the bound (the caller raises it).
std::string resample_accumulate(const ResampleArgs& a);

}  // namespace tessera::cpu
