// The mpi backend: meshes whose devices span processes.
//
// Within a process devices still meet in shared memory (the threads
// backend's rendezvous); between processes one thread per process, the
// leader, sends and receives MPI frames (transport.hpp) for all of that
// process's members. So every collective is hierarchical:
//
// - Reductions (Group::all_reduce, Communicator::reduce) follow the fixed
//   tree over member rank (comm/tree.hpp). Each process first combines the
//   largest subtrees whose members it holds (its frontier nodes: one node
//   when its members are an aligned power-of-two block), then the processes
//   finish the tree: small values are sent whole to every process of the
//   group and each combines everything; large ones are reduce-scattered (each
//   process finishes the tree on its chunk of the elements, from every
//   process's nodes for that chunk) and then all-gathered straight into the
//   result. Same tree, same bits, on every layout.
// - Redistributions (Communicator::exchange for the calling thread,
//   Group::exchange inside programs) send each process only the planner's
//   pieces it lacks: one frame per pair of processes holding all the
//   pieces between them, packed in plan order; local pieces are copied as
//   in the threads backend, while the frames are in flight.
// - The other collectives of a group (all_gather, reduce_scatter,
//   all_to_all, permute, barrier) have every process's leader send the
//   other processes of the group the parts of its members' values that
//   their members read (a psum_scatter's or all_to_all's share, a
//   ppermute's value only where it goes); every member then computes its
//   result with the threads backend's functions, and compares all members'
//   signatures first, so a mismatch is reported the same way on every
//   process.
//
// Every frame carries the collective's signature; a frame whose signature
// differs from the receiver's is a mismatch, reported as in one process.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "comm/mpi/transport.hpp"
#include "comm/process.hpp"
#include "comm/threads/threads.hpp"
#include "comm/tree.hpp"
#include "sharding/spec.hpp"
#include "core/array_impl.hpp"
#include "runtime/timeline.hpp"
#include "tessera/device.hpp"

