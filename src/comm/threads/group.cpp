// The threads backend's Group: collectives written once over the rendezvous
// (session.cpp). With every device's memory in one process they are
// zero-copy where the result is shared: all_reduce and all_gather build one
// result buffer that every member fills a part of and then shares (after a
// barrier), so a member writes only its part; permute hands the sender's
// buffer to the receiver. reduce_scatter, all_to_all and exchange pull each
// member's part straight from the others' deposited buffers, which stay
// alive and unchanged while any member holds the rendezvous. Reductions
// combine in the fixed tree order over member rank (comm/tree.hpp), so
// results are bitwise reproducible, equal on every member, and the same
// whichever processes hold the members.
//
// Each collective first meets with a signature (op, dtype, shape,
// parameters) that the rendezvous compares across members, so mismatched
// calls fail on every member instead of combining.
//
// The per-member results are computed by free functions over every
// member's deposit (threads.hpp), which the MPI backend reuses once it has
// assembled the deposits of members in other processes.
#include <algorithm>
#include <cstring>

#include "comm/threads/threads.hpp"
#include "comm/tree.hpp"
#include "core/array_impl.hpp"

#include "runtime/timeline.hpp"

namespace tessera::detail {

std::string collective_sig(const std::string& op, const Local& in, const std::string& params, bool with_shape,
                           int free_dim) {
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

std::string all_gather_params(int axis, bool tiled) {
  return "axis=" + std::to_string(axis) + ", tiled=" + (tiled ? "true" : "false");
}

std::string reduce_scatter_params(int dim, bool tiled, ReduceOp op) {
  std::string params = "scatter_dimension=" + std::to_string(dim) + ", tiled=" + (tiled ? "true" : "false");
  // A sum is what psum_scatter means; other reductions are named.
  if (op != ReduceOp::Sum) params += std::string(", reduce=") + name(op);
  return params;
}

std::string permute_params(const std::vector<std::pair<int, int>>& perm) {
  std::string params = "perm=[";
  for (size_t i = 0; i < perm.size(); ++i)
    params += (i ? ", (" : "(") + std::to_string(perm[i].first) + ", " + std::to_string(perm[i].second) + ")";
  return params + "]";
}

std::string all_to_all_params(int split_axis, int concat_axis) {
  return "split_axis=" + std::to_string(split_axis) + ", concat_axis=" + std::to_string(concat_axis);
}

std::string exchange_sig(const std::string& op, const ReshardPlan& plan) {
  // Blocks may differ in size (uneven layouts): the signature names the
  // global array and the two layouts instead.
  const std::string params = "from=" + plan.source.spec().str() + ", to=" + plan.target.spec().str();
  return collective_sig(op, {Buffer(), plan.shape, plan.dtype}, params, true);
}

Local gather_deposits(const std::vector<Deposit>& d, int axis, bool tiled, int device) {
  const int n = static_cast<int>(d.size());
  Shape out = d[0].shape;
  std::vector<std::int64_t> offset(n, 0);
  if (tiled) {
    out[axis] = 0;
    for (int r = 0; r < n; ++r) {
      offset[r] = out[axis];
      out[axis] += d[r].shape[axis];
    }
  } else {
    out.insert(out.begin() + axis, n);
    for (int r = 0; r < n; ++r) offset[r] = r;
  }
  const std::size_t isz = itemsize(d[0].dtype);
  Buffer res(device, static_cast<std::size_t>(num_elements(out)) * isz);
  for (int r = 0; r < n; ++r) {
    Shape piece = d[r].shape;
    if (!tiled) piece.insert(piece.begin() + axis, 1);
    std::vector<Slice> box = whole_box(piece);
    box[axis] = {offset[r], offset[r] + piece[axis]};
    if (!box_empty(box)) copy_box(d[r].data, box, res, whole_box(out), box, isz, "all_gather");
  }
  return {res, out, d[0].dtype};
}

Local reduce_scatter_deposits(const std::vector<Deposit>& d, int rank, int dim, bool tiled, ReduceOp op,
                              int device) {
  const int n = static_cast<int>(d.size());
  const Shape& shape = d[rank].shape;
  const DType dtype = d[rank].dtype;
  const std::int64_t len = shape[dim];
  const Slice part = tiled ? block_slice(len, n, rank) : Slice{rank, rank + 1};
  std::vector<Slice> box = whole_box(shape);
  box[dim] = part;
  Shape out = box_shape(box);
  const std::size_t isz = itemsize(dtype);
  Buffer res(device, static_cast<std::size_t>(num_elements(out)) * isz);
  if (!box_empty(box) && !res.on_host()) {
    // On a GPU: the same runs, copied into scratch there and combined by a
    // kernel in the same tree order.
    std::vector<const Buffer*> parts;
    for (const Deposit& m : d) parts.push_back(&m.data);
    std::vector<CombineRun> runs;
    for_each_run(whole_box(shape), box, box, isz, [&](std::int64_t so, std::int64_t dof, std::int64_t bytes) {
      runs.push_back({so, dof, bytes});
    });
    tree_combine_buffers(op, dtype, parts, runs, num_elements(out), res, 0, device, "reduce_scatter");
  } else if (!box_empty(box)) {
    for_each_run(whole_box(shape), box, box, isz, [&](std::int64_t so, std::int64_t dof, std::int64_t bytes) {
      tree_combine(op, dtype, 0, n, [&](int lo, int hi) {
        return hi - lo == 1 ? static_cast<const unsigned char*>(d[lo].data.data()) + so : nullptr;
      }, static_cast<unsigned char*>(res.data()) + dof, bytes / static_cast<std::int64_t>(isz));
    });
  }
  if (!tiled) out.erase(out.begin() + dim);
  return {res, out, dtype};
}

Local permute_deposits(const std::vector<Deposit>& d, int rank, const std::vector<std::pair<int, int>>& perm,
                       int device) {
  const Shape& shape = d[rank].shape;
  const DType dtype = d[rank].dtype;
  for (const auto& [src, dst] : perm)
    if (dst == rank) return {d[src].data, shape, dtype};  // the sender's buffer, shared
  const std::size_t nbytes = static_cast<std::size_t>(num_elements(shape)) * itemsize(dtype);
  Buffer zeros(device, nbytes);
  if (nbytes && zeros.on_host()) {
    std::memset(zeros.data(), 0, nbytes);
  } else if (nbytes) {
    const std::vector<unsigned char> host(nbytes, 0);
    write_buffer(zeros, host.data(), nbytes, "ppermute");
  }
  return {zeros, shape, dtype};
}

Local all_to_all_deposits(const std::vector<Deposit>& d, int rank, int split_axis, int concat_axis, int device) {
  const int n = static_cast<int>(d.size());
  const Shape& shape = d[rank].shape;
  const DType dtype = d[rank].dtype;
  const std::size_t isz = itemsize(dtype);
  const std::int64_t len = shape[split_axis];
  // Block `rank` of each member, placed one after another along concat_axis.
  Shape block = shape;
  block[split_axis] = block_size(len, n, rank);
  Shape out = block;
  out[concat_axis] = block[concat_axis] * n;
  Buffer res(device, static_cast<std::size_t>(num_elements(out)) * isz);
  const Slice part = block_slice(len, n, rank);
  for (int r = 0; r < n; ++r) {
    std::vector<Slice> src = whole_box(shape);
    src[split_axis] = part;
    if (box_empty(src)) continue;
    // Source box in the member's block; destination box in the output.
    std::vector<Slice> dst = whole_box(block);
    dst[concat_axis] = {r * block[concat_axis], (r + 1) * block[concat_axis]};
    // copy_box works in one coordinate system: shift the source box so it
    // lands on the destination box.
    std::vector<Slice> src_block = whole_box(shape);
    for (size_t k = 0; k < src.size(); ++k) {
      const std::int64_t shift = dst[k].start - src[k].start;
      src_block[k] = {src_block[k].start + shift, src_block[k].stop + shift};
    }
    copy_box(d[r].data, src_block, res, whole_box(out), dst, isz, "all_to_all");
  }
  return {res, out, dtype};
}

Buffer exchange_deposits(const ReshardPlan& plan, int my_position, const Buffer& mine, int device,
                         const std::function<PieceSource(int piece)>& source) {
  // This position's pieces: plan.pieces is grouped by destination in mesh order.
  const auto mine_first = std::partition_point(plan.pieces.begin(), plan.pieces.end(),
                                               [&](const TransferPiece& p) { return p.dst < my_position; });
  const auto mine_last = std::partition_point(mine_first, plan.pieces.end(),
                                              [&](const TransferPiece& p) { return p.dst == my_position; });
  const auto& tbox = plan.target_boxes[my_position];
  if (mine_first == mine_last) return box_empty(tbox) ? Buffer() : mine;
  const std::size_t isz = itemsize(plan.dtype);
  // The whole box one contiguous part of this member's own block: a view.
  if (mine_last - mine_first == 1 && mine_first->src == my_position && mine_first->box == tbox)
    if (Buffer v = contiguous_view(mine, plan.source.shard_index(plan.shape, my_position), tbox, isz); v.device_data())
      return v;
  Buffer out(device, static_cast<std::size_t>(num_elements(box_shape(tbox))) * isz);
  for (auto p = mine_first; p != mine_last; ++p) {
    const PieceSource from = source(static_cast<int>(p - plan.pieces.begin()));
    if (from.buffer)
      copy_box(*from.buffer, from.box, out, tbox, p->box, isz, "reshard");
    else
      copy_box(from.data, from.box, out.data(), tbox, p->box, isz);
  }
  return out;
}

void check_whole_mesh_group(const ReshardPlan& plan, int my_position, int rank, const std::vector<int>& device_ids,
                            const std::string& op) {
  const Mesh& mesh = plan.target.mesh();
  const int size = static_cast<int>(device_ids.size());
  bool whole_mesh = size == mesh.size() && rank == my_position;
  for (int r = 0; whole_mesh && r < size; ++r) whole_mesh = device_ids[r] == mesh.devices()[r].id();
  if (!whole_mesh)
    throw CollectiveError("[" + op + "] exchange needs the group of every device of " + mesh.str() +
                          " in mesh order, called at position " + std::to_string(my_position) + "; got member " +
                          std::to_string(rank) + " of " + std::to_string(size));
}

namespace {

class ThreadsGroup final : public Group {
 public:
  explicit ThreadsGroup(GroupSpec g) : g_(std::move(g)) {}

  int rank() const override { return g_.rank; }
  int size() const override { return g_.size(); }

  // All-reduce. Member r reduces the r-th balanced chunk of the elements for
  // everyone, reading every member's deposit and writing into one shared
  // result buffer; after the barrier every member returns that buffer. Each
  // element is combined in the fixed tree order (comm/tree.hpp), whoever
  // computes it. On GPUs a member combines its chunk with a kernel on its
  // own GPU (comm/tree.hpp), writing it into the shared buffer, and after
  // the barrier a member on another GPU than the shared buffer's copies the
  // result to its own device, so its kernels never read another GPU's
  // memory.
  Local all_reduce(const Local& in, ReduceOp op) override {
    TimelineScope scope(g_.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    auto rv = threads_meet(g_, {in.data, in.shape, in.dtype,
                                collective_sig(g_.op, in, std::string("reduce=") + name(op), true)});
    if (size() == 1) return in;
    const std::int64_t n = num_elements(in.shape);
    const std::size_t isz = itemsize(in.dtype);
    Buffer out = rv->shared(static_cast<std::size_t>(n) * isz, g_.rank, my_device());
    const Slice chunk = block_slice(n, size(), g_.rank);
    const auto& d = rv->deposits();
    const auto skip = static_cast<std::size_t>(chunk.start) * isz;
    if (!out.on_host()) {
      if (chunk.size() > 0) combine_chunk_on_gpu(d, op, in.dtype, out, skip, chunk.size());
      rv->barrier();
      return {own_copy(out), in.shape, in.dtype};
    }
    if (chunk.size() > 0) {
      tree_combine(op, in.dtype, 0, size(), [&](int lo, int hi) {
        return hi - lo == 1 ? static_cast<const unsigned char*>(d[lo].data.data()) + skip : nullptr;
      }, static_cast<unsigned char*>(out.data()) + skip, chunk.size());
    }
    rv->barrier();
    return {out, in.shape, in.dtype};
  }

  // All-gather. The members' pieces are laid out one after another along
  // `axis` (tiled) or stacked on a new dim there; every member copies its
  // own piece into one shared result buffer, and after the barrier all
  // return it.
  Local all_gather(const Local& in, int axis, bool tiled) override {
    TimelineScope scope(g_.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    auto rv = threads_meet(g_, {in.data, in.shape, in.dtype,
                                collective_sig(g_.op, in, all_gather_params(axis, tiled), !tiled, axis)});
    const auto& d = rv->deposits();
    // The result and where each member's piece goes in it.
    Shape out = in.shape;
    std::int64_t offset = g_.rank;
    if (tiled) {
      out[axis] = 0;
      for (int r = 0; r < size(); ++r) {
        if (r == g_.rank) offset = out[axis];
        out[axis] += d[r].shape[axis];
      }
    } else {
      out.insert(out.begin() + axis, size());
    }
    const std::size_t isz = itemsize(in.dtype);
    Buffer res = rv->shared(static_cast<std::size_t>(num_elements(out)) * isz, g_.rank, my_device());
    // Write my piece.
    Shape mine = in.shape;
    if (!tiled) mine.insert(mine.begin() + axis, 1);
    std::vector<Slice> box = whole_box(mine);
    box[axis] = {offset, offset + mine[axis]};
    if (!box_empty(box)) copy_box(in.data, box, res, whole_box(out), box, isz, "all_gather");
    rv->barrier();
    return {res, out, in.dtype};
  }

  // Reduce-scatter. Member r combines block r of every member's deposit into
  // its own result, in the tree order; no shared buffer, no barrier
  // (deposits outlive the reads).
  Local reduce_scatter(const Local& in, int dim, bool tiled, ReduceOp op) override {
    TimelineScope scope(g_.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    auto rv = threads_meet(g_, {in.data, in.shape, in.dtype,
                                collective_sig(g_.op, in, reduce_scatter_params(dim, tiled, op), true)});
    return reduce_scatter_deposits(rv->deposits(), g_.rank, dim, tiled, op, my_device());
  }

  // Permute. The receiver returns the sender's deposited buffer itself (no
  // copy: values are immutable); a member no one sends to gets zeros.
  Local permute(const Local& in, const std::vector<std::pair<int, int>>& perm) override {
    TimelineScope scope(g_.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    auto rv = threads_meet(g_, {in.data, in.shape, in.dtype, collective_sig(g_.op, in, permute_params(perm), true)});
    return permute_deposits(rv->deposits(), g_.rank, perm, my_device());
  }

  // All-to-all. Member r pulls block r (along split_axis, balanced) of every
  // member's deposit into its own result, member s's block at position s
  // along concat_axis; no shared buffer, no barrier.
  Local all_to_all(const Local& in, int split_axis, int concat_axis) override {
    TimelineScope scope(g_.op, "collective", num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    auto rv = threads_meet(g_, {in.data, in.shape, in.dtype,
                                collective_sig(g_.op, in, all_to_all_params(split_axis, concat_axis), true)});
    return all_to_all_deposits(rv->deposits(), g_.rank, split_axis, concat_axis, my_device());
  }

  // A meeting with nothing deposited: it returns once every member arrived.
  void barrier() override { threads_meet(g_, {Buffer(), {}, DType::f32, "barrier()"}); }

  // Exchange: one member's share of ThreadsCommunicator::exchange. Every
  // member deposits its source block (all must, since anyone may read it);
  // then this member copies the plan's pieces for its position, each out of
  // its source member's deposit, into a new buffer on its own device. The
  // pieces tile the target box exactly (the planner's invariant), so every
  // byte of the result is written once. No barrier: deposits outlive the
  // reads, and no member writes into another's memory.
  Buffer exchange(const ReshardPlan& plan, int my_position, const Buffer& mine) override {
    check_whole_mesh_group(plan, my_position, g_.rank, g_.device_ids, g_.op);
    auto rv = threads_meet(g_, {mine, box_shape(plan.source.shard_index(plan.shape, my_position)), plan.dtype,
                                exchange_sig(g_.op, plan)});
    const auto& d = rv->deposits();
    return exchange_deposits(plan, my_position, mine, my_device(), [&](int i) {
      const int src = plan.pieces[i].src;
      return PieceSource{d[src].data.device_data(), plan.source.shard_index(plan.shape, src), &d[src].data};
    });
  }

 private:
  int my_device() const { return g_.device_ids[g_.rank]; }

  bool same_gpu(int device_a, int device_b) const {
    const Runtime& rt = Runtime::get();
    return rt.gpu(device_a)->ordinal == rt.gpu(device_b)->ordinal;
  }

  // all_reduce's chunk on a GPU: `count` elements from byte `skip` of every
  // deposit, combined into `out` at the same place. The kernel writes there
  // itself when `out` is on this member's GPU; otherwise it writes local
  // scratch, copied over after.
  void combine_chunk_on_gpu(const std::vector<Deposit>& d, ReduceOp op, DType dtype, const Buffer& out,
                            std::size_t skip, std::int64_t count) const {
    std::vector<const Buffer*> parts;
    for (const Deposit& m : d) parts.push_back(&m.data);
    const std::int64_t bytes = count * static_cast<std::int64_t>(itemsize(dtype));
    const std::vector<CombineRun> runs{{static_cast<std::int64_t>(skip), 0, bytes}};
    if (same_gpu(out.device_id(), my_device())) {
      tree_combine_buffers(op, dtype, parts, runs, count, out, skip, my_device(), g_.op.c_str());
      return;
    }
    Buffer mine(my_device(), static_cast<std::size_t>(bytes));
    tree_combine_buffers(op, dtype, parts, runs, count, mine, 0, my_device(), g_.op.c_str());
    const GpuHandle& g = *Runtime::get().gpu(my_device());
    gpu_copy(g, static_cast<unsigned char*>(out.device_data()) + skip, mine.device_data(),
             static_cast<std::size_t>(bytes), CopyKind::DeviceToDevice, g_.op.c_str());
  }

  // The shared result itself when it is on this member's GPU, else a copy
  // on this member's device.
  Buffer own_copy(const Buffer& shared) const {
    if (shared.nbytes() == 0 || same_gpu(shared.device_id(), my_device())) return shared;
    Buffer mine(my_device(), shared.nbytes());
    gpu_copy(*Runtime::get().gpu(my_device()), mine.device_data(), shared.device_data(), shared.nbytes(),
             CopyKind::DeviceToDevice, g_.op.c_str());
    return mine;
  }

  GroupSpec g_;
};

}  // namespace

std::unique_ptr<Group> make_threads_group(GroupSpec g) { return std::make_unique<ThreadsGroup>(std::move(g)); }

}  // namespace tessera::detail
