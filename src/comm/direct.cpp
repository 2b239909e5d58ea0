// Direct groups: GPU collectives whose bytes move GPU to GPU.
//
// A direct group wraps a control group (the threads backend's within a
// process, the mpi backend's across processes) and a transport that moves
// device memory (NCCL). Every collective runs in two phases:
//
//   1. Agreement, over the control group: each member contributes a 512-byte
//      record (its call's signature, dtype and shape) to an all_gather of
//      host memory. The control group brings its own guarantees: a member
//      that never comes is named after the timeout, a failed member ends the
//      others' wait (PeerFailed). Each member then checks the records: a
//      mismatch raises the same CollectiveError on every member, with the
//      text the threads backend gives.
//   2. Data, over the transport: from the records every member knows every
//      value's size and who reads whose value (all of them for the
//      reductions, gathers and all_to_all; the sender only for ppermute; a
//      plan's sources for exchange), so the members post matching sends and
//      receives without another round. Each member then computes its result
//      on its own device from every member's value with the threads
//      backend's functions (threads.hpp), reductions in the fixed tree order
//      (comm/tree.hpp): the bits of every other backend.
//
// So a transport only moves bytes between agreed members; it never decides
// an order of combination (NCCL's algorithms cannot change a result).
// all_reduce (psum) moves 2 (n-1)/n of the value per member, in two
// exchanges (see there). Where a member reads only a part of the others'
// values (psum_scatter, all_to_all), each member sends each other member
// just that part, packed, so (n-1)/n of the value leaves each member; the
// gathers, ppermute and exchange send whole values to the members that
// read them.
//
// The link (an NCCL communicator) is made at a group's first transfer: a
// control collective shares member 0's rendezvous bytes. Links are cached
// by the transport (making one costs far more than a collective).
#include "comm/direct.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "comm/threads/threads.hpp"
#include "comm/tree.hpp"
#include "core/array_impl.hpp"
#include "core/hash.hpp"
#include "runtime/gpus.hpp"
#include "runtime/timeline.hpp"

namespace tessera::detail {

namespace {

std::atomic<std::int64_t> g_collectives{0}, g_transfers{0}, g_bytes{0};

// ------------------------------------------------------------- agreement

// One member's call, as phase 1 gathers it.
struct Record {
  std::uint64_t hash = 0;  // of the whole signature
  std::int32_t sig_len = 0;
  std::int32_t dtype = 0;
  std::int32_t ndim = 0;
  std::int32_t unused = 0;
  std::int64_t shape[8] = {};
  char sig[424] = {};  // the signature's beginning
};
static_assert(sizeof(Record) == 512, "a record is 512 bytes");

std::size_t value_bytes(const Shape& shape, DType dtype) {
  return static_cast<std::size_t>(num_elements(shape)) * itemsize(dtype);
}

class DirectGroup final : public Group {
 public:
  DirectGroup(std::unique_ptr<Group> control, DeviceTransport& transport, Session& session,
              std::vector<int> device_ids, int rank, std::string op, std::string axes, double timeout_s)
      : control_(std::move(control)),
        transport_(transport),
        session_(session),
        ids_(std::move(device_ids)),
        rank_(rank),
        op_(std::move(op)),
        axes_(std::move(axes)),
        timeout_(timeout_s) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ids_.size()); }

