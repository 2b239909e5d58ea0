// Shared by the transposition rules of the ops that only reshape their
// operand (reshape, expand_dims, squeeze).
#pragma once

#include "sharding/rule.hpp"

namespace tessera::detail {

/// The cotangent `ct` of a reshape-like op's result reshaped back to its
/// operand's type `operand` (empty stays empty), laid out as the operand:
/// the cotangent's own layout may not survive the reshape back (a sharded
/// dim split or merged unevenly).
Array reshape_back(const Array& ct, const AbstractArray& operand);

}  // namespace tessera::detail
