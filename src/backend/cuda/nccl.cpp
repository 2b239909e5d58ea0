// NCCL as the transport of direct groups (comm/direct.hpp): GPU memory
// moves between the members' GPUs by ncclSend/ncclRecv on each device's own
// stream, so the transfers are ordered after the kernels that made the
// values and before those that read the results.
//
// libnccl is opened at the first use (dlopen), never linked: a binary
// starts where NCCL is absent and says so only when asked for it
// (TESSERA_GPU_COLLECTIVES=nccl; TESSERA_NCCL_LIBRARY names the library,
// else libnccl.so.2 on the library path).
//
// No hang: communicators are non-blocking (NCCL's config.blocking = 0), so
// making one, a group of sends and receives, and the stream's completion are
// all polled against the collective timeout; past it, or on NCCL's
// asynchronous error, the communicator is aborted (ncclCommAbort) and a
// CollectiveError names the device. The control group has already checked
// that every member came with the same call, so a timeout here means a
// member died while its bytes were in flight.
//
// One communicator per group (its device ids, in member order) and member,
// kept for the process's life, since making one costs far more than a
// collective. Member 0 decides at each group's first transfer whether its
// communicator is reused or made anew (with a fresh unique id), and tells
// the others through the control group, so all members agree even when one
// process lost its communicator to an abort.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <cuda_runtime.h>

#include "comm/direct.hpp"
#include "runtime/gpus.hpp"
#include "tessera/device.hpp"
#include "tessera/error.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define TESSERA_HAVE_NCCL_H 1
#endif

namespace tessera::detail {

#ifndef TESSERA_HAVE_NCCL_H

DeviceTransport& nccl_transport() {
  throw DeviceError(
      "[devices] TESSERA_GPU_COLLECTIVES=nccl: this build found no nccl.h (give CMake NCCL_INCLUDE_DIR)");
}

#else

namespace {

using Clock = std::chrono::steady_clock;

// The functions used, from the library opened at run time.
struct Api {
  ncclResult_t (*get_version)(int*) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*abort)(ncclComm_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  std::string path;
  int version = 0;
  std::string error;  // why NCCL cannot be had
};

// Opened once; a failure is kept and raised at every use (a static
// initializer must not throw: every caller would retry it, and
// ThreadSanitizer's guard hung the threads that waited on one).
const Api& api() {
  static const Api a = [] {
    Api x;
    const char* env = std::getenv("TESSERA_NCCL_LIBRARY");
    x.path = env && *env ? env : "libnccl.so.2";
    void* lib = dlopen(x.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      x.error = "[devices] TESSERA_GPU_COLLECTIVES=nccl: cannot open " + x.path + ": " + dlerror() +
                " (TESSERA_NCCL_LIBRARY names the library)";
      return x;
    }
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
      if (!f && x.error.empty()) x.error = "[devices] TESSERA_GPU_COLLECTIVES=nccl: " + x.path + " has no " + name;
    };
    sym(x.get_version, "ncclGetVersion");
    sym(x.error_string, "ncclGetErrorString");
    sym(x.get_unique_id, "ncclGetUniqueId");
    sym(x.init_rank_config, "ncclCommInitRankConfig");
    sym(x.get_async_error, "ncclCommGetAsyncError");
    sym(x.abort, "ncclCommAbort");
    sym(x.group_start, "ncclGroupStart");
    sym(x.group_end, "ncclGroupEnd");
    sym(x.send, "ncclSend");
    sym(x.recv, "ncclRecv");
    if (x.error.empty()) x.get_version(&x.version);
    return x;
  }();
  if (!a.error.empty()) throw DeviceError(a.error);
  return a;
}

std::string text(ncclResult_t r) { return std::string(api().error_string(r)) + " (" + std::to_string(r) + ")"; }

// Waits for the communicator's pending work (non-blocking calls return
// ncclInProgress) and, when `stream` is given, for the stream; false after
// `timeout_s`. Raises on NCCL's or CUDA's error, after aborting.
bool settle(ncclComm_t comm, cudaStream_t stream, double timeout_s, const std::string& what,
            const std::function<std::string()>& aborted = nullptr) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (int spin = 0;; ++spin) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = api().get_async_error(comm, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      api().abort(comm);
      throw CollectiveError(what + ": NCCL failed: " + text(r != ncclSuccess ? r : state));
    }
    if (state == ncclSuccess) {
      if (!stream) return true;
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return true;
      if (e != cudaErrorNotReady) {
        api().abort(comm);
        throw CollectiveError(what + ": " + cudaGetErrorString(e));
      }
    }
    if (Clock::now() > deadline) return false;
    if (aborted && spin % 64 == 63)
      if (const std::string why = aborted(); !why.empty()) {
        // Another member failed: its transfers never come.
        api().abort(comm);
        throw PeerFailed(why);
      }
    if (spin > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class NcclLink final : public DeviceLink {
 public:
  NcclLink(ncclComm_t comm, std::vector<int> ids, int rank) : comm_(comm), ids_(std::move(ids)), rank_(rank) {}
  bool broken() const { return broken_.load(); }

  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, const std::string& op,
                double timeout_s, const std::function<std::string()>& aborted) override {
    const std::string who = "[" + op + "] " + device_label(ids_[rank_]);
    if (broken_) throw CollectiveError(who + ": its NCCL communicator was aborted by an earlier failure");
    const GpuHandle& g = *Runtime::get().gpu(ids_[rank_]);
    auto stream = static_cast<cudaStream_t>(g.stream);
    ncclResult_t r = api().group_start();
    for (const Transfer& s : sends)
      if (r == ncclSuccess) r = api().send(s.buffer.device_data(), s.nbytes, ncclUint8, s.peer, comm_, stream);
    for (const Transfer& v : recvs)
      if (r == ncclSuccess) r = api().recv(v.buffer.device_data(), v.nbytes, ncclUint8, v.peer, comm_, stream);
    const ncclResult_t end = api().group_end();
    if (r == ncclSuccess) r = end;
    if (r != ncclSuccess && r != ncclInProgress) {
      broken_ = true;
      api().abort(comm_);
      throw CollectiveError(who + ": NCCL refused the transfers: " + text(r));
    }
    try {
      if (!settle(comm_, stream, timeout_s, who, aborted)) {
        broken_ = true;
        api().abort(comm_);
        throw CollectiveError(who + ": NCCL transfers not done after " + std::to_string(timeout_s) +
                              " s (a member stopped while they were in flight); the communicator was aborted");
      }
    } catch (...) {
      broken_ = true;
      throw;
    }
  }

 private:
  ncclComm_t comm_;
  std::vector<int> ids_;
  int rank_;
  std::atomic<bool> broken_{false};
};

class NcclTransport final : public DeviceTransport {
 public:
  std::string name() const override { return "nccl"; }

