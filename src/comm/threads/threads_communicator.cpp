// Threads backend: every device's memory is in this process, so a transfer is
// one copy performed by the receiving device's worker straight out of the
// sender's buffer (no staging, no intermediate gather). Receivers pull in
// parallel; senders' buffers are immutable while the plan runs.
#include "comm/communicator.hpp"
#include "core/array_impl.hpp"

namespace tessera::detail {

namespace {

class ThreadsCommunicator final : public Communicator {
 public:
  std::string backend() const override { return "threads"; }

  void exchange(const ReshardPlan& plan, const std::vector<int>& piece_begin, const std::vector<Buffer>& src,
                std::vector<Buffer>& dst) override {
    const Mesh& mesh = plan.target.mesh();
    const std::size_t isz = itemsize(plan.dtype);
    run_on_devices(mesh.devices(), [&](int t) {
      const int b = piece_begin[t], e = piece_begin[t + 1];
      if (b == e) return;
      const auto tbox = plan.target.shard_index(plan.shape, t);
      Buffer out(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(box_shape(tbox))) * isz);
      for (int i = b; i < e; ++i) {
        const TransferPiece& p = plan.pieces[i];
        copy_box(src[p.src].data(), plan.source.shard_index(plan.shape, p.src), out.data(), tbox, p.box, isz);
      }
      dst[t] = std::move(out);
    });
  }
};

}  // namespace

Communicator& communicator_for(const Mesh&) {
  static ThreadsCommunicator threads;
  return threads;
}

}  // namespace tessera::detail
