// Threads backend: every device's memory is in this process, so a transfer is
// one copy performed by the receiving device's worker straight out of the
// sender's buffer (no staging, no intermediate gather). Receivers pull in
// parallel; senders' buffers are immutable while the plan runs. Per-member
// groups (group.cpp) meet at the session's rendezvous (session.cpp).
#include <algorithm>
#include <cstring>

#include "comm/direct.hpp"
#include "comm/threads/threads.hpp"
#include "comm/tree.hpp"
#include "core/array_impl.hpp"
#include "runtime/timeline.hpp"
#include "tessera/device.hpp"

namespace tessera::detail {

namespace {

class ThreadsCommunicator final : public Communicator {
 public:
  std::string backend() const override { return "threads"; }

  std::shared_ptr<Session> open_session(const Mesh& mesh, double timeout_s) override {
    return make_threads_session(timeout_s, Runtime::get().polls_for(mesh.size()));
  }

  std::unique_ptr<Group> group(Session& session, const Mesh& mesh, const std::vector<std::string>& axes, int pos,
                               const std::string& op) override {
    GroupSpec g;
    g.session = &session;
    g.op = op;
    g.axes = axes_text(axes);
    // Members meet by key: the axes and this group's coordinates off them.
    g.key = g.axes + "|";
    const std::vector<int> me = mesh.coords(pos);
    for (int i = 0; i < mesh.ndim(); ++i)
      if (std::find(axes.begin(), axes.end(), mesh.axis_names()[i]) == axes.end()) g.key += std::to_string(me[i]) + ",";
    const std::vector<int> members = members_of(mesh, axes, pos);
    for (size_t r = 0; r < members.size(); ++r) {
      if (members[r] == pos) g.rank = static_cast<int>(r);
      g.device_ids.push_back(mesh.devices()[members[r]].id());
    }
    // GPU meshes whose collectives go through a transport
    // (TESSERA_GPU_COLLECTIVES): the threads group only agrees.
    if (Runtime::get().platform() == Platform::Cuda)
      if (DeviceTransport* t = gpu_transport()) {
        std::vector<int> ids = g.device_ids;
        const int rank = g.rank;
        std::string axes_str = g.axes;
        g.op = kControlOp;
        return make_direct_group(make_threads_group(std::move(g)), *t, session, std::move(ids), rank, op, std::move(axes_str),
                                 config::collective_timeout());
      }
    return make_threads_group(std::move(g));
  }

  void exchange(const ReshardPlan& plan, const std::vector<int>& piece_begin, const std::vector<Buffer>& src,
                std::vector<Buffer>& dst) override {
    const Mesh& mesh = plan.target.mesh();
    const std::size_t isz = itemsize(plan.dtype);
    // Each byte received is read once and written once.
    std::int64_t bytes = 0;
    for (std::int64_t b : plan.bytes_received) bytes += 2 * b;
    run_on_devices_sized(mesh.devices(), [&](int t) {
      const int b = piece_begin[t], e = piece_begin[t + 1];
      if (b == e) return;
      TimelineScope scope("exchange", "collective", plan.bytes_received[t]);
      const auto& tbox = plan.target_boxes[t];
      Buffer out(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(box_shape(tbox))) * isz);
      for (int i = b; i < e; ++i) {
        const TransferPiece& p = plan.pieces[i];
        copy_box(src[p.src], plan.source.shard_index(plan.shape, p.src), out, tbox, p.box, isz, "reshard");
      }
      dst[t] = std::move(out);
    }, bytes);
  }

  void reduce(const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp op, DType dtype,
              const std::vector<Buffer>& partial, const std::vector<std::vector<Slice>>& partial_boxes,
              const std::vector<std::vector<Slice>>& out_boxes, std::vector<Buffer>& dst) override {
    const std::size_t isz = itemsize(dtype);
    // Every member reads the group's partials straight from their buffers
    // and combines its own box of the result, in the tree order over the
    // group (comm/tree.hpp). On GPUs it copies them into scratch on its own
    // GPU and a kernel combines them in the same order.
    std::int64_t bytes = 0;
    for (int t = 0; t < mesh.size(); ++t)
      bytes += num_elements(box_shape(out_boxes[t])) * static_cast<std::int64_t>(isz) *
               (1 + static_cast<std::int64_t>(group_of(mesh, axes, t).size()));
    run_on_devices_sized(mesh.devices(), [&](int t) {
      const auto& obox = out_boxes[t];
      Buffer out(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(box_shape(obox))) * isz);
      TimelineScope scope("reduce", "collective", static_cast<std::int64_t>(out.nbytes()));
      if (out.nbytes() > 0) {
        const std::vector<int> group = group_of(mesh, axes, t);
        // Partial boxes are equal within a group: the runs are the same for
        // every member.
        if (!out.on_host()) {
          std::vector<const Buffer*> parts;
          for (int m : group) parts.push_back(&partial[m]);
          std::vector<CombineRun> runs;
          for_each_run(partial_boxes[t], obox, obox, isz, [&](std::int64_t so, std::int64_t dof, std::int64_t n) {
            runs.push_back({so, dof, n});
          });
          const std::string what = std::string(name(op)) + "-reduce";
          tree_combine_buffers(op, dtype, parts, runs, num_elements(box_shape(obox)), out, 0, mesh.devices()[t].id(),
                               what.c_str());
          dst[t] = std::move(out);
          return;
        }
        for_each_run(partial_boxes[t], obox, obox, isz, [&](std::int64_t so, std::int64_t dof, std::int64_t n) {
          tree_combine(op, dtype, 0, static_cast<int>(group.size()), [&](int lo, int hi) {
            return hi - lo == 1 ? static_cast<const unsigned char*>(partial[group[lo]].data()) + so : nullptr;
          }, static_cast<unsigned char*>(out.data()) + dof, n / static_cast<std::int64_t>(isz));
        });
      }
      dst[t] = std::move(out);
    }, bytes);
  }
};

}  // namespace

Communicator& threads_communicator() {
  static ThreadsCommunicator threads;
  return threads;
}

}  // namespace tessera::detail
