// Threads backend: every device's memory is in this process, so a transfer is
// one copy performed by the receiving device's worker straight out of the
// sender's buffer (no staging, no intermediate gather). Receivers pull in
// parallel; senders' buffers are immutable while the plan runs.
#include "comm/communicator.hpp"
#include "core/array_impl.hpp"
#include "runtime/timeline.hpp"

#include <cstring>

namespace tessera::detail {

std::shared_ptr<Session> make_threads_session(double timeout_s, bool poll);
std::shared_ptr<Rendezvous> threads_meet(const Group& g, Deposit mine);

namespace {

class ThreadsCommunicator final : public Communicator {
 public:
  std::string backend() const override { return "threads"; }

  std::shared_ptr<Session> open_session(const Mesh& mesh, double timeout_s) override {
    return make_threads_session(timeout_s, Runtime::get().polls_for(mesh.size()));
  }
  std::shared_ptr<Rendezvous> meet(const Group& g, Deposit mine) override { return threads_meet(g, std::move(mine)); }

  void exchange(const ReshardPlan& plan, const std::vector<int>& piece_begin, const std::vector<Buffer>& src,
                std::vector<Buffer>& dst) override {
    const Mesh& mesh = plan.target.mesh();
    const std::size_t isz = itemsize(plan.dtype);
    run_on_devices(mesh.devices(), [&](int t) {
      const int b = piece_begin[t], e = piece_begin[t + 1];
      if (b == e) return;
      TimelineScope scope("exchange", "collective", plan.bytes_received[t]);
      const auto& tbox = plan.target_boxes[t];
      Buffer out(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(box_shape(tbox))) * isz);
      for (int i = b; i < e; ++i) {
        const TransferPiece& p = plan.pieces[i];
        copy_box(src[p.src].data(), plan.source.shard_index(plan.shape, p.src), out.data(), tbox, p.box, isz);
      }
      dst[t] = std::move(out);
    });
  }

  void reduce(const Mesh& mesh, const std::vector<std::string>& axes, std::size_t itemsize,
              const std::function<void(void*, const void*, std::int64_t)>& combine, const std::vector<Buffer>& partial,
              const std::vector<std::vector<Slice>>& partial_boxes, const std::vector<std::vector<Slice>>& out_boxes,
              std::vector<Buffer>& dst) override {
    // Every member reads the group's partials straight from their buffers
    // and combines its own box of the result, in group order.
    run_on_devices(mesh.devices(), [&](int t) {
      const auto& obox = out_boxes[t];
      Buffer out(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(box_shape(obox))) * itemsize);
      TimelineScope scope("reduce", "collective", static_cast<std::int64_t>(out.nbytes()));
      if (out.nbytes() > 0) {
        auto* o = static_cast<unsigned char*>(out.data());
        bool first = true;
        for (int m : group_of(mesh, axes, t)) {
          const auto* in = static_cast<const unsigned char*>(partial[m].data());
          for_each_run(partial_boxes[m], obox, obox, itemsize, [&](std::int64_t so, std::int64_t dof, std::int64_t n) {
            if (first)
              std::memcpy(o + dof, in + so, static_cast<std::size_t>(n));
            else
              combine(o + dof, in + so, n / static_cast<std::int64_t>(itemsize));
          });
          first = false;
        }
      }
      dst[t] = std::move(out);
    });
  }
};

}  // namespace

std::vector<int> group_of(const Mesh& mesh, const std::vector<std::string>& axes, int pos) {
  const std::vector<int> c = mesh.coords(pos);
  std::vector<bool> reduced(mesh.ndim(), false);
  for (const auto& a : axes) reduced[mesh.axis_index(a)] = true;
  std::vector<int> members;
  for (int q = 0; q < mesh.size(); ++q) {
    const std::vector<int> cq = mesh.coords(q);
    bool same = true;
    for (int i = 0; i < mesh.ndim() && same; ++i) same = reduced[i] || cq[i] == c[i];
    if (same) members.push_back(q);
  }
  return members;
}

Communicator& communicator_for(const Mesh&) {
  static ThreadsCommunicator threads;
  return threads;
}

}  // namespace tessera::detail
