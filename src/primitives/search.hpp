// Search and selection primitives: searchsorted and the middle elements of
// a median (see src/primitives/search.cpp).
#pragma once

#include <vector>

#include "primitives/primitive.hpp"

namespace tessera::detail {

/// jnp.searchsorted (operands: sorted_sequence (1-d), values), comparing in
/// their promoted dtype; results of dtype `out` (i32 or i64).
PrimitivePtr make_searchsorted(bool right, DType out);

/// The two middle elements of each selection of a median over `axes`
/// (sorted, unique): results (lo, hi), of x's dtype (f32 or f64), the
/// elements of rank (c - 1) / 2 and c / 2 among the c selected ones (equal
/// for odd c); NaN where the selection is empty or holds a NaN. Operands:
/// x, then with `masked` a bool mask of x's shape.
PrimitivePtr make_median_middle(std::vector<int> axes, bool keepdims, bool masked);

}  // namespace tessera::detail
