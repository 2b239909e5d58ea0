// The reduction tree (see tree.hpp).
#include "comm/tree.hpp"

#include <algorithm>
#include <cstring>
#include <deque>

namespace tessera::detail {

namespace {
// Elements per tile: the running result of a tile stays in L1/L2.
constexpr std::int64_t kTileBytes = 64 * 1024;

struct Combiner {
  ReduceOp op;
  DType dtype;
  std::size_t isz;
  const std::function<const unsigned char*(int, int)>& value;
  // One tile per tree level. A deque: a deeper level added while a
  // shallower one is in use must not move it (the right subtree may reach
  // deeper than the left one when given node values cut the left short).
  std::deque<std::vector<unsigned char>> scratch;

  // dst[0, len) = node [lo, hi) at element offset `off`.
  void eval(int lo, int hi, std::int64_t off, std::int64_t len, unsigned char* dst, int level) {
    if (const unsigned char* v = value(lo, hi)) {
      std::memcpy(dst, v + off * static_cast<std::int64_t>(isz), static_cast<std::size_t>(len) * isz);
      return;
    }
    const int m = tree_split(lo, hi);
    eval(lo, m, off, len, dst, level + 1);
    // The right child straight from its value when it has one (no copy).
    if (const unsigned char* v = value(m, hi)) {
      combine(op, dtype, dst, v + off * static_cast<std::int64_t>(isz), len);
      return;
    }
    if (static_cast<int>(scratch.size()) <= level) scratch.resize(level + 1);
    auto& tmp = scratch[static_cast<std::size_t>(level)];
    tmp.resize(static_cast<std::size_t>(len) * isz);
    unsigned char* right = tmp.data();
    eval(m, hi, off, len, right, level + 1);
    combine(op, dtype, dst, right, len);
  }
};
}  // namespace

int tree_split(int lo, int hi) {
  int p = 1;
  while (p * 2 < hi - lo) p *= 2;
  return lo + p;
}

std::vector<TreeNode> owner_frontier(const std::vector<int>& owner) {
  std::vector<TreeNode> out;
  std::function<void(int, int)> walk = [&](int lo, int hi) {
    if (std::all_of(owner.begin() + lo, owner.begin() + hi, [&](int o) { return o == owner[lo]; })) {
      out.push_back({lo, hi});
      return;
    }
    const int m = tree_split(lo, hi);
    walk(lo, m);
    walk(m, hi);
  };
  if (!owner.empty()) walk(0, static_cast<int>(owner.size()));
  return out;
}

void tree_combine(ReduceOp op, DType dtype, int lo, int hi,
                  const std::function<const unsigned char*(int lo, int hi)>& value, unsigned char* out,
                  std::int64_t count) {
  if (count <= 0) return;
  Combiner c{op, dtype, itemsize(dtype), value, {}};
  const std::int64_t tile = std::max<std::int64_t>(1, kTileBytes / static_cast<std::int64_t>(c.isz));
  for (std::int64_t off = 0; off < count; off += tile) {
    const std::int64_t len = std::min(tile, count - off);
    c.eval(lo, hi, off, len, out + off * static_cast<std::int64_t>(c.isz), 0);
  }
}

}  // namespace tessera::detail
