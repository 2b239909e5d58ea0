// Spectra: flux-conserving resampling of many spectra onto one wavelength
// grid, summed per segment, with a sum whose bits do not depend on the order
// of the terms (and so not on the mesh, the sharding or the chunking).
//
// Exact accumulators. A sum over millions of rows split across devices and
// chunks gives different float bits for every split when added in floating
// point. resample_accumulate instead returns an *exact accumulator*: a float64
// array with a leading dim of 3 "limbs". Every term x is split into
// x = h + m + l + r, where h, m and l are multiples of the fixed quanta
// 2^(P-22), 2^(P-46) and 2^(P-70) (2^P >= max_abs, the bound the caller
// gives) and |r| <= 2^(P-71) is dropped. Sums of such multiples are exact in
// float64 while they stay below 2^53 quanta, which holds for up to 2^30 terms
// per element, so the limbs of a sum are the same whatever the order and
// grouping of the terms. Accumulators built with the same max_abs add exactly
// with `add` (and `psum` inside shard_map); exact_total reads the value.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>

#include "tessera/array.hpp"

namespace tessera {

struct ResampleOptions {
  /// (n,): each row's resampled spectrum is multiplied by its weight (a
  /// star particle's mass).
  std::optional<Array> weights = std::nullopt;
  /// (n,): row i's wavelengths are wave * wave_scale[i] (a Doppler factor,
  /// e.g. exp(v/c)).
  std::optional<Array> wave_scale = std::nullopt;
  /// An exact accumulator (3, num_segments, T) built with the same max_abs:
  /// the result is init plus the rows (one pass, no separate add: what a
  /// loop over chunks of rows wants). The rows must then not be sharded
  /// (inside a shard_map body, or replicated), so that init is counted once.
  std::optional<Array> init = std::nullopt;
};

/// Resamples n spectra onto `target` conserving flux and sums them per
/// segment, exactly (see above).
///   flux (n, K): spectral densities at `wave`;
///   wave (K,) shared by every row, or (n, K) one grid per row; increasing;
///   target (T,): increasing output grid;
///   segment_ids (n,): integer, the segment each row is summed into; ids
///     outside [0, num_segments) are dropped (as segment_sum does).
/// Row i (with w = wave row * wave_scale[i], s = flux row) contributes
///   p[j] = interp(target[j], w, s)             (jnp.interp: linear, ends held)
///   L_in  = sum_{k>=1} s[k] (w[k] - w[k-1]) [target[0] <= w[k] <= target[T-1]]
///   L_out = sum_{j>=1} p[j] (target[j] - target[j-1])
///   out[j] = weight_i * p[j] * L_in / L_out     (0 when L_in / L_out is NaN
///                                                or L_out is 0)
/// to row segment_ids[i] of the result, computed in float64. Returns the
/// exact accumulator f64 (3, num_segments, T). max_abs bounds |out[j]| over
/// every term that will be summed with this accumulator; a larger term
/// raises ValueError naming it. Rows may be sharded (partial
/// accumulators are summed over the mesh, exactly); target and the wave
/// grid are brought whole to every device.
///
/// Derivatives (jvp, grad) in flux, weights, wave_scale and init; the wave
/// and target grids raise Error. The tangent is an exact accumulator too:
/// the rows' tangent terms split into limbs for a bound measured on them
/// (the largest |term| over every row), so exact_total of it is the
/// derivative of the total with the same bits on every mesh. In reverse
/// mode the accumulator's cotangent is read from its first limb (where
/// exact_total's transpose puts the value's cotangent, as on every limb),
/// and each row's cotangent is computed from it alone.
Array resample_accumulate(const Array& flux, const Array& wave, const Array& target, const Array& segment_ids,
                          std::int64_t num_segments, double max_abs, const ResampleOptions& opt = {},
                          std::source_location loc = std::source_location::current());

/// The cotangents of resample_accumulate's rows for a cotangent `ct` of its
/// accumulator ((3, num_segments, T); its first limb is read, as in reverse
/// mode), without computing the accumulator: what a reverse pass that
/// recomputes its rows chunk by chunk (rematerialisation) needs. The same
/// bits as the pullback of vjp(resample_accumulate) gives, in the rows'
/// dtypes: `flux` always, `weights` and `wave_scale` where opt gives them
/// (opt.init must be empty: its cotangent is ct itself). Rows may be
/// sharded; ct is brought whole to every device. Not itself differentiable.
struct ResampleCotangents {
  Array flux, weights, wave_scale;
};
ResampleCotangents resample_accumulate_vjp(const Array& ct, const Array& flux, const Array& wave, const Array& target,
                                           const Array& segment_ids, std::int64_t num_segments,
                                           const ResampleOptions& opt = {},
                                           std::source_location loc = std::source_location::current());

/// Splits x into an exact accumulator of its terms: f64 (3, *x.shape), the
/// limbs of every element for the bound max_abs >= |x|. Summing it along a
/// dim (sum over axis k+1) is exact and order-independent, under any mesh.
/// The bound is a precondition, not checked (that would cost a pass over x):
/// a larger term keeps its limbs but loses the 2^30-term guarantee.
///
/// Linear for differentiation: the tangent is an accumulator holding the
/// tangent's value in limb 0 (exact_total reads it back), and the
/// transpose reads the cotangent of limb 0.
Array exact_limbs(const Array& x, double max_abs, std::source_location loc = std::source_location::current());

/// The value of an exact accumulator (3, ...): (limb0 + limb1) + limb2,
/// rounded once more to `dtype`.
Array exact_total(const Array& acc, DType dtype = DType::f32, std::source_location loc = std::source_location::current());

}  // namespace tessera
