// reshard: executes the planner's plan through the mesh's communicator.
#include "comm/communicator.hpp"
#include "core/array_impl.hpp"
#include "sharding/check.hpp"
#include "tessera/explain.hpp"

namespace tessera {

Array reshard(const Array& array, const NamedSharding& sharding) {
  if (!array.valid()) throw Error("[reshard] the array is empty (default-constructed)");
  ReshardPlan plan = plan_reshard(array, sharding);
  CommRecord rec;
  rec.op = "reshard";
  rec.kind = plan.kind;
  rec.pieces = plan.remote_pieces();
  rec.bytes_received = plan.bytes_received;
  rec.bytes_local = plan.bytes_local;
  detail::record_comm(rec);
  if (plan.kind == "none" && array.sharding() == sharding) return array;

  const auto& src = array.impl();
  const int n = sharding.mesh().size();
  // Positions without pieces keep their source buffer (same box, or empty).
  std::vector<int> piece_begin(n + 1, 0);
  for (const auto& p : plan.pieces) ++piece_begin[p.dst + 1];
  for (int t = 0; t < n; ++t) piece_begin[t + 1] += piece_begin[t];
  auto out = std::make_shared<detail::ArrayImpl>(array.shape(), array.dtype(), sharding);
  out->buffers.resize(n);
  for (int t = 0; t < n; ++t)
    if (piece_begin[t] == piece_begin[t + 1] && !detail::box_empty(sharding.shard_index(array.shape(), t)))
      out->buffers[t] = src->buffers[t];
  if (!plan.pieces.empty())
    detail::communicator_for(sharding.mesh()).exchange(plan, piece_begin, src->buffers, out->buffers);
  return Array(std::move(out));
}

Array reshard(const Array& array, const PartitionSpec& spec) {
  if (!array.valid()) throw Error("[reshard] the array is empty (default-constructed)");
  const Mesh& mesh = array.sharding().mesh();
  // Validate here so the message names this op, not the sharding constructor.
  detail::check_spec(mesh, spec, "reshard");
  return reshard(array, NamedSharding(mesh, spec));
}

}  // namespace tessera