  // All-reduce in two exchanges, each moving (n-1)/n of the value per
  // member: member r first receives chunk r (a balanced block of the flat
  // elements) of every other member's value and combines it in the tree
  // order, then every member receives every other's combined chunk. Each
  // element is combined by one member, over all members in the fixed
  // order: the bits of every other backend.
  Local all_reduce(const Local& in, ReduceOp op) override {
    TimelineScope scope(op_, "collective", bytes_of(in));
    agree(in, collective_sig(op_, in, std::string("reduce=") + name(op), true));
    const std::int64_t count = num_elements(in.shape);
    const std::size_t isz = itemsize(in.dtype);
    const int n = size();
    if (n == 1) return in;
    Buffer res(me(), static_cast<std::size_t>(count) * isz);
    if (count == 0) return {res, in.shape, in.dtype};
    auto chunk = [&](int r) { return block_slice(count, n, r); };
    auto at = [&](int r) { return static_cast<std::size_t>(chunk(r).start) * isz; };
    auto len = [&](int r) { return static_cast<std::size_t>(chunk(r).size()) * isz; };
    // 1: chunk `rank_` of everyone's value, combined.
    std::vector<Buffer> parts(n);
    std::vector<Transfer> sends, recvs;
    for (int r = 0; r < n; ++r) {
      if (r == rank_) {
        parts[r] = in.data.view(at(rank_), len(rank_));
        continue;
      }
      if (len(r) > 0) sends.push_back({r, in.data.view(at(r), len(r)), len(r)});
      if (len(rank_) > 0) {
        parts[r] = Buffer(me(), len(rank_));
        recvs.push_back({r, parts[r], len(rank_)});
      }
    }
    move(sends, recvs);
    Buffer mine = res.view(at(rank_), len(rank_));
    if (len(rank_) > 0) {
      std::vector<const Buffer*> ptrs;
      for (const Buffer& b : parts) ptrs.push_back(&b);
      const std::vector<CombineRun> runs{{0, 0, static_cast<std::int64_t>(len(rank_))}};
      tree_combine_buffers(op, in.dtype, ptrs, runs, chunk(rank_).size(), res, at(rank_), me(), op_.c_str());
      // Others read it next, some from other streams (the emulated transport).
      if (const GpuHandle* g = Runtime::get().gpu(me())) gpu_wait(*g, op_.c_str());
    }
    // 2: everyone's combined chunk into place.
    sends.clear();
    recvs.clear();
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      if (len(rank_) > 0) sends.push_back({r, mine, len(rank_)});
      if (len(r) > 0) recvs.push_back({r, res.view(at(r), len(r)), len(r)});
    }
    move(sends, recvs);
    return {res, in.shape, in.dtype};
  }

  Local all_gather(const Local& in, int axis, bool tiled) override {
    TimelineScope scope(op_, "collective", bytes_of(in));
    const auto d = everyone(in, collective_sig(op_, in, all_gather_params(axis, tiled), !tiled, axis), all_read);
    return gather_deposits(d, axis, tiled, me());
  }

  // Member r combines part r (along `dim`) of every member's value, which
  // each member sends it packed; the combination is reduce_scatter_deposits'
  // (one tree over the members per element), so the bits are the same.
  Local reduce_scatter(const Local& in, int dim, bool tiled, ReduceOp op) override {
    TimelineScope scope(op_, "collective", bytes_of(in));
    const std::int64_t len = in.shape[dim];
    const int n = size();
    auto box_of = [&](int r) {
      std::vector<Slice> box = whole_box(in.shape);
      box[dim] = tiled ? block_slice(len, n, r) : Slice{r, r + 1};
      return box;
    };
    const std::vector<Buffer> parts =
        parts_for_me(in, collective_sig(op_, in, reduce_scatter_params(dim, tiled, op), true), box_of);
    Shape out = box_shape(box_of(rank_));
    const std::int64_t count = num_elements(out);
    Buffer res(me(), value_bytes(out, in.dtype));
    if (count > 0) {
      std::vector<const Buffer*> ptrs;
      for (const Buffer& b : parts) ptrs.push_back(&b);
      const std::vector<CombineRun> runs{{0, 0, static_cast<std::int64_t>(res.nbytes())}};
      tree_combine_buffers(op, in.dtype, ptrs, runs, count, res, 0, me(), op_.c_str());
    }
    if (!tiled) out.erase(out.begin() + dim);
    return {res, out, in.dtype};
  }

  // Member r receives block r (along split_axis) of every member's value,
  // packed, and places member s's at position s along concat_axis, as
  // all_to_all_deposits does.
  Local all_to_all(const Local& in, int split_axis, int concat_axis) override {
    TimelineScope scope(op_, "collective", bytes_of(in));
    const std::int64_t len = in.shape[split_axis];
    const int n = size();
    auto box_of = [&](int r) {
      std::vector<Slice> box = whole_box(in.shape);
      box[split_axis] = block_slice(len, n, r);
      return box;
    };
    const std::vector<Buffer> parts =
        parts_for_me(in, collective_sig(op_, in, all_to_all_params(split_axis, concat_axis), true), box_of);
    const Shape block = box_shape(box_of(rank_));
    Shape out = block;
    out[concat_axis] = block[concat_axis] * n;
    const std::size_t isz = itemsize(in.dtype);
    Buffer res(me(), value_bytes(out, in.dtype));
    if (res.nbytes() == 0) return {res, out, in.dtype};
    for (int r = 0; r < n; ++r) {
      // Member r's block covers this box of the result.
      std::vector<Slice> at = whole_box(block);
      at[concat_axis] = {r * block[concat_axis], (r + 1) * block[concat_axis]};
      copy_box(parts[r], at, res, whole_box(out), at, isz, op_.c_str());
    }
    return {res, out, in.dtype};
  }

  Local permute(const Local& in, const std::vector<std::pair<int, int>>& perm) override {
    TimelineScope scope(op_, "collective", bytes_of(in));
    // Member d reads member s's value for each (s, d) of the permutation.
    const auto d = everyone(in, collective_sig(op_, in, permute_params(perm), true), [&](int reader, int owner) {
      for (const auto& [s, t] : perm)
        if (s == owner && t == reader) return true;
      return false;
    });
    return permute_deposits(d, rank_, perm, me());
  }

  void barrier() override { agree({Buffer(), {}, DType::f32}, "barrier()"); }

  Buffer exchange(const ReshardPlan& plan, int my_position, const Buffer& mine) override {
    check_whole_mesh_group(plan, my_position, rank_, ids_, op_);
    // Position t reads position s's block when one of t's pieces comes
    // from s (members are mesh positions here).
    std::vector<std::vector<bool>> reads(size(), std::vector<bool>(size(), false));
    for (const TransferPiece& p : plan.pieces) reads[p.dst][p.src] = true;
    const Local in{mine, box_shape(plan.source.shard_index(plan.shape, my_position)), plan.dtype};
    const auto d =
        everyone(in, exchange_sig(op_, plan), [&](int reader, int owner) { return reads[reader][owner]; });
    return exchange_deposits(plan, my_position, mine, me(), [&](int i) {
      const int src = plan.pieces[i].src;
      return PieceSource{d[src].data.device_data(), plan.source.shard_index(plan.shape, src), &d[src].data};
    });
  }

 private:
  static bool all_read(int, int) { return true; }
  static std::int64_t bytes_of(const Local& in) { return static_cast<std::int64_t>(value_bytes(in.shape, in.dtype)); }
  int me() const { return ids_[rank_]; }

  // The control group's all_gather (stacked) of `block`, its errors (a
  // timeout, a failed member) in this group's op's name.
  Local control(const Local& block) {
    auto named = [&](std::string m) {
      const std::string from = kControlOp;
      for (std::size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + op_.size()))
        m.replace(at, from.size(), op_);
      return m;
    };
    try {
      return control_->all_gather(block, 0, false);
    } catch (const PeerFailed& e) {
      throw PeerFailed(named(e.what()));
    } catch (const CollectiveError& e) {
      throw CollectiveError(named(e.what()));
    }
  }

  // Phase 1: every member's record of its call, checked alike everywhere;
  // every member's value as a Deposit without data.
  std::vector<Deposit> agree(const Local& in, const std::string& sig) {
    if (in.shape.size() > 8)
      throw CollectiveError("[" + op_ + "] collectives over GPU transports take at most 8 dims, got " +
                            std::to_string(in.shape.size()));
    Record mine;
    mine.hash = fnv1a(sig);
    mine.sig_len = static_cast<std::int32_t>(sig.size());
    mine.dtype = static_cast<std::int32_t>(in.dtype);
    mine.ndim = static_cast<std::int32_t>(in.shape.size());
    for (size_t k = 0; k < in.shape.size(); ++k) mine.shape[k] = in.shape[k];
    std::memcpy(mine.sig, sig.data(), std::min(sig.size(), sizeof(mine.sig) - 1));
    Local all;
    {
      // The control group's memory is host memory, for its frames and ours.
      HostStaging stage;
      Buffer b = Buffer::host_staging(me(), sizeof(Record));
      std::memcpy(b.data(), &mine, sizeof(Record));
      all = control({b, {static_cast<std::int64_t>(sizeof(Record))}, DType::u8});
    }
    if (!all.data.on_host() || all.data.nbytes() != sizeof(Record) * ids_.size())
      throw CollectiveError("[" + op_ + "] internal: the control group's records are not in host memory");
    const auto* recs = static_cast<const Record*>(all.data.data());
    std::vector<Deposit> m(ids_.size());
    bool same = true;
    for (size_t r = 0; r < ids_.size(); ++r) {
      const Record& x = recs[r];
      m[r].dtype = static_cast<DType>(x.dtype);
      m[r].shape.assign(x.shape, x.shape + std::clamp(x.ndim, 0, 8));
      m[r].signature.assign(x.sig, strnlen(x.sig, sizeof(x.sig)));
      if (static_cast<std::size_t>(x.sig_len) > m[r].signature.size()) m[r].signature += "...";
      same = same && x.hash == recs[0].hash && x.sig_len == recs[0].sig_len;
    }
    if (!same) {
      std::string text = mismatch_text(m, ids_, axes_);
      if (text.empty()) text = "mismatched collectives on axis " + axes_ + " (signatures differ past their first " +
                               std::to_string(sizeof(mine.sig) - 1) + " characters)";
      // Member 0's op, so every member reports the same text.
      throw CollectiveError("[" + m[0].signature.substr(0, m[0].signature.find('(')) + "] " + text);
    }
    return m;
  }

  // Phases 1 and 2: every member's value on this device (an empty buffer
  // where this member does not read it), in member order.
  template <class Reads>
  std::vector<Deposit> everyone(const Local& in, const std::string& sig, Reads reads) {
    std::vector<Deposit> d = agree(in, sig);
    d[rank_].data = in.data;
    std::vector<Transfer> sends, recvs;
    bool any = false;
    for (int a = 0; a < size(); ++a) {
      const std::size_t nbytes = value_bytes(d[a].shape, d[a].dtype);
      for (int b = 0; b < size(); ++b)
        if (a != b && nbytes > 0 && reads(b, a)) {
          any = true;
          if (a == rank_) sends.push_back({b, in.data, nbytes});
          if (b == rank_) {
            d[a].data = Buffer(me(), nbytes);
            recvs.push_back({a, d[a].data, nbytes});
          }
        }
    }
    if (any) move(sends, recvs);
    return d;
  }

  // Phases 1 and 2 where member r reads only the box `box_of(r)` of each
  // member's value, which the signature makes the same shape everywhere:
  // that box of every member's value, packed row-major, in member order
  // (this member's own too; an empty Buffer where the box is empty).
  template <class BoxOf>
  std::vector<Buffer> parts_for_me(const Local& in, const std::string& sig, BoxOf box_of) {
    agree(in, sig);
    const std::size_t isz = itemsize(in.dtype);
    const std::vector<Slice> whole = whole_box(in.shape);
    std::vector<Buffer> parts(size());
    std::vector<Transfer> sends, recvs;
    for (int r = 0; r < size(); ++r) {
      const std::vector<Slice> box = box_of(r);
      const std::size_t nbytes = value_bytes(box_shape(box), in.dtype);
      if (nbytes == 0) continue;
      Buffer packed = contiguous_view(in.data, whole, box, isz);
      if (!packed.device_data()) {
        packed = Buffer(me(), nbytes);
        copy_box(in.data, whole, packed, box, box, isz, op_.c_str());
      }
      if (r == rank_) {
        parts[r] = packed;
        // This member's own box, from every other member.
        for (int s = 0; s < size(); ++s)
          if (s != rank_) {
            parts[s] = Buffer(me(), nbytes);
            recvs.push_back({s, parts[s], nbytes});
          }
      } else {
        sends.push_back({r, packed, nbytes});
      }
    }
    // Every member moves when any box is non-empty (it sends the others'
    // boxes, or receives its own), as the link needs.
    if (!sends.empty() || !recvs.empty()) move(sends, recvs);
    return parts;
  }

  // Phase 2's transfers through the link (made at the group's first),
  // which every member enters when any member has something to move.
  void move(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) {
    if (!link_) link_ = make_link();
    try {
      link_->exchange(sends, recvs, op_, timeout_, [&]() -> std::string {
        const std::string why = session_.abort_reason();
        return why.empty() ? why : "[" + op_ + "] aborted on axis " + axes_ + ": " + why;
      });
    } catch (...) {
      link_.reset();
      throw;
    }
    g_collectives.fetch_add(rank_ == 0 ? 1 : 0, std::memory_order_relaxed);
    g_transfers.fetch_add(static_cast<std::int64_t>(sends.size()), std::memory_order_relaxed);
    for (const Transfer& t : sends) g_bytes.fetch_add(static_cast<std::int64_t>(t.nbytes), std::memory_order_relaxed);
  }

  std::shared_ptr<DeviceLink> make_link() {
    return transport_.link(ids_, rank_, [&](const std::vector<unsigned char>& bytes) {
      // Member 0's bytes to everyone: an all_gather of fixed-size host
      // blocks (every member's, of which member 0's is kept).
      constexpr std::size_t kShare = 256;
      if (bytes.size() > kShare - 8)
        throw CollectiveError("[" + op_ + "] internal: a transport's rendezvous is " + std::to_string(bytes.size()) +
                              " bytes, at most " + std::to_string(kShare - 8));
      Local all;
      {
        HostStaging stage;
        Buffer b = Buffer::host_staging(me(), kShare);
        std::memset(b.data(), 0, kShare);
        const std::uint64_t n = bytes.size();
        std::memcpy(b.data(), &n, 8);
        std::memcpy(static_cast<unsigned char*>(b.data()) + 8, bytes.data(), bytes.size());
        all = control({b, {static_cast<std::int64_t>(kShare)}, DType::u8});
      }
      const auto* p = static_cast<const unsigned char*>(all.data.data());
      std::uint64_t n = 0;
      std::memcpy(&n, p, 8);
      return std::vector<unsigned char>(p + 8, p + 8 + std::min<std::uint64_t>(n, kShare - 8));
    });
  }

  std::unique_ptr<Group> control_;
  DeviceTransport& transport_;
  Session& session_;
  std::vector<int> ids_;
  int rank_;
  std::string op_, axes_;
  double timeout_;
  std::shared_ptr<DeviceLink> link_;
};

