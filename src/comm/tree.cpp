// The reduction tree (see tree.hpp).
#include "comm/tree.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

#include "tessera/error.hpp"

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

void tree_combine_buffers(ReduceOp op, DType dtype, const std::vector<const Buffer*>& parts,
                          const std::vector<CombineRun>& runs, std::int64_t count, const Buffer& out,
                          std::size_t out_offset, int device, const char* op_name) {
  if (count <= 0) return;
  const GpuHandle* g = Runtime::get().gpu(device);
  if (g == nullptr || out.on_host())
    throw DeviceError(std::string("[") + op_name + "] internal: a GPU combine on device " + std::to_string(device) +
                      ", which is no CUDA device");
  const int n = static_cast<int>(parts.size());
  const std::int64_t slice = count * static_cast<std::int64_t>(itemsize(dtype));
  // Every member's values side by side in member order, then one kernel.
  // (Members on this GPU could be read in place through an array of
  // pointers instead; a copy keeps one kernel for every layout, peers on
  // other GPUs included, at the cost of n * count elements of scratch.)
  Buffer scratch(device, static_cast<std::size_t>(n * slice));
  auto* s = static_cast<unsigned char*>(scratch.device_data());
  for (int r = 0; r < n; ++r) {
    const Buffer& p = *parts[static_cast<std::size_t>(r)];
    const auto* src = static_cast<const unsigned char*>(p.device_data());
    const CopyKind kind = p.on_host() ? CopyKind::HostToDevice : CopyKind::DeviceToDevice;
    for (const CombineRun& run : runs)
      gpu_copy(*g, s + r * slice + run.dst, src + run.src, static_cast<std::size_t>(run.bytes), kind, op_name, false);
  }
  tree_combine_on_gpu(op, dtype, n, s, static_cast<unsigned char*>(out.device_data()) + out_offset, count, device,
                      op_name);
  gpu_wait(*g, op_name);
}

}  // namespace tessera::detail
