// What a contraction computes: the roles of two operands' dims in a
// dot_general (batch, contracting, free, summed) and the output order. The
// front ends (ops/linalg) build one, the primitive (primitives/linalg) infers
// shapes and sharding factors from it, and the kernel (backend/cpu/dot) runs
// it: a description, not a kernel.
#pragma once

#include <vector>

namespace tessera::detail {

/// Roles of one operand's dims in a contraction.
struct DotSide {
  std::vector<int> batch;     // per batch pair: the dim, or -1 when the operand lacks it
  std::vector<int> contract;  // per contracting pair
  std::vector<int> free;      // in output order
  std::vector<int> summed;    // in this operand only and not in the output: summed away
};

/// A contraction of two operands: canonical output (batch..., lhs free...,
/// rhs free...), then permuted. A batch dim of size 1 on one side broadcasts
/// against the other side's size.
struct Contraction {
  DotSide lhs, rhs;
  std::vector<int> out_perm;  // output dim i is canonical dim out_perm[i]; empty: identity
};

}  // namespace tessera::detail