  std::shared_ptr<DeviceLink> link(const std::vector<int>& device_ids, int rank, const Share& share) override {
    const auto key = std::make_pair(device_ids, rank);
    std::shared_ptr<NcclLink> cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = links_.find(key); it != links_.end() && !it->second->broken()) cached = it->second;
    }
    // Member 0's decision: byte 0 says reuse (1) or a new communicator (0)
    // whose unique id follows.
    std::vector<unsigned char> mine(1 + sizeof(ncclUniqueId), 0);
    if (rank == 0) {
      if (cached) {
        mine[0] = 1;
      } else {
        ncclUniqueId id;
        if (const ncclResult_t r = api().get_unique_id(&id); r != ncclSuccess)
          throw CollectiveError("[nccl] ncclGetUniqueId failed: " + text(r));
        std::memcpy(mine.data() + 1, &id, sizeof id);
      }
    }
    const std::vector<unsigned char> got = share(mine);
    if (got.size() != mine.size()) throw CollectiveError("[nccl] internal: a unique id of the wrong size");
    if (got[0] == 1) {
      if (cached) return cached;
      throw CollectiveError("[nccl] " + device_label(device_ids[rank]) +
                            " has lost the group's NCCL communicator (aborted) while member 0 kept it");
    }
    ncclUniqueId id;
    std::memcpy(&id, got.data() + 1, sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const std::string who = "[nccl] " + device_label(device_ids[rank]);
    const ncclResult_t r =
        api().init_rank_config(&comm, static_cast<int>(device_ids.size()), id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm) api().abort(comm);
      throw CollectiveError(who + ": making the NCCL communicator failed: " + text(r));
    }
    if (!settle(comm, nullptr, config::collective_timeout(), who)) {
      api().abort(comm);
      throw CollectiveError(who + ": the NCCL communicator was not made after " +
                            std::to_string(config::collective_timeout()) + " s; aborted");
    }
    auto link = std::make_shared<NcclLink>(comm, device_ids, rank);
    std::lock_guard<std::mutex> lock(mu_);
    links_[key] = link;
    return link;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<std::vector<int>, int>, std::shared_ptr<NcclLink>> links_;
};

}  // namespace

DeviceTransport& nccl_transport() {
  api();  // raises when there is no NCCL to open
  // Kept to the process's end and never destroyed: its communicators must
  // not be torn down after the CUDA runtime is.
  static NcclTransport* t = new NcclTransport;
  return *t;
}

#endif

}  // namespace tessera::detail
