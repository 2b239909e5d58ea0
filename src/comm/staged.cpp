// GPU meshes across processes: the cross-process communicator's host
// algorithms, run on page-locked host copies of the GPU devices' bytes.
//
// The mpi backend (comm/mpi/) moves and combines host memory: frames are
// packed and unpacked by host code, the local part of a reduction's tree is
// combined on the host, and a group's members compute their results with
// the threads backend's host functions. On GPUs this decorator gives it host
// memory to work on:
//
//   - each input that lives on a GPU is copied once into page-locked host
//     staging memory (Buffer::host_staging), where the GPU's copy engine
//     writes at full bus speed;
//   - the wrapped call runs inside a HostStaging scope, so every buffer it
//     allocates (on its own thread and in the device tasks it starts) is
//     host staging memory too;
//   - each result is copied onto its own device's GPU, and a result that is
//     the (unchanged) input comes back as the input itself.
//
// The bits are the CPU's: the same tree over the same member order, only run
// by host code (which is what every backend's combine reproduces). The
// price is two host copies of each local value per collective; a transport
// that moves GPU memory directly would avoid them.
#include "comm/staged.hpp"

#include <utility>

#include "comm/direct.hpp"
#include "core/array_impl.hpp"
#include "tessera/device.hpp"

namespace tessera::detail {

namespace {

// `b` in host memory: itself when it is (or is empty), else a staging copy.
Buffer to_host(const Buffer& b, const char* op) {
  if (b.device_id() < 0 || b.on_host()) return b;
  Buffer h = Buffer::host_staging(b.device_id(), b.nbytes());
  read_buffer(b, h.device_data(), b.nbytes(), op);
  return h;
}

Local to_host(const Local& l, const char* op) { return {to_host(l.data, op), l.shape, l.dtype}; }

// `h`, a result in host memory, on device `device_id`'s GPU; `given`/`staged`
// are an input and its staging copy, so that a result that is the input
// comes back as the input.
Buffer to_device(const Buffer& h, int device_id, const Buffer& given, const Buffer& staged, const char* op) {
  if (h.device_id() < 0 || !h.on_host()) return h;
  if (staged.device_id() >= 0 && h.device_data() == staged.device_data() && h.nbytes() == staged.nbytes())
    return given;  // the input, unchanged
  Buffer d(device_id, h.nbytes());
  if (d.on_host()) return h;  // a CPU device: host memory is its memory
  write_buffer(d, h.device_data(), h.nbytes(), op);
  return d;
}

class StagedGroup final : public Group {
 public:
  StagedGroup(std::unique_ptr<Group> inner, int device_id) : inner_(std::move(inner)), device_(device_id) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  Local all_reduce(const Local& in, ReduceOp op) override {
    return run(in, "psum", [&](const Local& h) { return inner_->all_reduce(h, op); });
  }
  Local all_gather(const Local& in, int axis, bool tiled) override {
    return run(in, "all_gather", [&](const Local& h) { return inner_->all_gather(h, axis, tiled); });
  }
  Local reduce_scatter(const Local& in, int dim, bool tiled, ReduceOp op) override {
    return run(in, "psum_scatter", [&](const Local& h) { return inner_->reduce_scatter(h, dim, tiled, op); });
  }
  Local all_to_all(const Local& in, int split_axis, int concat_axis) override {
    return run(in, "all_to_all", [&](const Local& h) { return inner_->all_to_all(h, split_axis, concat_axis); });
  }
  Local permute(const Local& in, const std::vector<std::pair<int, int>>& perm) override {
    return run(in, "ppermute", [&](const Local& h) { return inner_->permute(h, perm); });
  }
  void barrier() override {
    HostStaging stage;
    inner_->barrier();
  }
  Buffer exchange(const ReshardPlan& plan, int my_position, const Buffer& mine) override {
    const Buffer h = to_host(mine, "reshard");
    Buffer r;
    {
      HostStaging stage;
      r = inner_->exchange(plan, my_position, h);
    }
    return to_device(r, device_, mine, h, "reshard");
  }

 private:
  template <class F>
  Local run(const Local& in, const char* op, F&& f) {
    const Local h = to_host(in, op);
    Local r;
    {
      HostStaging stage;
      r = f(h);
    }
    r.data = to_device(r.data, device_, in.data, h.data, op);
    return r;
  }