// ------------------------------------------------------- emulated transport

// A transport for checking direct groups on emulated GPUs, where NCCL
// cannot run (what it does not check is NCCL itself). Within the process a
// send leaves a reference to the sender's buffer (values are immutable) in
// the receiver's mailbox, and the receive copies it with the GPU port;
// to another process the bytes go through host copies and MPI
// (exchange_across_processes).
class Mailboxes {
 public:
  // (link, from, to) -> buffers in the order sent
  using Key = std::tuple<std::uint64_t, int, int>;
  void post(const Key& k, Transfer t) {
    std::lock_guard<std::mutex> lock(mu_);
    box_[k].push_back(std::move(t));
    cv_.notify_all();
  }
  // The oldest transfer under `k`, or false after `timeout_s`; raises
  // PeerFailed once `aborted()` gives a reason (polled every few ms: an
  // abort does not signal this condition variable).
  bool take(const Key& k, double timeout_s, const std::function<std::string()>& aborted, Transfer& out) {
    using Clock = std::chrono::steady_clock;
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    auto has = [&] {
      const auto it = box_.find(k);
      return it != box_.end() && !it->second.empty();
    };
    while (!has()) {
      if (Clock::now() >= deadline) return false;
      cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(5)));
      if (!has()) {
        lock.unlock();
        const std::string why = aborted();
        if (!why.empty()) throw PeerFailed(why);
        lock.lock();
      }
    }
    auto it = box_.find(k);
    out = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) box_.erase(it);  // links come and go: keep no empty boxes
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<Transfer>> box_;
};

