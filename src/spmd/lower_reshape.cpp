// The lowering of reshape (primitives/reshape.hpp). A local reshape shares
// the operand's buffers. Otherwise each position gathers the input boxes of
// its output block (reshape_sources, primitives/reshape.cpp) and the
// primitive's write_block (backend/cpu/eval_reshape.cpp; on a CUDA device
// write_block_cuda, backend/cuda/eval_reshape.cpp) puts them at their flat
// positions. When a requested layout would need many boxes (an output
// sharded on an inner dim of a split), the data first goes to the natural
// layout (which needs few) split also over the requested layout's axes,
// then through the planner: each step moves at most the requested blocks.
#include <algorithm>
#include <cstdint>

#include "core/array_impl.hpp"
#include "primitives/reshape.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"

namespace tessera::detail {

namespace {

using Box = std::vector<Slice>;
using Entry = PartitionSpec::Entry;

bool box_contains(const Box& outer, const Box& inner) { return intersect(inner, outer) == inner; }

/// Reshape `op` of `x` into layout `s` by gathering, per position, the input
/// boxes of its output block; nullopt when some position would need more
/// than `cap`.
std::optional<Array> reshape_gather(const ExecContext& ctx, const Reshape& op, const Array& x, const Shape& out,
                                    const std::vector<ReshapeGroup>& groups, const NamedSharding& s, std::size_t cap) {
  const int n = s.mesh().size();
  std::vector<std::vector<Box>> src(n);
  std::size_t rounds = 0;
  for (int t = 0; t < n; ++t) {
    auto b = reshape_sources(x.shape(), out, groups, s.shard_index(out, t), cap);
    if (!b) return std::nullopt;
    src[t] = std::move(*b);
  }
  // Boxes the position holds are read in place; the others are fetched, one
  // planner round per box index.
  std::vector<std::vector<int>> round_of(n);
  for (int t = 0; t < n; ++t) {
    const Box own = local_index(x, t);
    int k = 0;
    for (const Box& b : src[t]) round_of[t].push_back(box_contains(own, b) ? -1 : k++);
    rounds = std::max(rounds, static_cast<std::size_t>(k));
  }
  std::vector<std::vector<Buffer>> fetched;
  for (std::size_t k = 0; k < rounds; ++k) {
    std::vector<Box> boxes(n, empty_box(x.ndim()));
    for (int t = 0; t < n; ++t)
      for (size_t i = 0; i < src[t].size(); ++i)
        if (round_of[t][i] == static_cast<int>(k)) boxes[t] = src[t][i];
    fetched.push_back(gather_boxes(ctx, x, boxes, "reshape"));
  }
  if (rounds == 0) record_none(s.mesh(), "reshape");
  const std::size_t isz = itemsize(x.dtype());
  return make_array(ctx, out, x.dtype(), s, [&](int t, Buffer& buf) {
    if (buf.nbytes() == 0) return;
    const Box blk = s.shard_index(out, t);
    const Box own = local_index(x, t);
    // Sources in their own memory space: all on device t, as `buf` is.
    std::vector<ReshapeCopy> copies;
    for (size_t i = 0; i < src[t].size(); ++i) {
      const int k = round_of[t][i];
      if (k < 0)
        copies.push_back({x.impl()->buffers[t].device_data(), own, src[t][i]});
      else
        copies.push_back({fetched[k][t].device_data(), src[t][i], src[t][i]});
    }
    if (buf.on_host())
      op.write_block(buf.data(), blk, x.shape(), isz, copies);
    else
      op.write_block_cuda(buf.device_data(), blk, x.shape(), isz, copies);
  });
}

}  // namespace

std::vector<Array> Reshape::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>&,
                                        const std::vector<NamedSharding>& layouts) const {
  const Array& x = in[0];
  const Shape& out = out_;
  const NamedSharding& target = layouts[0];
  const Mesh& mesh = x.sharding().mesh();
  const int rank = static_cast<int>(out.size());
  if (reshape_is_local(x.shape(), x.sharding(), out, target)) {
    record_none(mesh, "reshape");
    return {wrap(out, x.dtype(), target, x.impl()->buffers)};
  }
  const auto groups = reshape_groups(x.shape(), out);
  const NamedSharding natural = reshape_natural_sharding(x.sharding(), out, groups);
  // Few boxes per device: straight to the layout. The natural layout always
  // needs few (each group's block is one flat range); other layouts that
  // would need many go through it and then the planner.
  // Without a requested layout the target is the natural or the balanced
  // layout (see reshape_layout, primitives/reshape.cpp): both need few boxes.
  if (!requested_) return {*reshape_gather(ctx, *this, x, out, groups, target, SIZE_MAX)};
  if (target == natural) return {*reshape_gather(ctx, *this, x, out, groups, natural, SIZE_MAX)};
  if (auto direct = reshape_gather(ctx, *this, x, out, groups, target, kReshapeMaxBoxes)) return {*direct};
  if (reshape_is_local(x.shape(), x.sharding(), out, natural))
    return {reshard_for(ctx, wrap(out, x.dtype(), natural, x.impl()->buffers), target, "reshape")};
  // The intermediate also splits over the target's other axes, so its blocks
  // are no larger than the target's: each step moves at most the target's
  // blocks. They go on the dim carrying the first group's axes (or the first
  // dim of size != 1), keeping one flat range per group.
  std::vector<Entry> e = entries_of(natural, rank);
  std::vector<std::string> extra;
  for (const auto& en : target.spec().entries())
    for (const auto& a : en.axes()) {
      bool used = false;
      for (const auto& ne : e) used = used || std::find(ne.axes().begin(), ne.axes().end(), a) != ne.axes().end();
      if (!used) extra.push_back(a);
    }
  int dim = -1;
  for (int j = 0; j < rank && dim < 0; ++j)
    if (!e[j].is_none()) dim = j;
  for (int j = 0; j < rank && dim < 0; ++j)
    if (out[j] != 1) dim = j;
  if (dim < 0 && rank > 0) dim = 0;
  if (dim >= 0 && !extra.empty()) {
    std::vector<std::string> axes = e[dim].axes();
    axes.insert(axes.end(), extra.begin(), extra.end());
    e[dim] = entry_of(axes);
  }
  const NamedSharding mid(mesh, spec_of(std::move(e), natural.spec().unreduced()));
  return {reshard_for(ctx, *reshape_gather(ctx, *this, x, out, groups, mid, SIZE_MAX), target, "reshape")};
}

}  // namespace tessera::detail
