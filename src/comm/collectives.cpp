// Collectives for shard_map bodies, written once over the rendezvous
// primitive. With every device's memory in one process they are zero-copy
// where the result is shared: all_reduce and all_gather build one result
// buffer that every member fills a part of and then shares (after a
// barrier), so a member writes only its part; ppermute hands the sender's
// buffer to the receiver. reduce_scatter and all_to_all pull each member's
// block straight from the others' buffers. Reductions combine in member
// order, so results are bitwise reproducible and equal on every member.
#include "comm/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/array_impl.hpp"
#include "core/dispatch.hpp"
#include "core/wrapping.hpp"
#include "runtime/timeline.hpp"

namespace tessera::detail {

namespace {

// Working-set size for combining: the running result of a tile stays in L1/L2.
constexpr std::int64_t kTileBytes = 64 * 1024;

std::string sig(const std::string& op, const Local& in, const std::string& params, bool with_shape,
                int free_dim = -1) {
  std::string s = op + "(" + dtype_name(in.dtype) + "[";
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (d) s += ",";
    if (with_shape || static_cast<int>(d) != free_dim) s += std::to_string(in.shape[d]);
    else s += "*";
  }
  s += "]";
  if (!params.empty()) s += ", " + params;
  return s + ")";
}

int my_device(const Group& g) { return g.device_ids[g.rank]; }

template <class T>
void combine(ReduceOp op, T* acc, const T* x, std::int64_t n) {
  switch (op) {
    case ReduceOp::Sum:
      for (std::int64_t i = 0; i < n; ++i) acc[i] = detail::wrapping_add(acc[i], x[i]);  // integers wrap, no UB
      return;
    case ReduceOp::Max:
      for (std::int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_floating_point_v<T>)
          if (std::isnan(x[i])) {
            acc[i] = x[i];
            continue;
          }
        if (x[i] > acc[i]) acc[i] = x[i];
      }
      return;
    case ReduceOp::Min:
      for (std::int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_floating_point_v<T>)
          if (std::isnan(x[i])) {
            acc[i] = x[i];
            continue;
          }
        if (x[i] < acc[i]) acc[i] = x[i];
      }
      return;
  }
}

}  // namespace