class EmulatedLink final : public DeviceLink {
 public:
  EmulatedLink(Mailboxes& boxes, std::uint64_t id, std::vector<int> ids, int rank)
      : boxes_(boxes), id_(id), ids_(std::move(ids)), rank_(rank) {}
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, const std::string& op,
                double timeout_s, const std::function<std::string()>& aborted) override {
    // Peers in this process through the mailboxes, the others over MPI.
    const Runtime& rt = Runtime::get();
    std::vector<Transfer> far_sends, far_recvs, near_recvs;
    for (const Transfer& s : sends) {
      if (rt.is_local(ids_[s.peer])) boxes_.post({id_, rank_, s.peer}, s);
      else far_sends.push_back(s);
    }
    for (const Transfer& r : recvs) (rt.is_local(ids_[r.peer]) ? near_recvs : far_recvs).push_back(r);
    if (!far_sends.empty() || !far_recvs.empty())
      exchange_across_processes(far_sends, far_recvs, ids_, rank_, op, timeout_s, aborted);
    const GpuHandle* g = rt.gpu(ids_[rank_]);
    for (const Transfer& r : near_recvs) {
      Transfer got;
      if (!boxes_.take({id_, r.peer, rank_}, timeout_s, aborted, got))
        throw CollectiveError("[" + op + "] timed out after " + std::to_string(timeout_s) + " s waiting for " +
                              device_label(ids_[r.peer]) + "'s bytes on the emulated GPU transport");
      if (got.nbytes != r.nbytes)
        throw CollectiveError("[" + op + "] internal: " + device_label(ids_[r.peer]) + " sent " +
                              std::to_string(got.nbytes) + " bytes where " + std::to_string(r.nbytes) +
                              " were expected");
      if (g)
        gpu_copy(*g, r.buffer.device_data(), got.buffer.device_data(), r.nbytes, CopyKind::DeviceToDevice,
                 op.c_str(), false);
      else
        std::memcpy(r.buffer.data(), got.buffer.data(), r.nbytes);
    }
    if (g && !near_recvs.empty()) gpu_wait(*g, op.c_str());
  }

 private:
  Mailboxes& boxes_;
  std::uint64_t id_;
  std::vector<int> ids_;
  int rank_;
};

