#include "spmd/exchange.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "comm/communicator.hpp"
#include "comm/direct.hpp"
#include "comm/process.hpp"
#include "core/validate.hpp"
#include "runtime/runtime.hpp"
#include "runtime/timeline.hpp"
#include "sharding/spec.hpp"
#include "spmd/member.hpp"
#include "spmd/program.hpp"

namespace tessera::detail {

namespace {

// GPU meshes over several processes whose collectives go through a
// transport (TESSERA_GPU_COLLECTIVES, comm/direct.hpp): their whole-mesh
// exchanges and reductions run as one program of the mesh's members, each
// member's share through its direct group, so NCCL carries those bytes too.
bool direct_across_processes(const Mesh& mesh) {
  const Runtime& rt = Runtime::get();
  if (rt.platform() != Platform::Cuda || rt.process_count() < 2 || gpu_collectives() == GpuCollectives::Host)
    return false;
  const int first = rt.process_of(mesh.devices()[0].id());
  for (const Device& d : mesh.devices())
    if (rt.process_of(d.id()) != first) return true;
  return false;
}

}  // namespace

Array wrap(const Shape& shape, DType dtype, const NamedSharding& sharding, std::vector<Buffer> buffers) {
  auto impl = std::make_shared<ArrayImpl>(shape, dtype, sharding);
  impl->buffers = std::move(buffers);
  return Array(std::move(impl));
}

Array reshard_for(const ExecContext& ctx, const Array& a, const NamedSharding& s, const char* op) {
  if (a.sharding() == s) return a;
  std::vector<std::vector<Slice>> boxes(s.mesh().size());
  for (int t = 0; t < s.mesh().size(); ++t) boxes[t] = s.shard_index(a.shape(), t);
  return wrap(a.shape(), a.dtype(), s, gather_boxes(ctx, a, boxes, op));
}

std::vector<Buffer> gather_boxes(const ExecContext& ctx, const Array& a, const std::vector<std::vector<Slice>>& boxes, const char* op) {
  TimelineScope scope("reshard", "reshard");
  ReshardPlan plan = plan_boxes(a.shape(), a.dtype(), a.sharding(), boxes);
  if (scope) {
    scope.arg("op", op);
    scope.arg("kind", plan.kind);
    scope.arg("bytes", plan.bytes_moved());
    scope.arg("type", typeof(a));  // dtype, shape and source layout
  }
  const int n = a.sharding().mesh().size();
  record_comm(plan_record(plan, op));
  std::vector<Buffer> out(n);
  const auto& src = a.impl()->buffers;
  if (MemberContext* m = ctx.member()) {
    // One member's share (spmd/member.hpp); views as below, by the group.
    if (!(a.sharding().mesh() == m->mesh()))
      throw Error(msg(op, "internal: a device's share of a program moves " + describe(a) + ", which is not on " +
                              m->mesh().str()));
    out[m->pos()] = m->whole(op).exchange(plan, m->pos(), src[m->pos()]);
    return out;
  }
  if (direct_across_processes(a.sharding().mesh())) {
    const Mesh& mesh = a.sharding().mesh();
    run_spmd(mesh, [&](int pos, Session& session) {
      MemberContext m(mesh, pos, session);
      out[pos] = m.whole(op).exchange(plan, pos, src[pos]);
    });
    return out;
  }
  // A position whose whole box is one contiguous part of its own block (rows
  // of a replicated matrix) takes a view of it instead of a copy.
  std::vector<char> viewed(n, 0);
  bool any_view = false;
  for (const auto& p : plan.pieces)
    if (p.src == p.dst && p.box == boxes[p.dst]) {
      out[p.dst] = contiguous_view(src[p.src], a.sharding().shard_index(a.shape(), p.src), p.box, itemsize(a.dtype()));
      viewed[p.dst] = out[p.dst].device_data() != nullptr;
      any_view = any_view || viewed[p.dst];
    }
  // The pieces still to copy: the plan itself unless some became views.
  std::optional<ReshardPlan> trimmed;
  if (any_view) {
    trimmed = plan;
    std::erase_if(trimmed->pieces, [&](const TransferPiece& p) { return viewed[p.dst] != 0; });
  }
  const ReshardPlan& rest = trimmed ? *trimmed : plan;
  std::vector<int> piece_begin(n + 1, 0);
  for (const auto& p : rest.pieces) ++piece_begin[p.dst + 1];
  for (int t = 0; t < n; ++t) piece_begin[t + 1] += piece_begin[t];
  for (int t = 0; t < n; ++t)
    if (!viewed[t] && piece_begin[t] == piece_begin[t + 1] && !box_empty(boxes[t])) out[t] = src[t];
  if (!rest.pieces.empty()) communicator_for(a.sharding().mesh()).exchange(rest, piece_begin, src, out);
  return out;
}

void record_none(const Mesh& mesh, const char* op) {
  const auto n = static_cast<size_t>(mesh.size());
  record_comm(CommRecord{op, "none", 0, std::vector<std::int64_t>(n, 0), std::vector<std::int64_t>(n, 0)});
}

CommRecord plan_record(const ReshardPlan& plan, const char* op) {
  CommRecord rec;
  rec.op = op;
  rec.kind = plan.kind;
  rec.pieces = plan.remote_pieces();
  rec.bytes_received = plan.bytes_received;
  rec.bytes_local = plan.bytes_local;
  return rec;
}

CommRecord reduce_record(const Mesh& mesh, const std::vector<std::string>& axes, DType dtype,
                         const std::vector<std::vector<Slice>>& partial_boxes,
                         const std::vector<std::vector<Slice>>& out_boxes, const char* op) {
  const int n = mesh.size();
  const std::size_t isz = itemsize(dtype);
  CommRecord rec;
  rec.op = op;
  rec.kind = "all-reduce";
  rec.bytes_received.assign(n, 0);
  rec.bytes_local.assign(n, 0);
  bool scatter = false;
  for (int t = 0; t < n; ++t) {
    const auto obytes = num_elements(box_shape(out_boxes[t])) * static_cast<std::int64_t>(isz);
    const auto group = group_of(mesh, axes, t);
    rec.bytes_received[t] = obytes * static_cast<std::int64_t>(group.size() - 1);
    rec.bytes_local[t] = obytes;
    rec.pieces += static_cast<std::int64_t>(group.size() - 1);
    scatter = scatter || out_boxes[t] != partial_boxes[t];
  }
  if (scatter) rec.kind = "reduce-scatter";
  bool trivial = true;
  for (const auto& a : axes) trivial = trivial && mesh.axis_size(a) == 1;
  if (trivial) rec.kind = "none";
  return rec;
}

std::vector<Buffer> reduce_over(const ExecContext& ctx, const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp reduction, DType dtype,
                                const std::vector<Buffer>& partial,
                                const std::vector<std::vector<Slice>>& partial_boxes,
                                const std::vector<std::vector<Slice>>& out_boxes, const char* op) {
  record_comm(reduce_record(mesh, axes, dtype, partial_boxes, out_boxes, op));
  std::vector<Buffer> out(mesh.size());
  if (MemberContext* m = ctx.member()) {
    if (!(mesh == m->mesh()))
      throw Error(msg(op, "internal: a device's share of a program reduces over " + mesh.str() + ", not " +
                              m->mesh().str()));
    const int pos = m->pos();
    out[pos] = reduce_member(m->over(in_mesh_order(mesh, axes), op), partial[pos], partial_boxes[pos], out_boxes[pos],
                             dtype, reduction, mesh.devices()[pos].id());
    return out;
  }
  if (direct_across_processes(mesh)) {
    run_spmd(mesh, [&](int pos, Session& session) {
      MemberContext m(mesh, pos, session);
      out[pos] = reduce_member(m.over(in_mesh_order(mesh, axes), op), partial[pos], partial_boxes[pos],
                               out_boxes[pos], dtype, reduction, mesh.devices()[pos].id());
    });
    return out;
  }
  communicator_for(mesh).reduce(mesh, axes, reduction, dtype, partial, partial_boxes, out_boxes, out);
  return out;
}

void for_each_device(const ExecContext& ctx, const Mesh& mesh, const std::function<void(int)>& fn,
                     std::int64_t bytes) {
  if (MemberContext* m = ctx.member()) {
    if (!(mesh == m->mesh()))
      throw Error("[member] internal: a device's share of a program runs on " + mesh.str() + ", not " +
                  m->mesh().str());
    fn(m->pos());
    return;
  }
  if (bytes >= 0) return run_on_devices_sized(mesh.devices(), fn, bytes);
  run_on_devices(mesh.devices(), fn);
}

Array make_array(const ExecContext& ctx, const Shape& shape, DType dtype, const NamedSharding& sharding,
                 const std::function<void(int, Buffer&)>& fill) {
  return make_array_on(shape, dtype, sharding, fill,
                       [&](const std::function<void(int)>& fn) { for_each_device(ctx, sharding.mesh(), fn); });
}

std::optional<std::int64_t> first_over_processes(const ExecContext& ctx, const Mesh& mesh,
                                                 const std::vector<std::optional<std::int64_t>>& found,
                                                 const char* op) {
  auto first = [](const std::vector<std::optional<std::int64_t>>& f) -> std::optional<std::int64_t> {
    for (const auto& v : f)
      if (v) return v;
    return std::nullopt;
  };
  if (Runtime::get().process_count() == 1) return first(found);
  // (position, value) of this thread's first finding; position -1: none.
  std::int64_t mine[2] = {-1, 0};
  for (size_t t = 0; t < found.size(); ++t)
    if (found[t]) {
      mine[0] = static_cast<std::int64_t>(t);
      mine[1] = *found[t];
      break;
    }
  std::vector<std::optional<std::int64_t>> all(found.size());
  auto take_in = [&](const std::int64_t* pair) {
    if (pair[0] >= 0 && pair[0] < static_cast<std::int64_t>(all.size()) && !all[static_cast<size_t>(pair[0])])
      all[static_cast<size_t>(pair[0])] = pair[1];
  };
  if (MemberContext* m = ctx.member()) {
    // Every member of the program, on every process, gathers every member's.
    // A few bytes, read here: they stay in host memory on GPUs too.
    HostStaging on_host;
    Buffer b(mesh.devices()[m->pos()].id(), sizeof mine);
    std::memcpy(b.data(), mine, sizeof mine);
    const Local got = m->whole(op).all_gather({b, {2}, DType::i64}, 0, true);
    const auto* v = static_cast<const std::int64_t*>(got.data.data());
    for (std::int64_t i = 0; i < num_elements(got.shape); i += 2) take_in(v + i);
  } else {
    for (const auto& part : allgather_processes(mine, sizeof mine, op))
      if (part.size() == sizeof mine) take_in(reinterpret_cast<const std::int64_t*>(part.data()));
  }
  return first(all);
}

}  // namespace tessera::detail
