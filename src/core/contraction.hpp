// What a contraction computes: the roles of two operands' dims in a
// dot_general (batch, contracting, free, summed) and the output order. The
// front ends (ops/linalg) build one, the primitive (primitives/linalg) infers
// shapes and sharding factors from it, and the kernel (backend/cpu/dot) runs
// it: a description, not a kernel.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::detail {

/// Float contractions over at most this many terms are summed in order on
/// every backend, each term one multiply and one add (no fused
/// multiply-add) from 0: the CPU's gemm (backend/cpu/gemm.cpp) and the
/// GPU's exact kernel (backend/cuda/gemm.cu) then give the same bits, so a
/// small product (a rotation by a 3 x 3 matrix, a few Jacobian
/// directions) is bitwise the same on CPUs and GPUs. Longer sums go to the
/// BLAS libraries, whose orders differ (results within rounding).
inline constexpr std::int64_t kOrderedContraction = 16;

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