class EmulatedTransport final : public DeviceTransport {
 public:
  std::string name() const override { return "emulated"; }
  std::shared_ptr<DeviceLink> link(const std::vector<int>& device_ids, int rank, const Share& share) override {
    // Member 0 names the link; the others learn the name through `share`,
    // as NCCL's ranks learn its unique id.
    std::vector<unsigned char> mine(8, 0);
    if (rank == 0) {
      const std::uint64_t id = next_.fetch_add(1, std::memory_order_relaxed);
      std::memcpy(mine.data(), &id, 8);
    }
    const std::vector<unsigned char> got = share(mine);
    std::uint64_t id = 0;
    std::memcpy(&id, got.data(), std::min<std::size_t>(8, got.size()));
    return std::make_shared<EmulatedLink>(boxes_, id, device_ids, rank);
  }

 private:
  Mailboxes boxes_;
  std::atomic<std::uint64_t> next_{1};
};

// The setting, or why it is not one. Never throws: a static initializer
// that throws is retried by every caller (and ThreadSanitizer's guard hung
// the members that waited on one).
struct Setting {
  GpuCollectives value = GpuCollectives::Host;
  std::string error;
};

Setting read_gpu_collectives() {
  const char* env = std::getenv("TESSERA_GPU_COLLECTIVES");
  const std::string v = env ? env : "";
  if (v.empty() || v == "host") return {GpuCollectives::Host, ""};
  if (v == "nccl") return {GpuCollectives::Nccl, ""};
  if (v == "emulated") return {GpuCollectives::Emulated, ""};
  return {GpuCollectives::Host,
          "[devices] TESSERA_GPU_COLLECTIVES: expected 'host', 'nccl' or 'emulated', got '" + v + "'"};
}

}  // namespace

