// The redistribution planner: the one place that decides how data moves when
// an array changes layout on a mesh.
//
// Algorithm. Under any NamedSharding the array is cut into a grid of distinct
// blocks (the product over dims of the balanced 1-d splits); a block is held
// by every device whose part indices select it (several when the spec leaves
// mesh axes out: replicas). For each destination position t:
//   1. T = the box t must hold: its block under the target sharding, or any
//      box the caller asks for (plan_boxes: a block widened by a halo, the
//      source region of a slice, ...).
//   2. If T equals the box t already holds under the source sharding, t keeps
//      its buffer: no piece, no copy (this covers "nothing changes").
//   3. Otherwise, per dim, find the source parts whose 1-d slice overlaps T
//      (they are consecutive, because blocks are ordered); every combination
//      gives one source block B and one piece T ∩ B.
//   4. The piece comes from t itself when t holds B (a local copy); else from
//      one replica of B: among the replicas in t's own process when there
//      are any (shared memory, not the network), chosen as
//      candidates[t % #candidates] so that receivers spread over senders
//      deterministically. Every process plans alike: device placement is
//      global knowledge.
// Invariants (property-tested): for each t the pieces tile T exactly (every
// element arrives once, nothing outside T is copied), and a piece crosses
// devices only when t does not hold its data. So bytes received by t equal
// |T minus what t holds|: the minimum any schedule could move.
//
// The plan is then classified by its data flow, only to report it (the
// threads backend executes every form the same way: receivers pull):
// "none", "local slice" (no remote piece), "all-gather" (remote pieces are
// whole source blocks), "permute" (each receiver has at most two senders),
// "all-to-all" (every device sends and receives), else "point-to-point".
#include <algorithm>
#include <numeric>

#include "core/array_impl.hpp"
#include "tessera/explain.hpp"