namespace tessera::detail {

namespace {

using mpi::Batch;
using mpi::Header;
using mpi::WaitFor;

// Values up to this size are sent whole to every process of a reduction's
// group; larger ones are reduce-scattered and all-gathered.
constexpr std::int64_t kSmallReduce = 64 * 1024;
// Extra time a local member waits for its leader, whose wait across
// processes has the collective timeout and reports the better error.
double leader_slack(double timeout) { return std::min(5.0, 0.25 * timeout); }

int my_process() { return Runtime::get().process_index(); }
int process_of_device(int id) { return Runtime::get().process_of(id); }

std::vector<int> owners(const Mesh& mesh, const std::vector<int>& positions) {
  std::vector<int> out;
  out.reserve(positions.size());
  for (int p : positions) out.push_back(process_of_device(mesh.devices()[p].id()));
  return out;
}

// The processes among `owner`, in increasing order.
std::vector<int> distinct(std::vector<int> owner) {
  std::sort(owner.begin(), owner.end());
  owner.erase(std::unique(owner.begin(), owner.end()), owner.end());
  return owner;
}

// ------------------------------------------------------ reduction across processes

struct CrossReduce {
  std::vector<int> owner;  // process of each member rank
  ReduceOp op = ReduceOp::Sum;
  DType dtype = DType::f32;
  std::int64_t count = 0;  // elements
  Header header;           // this process's signature
  int tag = mpi::kTagMain;
  WaitFor wait;
  // Raises when another process's header differs from this one's.
  std::function<void(const std::vector<Header>&)> check;
};

// Finishes the tree of a reduction across processes (see the file comment).
// `mine(node)` is this process's combined value of its frontier node (count
// elements); `out` receives all `count` elements.
void cross_all_reduce(const CrossReduce& c, const std::function<const unsigned char*(int node)>& mine,
                      unsigned char* out) {
  const int me = my_process();
  const std::vector<TreeNode> frontier = owner_frontier(c.owner);
  const std::vector<int> procs = distinct(c.owner);
  const int np = static_cast<int>(procs.size());
  const int my_index = static_cast<int>(std::find(procs.begin(), procs.end(), me) - procs.begin());
  const std::size_t isz = itemsize(c.dtype);
  // Each process's frontier nodes, in tree order.
  std::vector<std::vector<int>> nodes_of(np);
  for (int k = 0; k < static_cast<int>(frontier.size()); ++k) {
    const int p = static_cast<int>(std::find(procs.begin(), procs.end(), c.owner[frontier[k].lo]) - procs.begin());
    nodes_of[p].push_back(k);
  }
  auto node_at = [&](int lo, int hi) {
    for (int k = 0; k < static_cast<int>(frontier.size()); ++k)
      if (frontier[k].lo == lo && frontier[k].hi == hi) return k;
    return -1;
  };
  const std::int64_t total = c.count * static_cast<std::int64_t>(isz);
  auto check_headers = [&](Batch& b) {
    std::vector<Header> hs;
    for (int i = 0; i < b.num_recvs(); ++i) hs.push_back(b.header(i));
    c.check(hs);
  };

  if (total <= kSmallReduce || c.count < np) {
    // Every process sends its nodes whole to every other and combines all.
    std::vector<unsigned char> my_pack(nodes_of[my_index].size() * static_cast<std::size_t>(total));
    for (size_t i = 0; i < nodes_of[my_index].size(); ++i)
      if (total) std::memcpy(my_pack.data() + i * total, mine(nodes_of[my_index][i]), static_cast<std::size_t>(total));
    std::vector<std::vector<unsigned char>> theirs(np);
    Batch b(c.tag);
    for (int q = 0; q < np; ++q) {
      if (q == my_index) continue;
      theirs[q].resize(nodes_of[q].size() * static_cast<std::size_t>(total));
      b.recv(procs[q], static_cast<std::int64_t>(theirs[q].size()), theirs[q].data());
    }
    for (int q = 0; q < np; ++q) {
      if (q == my_index) continue;
      Header h = c.header;
      h.nbytes = static_cast<std::int64_t>(my_pack.size());
      b.send(procs[q], h, my_pack.data());
    }
    b.wait(c.wait);
    check_headers(b);
    tree_combine(c.op, c.dtype, 0, static_cast<int>(c.owner.size()), [&](int lo, int hi) -> const unsigned char* {
      const int k = node_at(lo, hi);
      if (k < 0) return nullptr;
      const int q = static_cast<int>(std::find(procs.begin(), procs.end(), c.owner[lo]) - procs.begin());
      const auto i = std::find(nodes_of[q].begin(), nodes_of[q].end(), k) - nodes_of[q].begin();
      if (q == my_index) return mine(k);
      return theirs[q].data() + i * total;
    }, out, c.count);
    return;
  }

  // Reduce-scatter: process j finishes the tree on chunk j of the elements.
  auto chunk = [&](int j) { return block_slice(c.count, np, j); };
  const Slice my_chunk = chunk(my_index);
  const std::int64_t my_chunk_bytes = my_chunk.size() * static_cast<std::int64_t>(isz);
  std::vector<std::vector<unsigned char>> theirs(np);
  std::vector<std::vector<unsigned char>> packs(np);
  {
    Batch b(c.tag);
    for (int q = 0; q < np; ++q) {
      if (q == my_index) continue;
      theirs[q].resize(nodes_of[q].size() * static_cast<std::size_t>(my_chunk_bytes));
      b.recv(procs[q], static_cast<std::int64_t>(theirs[q].size()), theirs[q].data());
    }
    for (int q = 0; q < np; ++q) {
      if (q == my_index) continue;
      const Slice cq = chunk(q);
      const std::int64_t cb = cq.size() * static_cast<std::int64_t>(isz);
      Header h = c.header;
      h.nbytes = static_cast<std::int64_t>(nodes_of[my_index].size()) * cb;
      if (nodes_of[my_index].size() == 1) {
        // One node (the usual layout): sent straight from its value.
        b.send(procs[q], h, mine(nodes_of[my_index][0]) + cq.start * static_cast<std::int64_t>(isz));
      } else {
        packs[q].resize(static_cast<std::size_t>(h.nbytes));
        for (size_t i = 0; i < nodes_of[my_index].size(); ++i)
          std::memcpy(packs[q].data() + i * cb, mine(nodes_of[my_index][i]) + cq.start * static_cast<std::int64_t>(isz),
                      static_cast<std::size_t>(cb));
        b.send(procs[q], h, packs[q].data());
      }
    }
    b.wait(c.wait);
    check_headers(b);
  }
  const std::int64_t skip = my_chunk.start * static_cast<std::int64_t>(isz);
  tree_combine(c.op, c.dtype, 0, static_cast<int>(c.owner.size()), [&](int lo, int hi) -> const unsigned char* {
    const int k = node_at(lo, hi);
    if (k < 0) return nullptr;
    const int q = static_cast<int>(std::find(procs.begin(), procs.end(), c.owner[lo]) - procs.begin());
    if (q == my_index) return mine(k) + skip;
    const auto i = std::find(nodes_of[q].begin(), nodes_of[q].end(), k) - nodes_of[q].begin();
    return theirs[q].data() + i * my_chunk_bytes;
  }, out + skip, my_chunk.size());
  // All-gather the finished chunks straight into `out`.
  Batch b(c.tag);
  for (int q = 0; q < np; ++q) {
    if (q == my_index) continue;
    const Slice cq = chunk(q);
    b.recv(procs[q], cq.size() * static_cast<std::int64_t>(isz), out + cq.start * static_cast<std::int64_t>(isz));
  }
  for (int q = 0; q < np; ++q) {
    if (q == my_index) continue;
    Header h = c.header;
    h.nbytes = my_chunk_bytes;
    b.send(procs[q], h, out + skip);
  }
  b.wait(c.wait);
  check_headers(b);
}

// The values of this process's frontier nodes: a node of one member is
// that member's value itself; a larger one is combined into `store`.
std::vector<const unsigned char*> frontier_values(const std::vector<int>& owner, ReduceOp op, DType dtype,
                                                  std::int64_t count,
                                                  const std::function<const unsigned char*(int rank)>& value,
                                                  std::vector<std::vector<unsigned char>>& store) {
  const int me = my_process();
  const std::vector<TreeNode> frontier = owner_frontier(owner);
  std::vector<const unsigned char*> out(frontier.size(), nullptr);
  for (size_t k = 0; k < frontier.size(); ++k) {
    const TreeNode& n = frontier[k];
    if (owner[n.lo] != me) continue;
    if (n.hi - n.lo == 1) {
      out[k] = value(n.lo);
      continue;
    }
    store.emplace_back(static_cast<std::size_t>(count) * itemsize(dtype));
    tree_combine(op, dtype, n.lo, n.hi, [&](int lo, int hi) { return hi - lo == 1 ? value(lo) : nullptr; },
                 store.back().data(), count);
    out[k] = store.back().data();
  }
  return out;
}

// ----------------------------------------------------- pieces across processes

// The pieces of a plan that cross from this process to process q (send) or
// from q to this one (recv), in plan order, and their packed sizes.
struct CrossPieces {
  std::vector<int> send, recv;
  std::int64_t send_bytes = 0, recv_bytes = 0;
};

std::map<int, CrossPieces> cross_pieces(const ReshardPlan& plan) {
  const Mesh& mesh = plan.target.mesh();
  const int me = my_process();
  const std::size_t isz = itemsize(plan.dtype);
  std::map<int, CrossPieces> out;
  for (int i = 0; i < static_cast<int>(plan.pieces.size()); ++i) {
    const TransferPiece& p = plan.pieces[i];
    const int ps = process_of_device(mesh.devices()[p.src].id());
    const int pd = process_of_device(mesh.devices()[p.dst].id());
    if (ps == pd) continue;
    const std::int64_t bytes = num_elements(box_shape(p.box)) * static_cast<std::int64_t>(isz);
    if (ps == me) {
      out[pd].send.push_back(i);
      out[pd].send_bytes += bytes;
    } else if (pd == me) {
      out[ps].recv.push_back(i);
      out[ps].recv_bytes += bytes;
    }
  }
  return out;
}

// Packs the pieces `which` (row-major boxes, one after another) from the
// source blocks `block(position)`.
std::vector<unsigned char> pack_pieces(const ReshardPlan& plan, const std::vector<int>& which, std::int64_t bytes,
                                       const std::function<const void*(int position)>& block) {
  const std::size_t isz = itemsize(plan.dtype);
  std::vector<unsigned char> out(static_cast<std::size_t>(bytes));
  std::size_t off = 0;
  for (int i : which) {
    const TransferPiece& p = plan.pieces[i];
    copy_box(block(p.src), plan.source.shard_index(plan.shape, p.src), out.data() + off, p.box, p.box, isz);
    off += static_cast<std::size_t>(num_elements(box_shape(p.box))) * isz;
  }
  return out;
}

// Where each received piece lies in the packed frames: piece index ->
// pointer, for the frames `frames[q]` of the processes in `cross`.
std::map<int, const unsigned char*> unpacked(const ReshardPlan& plan, const std::map<int, CrossPieces>& cross,
                                             const std::map<int, const unsigned char*>& frames) {
  const std::size_t isz = itemsize(plan.dtype);
  std::map<int, const unsigned char*> at;
  for (const auto& [q, c] : cross) {
    if (c.recv.empty()) continue;
    const unsigned char* base = frames.at(q);
    std::size_t off = 0;
    for (int i : c.recv) {
      at[i] = base + off;
      off += static_cast<std::size_t>(num_elements(box_shape(plan.pieces[i].box))) * isz;
    }
  }
  return at;
}

// "process 0 called X but process 1 called Y" for the first header that
// differs from this process's.
void check_same_call(const std::string& op, const std::string& what, const Header& mine,
                     const std::vector<Header>& theirs) {
  for (const Header& h : theirs) {
    if (h.same_call(mine)) continue;
    const bool first = h.process < mine.process;
    const Header& a = first ? h : mine;
    const Header& b = first ? mine : h;
    throw CollectiveError("[" + op + "] mismatched collectives across processes " + what + ": process " +
                          std::to_string(a.process) + " called " + a.signature() + " but process " +
                          std::to_string(b.process) + " called " + b.signature());
  }
}

// ---------------------------------------------------------------- session

class MpiSession final : public Session {
 public:
  MpiSession(double timeout, bool poll)
      : local_(make_threads_session(timeout + leader_slack(timeout), poll)), id_(mpi::next_session()), timeout_(timeout) {}
  void abort(int device_id, const std::string& what) override {
    local_->abort(device_id, what);
    mpi::announce_session_failure(id_, device_id, what);
  }
  // This process's members' failures, else another process's (its notice
  // read now, which also wakes this process's members).
  std::string abort_reason() override {
    std::string why = local_->abort_reason();
    int dev = -1;
    std::string what;
    if (why.empty() && mpi::remote_session_failure(id_, dev, what)) {
      local_->abort(dev, what);
      why = local_->abort_reason();
    }
    return why;
  }
  Session& local() { return *local_; }
  long id() const { return id_; }
  double timeout() const { return timeout_; }

