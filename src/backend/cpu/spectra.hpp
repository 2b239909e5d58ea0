// Per-device kernels of the spectra ops (resample_accumulate).
#pragma once

#include <cstdint>
#include <string>

#include "core/exact_limbs.hpp"
#include "core/spectra_rows.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cpu {

/// The limbs of an exact accumulator (core/exact_limbs.hpp).
using detail::ExactLimbs;

/// The rows' operands and their tangents (core/spectra_rows.hpp).
using detail::ResampleRows;
using detail::ResampleTangents;

/// One device's rows of resample_accumulate; `out` is the f64 (3, S, T)
/// accumulator, written whole.
struct ResampleArgs : ResampleRows {
  double max_abs = 1.0;
  const double* init = nullptr;  // (3, S, T) or null: out starts as a copy of it, else zeros
  double* out = nullptr;
};

/// Fills a.out. Returns an empty string, or the message of a term larger
/// than the bound (the caller raises it).
std::string resample_accumulate(const ResampleArgs& a);

/// The tangent of one device's rows of resample_accumulate along tangents
/// of the flux (n, K), the weights (n,) and the wave scales (n,) (null:
/// zero); `a` holds the primal operands (a.init and a.out unused). Row i's
/// tangent terms are d(out_i[j]) (see the formula in tessera/spectra.hpp).
/// With `rowmax` set: rowmax[i] = max_j |term|, 0 for a dropped row or one
/// whose ratio is replaced by 0 (NaN where a term is). Else `out` (3, S, T)
/// gets the exact accumulator of the terms for the bound `bound` (every
/// |term| <= bound); a bound that is not finite gives NaN everywhere.
struct ResampleTangentArgs : ResampleTangents {
  ResampleArgs a;
  double bound = 0.0;
  double* rowmax = nullptr;
  double* out = nullptr;
};
/// Returns an empty string, or the message of a bound too large for limbs.
std::string resample_tangent(const ResampleTangentArgs& t);

/// The transpose of resample_tangent in the tangents: from the cotangent
/// `ct` (3, S, T) of the accumulator (its limb 0 read: exact_total, the
/// accumulator's reader, gives every limb the value's cotangent), each row's
/// cotangents: gflux (n, K), gweights (n,), gscale (n,) (null: not wanted),
/// all f64. Row by row, so a row's cotangent does not depend on the others
/// or on where they lie.
struct ResampleTransposeArgs {
  ResampleArgs a;
  const double* ct = nullptr;
  double* gflux = nullptr;
  double* gweights = nullptr;
  double* gscale = nullptr;
};
void resample_transpose(const ResampleTransposeArgs& t);

}  // namespace tessera::cpu