GpuCollectives gpu_collectives() {
  static const Setting s = read_gpu_collectives();
  if (!s.error.empty()) throw DeviceError(s.error);
  return s.value;
}

DeviceTransport* gpu_transport() {
  switch (gpu_collectives()) {
    case GpuCollectives::Host: return nullptr;
    case GpuCollectives::Nccl:
      if (emulated_gpus() > 0)
        throw DeviceError(
            "[devices] TESSERA_GPU_COLLECTIVES=nccl needs real GPUs, and these are emulated (TESSERA_CUDA_EMULATE); "
            "TESSERA_GPU_COLLECTIVES=emulated checks the same groups on them");
      return &nccl_transport();
    case GpuCollectives::Emulated: {
      static EmulatedTransport emulated;
      return &emulated;
    }
  }
  return nullptr;
}

std::unique_ptr<Group> make_direct_group(std::unique_ptr<Group> control, DeviceTransport& transport,
                                         Session& session, std::vector<int> device_ids, int rank, std::string op,
                                         std::string axes, double timeout_s) {
  return std::make_unique<DirectGroup>(std::move(control), transport, session, std::move(device_ids), rank,
                                       std::move(op), std::move(axes), timeout_s);
}

DirectStats direct_stats() {
  return {g_collectives.load(std::memory_order_relaxed), g_transfers.load(std::memory_order_relaxed),
          g_bytes.load(std::memory_order_relaxed)};
}

}  // namespace tessera::detail
