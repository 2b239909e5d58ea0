// Spectra primitives: resample_accumulate (tessera/spectra.hpp).
#pragma once

#include <cstdint>

#include "primitives/primitive.hpp"

namespace tessera::detail {

/// Operands: flux (n, K), wave (K,) or (n, K), target (T,), segment_ids (n,),
/// then weights (n,) if has_weights, then wave_scale (n,) if has_scale, then
/// the initial accumulator (3, S, T) if has_init.
PrimitivePtr make_resample_accumulate(std::int64_t num_segments, double max_abs, bool has_weights, bool has_scale,
                                      bool has_init);

}  // namespace tessera::detail
