// The interp2d kernel: one device's block of queries against the whole grid
// and table (see src/primitives/interp2d.cpp; the primitive calls it from
// backend/cpu/eval_interp2d.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "core/interp2d.hpp"
#include "tessera/dtype.hpp"

namespace tessera::detail::cpu {

using detail::Interp2dDeriv;
using detail::Interp2dGrid;
using detail::Interp2dMethod;

/// out[q, :] = the interpolant at (xq[q], yq[q]) for q in [0, n): a weighted
/// sum of rows of f (nx, ny, rest), row-major, of dtype t (f32 or f64, also
/// out's). Queries outside the grid (or NaN) give `fill` in every element of
/// their row; without fill the edge cell's polynomial extrapolates.
/// With deriv X or Y: the interpolant's derivative in xq or yq instead (0
/// outside the grid when filling).
void interp2d(Interp2dMethod method, const std::optional<double>& fill, Interp2dDeriv deriv,
              const Interp2dGrid& grid, const void* xq, DType xq_dtype, const void* yq, DType yq_dtype,
              std::int64_t n, const void* f, DType t, std::int64_t rest, void* out);

/// The transpose of interp2d in f: table (nx, ny, rest) = the sum over the
/// n queries of each tap's weight times ct[q, :] (ct of dtype t, also the
/// table's), added in query order. Filled queries contribute nothing.
void interp2d_transpose(Interp2dMethod method, const std::optional<double>& fill, Interp2dDeriv deriv,
                        const Interp2dGrid& grid, const void* xq, DType xq_dtype, const void* yq, DType yq_dtype,
                        std::int64_t n, const void* ct, DType t, std::int64_t rest, void* table);

}  // namespace tessera::detail::cpu
