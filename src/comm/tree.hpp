// The one order in which reductions combine their members' values.
//
// Members 0..n-1 are combined as a fixed binary tree over member rank: the
// node covering ranks [lo, hi) combines its left child [lo, m) with its right
// child [m, hi), m = lo + the largest power of two below hi - lo (so (0+1)+2,
// (0+1)+(2+3), ((0+1)+(2+3))+(4+5)). The tree depends only on n, never on
// which process or thread holds a member, so a reduction gives bitwise the
// same result on every layout of its members: four devices in one process,
// two processes of two, four processes of one. A process can combine any
// node whose members it holds before anything crosses processes (the
// hierarchical reduction): with members laid out process by process in
// aligned power-of-two blocks, each process sends one value.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/reduce_op.hpp"
#include "tessera/dtype.hpp"

namespace tessera::detail {

/// Where the node [lo, hi) splits (hi - lo >= 2).
int tree_split(int lo, int hi);

/// A node of the tree: ranks [lo, hi).
struct TreeNode {
  int lo = 0, hi = 0;
  bool operator==(const TreeNode&) const = default;
};

/// The largest nodes whose members all have the same owner (owner[r] for
/// rank r), left to right: what each owner can combine by itself.
std::vector<TreeNode> owner_frontier(const std::vector<int>& owner);

/// Combines elements [0, count) of the tree over ranks [lo, hi) into `out`
/// by `op`. `value(lo, hi)` gives a node's already combined value (its
/// elements [0, count)) or nullptr; every rank must be reachable (a node of
/// one rank must have a value unless a node above it does). Works tile by
/// tile so partial results stay in cache.
void tree_combine(ReduceOp op, DType dtype, int lo, int hi,
                  const std::function<const unsigned char*(int lo, int hi)>& value, unsigned char* out,
                  std::int64_t count);

}  // namespace tessera::detail