Local all_reduce(Communicator& c, const Group& g, const Local& in, ReduceOp op) {
  TimelineScope scope(g.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
  const char* name = op == ReduceOp::Sum ? "sum" : op == ReduceOp::Max ? "max" : "min";
  auto rv = c.meet(g, {in.data, in.shape, in.dtype, sig(g.op, in, std::string("reduce=") + name, true)});
  if (g.size() == 1) return in;
  const std::int64_t n = num_elements(in.shape);
  const std::size_t isz = itemsize(in.dtype);
  Buffer out = rv->shared(static_cast<std::size_t>(n) * isz, g.rank, my_device(g));
  // Member r reduces the r-th balanced chunk for everyone.
  const Slice chunk = block_slice(n, g.size(), g.rank);
  if (chunk.size() > 0) {
    const auto& d = rv->deposits();
    dispatch(in.dtype, [&](auto t) {
      using T = decltype(t);
      T* o = static_cast<T*>(out.data());
      // Tile by tile, so the running sum stays in cache while every member's
      // tile is added (same order per element: same bits).
      const std::int64_t tile = std::max<std::int64_t>(1, kTileBytes / static_cast<std::int64_t>(isz));
      for (std::int64_t lo = chunk.start; lo < chunk.stop; lo += tile) {
        const std::int64_t len = std::min(tile, chunk.stop - lo);
        std::memcpy(o + lo, static_cast<const T*>(d[0].data.data()) + lo, static_cast<std::size_t>(len) * isz);
        for (int r = 1; r < g.size(); ++r) combine<T>(op, o + lo, static_cast<const T*>(d[r].data.data()) + lo, len);
      }
    });
  }
  rv->barrier();
  return {out, in.shape, in.dtype};
}

Local all_gather(Communicator& c, const Group& g, const Local& in, int axis, bool tiled) {
  TimelineScope scope(g.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
  const std::string params = "axis=" + std::to_string(axis) + ", tiled=" + (tiled ? "true" : "false");
  auto rv = c.meet(g, {in.data, in.shape, in.dtype, sig(g.op, in, params, !tiled, axis)});
  const auto& d = rv->deposits();
  // The result and where each member's piece goes in it.
  Shape out = in.shape;
  std::vector<std::int64_t> offset(g.size(), 0);
  if (tiled) {
    out[axis] = 0;
    for (int r = 0; r < g.size(); ++r) {
      offset[r] = out[axis];
      out[axis] += d[r].shape[axis];
    }
  } else {
    out.insert(out.begin() + axis, g.size());
    for (int r = 0; r < g.size(); ++r) offset[r] = r;
  }
  const std::size_t isz = itemsize(in.dtype);
  Buffer res = rv->shared(static_cast<std::size_t>(num_elements(out)) * isz, g.rank, my_device(g));
  // Write my piece.
  Shape mine = in.shape;
  if (!tiled) mine.insert(mine.begin() + axis, 1);
  std::vector<Slice> box = whole_box(mine);
  box[axis] = {offset[g.rank], offset[g.rank] + mine[axis]};
  if (!box_empty(box)) copy_box(in.data.data(), box, res.data(), whole_box(out), box, isz);
  rv->barrier();
  return {res, out, in.dtype};
}

Local reduce_scatter(Communicator& c, const Group& g, const Local& in, int dim, bool tiled) {
  TimelineScope scope(g.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
  const std::string params = "scatter_dimension=" + std::to_string(dim) + ", tiled=" + (tiled ? "true" : "false");
  auto rv = c.meet(g, {in.data, in.shape, in.dtype, sig(g.op, in, params, true)});
  const auto& d = rv->deposits();
  const std::int64_t len = in.shape[dim];
  const Slice part = tiled ? block_slice(len, g.size(), g.rank) : Slice{g.rank, g.rank + 1};
  std::vector<Slice> box = whole_box(in.shape);
  box[dim] = part;
  Shape out = box_shape(box);
  const std::size_t isz = itemsize(in.dtype);
  Buffer res(my_device(g), static_cast<std::size_t>(num_elements(out)) * isz);
  if (!box_empty(box)) {
    copy_box(d[0].data.data(), whole_box(in.shape), res.data(), box, box, isz);
    dispatch(in.dtype, [&](auto t) {
      using T = decltype(t);
      for (int r = 1; r < g.size(); ++r)
        for_each_run(whole_box(in.shape), box, box, isz, [&](std::int64_t so, std::int64_t dof, std::int64_t bytes) {
          combine<T>(ReduceOp::Sum, reinterpret_cast<T*>(static_cast<unsigned char*>(res.data()) + dof),
                     reinterpret_cast<const T*>(static_cast<const unsigned char*>(d[r].data.data()) + so),
                     bytes / static_cast<std::int64_t>(isz));
        });
    });
  }
  if (!tiled) out.erase(out.begin() + dim);
  return {res, out, in.dtype};
}

Local permute(Communicator& c, const Group& g, const Local& in, const std::vector<std::pair<int, int>>& perm) {
  TimelineScope scope(g.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
  std::string params = "perm=[";
  for (size_t i = 0; i < perm.size(); ++i)
    params += (i ? ", (" : "(") + std::to_string(perm[i].first) + ", " + std::to_string(perm[i].second) + ")";
  params += "]";
  auto rv = c.meet(g, {in.data, in.shape, in.dtype, sig(g.op, in, params, true)});
  for (const auto& [src, dst] : perm)
    if (dst == g.rank) return {rv->deposits()[src].data, in.shape, in.dtype};  // the sender's buffer, shared
  const std::size_t nbytes = static_cast<std::size_t>(num_elements(in.shape)) * itemsize(in.dtype);
  Buffer zeros(my_device(g), nbytes);
  if (nbytes) std::memset(zeros.data(), 0, nbytes);
  return {zeros, in.shape, in.dtype};
}

Local all_to_all(Communicator& c, const Group& g, const Local& in, int split_axis, int concat_axis) {
  TimelineScope scope(g.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
  const std::string params = "split_axis=" + std::to_string(split_axis) + ", concat_axis=" + std::to_string(concat_axis);
  auto rv = c.meet(g, {in.data, in.shape, in.dtype, sig(g.op, in, params, true)});
  const auto& d = rv->deposits();
  const std::size_t isz = itemsize(in.dtype);
  const std::int64_t len = in.shape[split_axis];
  // Block r of each member, placed one after another along concat_axis.
  Shape block = in.shape;
  block[split_axis] = block_size(len, g.size(), g.rank);
  Shape out = block;
  out[concat_axis] = block[concat_axis] * g.size();
  Buffer res(my_device(g), static_cast<std::size_t>(num_elements(out)) * isz);
  const Slice part = block_slice(len, g.size(), g.rank);
  for (int r = 0; r < g.size(); ++r) {
    std::vector<Slice> src = whole_box(in.shape);
    src[split_axis] = part;
    if (box_empty(src)) continue;
    // Source box in the member's block; destination box in the output.
    std::vector<Slice> dst = whole_box(block);
    dst[concat_axis] = {r * block[concat_axis], (r + 1) * block[concat_axis]};
    // copy_box works in one coordinate system: shift the source box so it
    // lands on the destination box.
    std::vector<Slice> src_block = whole_box(in.shape);
    for (size_t k = 0; k < src.size(); ++k) {
      const std::int64_t shift = dst[k].start - src[k].start;
      src_block[k] = {src_block[k].start + shift, src_block[k].stop + shift};
    }
    copy_box(d[r].data.data(), src_block, res.data(), whole_box(out), dst, isz);
  }
  return {res, out, in.dtype};
}

}  // namespace tessera::detail
