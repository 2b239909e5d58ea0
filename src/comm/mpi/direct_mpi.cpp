// The emulated direct transport across processes (comm/direct.hpp): each
// transfer to or from a member in another process is one MPI message of
// host bytes, copied from and to the device with the GPU port. It exists to
// check direct groups over the MPI control path on emulated GPUs; on real
// GPUs NCCL moves the bytes instead.
//
// Messages travel on their own communicator (mpi::direct_comm), tagged by
// the global ids of the sending and receiving devices: every process runs
// the same program, and a device's transfers to another are posted by one
// thread (the device's worker) in program order, so the k-th message from a
// to b is the k-th receive b posts from a (MPI keeps messages between two
// processes on one tag in order). The sizes were agreed beforehand; a
// message of another size (left by an aborted program) is reported, never
// read as the wrong value.
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/direct.hpp"
#include "comm/mpi/transport.hpp"
#include "core/array_impl.hpp"

namespace tessera::detail {

namespace {

constexpr int kTagBase = 64;

int tag_of(int from_device, int to_device) {
  const int n = Runtime::get().num_devices();
  static const int ub = [] {
    int* v = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(mpi::direct_comm(), MPI_TAG_UB, &v, &flag);
    return flag && v ? *v : 32767;
  }();
  const long t = kTagBase + static_cast<long>(from_device) * n + to_device;
  if (t > ub)
    throw CollectiveError("[direct] internal: " + std::to_string(n) + " devices need tags up to " + std::to_string(t) +
                          ", MPI allows " + std::to_string(ub));
  return static_cast<int>(t);
}

// Host buffers of requests that an error left in flight: MPI may still write
// into them, so they live until the process ends.
std::mutex g_orphans_mu;
std::vector<std::shared_ptr<std::vector<unsigned char>>> g_orphans;

}  // namespace

void exchange_across_processes(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                               const std::vector<int>& device_ids, int rank, const std::string& op, double timeout_s,
                               const std::function<std::string()>& aborted) {
  const Runtime& rt = Runtime::get();
  const int me = device_ids[rank];
  std::vector<std::shared_ptr<std::vector<unsigned char>>> host;
  std::vector<MPI_Request> reqs;
  auto post = [&](const Transfer& t, bool send) {
    if (t.nbytes > static_cast<std::size_t>(INT_MAX))
      throw CollectiveError("[" + op + "] the emulated transport sends at most " + std::to_string(INT_MAX) +
                            " bytes at once, got " + std::to_string(t.nbytes));
    auto h = std::make_shared<std::vector<unsigned char>>(t.nbytes);
    const int peer = device_ids[t.peer];
    MPI_Request req;
    int rc;
    if (send) {
      read_buffer(t.buffer, h->data(), t.nbytes, op.c_str());
      rc = MPI_Isend(h->data(), static_cast<int>(t.nbytes), MPI_BYTE, rt.process_of(peer), tag_of(me, peer),
                     mpi::direct_comm(), &req);
    } else {
      rc = MPI_Irecv(h->data(), static_cast<int>(t.nbytes), MPI_BYTE, rt.process_of(peer), tag_of(peer, me),
                     mpi::direct_comm(), &req);
    }
    if (rc != MPI_SUCCESS) throw CollectiveError("[" + op + "] MPI refused a transfer with " + device_label(peer));
    host.push_back(std::move(h));
    reqs.push_back(req);
  };
  auto orphan = [&] {
    std::lock_guard<std::mutex> lock(g_orphans_mu);
    for (auto& h : host) g_orphans.push_back(h);
  };
  try {
    for (const Transfer& s : sends) post(s, true);
    for (const Transfer& r : recvs) post(r, false);
  } catch (...) {
    orphan();
    throw;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::vector<MPI_Status> st(reqs.size());
  for (int spin = 0;; ++spin) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, st.data()) != MPI_SUCCESS) {
      orphan();
      throw CollectiveError("[" + op + "] an MPI transfer of " + device_label(me) + " failed");
    }
    if (done) break;
    if (const std::string why = aborted(); !why.empty()) {
      orphan();
      throw PeerFailed(why);
    }
    if (Clock::now() > deadline) {
      orphan();
      throw CollectiveError("[" + op + "] timed out after " + std::to_string(timeout_s) + " s: " + device_label(me) +
                            "'s transfers to and from other processes are not done");
    }
    if (spin > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    const std::size_t k = sends.size() + i;
    int count = 0;
    MPI_Get_count(&st[k], MPI_BYTE, &count);
    if (static_cast<std::size_t>(count) != recvs[i].nbytes)
      throw CollectiveError("[" + op + "] " + device_label(device_ids[recvs[i].peer]) + " sent " +
                            std::to_string(count) + " bytes where " + std::to_string(recvs[i].nbytes) +
                            " were agreed (a message left by an earlier, failed program?)");
    write_buffer(recvs[i].buffer, host[k]->data(), recvs[i].nbytes, op.c_str());
  }
}

}  // namespace tessera::detail
