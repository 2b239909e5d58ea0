// How two values of a reduction combine (combine1), the reduction tree's
// per-element walk (tree_fold), and argmax/argmin's comparison: one
// __host__ __device__ source for the CPU's reductions and combines
// (core/reduce_op.hpp includes this header) and the GPU's kernels, so both
// give the same bits.
#pragma once

#include "kernels/portable.hpp"
#include "kernels/wrapping.hpp"

namespace tessera::detail {

enum class ReduceOp { Sum, Prod, Max, Min, Any, All };

/// One step of a reduction: the running value `acc` combined with `v`.
/// - Sum and Prod wrap on integer overflow, as XLA does (signed overflow is
///   undefined in C++); on bool they are logical or and logical and.
/// - Max and Min return NaN when either side is NaN, so NaN wins whatever
///   the order; equal values (0.0 and -0.0) keep `acc`.
/// - Any and All treat every nonzero value as true and return 0 or 1.
template <ReduceOp r, class A>
TESSERA_HD inline A combine1(A acc, A v) {
  if constexpr (r == ReduceOp::Sum) {
    return wrapping_add(acc, v);
  } else if constexpr (r == ReduceOp::Prod) {
    return wrapping_mul(acc, v);
  } else if constexpr (r == ReduceOp::Max) {
    if constexpr (TESSERA_STD::is_floating_point_v<A>)
      if (lm::isnan(v) || lm::isnan(acc)) return TESSERA_STD::numeric_limits<A>::quiet_NaN();
    return v > acc ? v : acc;
  } else if constexpr (r == ReduceOp::Min) {
    if constexpr (TESSERA_STD::is_floating_point_v<A>)
      if (lm::isnan(v) || lm::isnan(acc)) return TESSERA_STD::numeric_limits<A>::quiet_NaN();
    return v < acc ? v : acc;
  } else if constexpr (r == ReduceOp::Any) {
    return static_cast<A>(acc != A(0) || v != A(0));
  } else {
    return static_cast<A>(acc != A(0) && v != A(0));
  }
}

/// The value a reduction starts from: combine1<r>(identity, v) is v for
/// every v (the lowest value or -inf for Max, the highest or +inf for Min).
template <class T>
TESSERA_HD inline T reduce_identity(ReduceOp r) {
  using L = TESSERA_STD::numeric_limits<T>;
  switch (r) {
    case ReduceOp::Sum: return T(0);
    case ReduceOp::Prod: return T(1);
    case ReduceOp::Max: return L::has_infinity ? -L::infinity() : L::lowest();
    case ReduceOp::Min: return L::has_infinity ? L::infinity() : L::max();
    case ReduceOp::Any: return T(0);
    case ReduceOp::All: return T(1);
  }
  return T(0);
}

/// A block reduction's accumulator type: f32 accumulates in f64 locally for
/// accuracy (the mesh-level combine is in the output dtype); bool in bytes
/// (0 or 1).
template <class T>
using ReduceAcc =
    TESSERA_STD::conditional_t<TESSERA_STD::is_same_v<T, float>, double,
                               TESSERA_STD::conditional_t<TESSERA_STD::is_same_v<T, bool>, unsigned char, T>>;

/// Sums of a reduced last dim cut each row into pieces of this many
/// elements (the last piece shorter), each summed in eight lanes merged into
/// the running value before its tail: a row's pieces can be summed in
/// parallel (a GPU's threads) and a piece's lanes vectorise (a CPU), and
/// both backends meet the same additions in the same order. A multiple of 8,
/// so only a row's last piece has a tail.
inline constexpr TESSERA_STD::int64_t kSumPiece = 8192;

/// Sums over leading dims (the last dim kept) meet an output element's rows
/// in pieces of this many: each piece is summed from zero, then added to the
/// element's running value. Independent pieces let a GPU sum a long column
/// in parallel; up to this many rows the bits are those of one pass.
inline constexpr TESSERA_STD::int64_t kRowPiece = 1024;

/// Which reductions run in which dtype (every backend's reduce_runs): Max
/// and Min in all, Any and All on bool, Sum and Prod on the 4- and 8-byte
/// numbers.
template <ReduceOp r, class T>
inline constexpr bool kReduceRuns = (r == ReduceOp::Max || r == ReduceOp::Min) ? true
                                    : (r == ReduceOp::Any || r == ReduceOp::All)
                                        ? TESSERA_STD::is_same_v<T, bool>
                                        : !TESSERA_STD::is_same_v<T, bool> && sizeof(T) >= 4;

/// The most members tree_fold combines: its stack holds one value per bit
/// of the member count.
inline constexpr int kTreeMaxDepth = 32;

/// The n values leaf(0), ..., leaf(n-1) (n >= 1) combined in the reduction
/// tree's order (comm/tree.hpp): the node [lo, hi) is its left child
/// [lo, lo + p) combined with its right child [lo + p, hi), p the largest
/// power of two below hi - lo. So the left child is a perfect tree, and the
/// whole tree is the perfect trees of n's binary digits, largest first,
/// folded from the right: for n = 7, P4 . (P2 . L6). Walked as a binary
/// counter: each leaf is pushed as a tree of one; two trees of equal size
/// on top merge (left . right), which builds each perfect tree pairwise as
/// the recursion would; at the end the stack holds the trees of n's binary
/// digits, and they fold right to left.
template <ReduceOp r, class T, class Leaf>
TESSERA_HD inline T tree_fold(int n, const Leaf& leaf) {
  T val[kTreeMaxDepth];
  int size[kTreeMaxDepth];
  int top = 0;
  for (int i = 0; i < n; ++i) {
    T v = leaf(i);
    int s = 1;
    while (top > 0 && size[top - 1] == s) {
      --top;
      v = combine1<r, T>(val[top], v);
      s *= 2;
    }
    val[top] = v;
    size[top] = s;
    ++top;
  }
  T v = val[--top];
  while (top > 0) {
    --top;
    v = combine1<r, T>(val[top], v);
  }
  return v;
}

/// argmax (`is_max`) / argmin: true when (v, i) should replace the best so
/// far (bv, bi): larger (or smaller), NaN first, ties to the lower index.
template <class T>
TESSERA_HD inline bool arg_better(bool is_max, T v, long long i, T bv, long long bi) {
  if constexpr (TESSERA_STD::is_floating_point_v<T>) {
    const bool vn = lm::isnan(v), bn = lm::isnan(bv);
    if (vn || bn) return vn && (!bn || i < bi);
  }
  if (v == bv) return i < bi;
  return is_max ? v > bv : v < bv;
}

/// True when a and b are in the same class for arg_better: equal, or both
/// NaN.
template <class T>
TESSERA_HD inline bool arg_same_value(T a, T b) {
  if constexpr (TESSERA_STD::is_floating_point_v<T>)
    if (lm::isnan(a) || lm::isnan(b)) return lm::isnan(a) && lm::isnan(b);
  return a == b;
}

}  // namespace tessera::detail
