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
#include "runtime/runtime.hpp"
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

// ---- On GPUs. The members' values are copied into one scratch buffer on
// the combining device's GPU, member by member, and a kernel combines each
// element's values in the same tree order (kernels/combine.hpp's tree_fold),
// so a reduction on GPUs gives the CPU's bits.

/// One contiguous piece of a member's values: `bytes` bytes at byte `src` of
/// the member's buffer go to byte `dst` of the result.
struct CombineRun {
  std::int64_t src = 0, dst = 0, bytes = 0;
};

/// `out` (a buffer of device `device`, whose worker calls this; GPU memory
/// of the GPU that the device drives) from byte `out_offset` on: `count`
/// elements, each the members' values combined by `op` in the tree order
/// over ranks [0, parts.size()). Member r's values are read from *parts[r]
/// (any memory space, any local device) by `runs`, which cover the
/// `count` elements of the result. Queues the copies and the kernel on the
/// device's stream and waits for them, so the parts may be freed after.
/// Raises DeviceError naming `op_name`.
void tree_combine_buffers(ReduceOp op, DType dtype, const std::vector<const Buffer*>& parts,
                          const std::vector<CombineRun>& runs, std::int64_t count, const Buffer& out,
                          std::size_t out_offset, int device, const char* op_name);

/// The combine kernel of tree_combine_buffers: out[i] = the n values
/// parts[r * count + i] combined in the tree order, on the calling thread's
/// GPU, which must be device `device`'s (device pointers; queued on its
/// stream, not waited for). Defined by the CUDA backend
/// (backend/cuda/eval_reduce.cpp), whose kernels this layer cannot include:
/// a call up the stack through this declaration, chosen at link time as the
/// GPU port is (a build without CUDA raises DeviceError).
void tree_combine_on_gpu(ReduceOp op, DType dtype, int n, const void* parts, void* out, std::int64_t count,
                         int device, const char* op_name);

}  // namespace tessera::detail