  std::unique_ptr<Group> inner_;
  int device_;
};

class StagedCommunicator final : public Communicator {
 public:
  explicit StagedCommunicator(Communicator& inner) : inner_(inner) {}
  std::string backend() const override { return inner_.backend(); }

  void exchange(const ReshardPlan& plan, const std::vector<int>& piece_begin, const std::vector<Buffer>& src,
                std::vector<Buffer>& dst) override {
    std::vector<Buffer> hsrc(src.size()), hdst(dst.size());
    for (size_t t = 0; t < src.size(); ++t) hsrc[t] = to_host(src[t], "reshard");
    {
      HostStaging stage;
      inner_.exchange(plan, piece_begin, hsrc, hdst);
    }
    back(plan.target.mesh(), hdst, src, hsrc, dst, "reshard");
  }

  void reduce(const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp op, DType dtype,
              const std::vector<Buffer>& partial, const std::vector<std::vector<Slice>>& partial_boxes,
              const std::vector<std::vector<Slice>>& out_boxes, std::vector<Buffer>& dst) override {
    std::vector<Buffer> hpartial(partial.size()), hdst(dst.size());
    for (size_t t = 0; t < partial.size(); ++t) hpartial[t] = to_host(partial[t], "reduce");
    {
      HostStaging stage;
      inner_.reduce(mesh, axes, op, dtype, hpartial, partial_boxes, out_boxes, hdst);
    }
    back(mesh, hdst, partial, hpartial, dst, "reduce");
  }

  std::shared_ptr<Session> open_session(const Mesh& mesh, double timeout_s) override {
    return inner_.open_session(mesh, timeout_s);
  }

  std::unique_ptr<Group> group(Session& session, const Mesh& mesh, const std::vector<std::string>& axes, int pos,
                               const std::string& op) override {
    const bool direct = gpu_collectives() != GpuCollectives::Host;
    std::unique_ptr<Group> g = inner_.group(session, mesh, axes, pos, direct ? kControlOp : op);
    // A group whose members are all in this process meets in shared memory
    // with GPU kernels and peer copies: nothing to stage.
    const Runtime& rt = Runtime::get();
    const std::vector<int> members = members_of(mesh, axes, pos);
    bool local = true;
    for (int q : members) local = local && rt.is_local(mesh.devices()[q].id());
    // TESSERA_GPU_COLLECTIVES: a transport moves every group's bytes.
    if (direct) {
      std::vector<int> ids;
      int rank = 0;
      for (size_t r = 0; r < members.size(); ++r) {
        if (members[r] == pos) rank = static_cast<int>(r);
        ids.push_back(mesh.devices()[members[r]].id());
      }
      return make_direct_group(std::move(g), *gpu_transport(), session, std::move(ids), rank, op, axes_text(axes),
                               config::collective_timeout());
    }
    if (local) return g;
    return std::make_unique<StagedGroup>(std::move(g), mesh.devices()[pos].id());
  }

 private:
  // The wrapped call's results (position t's in hdst[t]) onto their devices;
  // entries it left empty leave dst[t] as it was. A result that is one of
  // the inputs' staging copies, unchanged, comes back as that input when it
  // is on the right device.
  static void back(const Mesh& mesh, const std::vector<Buffer>& hdst, const std::vector<Buffer>& given,
                   const std::vector<Buffer>& staged, std::vector<Buffer>& dst, const char* op) {
    for (size_t t = 0; t < hdst.size(); ++t) {
      if (hdst[t].device_id() < 0) continue;
      const int device = mesh.devices()[t].id();
      size_t k = 0;
      while (k < staged.size() && !(given[k].device_id() == device && same(staged[k], hdst[t]))) ++k;
      dst[t] = k < staged.size() ? given[k] : to_device(hdst[t], device, Buffer(), Buffer(), op);
    }
  }
  static bool same(const Buffer& a, const Buffer& b) {
    return a.device_id() >= 0 && a.device_data() == b.device_data() && a.nbytes() == b.nbytes();
  }

  Communicator& inner_;
};

}  // namespace

Communicator& staged_on_host(Communicator& inner) {
  // One decorator per communicator, made once (the communicators live for
  // the whole process).
  static StagedCommunicator* staged = new StagedCommunicator(inner);
  return *staged;
}

}  // namespace tessera::detail