namespace tessera {

using detail::box_empty;
using detail::intersect;
using detail::num_elements;

namespace {

std::string vec_str(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + format_bytes(v[i]);
  return s + "]";
}

std::string classify(const ReshardPlan& p, const std::vector<int>& senders_per_dst, bool all_whole_blocks) {
  if (p.pieces.empty()) return "none";
  if (p.bytes_moved() == 0) return "local slice";
  if (all_whole_blocks) return "all-gather";
  if (*std::max_element(senders_per_dst.begin(), senders_per_dst.end()) <= 2) return "permute";
  bool all = true;
  for (size_t t = 0; t < p.bytes_received.size(); ++t)
    all = all && p.bytes_received[t] > 0 && p.bytes_sent[t] > 0;
  return all ? "all-to-all" : "point-to-point";
}

}  // namespace

std::int64_t ReshardPlan::bytes_moved() const {
  return std::accumulate(bytes_received.begin(), bytes_received.end(), std::int64_t{0});
}

std::int64_t ReshardPlan::remote_pieces() const {
  return std::count_if(pieces.begin(), pieces.end(), [](const TransferPiece& p) { return p.src != p.dst; });
}

std::string ReshardPlan::str() const {
  return "reshard " + kind + ": " + std::to_string(remote_pieces()) + " pieces, " + format_bytes(bytes_moved()) +
         " moved between devices; received per device " + vec_str(bytes_received) + ", local copies " +
         vec_str(bytes_local);
}

ReshardPlan plan_reshard(const Shape& shape, DType dtype, const NamedSharding& source, const NamedSharding& target) {
  if (!(source.mesh() == target.mesh()))
    throw ShardingError("[reshard] source and target must be on the same mesh: source " + source.mesh().str() +
                        ", target " + target.mesh().str() + "; use device_put to move between meshes");
  const int rank = static_cast<int>(shape.size());
  source.check_rank(rank, "reshard");
  target.check_rank(rank, "reshard");
  std::vector<std::vector<Slice>> boxes(target.mesh().size());
  for (int t = 0; t < target.mesh().size(); ++t) boxes[t] = target.shard_index(shape, t);
  ReshardPlan plan = plan_boxes(shape, dtype, source, std::move(boxes));
  plan.target = target;
  return plan;
}

ReshardPlan plan_boxes(const Shape& shape, DType dtype, const NamedSharding& source,
                       std::vector<std::vector<Slice>> target_boxes) {
  const int rank = static_cast<int>(shape.size());
  ReshardPlan plan(source, source);
  plan.target_boxes = std::move(target_boxes);
  plan.shape = shape;
  plan.dtype = dtype;
  const Mesh& mesh = source.mesh();
  const int n = mesh.size();
  const auto isz = static_cast<std::int64_t>(itemsize(dtype));
  plan.bytes_received.assign(n, 0);
  plan.bytes_sent.assign(n, 0);
  plan.bytes_local.assign(n, 0);

  // Source part indices of every position, and the replicas of each block.
  std::vector<int> kS(rank);
  for (int d = 0; d < rank; ++d) kS[d] = source.num_parts(d);
  auto block_id = [&](const std::vector<int>& parts) {
    long long id = 0;
    for (int d = 0; d < rank; ++d) id = id * kS[d] + parts[d];
    return id;
  };
  std::vector<std::vector<int>> parts_of(n, std::vector<int>(rank));
  std::vector<std::pair<long long, int>> holders;  // (block id, position), sorted
  for (int pos = 0; pos < n; ++pos) {
    for (int d = 0; d < rank; ++d) parts_of[pos][d] = source.part_index(d, pos);
    holders.emplace_back(block_id(parts_of[pos]), pos);
  }
  std::sort(holders.begin(), holders.end());
  auto replicas = [&](long long id) {
    auto lo = std::lower_bound(holders.begin(), holders.end(), std::make_pair(id, -1));
    auto hi = std::lower_bound(holders.begin(), holders.end(), std::make_pair(id + 1, -1));
    return std::make_pair(lo, hi);
  };

  std::vector<int> process(n);
  for (int pos = 0; pos < n; ++pos) process[pos] = mesh.devices()[pos].process_index();
  std::vector<int> near;

  std::vector<int> senders_per_dst(n, 0);
  bool all_whole_blocks = true;
  for (int t = 0; t < n; ++t) {
    const auto& tbox = plan.target_boxes[t];
    if (tbox == source.shard_index(shape, t) || box_empty(tbox)) continue;
    // Per dim, the consecutive source parts overlapping T.
    std::vector<int> lo(rank), hi(rank);
    for (int d = 0; d < rank; ++d) {
      lo[d] = kS[d];
      hi[d] = -1;
      for (int c = 0; c < kS[d]; ++c) {
        Slice s = block_slice(shape[d], kS[d], c);
        if (std::max(s.start, tbox[d].start) < std::min(s.stop, tbox[d].stop)) {
          lo[d] = std::min(lo[d], c);
          hi[d] = std::max(hi[d], c);
        }
      }
    }
    std::vector<int> senders;
    std::vector<int> parts = lo;
    for (;;) {
      std::vector<Slice> bbox(rank);
      for (int d = 0; d < rank; ++d) bbox[d] = block_slice(shape[d], kS[d], parts[d]);
      TransferPiece piece;
      piece.dst = t;
      piece.box = intersect(tbox, bbox);
      piece.bytes = num_elements(detail::box_shape(piece.box)) * isz;
      if (parts == parts_of[t]) {
        piece.src = t;
        plan.bytes_local[t] += piece.bytes;
      } else {
        auto [b, e] = replicas(block_id(parts));
        near.clear();
        for (auto it = b; it != e; ++it)
          if (process[it->second] == process[t]) near.push_back(it->second);
        piece.src = near.empty() ? (b + t % (e - b))->second : near[static_cast<size_t>(t) % near.size()];
        plan.bytes_received[t] += piece.bytes;
        plan.bytes_sent[piece.src] += piece.bytes;
        if (std::find(senders.begin(), senders.end(), piece.src) == senders.end()) senders.push_back(piece.src);
        all_whole_blocks = all_whole_blocks && piece.box == bbox;
      }
      plan.pieces.push_back(std::move(piece));
      int d = rank - 1;
      while (d >= 0 && ++parts[d] > hi[d]) parts[d] = lo[d], --d;
      if (d < 0) break;
    }
    senders_per_dst[t] = static_cast<int>(senders.size());
  }
  plan.kind = classify(plan, senders_per_dst, all_whole_blocks);
  return plan;
}

ReshardPlan plan_reshard(const Array& array, const NamedSharding& target) {
  return plan_reshard(array.shape(), array.dtype(), array.sharding(), target);
}

}  // namespace tessera