 private:
  std::shared_ptr<Session> local_;
  long id_;
  double timeout_;
};

// ------------------------------------------------------------------ group

struct MpiGroupSpec {
  GroupSpec local;                // this process's members (rank: among them)
  std::vector<int> device_ids;    // every member's device, in member order
  std::vector<int> owner;         // every member's process
  std::vector<int> local_ranks;   // member rank of each local member
  int rank = 0;                   // this member's rank in the whole group
  int tag = mpi::kTagGroupBase;
  MpiSession* session = nullptr;
};

// One member's view of a group whose members span processes.
class MpiGroup final : public Group {
 public:
  explicit MpiGroup(MpiGroupSpec g) : g_(std::move(g)) {}
  int rank() const override { return g_.rank; }
  int size() const override { return static_cast<int>(g_.device_ids.size()); }

  Local all_reduce(const Local& in, ReduceOp op) override {
    TimelineScope scope(g_.local.op, "collective",
                        num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    const std::string sig = collective_sig(g_.local.op, in, std::string("reduce=") + name(op), true);
    auto rv = threads_meet(g_.local, {in.data, in.shape, in.dtype, sig});
    const std::int64_t count = num_elements(in.shape);
    const std::size_t nbytes = static_cast<std::size_t>(count) * itemsize(in.dtype);
    Buffer out = rv->shared(nbytes, g_.local.rank, my_device());
    if (g_.local.rank == 0) {
      const auto& d = rv->deposits();
      std::vector<std::vector<unsigned char>> store;
      auto values = frontier_values(g_.owner, op, in.dtype, count, [&](int r) {
        return static_cast<const unsigned char*>(d[local_index(r)].data.data());
      }, store);
      CrossReduce c;
      c.owner = g_.owner;
      c.op = op;
      c.dtype = in.dtype;
      c.count = count;
      c.header.set(sig, in.shape, in.dtype, g_.local.device_ids[0]);
      c.tag = g_.tag;
      c.wait = wait_for();
      c.check = [&](const std::vector<Header>& hs) { check_headers(hs, sig, in); };
      cross_all_reduce(c, [&](int k) { return values[k]; }, static_cast<unsigned char*>(out.data()));
    }
    rv->barrier();
    return {out, in.shape, in.dtype};
  }

  Local all_gather(const Local& in, int axis, bool tiled) override {
    TimelineScope scope(g_.local.op, "collective",
                        num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    const std::string sig = collective_sig(g_.local.op, in, all_gather_params(axis, tiled), !tiled, axis);
    return gather_deposits(everyone(in, sig, whole_to_everyone), axis, tiled, my_device());
  }

  Local reduce_scatter(const Local& in, int dim, bool tiled, ReduceOp op) override {
    TimelineScope scope(g_.local.op, "collective",
                        num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    const std::string sig = collective_sig(g_.local.op, in, reduce_scatter_params(dim, tiled, op), true);
    const int n = size();
    // Member r reads part r of every member's value along `dim`.
    auto need = [&](const Shape& s, int, int r) -> std::optional<std::vector<Slice>> {
      std::vector<Slice> box = whole_box(s);
      box[dim] = tiled ? block_slice(s[dim], n, r) : Slice{r, r + 1};
      return box;
    };
    return reduce_scatter_deposits(everyone(in, sig, need), g_.rank, dim, tiled, op, my_device());
  }

  Local all_to_all(const Local& in, int split_axis, int concat_axis) override {
    TimelineScope scope(g_.local.op, "collective",
                        num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    const std::string sig = collective_sig(g_.local.op, in, all_to_all_params(split_axis, concat_axis), true);
    const int n = size();
    // Member r reads block r of every member's value along split_axis.
    auto need = [&](const Shape& s, int, int r) -> std::optional<std::vector<Slice>> {
      std::vector<Slice> box = whole_box(s);
      box[split_axis] = block_slice(s[split_axis], n, r);
      return box;
    };
    return all_to_all_deposits(everyone(in, sig, need), g_.rank, split_axis, concat_axis, my_device());
  }

  Local permute(const Local& in, const std::vector<std::pair<int, int>>& perm) override {
    TimelineScope scope(g_.local.op, "collective",
                        num_elements(in.shape) * static_cast<std::int64_t>(itemsize(in.dtype)));
    const std::string sig = collective_sig(g_.local.op, in, permute_params(perm), true);
    // Member r reads the whole value of the member that sends to it.
    auto need = [&](const Shape& s, int j, int r) -> std::optional<std::vector<Slice>> {
      for (const auto& [src, dst] : perm)
        if (src == j && dst == r) return whole_box(s);
      return std::nullopt;
    };
    return permute_deposits(everyone(in, sig, need), g_.rank, perm, my_device());
  }

  void barrier() override {
    (void)everyone({Buffer(), {}, DType::f32}, "barrier()",
                   [](const Shape&, int, int) -> std::optional<std::vector<Slice>> { return std::nullopt; });
  }

  Buffer exchange(const ReshardPlan& plan, int my_position, const Buffer& mine) override {
    check_whole_mesh_group(plan, my_position, g_.rank, g_.device_ids, g_.local.op);
    const std::string sig = exchange_sig(g_.local.op, plan);
    auto rv = threads_meet(g_.local, {mine, box_shape(plan.source.shard_index(plan.shape, my_position)), plan.dtype,
                                      sig});
    const auto& d = rv->deposits();
    const auto cross = cross_pieces(plan);
    // Every process's received frames land in one buffer that all local
    // members read: the frames of each process in turn.
    std::map<int, std::int64_t> frame_at;
    std::int64_t total = 0;
    for (const auto& [q, c] : cross) {
      frame_at[q] = total;
      total += (c.recv_bytes + 63) / 64 * 64;
    }
    Buffer frames = rv->shared(static_cast<std::size_t>(total), g_.local.rank, my_device());
    if (g_.local.rank == 0) {
      Header h;
      h.set(sig, plan.shape, plan.dtype, g_.local.device_ids[0]);
      Batch b(g_.tag);
      std::vector<std::vector<unsigned char>> packs;
      for (const auto& [q, c] : cross)
        if (!c.recv.empty()) b.recv(q, c.recv_bytes, static_cast<unsigned char*>(frames.data()) + frame_at[q]);
      for (const auto& [q, c] : cross) {
        if (c.send.empty()) continue;
        packs.push_back(pack_pieces(plan, c.send, c.send_bytes, [&](int pos) { return d[local_index(pos)].data.data(); }));
        Header hq = h;
        hq.nbytes = c.send_bytes;
        b.send(q, hq, packs.back().data());
      }
      b.wait(wait_for());
      std::vector<Header> hs;
      for (int i = 0; i < b.num_recvs(); ++i) hs.push_back(b.header(i));
      check_same_call(g_.local.op, "on " + g_.local.axes, h, hs);
    }
    rv->barrier();
    std::map<int, const unsigned char*> frame_ptr;
    for (const auto& [q, at] : frame_at) frame_ptr[q] = static_cast<const unsigned char*>(frames.data()) + at;
    const auto remote = unpacked(plan, cross, frame_ptr);
    // Pieces from this process's members come from their blocks, the others
    // from the frames, packed one box after another.
    return exchange_deposits(plan, my_position, mine, my_device(), [&](int i) {
      const TransferPiece& p = plan.pieces[i];
      if (auto it = remote.find(i); it != remote.end()) return PieceSource{it->second, p.box};
      return PieceSource{d[local_index(p.src)].data.data(), plan.source.shard_index(plan.shape, p.src)};
    });
  }

 private:
  int my_device() const { return g_.local.device_ids[g_.local.rank]; }
  // The index among the local deposits of member rank (or position) r.
  int local_index(int r) const {
    return static_cast<int>(std::find(g_.local_ranks.begin(), g_.local_ranks.end(), r) - g_.local_ranks.begin());
  }
  WaitFor wait_for() const {
    WaitFor w;
    w.op = g_.local.op;
    w.what = "for all devices on axis " + g_.local.axes;
    w.timeout_s = g_.session->timeout();
    w.session = g_.session->id();
    w.local = &g_.session->local();
    return w;
  }

  // Which box of member j's value (of shape s) member r reads, if any.
  using Need = std::function<std::optional<std::vector<Slice>>(const Shape& s, int j, int r)>;
  static std::optional<std::vector<Slice>> whole_to_everyone(const Shape& s, int, int) { return whole_box(s); }

  // Every member's value and signature, in member order: the local members
  // meet, the leader trades its members' values with the other processes
  // of the group, and all local members read them from one buffer. Raises
  // the same CollectiveError on every member of every process when the
  // signatures differ.
  //
  // Only what is read crosses processes: to process q the leader sends, of
  // each local member j's value, the boxes need(j, r) of q's members r (a
  // box several of them read, once), so a psum_scatter or all_to_all moves
  // each member's share once and a ppermute only what is sent. Every
  // process still sends every other one a frame (its members' signatures,
  // perhaps no data), so a mismatch is found by all. The receiving leader
  // places the boxes in full-size values; members read only their boxes.
  std::vector<Deposit> everyone(const Local& in, const std::string& sig, const Need& need) {
    auto rv = threads_meet(g_.local, {in.data, in.shape, in.dtype, sig});
    const auto& d = rv->deposits();
    const std::vector<int> procs = distinct(g_.owner);
    const int me = my_process();
    // The leader gathers the blobs of the other processes into one buffer:
    // [8-byte size][blob] per process, in process order.
    Buffer all;
    if (g_.local.rank == 0) {
      Header h;
      h.set(sig, in.shape, in.dtype, g_.local.device_ids[0]);
      Batch b(g_.tag);
      for (int q : procs)
        if (q != me) b.recv_any(q);
      std::vector<std::vector<unsigned char>> blobs;
      for (int q : procs) {
        if (q == me) continue;
        blobs.push_back(pack_blob(d, q, need));
        Header hq = h;
        hq.nbytes = static_cast<std::int64_t>(blobs.back().size());
        b.send_any(q, hq, blobs.back().data());
      }
      b.wait(wait_for());
      std::size_t total = 0;
      for (int i = 0; i < b.num_recvs(); ++i) total += 64 + expanded_size(b.payload(i));
      all = rv->shared(total, 0, my_device());
      auto* o = static_cast<unsigned char*>(all.data());
      std::size_t off = 0;
      for (int i = 0; i < b.num_recvs(); ++i) {
        const std::uint64_t n = expand_blob(b.payload(i), b.source(i), sig, need, o + off + 64);
        std::memcpy(o + off, &n, sizeof n);
        off += 64 + n;
      }
    } else {
      all = rv->shared(0, g_.local.rank, my_device());
    }
    rv->barrier();
    // Every member's deposit: local ones from the rendezvous, the others
    // as views of the shared buffer.
    std::vector<Deposit> every(size());
    for (size_t i = 0; i < g_.local_ranks.size(); ++i) every[g_.local_ranks[i]] = d[i];
    std::size_t off = 0;
    const auto* base = static_cast<const unsigned char*>(all.data());
    for (int q : procs) {
      if (q == me) continue;
      std::uint64_t n = 0;
      std::memcpy(&n, base + off, sizeof n);
      unpack_blob(all, off + 64, n, q, every);
      off += 64 + n;
    }
    const std::string bad = mismatch_text(every, g_.device_ids, g_.local.axes);
    if (!bad.empty()) {
      const std::string& s0 = every[0].signature;
      throw CollectiveError("[" + (s0.empty() ? g_.local.op : s0.substr(0, s0.find('('))) + "] " + bad);
    }
    return every;
  }

  // The blobs: per member, 64-byte aligned sections: its meta (rank, dtype,
  // shape, bytes of its whole value, bytes of data in this blob), its
  // signature, its data. As sent, the data is the boxes process q reads,
  // one after another; expanded, it is the whole value (the boxes in place).
  static constexpr std::size_t kMeta = 13;
  static std::size_t up(std::size_t x) { return (x + 63) / 64 * 64; }

  // The distinct boxes of member j's value (shape s) that the members of
  // process q read, in member order.
  std::vector<std::vector<Slice>> boxes_for(const Shape& s, int j, int q, const Need& need) const {
    std::vector<std::vector<Slice>> out;
    for (int r = 0; r < size(); ++r) {
      if (g_.owner[r] != q) continue;
      auto box = need(s, j, r);
      if (!box || box_empty(*box) || std::find(out.begin(), out.end(), *box) != out.end()) continue;
      out.push_back(std::move(*box));
    }
    return out;
  }

  std::vector<unsigned char> pack_blob(const std::vector<Deposit>& d, int q, const Need& need) const {
    std::vector<unsigned char> out;
    auto reserve = [&](std::size_t n) {
      const std::size_t at = out.size();
      out.resize(at + up(n));
      return out.data() + at;
    };
    for (size_t i = 0; i < d.size(); ++i) {
      const std::int64_t isz = static_cast<std::int64_t>(itemsize(d[i].dtype));
      const std::vector<std::vector<Slice>> boxes =
          d[i].data.data() ? boxes_for(d[i].shape, g_.local_ranks[i], q, need) : std::vector<std::vector<Slice>>{};
      std::int64_t sent = 0;
      for (const auto& box : boxes) sent += num_elements(box_shape(box)) * isz;
      std::int64_t meta[kMeta] = {};
      meta[0] = g_.local_ranks[i];
      meta[1] = static_cast<std::int64_t>(d[i].dtype);
      meta[2] = static_cast<std::int64_t>(d[i].shape.size());
      for (size_t k = 0; k < d[i].shape.size() && k < 8; ++k) meta[3 + k] = d[i].shape[k];
      meta[11] = d[i].data.data() ? num_elements(d[i].shape) * isz : 0;
      meta[12] = sent;
      std::memcpy(reserve(sizeof meta), meta, sizeof meta);
      const std::uint64_t slen = d[i].signature.size();
      std::memcpy(reserve(sizeof slen), &slen, sizeof slen);
      if (slen) std::memcpy(reserve(slen), d[i].signature.data(), slen);
      unsigned char* at = reserve(static_cast<std::size_t>(sent));
      for (const auto& box : boxes) {
        copy_box(d[i].data.data(), whole_box(d[i].shape), at, box, box, static_cast<std::size_t>(isz));
        at += num_elements(box_shape(box)) * isz;
      }
    }
    return out;
  }

  // Calls fn(at, meta, slen, head) for each member's entry of a received
  // blob: where it starts, its meta, its signature's length, and the bytes
  // before its data.
  template <class F>
  static void for_each_entry(const std::vector<unsigned char>& blob, F&& fn) {
    std::size_t at = 0;
    while (at + sizeof(std::int64_t) * kMeta <= blob.size()) {
      std::int64_t meta[kMeta];
      std::memcpy(meta, blob.data() + at, sizeof meta);
      std::uint64_t slen = 0;
      std::memcpy(&slen, blob.data() + at + up(sizeof meta), sizeof slen);
      const std::size_t head = up(sizeof meta) + up(sizeof slen) + up(slen);
      fn(at, meta, slen, head);
      at += head + up(static_cast<std::size_t>(meta[12]));
    }
  }

  // Bytes of a received blob once expanded.
  static std::size_t expanded_size(const std::vector<unsigned char>& blob) {
    std::size_t total = 0;
    for_each_entry(blob, [&](std::size_t, const std::int64_t* meta, std::uint64_t, std::size_t head) {
      total += head + up(static_cast<std::size_t>(meta[11]));
    });
    return total;
  }

  // Writes `blob` (from process `process`) expanded at `o`: each member's
  // boxes in place in its whole value. Data of a member whose signature
  // is not this call's is left out (the mismatch is reported next).
  std::uint64_t expand_blob(const std::vector<unsigned char>& blob, int process, const std::string& sig,
                            const Need& need, unsigned char* o) const {
    const int me = my_process();
    std::size_t w = 0;
    for_each_entry(blob, [&](std::size_t at, const std::int64_t* meta, std::uint64_t slen, std::size_t head) {
      if (at + head + up(static_cast<std::size_t>(meta[12])) > blob.size())
        throw CollectiveError("[" + g_.local.op + "] internal: a short message from process " + std::to_string(process));
      std::memcpy(o + w, blob.data() + at, head);
      const std::string their(reinterpret_cast<const char*>(blob.data() + at + head - up(slen)), slen);
      const unsigned char* from = blob.data() + at + head;
      unsigned char* value = o + w + head;
      if (their == sig && meta[11] > 0) {
        const Shape s(meta + 3, meta + 3 + std::min<std::int64_t>(meta[2], 8));
        const auto isz = static_cast<std::int64_t>(itemsize(static_cast<DType>(meta[1])));
        std::int64_t got = 0;
        for (const auto& box : boxes_for(s, static_cast<int>(meta[0]), me, need)) {
          const std::int64_t nb = num_elements(box_shape(box)) * isz;
          if (got + nb > meta[12])
            throw CollectiveError("[" + g_.local.op + "] internal: process " + std::to_string(process) +
                                  " sent less than this process reads");
          copy_box(from + got, box, value, whole_box(s), box, static_cast<std::size_t>(isz));
          got += nb;
        }
      }
      w += head + up(static_cast<std::size_t>(meta[11]));
    });
    return w;
  }

  void unpack_blob(const Buffer& all, std::size_t at, std::size_t n, int process, std::vector<Deposit>& every) const {
    const auto* base = static_cast<const unsigned char*>(all.data());
    const std::size_t end = at + n;
    while (at < end) {
      std::int64_t meta[kMeta];
      std::memcpy(meta, base + at, sizeof meta);
      at += up(sizeof meta);
      std::uint64_t slen = 0;
      std::memcpy(&slen, base + at, sizeof slen);
      at += up(sizeof slen);
      std::string sig(reinterpret_cast<const char*>(base + at), slen);
      at += up(slen);
      const auto nbytes = static_cast<std::size_t>(meta[11]);
      const int r = static_cast<int>(meta[0]);
      if (r < 0 || r >= size() || g_.owner[r] != process)
        throw CollectiveError("[" + g_.local.op + "] internal: process " + std::to_string(process) +
                              " sent a value for member " + std::to_string(r));
      Deposit& dep = every[r];
      dep.dtype = static_cast<DType>(meta[1]);
      dep.shape.assign(meta + 3, meta + 3 + std::min<std::int64_t>(meta[2], 8));
      dep.signature = std::move(sig);
      dep.data = nbytes ? all.view(at, nbytes) : Buffer();
      at += up(nbytes);
    }
  }

  // Another process's call differs from this one's: the same message as in
  // one process, naming the first member of each.
  void check_headers(const std::vector<Header>& hs, const std::string& sig, const Local& in) const {
    if (std::all_of(hs.begin(), hs.end(), [&](const Header& h) { return h.same_call(sig); })) return;
    std::vector<Deposit> every(size());
    std::vector<int> ids = g_.device_ids;
    for (int r = 0; r < size(); ++r) every[r] = {Buffer(), in.shape, in.dtype, sig};
    bool differ = false;
    for (const Header& h : hs) {
      if (h.same_call(sig)) continue;
      differ = true;
      for (int r = 0; r < size(); ++r)
        if (g_.owner[r] == h.process) every[r] = {Buffer(), h.shape_vec(), static_cast<DType>(h.dtype), h.signature()};
    }
    if (!differ) return;
    const std::string bad = mismatch_text(every, ids, g_.local.axes);
    const std::string& s0 = every[0].signature;
    throw CollectiveError("[" + s0.substr(0, s0.find('(')) + "] " + bad);
  }

  MpiGroupSpec g_;
};

// ---------------------------------------------------------- communicator

class MpiCommunicator final : public Communicator {
 public:
  std::string backend() const override { return "mpi"; }

  std::shared_ptr<Session> open_session(const Mesh& mesh, double timeout_s) override {
    int local = 0;
    for (const Device& d : mesh.devices()) local += Runtime::get().is_local(d.id());
    return std::make_shared<MpiSession>(timeout_s, Runtime::get().polls_for(local));
  }

  std::unique_ptr<Group> group(Session& session, const Mesh& mesh, const std::vector<std::string>& axes, int pos,
                               const std::string& op) override {
    auto& s = static_cast<MpiSession&>(session);
    const std::vector<int> members = members_of(mesh, axes, pos);
    const std::vector<int> owner = owners(mesh, members);
    const int me = my_process();
    GroupSpec local;
    local.session = &s.local();
    local.op = op;
    local.axes = axes_text(axes);
    local.key = local.axes + "|";
    const std::vector<int> coords = mesh.coords(pos);
    int mask = 0;
    for (int i = 0; i < mesh.ndim(); ++i) {
      if (std::find(axes.begin(), axes.end(), mesh.axis_names()[i]) == axes.end())
        local.key += std::to_string(coords[i]) + ",";
      else
        mask |= 1 << i;
    }
    MpiGroupSpec g;
    for (size_t r = 0; r < members.size(); ++r) {
      const int id = mesh.devices()[members[r]].id();
      g.device_ids.push_back(id);
      if (members[r] == pos) g.rank = static_cast<int>(r);
      if (owner[r] == me) {
        if (members[r] == pos) local.rank = static_cast<int>(g.local_ranks.size());
        g.local_ranks.push_back(static_cast<int>(r));
        local.device_ids.push_back(id);
      }
    }
    if (static_cast<int>(local.device_ids.size()) == static_cast<int>(members.size()))
      return make_threads_group(std::move(local));  // every member is here
    g.local = std::move(local);
    g.owner = owner;
    // One tag per group of the mesh: the axes and the group's first member.
    g.tag = mpi::group_tag(s.id(), mask * mesh.size() + *std::min_element(members.begin(), members.end()));
    g.session = &s;
    return std::make_unique<MpiGroup>(std::move(g));
  }

  void exchange(const ReshardPlan& plan, const std::vector<int>& piece_begin, const std::vector<Buffer>& src,
                std::vector<Buffer>& dst) override {
    const Mesh& mesh = plan.target.mesh();
    const std::size_t isz = itemsize(plan.dtype);
    const auto cross = cross_pieces(plan);
    const std::string sig = exchange_sig("reshard", plan);
    Header h;
    h.set(sig, plan.shape, plan.dtype, -1);
    Batch b(mpi::kTagMain);
    std::map<int, std::vector<unsigned char>> frames, packs;
    for (const auto& [q, c] : cross)
      if (!c.recv.empty()) {
        frames[q].resize(static_cast<std::size_t>(c.recv_bytes));
        b.recv(q, c.recv_bytes, frames[q].data());
      }
    for (const auto& [q, c] : cross) {
      if (c.send.empty()) continue;
      packs[q] = pack_pieces(plan, c.send, c.send_bytes, [&](int pos) { return src[pos].data(); });
      Header hq = h;
      hq.nbytes = c.send_bytes;
      b.send(q, hq, packs[q].data());
    }
    // While the frames travel: every local destination's own pieces.
    const int me = my_process();
    auto is_remote = [&](int pos) { return process_of_device(mesh.devices()[pos].id()) != me; };
    run_on_devices(mesh.devices(), [&](int t) {
      const int pb = piece_begin[t], pe = piece_begin[t + 1];
      if (pb == pe) return;
      TimelineScope scope("exchange", "collective", plan.bytes_received[t]);
      const auto& tbox = plan.target_boxes[t];
      Buffer out(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(box_shape(tbox))) * isz);
      for (int i = pb; i < pe; ++i) {
        const TransferPiece& p = plan.pieces[i];
        if (!is_remote(p.src))
          copy_box(src[p.src].data(), plan.source.shard_index(plan.shape, p.src), out.data(), tbox, p.box, isz);
      }
      dst[t] = std::move(out);
    });
    b.wait(main_wait("reshard", "in a redistribution of " + dtype_name(plan.dtype) + shape_str(plan.shape) +
                                    " from " + plan.source.spec().str() + " to " + plan.target.spec().str() +
                                    " on " + mesh.str()));
    std::vector<Header> hs;
    for (int i = 0; i < b.num_recvs(); ++i) hs.push_back(b.header(i));
    check_same_call("reshard", "in a redistribution", h, hs);
    if (frames.empty()) return;
    std::map<int, const unsigned char*> frame_ptr;
    for (auto& [q, f] : frames) frame_ptr[q] = f.data();
    const auto remote = unpacked(plan, cross, frame_ptr);
    run_on_devices(mesh.devices(), [&](int t) {
      for (int i = piece_begin[t]; i < piece_begin[t + 1]; ++i) {
        auto it = remote.find(i);
        if (it == remote.end()) continue;
        const TransferPiece& p = plan.pieces[i];
        copy_box(it->second, p.box, dst[t].data(), plan.target_boxes[t], p.box, isz);
      }
    });
  }

  void reduce(const Mesh& mesh, const std::vector<std::string>& axes, ReduceOp op, DType dtype,
              const std::vector<Buffer>& partial, const std::vector<std::vector<Slice>>& partial_boxes,
              const std::vector<std::vector<Slice>>& out_boxes, std::vector<Buffer>& dst) override {
    const std::size_t isz = itemsize(dtype);
    const int me = my_process();
    const std::vector<std::string> ordered = in_mesh_order(mesh, axes);
    // One reduction per group of the mesh (positions sharing their
    // coordinates off `axes`), in mesh order of their first member, so
    // every process meets the same groups in the same order.
    std::vector<char> done(mesh.size(), 0);
    for (int first = 0; first < mesh.size(); ++first) {
      if (done[first]) continue;
      const std::vector<int> group = group_of(mesh, axes, first);
      for (int t : group) done[t] = 1;
      const std::vector<int> owner = owners(mesh, group);
      if (std::find(owner.begin(), owner.end(), me) == owner.end()) continue;
      const std::int64_t count = num_elements(box_shape(partial_boxes[group[0]]));
      int first_local = -1;
      for (size_t r = 0; r < group.size() && first_local < 0; ++r)
        if (owner[r] == me) first_local = group[r];
      Buffer full(mesh.devices()[first_local].id(), static_cast<std::size_t>(count) * isz);
      if (distinct(owner).size() == 1) {
        tree_combine(op, dtype, 0, static_cast<int>(group.size()), [&](int lo, int hi) {
          return hi - lo == 1 ? static_cast<const unsigned char*>(partial[group[lo]].data()) : nullptr;
        }, static_cast<unsigned char*>(full.data()), count);
      } else {
        // This process's subtrees first, then the rest of the tree across.
        std::vector<std::vector<unsigned char>> store;
        auto values = frontier_values(owner, op, dtype, count, [&](int r) {
          return static_cast<const unsigned char*>(partial[group[r]].data());
        }, store);
        const Shape pshape = box_shape(partial_boxes[group[0]]);
        const std::string sig = collective_sig("reduce", {Buffer(), pshape, dtype},
                                               "axes=" + axes_text(ordered) + ", reduce=" + name(op), true);
        CrossReduce c;
        c.owner = owner;
        c.op = op;
        c.dtype = dtype;
        c.count = count;
        c.header.set(sig, pshape, dtype, -1);
        c.tag = mpi::kTagMain;
        c.wait = main_wait("reduce", "in a reduction over " + axes_text(ordered) + " of " + mesh.str());
        c.check = [&](const std::vector<Header>& hs) { check_same_call("reduce", "in a reduction", c.header, hs); };
        cross_all_reduce(c, [&](int k) { return values[k]; }, static_cast<unsigned char*>(full.data()));
      }
      for (int t : group) {
        if (process_of_device(mesh.devices()[t].id()) != me) continue;
        if (out_boxes[t] == partial_boxes[t]) {
          dst[t] = full;
          continue;
        }
        Buffer out(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(box_shape(out_boxes[t]))) * isz);
        if (out.nbytes() > 0) copy_box(full.data(), partial_boxes[t], out.data(), out_boxes[t], out_boxes[t], isz);
        dst[t] = std::move(out);
      }
    }
  }

 private:
  static WaitFor main_wait(const std::string& op, const std::string& what) {
    WaitFor w;
    w.op = op;
    w.what = what;
    w.timeout_s = config::collective_timeout();
    return w;
  }
};

}  // namespace

Communicator& cross_process_communicator() {
  static MpiCommunicator c;
  return c;
}

std::vector<std::vector<unsigned char>> allgather_processes(const void* data, std::size_t nbytes, const char* op) {
  const int np = Runtime::get().process_count();
  const int me = my_process();
  std::vector<std::vector<unsigned char>> out(np);
  const auto* bytes = static_cast<const unsigned char*>(data);
  out[me].assign(bytes, bytes + nbytes);
  if (np == 1) return out;
  Header h;
  h.set(std::string(op) + "()", {}, DType::u8, -1);
  h.nbytes = static_cast<std::int64_t>(nbytes);
  Batch b(mpi::kTagMain);
  for (int q = 0; q < np; ++q)
    if (q != me) b.recv_any(q);
  for (int q = 0; q < np; ++q)
    if (q != me) b.send_any(q, h, data);
  WaitFor w;
  w.op = op;
  w.what = "for every process";
  w.timeout_s = config::collective_timeout();
  b.wait(w);
  std::vector<Header> hs;
  for (int i = 0; i < b.num_recvs(); ++i) {
    hs.push_back(b.header(i));
    out[b.source(i)] = std::move(b.payload(i));
  }
  check_same_call(op, "in a gather over processes", h, hs);
  return out;
}

}  // namespace tessera::detail
