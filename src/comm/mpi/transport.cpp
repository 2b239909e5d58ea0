// The mpi backend's process group and frames (see transport.hpp).
#include "comm/mpi/transport.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "comm/process.hpp"
#include "core/hash.hpp"
#include "runtime/runtime.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace mpi {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMagic = 0x7465737365726131ull;  // "tessera1"
// Payloads up to this size travel in the header's message; larger ones go
// straight into the receiver's buffer as a second message.
constexpr std::int64_t kInline = 32 * 1024;
// Frames up to kChunkedFrame bytes (header included) travel as messages of
// at most kEagerChunk bytes: Open MPI's shared-memory transport sends a
// message under its eager limit (4 KiB less its own header) at once, while
// a larger one waits for a rendezvous with the receiver, which costs more
// than the message itself at these sizes (a 4 KiB psum frame took 3.4 us as
// one message, 1.5 us as two). Both sides split a frame alike: the receiver
// knows each frame's size.
constexpr std::int64_t kEagerChunk = 4000;
constexpr std::int64_t kChunkedFrame = 16 * 1024;
// Largest piece of one MPI message (counts are int).
constexpr std::int64_t kMaxMessage = std::int64_t(1) << 30;
// How long a process that fails keeps running so the others can report it
// before the launcher stops them all.
constexpr auto kFailureGrace = std::chrono::milliseconds(1500);
// How long a wait still runs after a process it needs announced its exit
// (messages it sent before exiting may still be arriving).
constexpr auto kExitGrace = std::chrono::milliseconds(1000);

MPI_Comm g_comm = MPI_COMM_NULL;
MPI_Comm g_direct_comm = MPI_COMM_NULL;  // the emulated direct transport's (its own tag space)
int g_rank = 0, g_size = 1;
bool g_we_initialized = false;

enum class NoticeKind : std::int32_t { ProcessFailed = 1, ProcessExited = 2, SessionFailed = 3 };

struct Notice {
  NoticeKind kind = NoticeKind::ProcessFailed;
  std::int32_t process = 0;
  std::int32_t device = -1;
  std::int64_t session = -1;
  char text[1024] = {};
};

// What this process has heard from the others.
struct Heard {
  std::mutex mu;
  std::map<int, std::string> failed;                 // process -> why
  std::map<int, Clock::time_point> exited;           // process -> when heard
  std::map<long, std::pair<int, std::string>> sessions;  // session -> (device, why)
  std::mutex send_mu;
  std::deque<std::pair<std::unique_ptr<Notice>, MPI_Request>> sent;  // alive until delivered
};
Heard& heard() {
  static Heard* h = new Heard;  // leaked: notices may be sent during exit
  return *h;
}

std::string text_of(const char* s, std::size_t cap) { return std::string(s, strnlen(s, cap)); }

// Receives every notice that has arrived.
void drain_notices() {
  Heard& h = heard();
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, kTagNotice, g_comm, &flag, &msg, &st) != MPI_SUCCESS || !flag) return;
    Notice n;
    MPI_Mrecv(&n, sizeof n, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    std::lock_guard<std::mutex> lock(h.mu);
    const std::string text = text_of(n.text, sizeof n.text);
    switch (n.kind) {
      case NoticeKind::ProcessFailed: h.failed.emplace(n.process, text); break;
      case NoticeKind::ProcessExited: h.exited.emplace(n.process, Clock::now()); break;
      case NoticeKind::SessionFailed: h.sessions.emplace(n.session, std::make_pair(n.device, text)); break;
    }
  }
}

void announce(const Notice& n) {
  if (g_comm == MPI_COMM_NULL || g_size < 2) return;
  Heard& h = heard();
  std::lock_guard<std::mutex> lock(h.send_mu);
  for (int p = 0; p < g_size; ++p) {
    if (p == g_rank) continue;
    auto copy = std::make_unique<Notice>(n);
    MPI_Request req;
    if (MPI_Isend(copy.get(), sizeof(Notice), MPI_BYTE, p, kTagNotice, g_comm, &req) == MPI_SUCCESS)
      h.sent.emplace_back(std::move(copy), req);
  }
  // Forget the delivered ones.
  while (!h.sent.empty()) {
    int done = 0;
    MPI_Test(&h.sent.front().second, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    h.sent.pop_front();
  }
}

// Gives the notices just sent a moment to leave, then lets the others report.
void linger_after_announcing() {
  Heard& h = heard();
  const auto until = Clock::now() + kFailureGrace;
  while (Clock::now() < until) {
    bool all = true;
    {
      std::lock_guard<std::mutex> lock(h.send_mu);
      for (auto& [n, req] : h.sent) {
        int done = 0;
        if (req != MPI_REQUEST_NULL) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        all = all && (done || req == MPI_REQUEST_NULL);
      }
    }
    drain_notices();
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(kFailureGrace / 2);
}

std::terminate_handler g_previous_terminate = nullptr;

// An uncaught exception (or std::terminate) in this process: tell the
// others, so a process waiting for this one in a collective raises a
// CollectiveError naming it instead of waiting out its timeout, then end
// as the default handler does (the launcher sees the abnormal exit).
[[noreturn]] void on_terminate() {
  static std::atomic<bool> once{false};
  if (!once.exchange(true) && g_comm != MPI_COMM_NULL) {
    Notice n;
    n.kind = NoticeKind::ProcessFailed;
    n.process = g_rank;
    std::string why = "terminated";
    if (auto e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        why = std::string("terminated by an uncaught exception: ") + ex.what();
      } catch (...) {
        why = "terminated by an uncaught exception that is not a std::exception";
      }
    }
    std::snprintf(n.text, sizeof n.text, "%s", why.c_str());
    announce(n);
    linger_after_announcing();
  }
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<std::size_t>(len));
}

std::string process_list(const std::vector<int>& ps) {
  std::string s = ps.size() == 1 ? "process " : "processes ";
  for (size_t i = 0; i < ps.size(); ++i) s += (i ? ", " : "") + std::to_string(ps[i]);
  return s;
}

}  // namespace

bool remote_session_failure(long session, int& device, std::string& what) {
  drain_notices();
  Heard& h = heard();
  std::lock_guard<std::mutex> lock(h.mu);
  const auto it = h.sessions.find(session);
  if (it == h.sessions.end()) return false;
  device = it->second.first;
  what = it->second.second + " (process " + std::to_string(Runtime::get().process_of(device)) + ")";
  return true;
}

MPI_Comm comm() { return g_comm; }
MPI_Comm direct_comm() { return g_direct_comm; }
int rank() { return g_rank; }
int size() { return g_size; }

void Header::set(const std::string& signature, const Shape& s, DType t, int dev) {
  magic = kMagic;
  process = g_rank;
  device = dev;
  dtype = static_cast<std::int32_t>(t);
  ndim = static_cast<std::int32_t>(std::min<std::size_t>(s.size(), 8));
  for (int i = 0; i < ndim; ++i) shape[i] = s[i];
  sig_hash = fnv1a(signature);
  sig_len = static_cast<std::int32_t>(signature.size());
  std::snprintf(sig, sizeof sig, "%s", signature.c_str());
}

std::string Header::signature() const {
  std::string s(sig, strnlen(sig, sizeof sig));
  if (static_cast<std::size_t>(sig_len) > s.size()) s += "...";
  return s;
}

bool Header::same_call(const std::string& s) const {
  return sig_hash == fnv1a(s) && static_cast<std::size_t>(sig_len) == s.size();
}

int group_tag(long session, int group) {
  static const long ub = [] {
    void* v = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(g_comm, MPI_TAG_UB, &v, &flag);
    return flag ? static_cast<long>(*static_cast<int*>(v)) : 32767L;
  }();
  const long span = ub - kTagGroupBase;
  const long t = (session % 4096) * 8192 + group % 8192;
  return kTagGroupBase + static_cast<int>(t % span);
}

long next_session() {
  static std::atomic<long> n{0};
  return n++;
}

void announce_session_failure(long session, int device, const std::string& what) {
  Notice n;
  n.kind = NoticeKind::SessionFailed;
  n.process = g_rank;
  n.device = device;
  n.session = session;
  std::snprintf(n.text, sizeof n.text, "%s", what.c_str());
  announce(n);
}

// ------------------------------------------------------------------ Batch

namespace {
// The messages of an inline frame of `n` bytes: (offset, length) each.
template <class F>
void for_each_part(std::int64_t n, F&& f) {
  if (n > kChunkedFrame) {
    f(0, static_cast<int>(n));
    return;
  }
  for (std::int64_t off = 0; off < n; off += kEagerChunk) f(off, static_cast<int>(std::min(kEagerChunk, n - off)));
}
}  // namespace

Batch::~Batch() {
  if (waited_) return;
  // Raised before completing (or never waited): MPI may still read or
  // write these buffers, so they must outlive this object.
  for (auto& req : reqs_)
    if (req != MPI_REQUEST_NULL) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
    }
  static std::mutex mu;
  static auto* graveyard = new std::vector<std::shared_ptr<void>>;
  std::lock_guard<std::mutex> lock(mu);
  for (auto& r : recvs_) {
    if (r.keep) graveyard->push_back(std::move(r.keep));
    graveyard->push_back(std::make_shared<std::vector<unsigned char>>(std::move(r.owned)));
  }
  for (auto& k : keep_) graveyard->push_back(std::const_pointer_cast<void>(k));
  for (auto& b : send_bufs_) graveyard->push_back(std::make_shared<std::vector<unsigned char>>(std::move(b)));
}

void Batch::send(int dest, const Header& h0, const void* data, std::shared_ptr<const void> keep) {
  Header h = h0;
  h.magic = kMagic;
  auto* bytes = static_cast<const unsigned char*>(data);
  MPI_Request req;
  if (h.nbytes <= kInline) {
    std::vector<unsigned char> buf(sizeof(Header) + static_cast<std::size_t>(h.nbytes));
    std::memcpy(buf.data(), &h, sizeof(Header));
    if (h.nbytes > 0) std::memcpy(buf.data() + sizeof(Header), bytes, static_cast<std::size_t>(h.nbytes));
    for_each_part(static_cast<std::int64_t>(buf.size()), [&](std::int64_t off, int len) {
      MPI_Isend(buf.data() + off, len, MPI_BYTE, dest, tag_, g_comm, &req);
      track(req, dest, -1);
    });
    send_bufs_.push_back(std::move(buf));
    return;
  }
  std::vector<unsigned char> head(sizeof(Header));
  std::memcpy(head.data(), &h, sizeof(Header));
  MPI_Isend(head.data(), static_cast<int>(head.size()), MPI_BYTE, dest, tag_, g_comm, &req);
  send_bufs_.push_back(std::move(head));
  track(req, dest, -1);
  for (std::int64_t off = 0; off < h.nbytes; off += kMaxMessage) {
    const auto len = static_cast<int>(std::min(kMaxMessage, h.nbytes - off));
    MPI_Isend(bytes + off, len, MPI_BYTE, dest, tag_, g_comm, &req);
    track(req, dest, -1);
  }
  if (keep) keep_.push_back(std::move(keep));
}

int Batch::recv(int src, std::int64_t nbytes, void* dst, std::shared_ptr<void> keep) {
  const int idx = static_cast<int>(recvs_.size());
  recvs_.emplace_back();
  Recv& r = recvs_.back();
  r.index = idx;
  r.src = src;
  r.nbytes = nbytes;
  r.dst = dst;
  r.keep = std::move(keep);
  r.inline_ = nbytes <= kInline;
  MPI_Request req;
  if (r.inline_) {
    r.owned.resize(sizeof(Header) + static_cast<std::size_t>(nbytes));
    for_each_part(static_cast<std::int64_t>(r.owned.size()), [&](std::int64_t off, int len) {
      MPI_Irecv(r.owned.data() + off, len, MPI_BYTE, src, tag_, g_comm, &req);
      track(req, src, idx);
    });
    return idx;
  }
  MPI_Irecv(&r.header, sizeof(Header), MPI_BYTE, src, tag_, g_comm, &req);
  track(req, src, idx);
  auto* bytes = static_cast<unsigned char*>(dst);
  for (std::int64_t off = 0; off < nbytes; off += kMaxMessage) {
    const auto len = static_cast<int>(std::min(kMaxMessage, nbytes - off));
    MPI_Irecv(bytes + off, len, MPI_BYTE, src, tag_, g_comm, &req);
    track(req, src, idx);
  }
  return idx;
}

void Batch::send_any(int dest, const Header& h0, const void* data) {
  Header h = h0;
  h.magic = kMagic;
  if (h.nbytes > kMaxMessage - static_cast<std::int64_t>(sizeof(Header)))
    throw CollectiveError("[" + h.signature() + "] cannot send " + std::to_string(h.nbytes) +
                          " bytes to another process in one message (at most 1 GiB)");
  std::vector<unsigned char> buf(sizeof(Header) + static_cast<std::size_t>(h.nbytes));
  std::memcpy(buf.data(), &h, sizeof(Header));
  if (h.nbytes > 0) std::memcpy(buf.data() + sizeof(Header), data, static_cast<std::size_t>(h.nbytes));
  MPI_Request req;
  MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, dest, tag_, g_comm, &req);
  send_bufs_.push_back(std::move(buf));
  track(req, dest, -1);
}

int Batch::recv_any(int src) {
  const int idx = static_cast<int>(recvs_.size());
  recvs_.emplace_back();
  recvs_.back().index = idx;
  recvs_.back().src = src;
  return idx;
}

void Batch::post_any(Recv& r, MPI_Message msg, int count) {
  r.owned.resize(static_cast<std::size_t>(count));
  MPI_Request req;
  MPI_Imrecv(r.owned.data(), count, MPI_BYTE, &msg, &req);
  track(req, r.src, r.index);
  r.probed = true;
}

void Batch::finish_recv(Recv& r) {
  if (r.nbytes < 0 || r.inline_) {
    if (r.owned.size() < sizeof(Header))
      throw CollectiveError("[collective] a message from process " + std::to_string(r.src) + " is too short");
    std::memcpy(&r.header, r.owned.data(), sizeof(Header));
    if (r.nbytes < 0) {
      r.owned.erase(r.owned.begin(), r.owned.begin() + sizeof(Header));
    } else if (r.header.nbytes == r.nbytes && r.nbytes > 0) {
      std::memcpy(r.dst, r.owned.data() + sizeof(Header), static_cast<std::size_t>(r.nbytes));
    }
  }
  r.done = true;
}

void Batch::track(MPI_Request req, int peer, int recv) {
  reqs_.push_back(req);
  req_peer_.push_back(peer);
  req_recv_.push_back(recv);
  if (recv >= 0) ++recvs_[recv].outstanding;
}

// The processes this wait still needs.
std::vector<int> Batch::pending() const {
  std::vector<int> out;
  for (size_t i = 0; i < reqs_.size(); ++i)
    if (reqs_[i] != MPI_REQUEST_NULL) out.push_back(req_peer_[i]);
  for (auto& r : recvs_)
    if (r.nbytes < 0 && !r.probed) out.push_back(r.src);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Polls the requests (one MPI_Testsome per round: with MPI_THREAD_MULTIPLE
// every MPI call takes Open MPI's lock) and, every 64 rounds, the notices.
void Batch::wait(const WaitFor& w) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w.timeout_s));
  const std::string prefix = "[" + w.op + "] ";
  long spins = 0;
  int unprobed = 0;
  for (auto& r : recvs_) unprobed += r.nbytes < 0 && !r.probed;
  int active = static_cast<int>(std::count_if(reqs_.begin(), reqs_.end(), [](MPI_Request q) { return q != MPI_REQUEST_NULL; }));
  std::vector<int> done_at(reqs_.size());
  std::vector<MPI_Status> statuses(reqs_.size());
  for (;;) {
    // Any-size receives: match them as their messages arrive.
    if (unprobed > 0) {
      for (auto& r : recvs_) {
        if (r.nbytes >= 0 || r.probed) continue;
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        MPI_Improbe(r.src, tag_, g_comm, &flag, &msg, &st);
        if (flag) {
          int count = 0;
          MPI_Get_count(&st, MPI_BYTE, &count);
          post_any(r, msg, count);
          --unprobed;
          ++active;
        }
      }
      done_at.resize(reqs_.size());
      statuses.resize(reqs_.size());
    }
    if (active > 0) {
      int ndone = 0;
      const int rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &ndone, done_at.data(), statuses.data());
      if (rc != MPI_SUCCESS) {
        int peer = -1, code = rc;
        for (int k = 0; k < ndone && ndone != MPI_UNDEFINED; ++k)
          if (statuses[k].MPI_ERROR != MPI_SUCCESS) {
            peer = req_peer_[done_at[k]];
            code = statuses[k].MPI_ERROR;
            break;
          }
        throw CollectiveError(prefix + "mismatched collectives across processes " + w.what +
                              ": a message from " + (peer >= 0 ? "process " + std::to_string(peer) : "another process") +
                              " did not match what this process expected (" + mpi_error(code) + ")");
      }
      for (int k = 0; k < ndone && ndone != MPI_UNDEFINED; ++k) {
        --active;
        const int ri = req_recv_[done_at[k]];
        if (ri >= 0 && --recvs_[ri].outstanding == 0) finish_recv(recvs_[ri]);
      }
    }
    if (active == 0 && unprobed == 0) break;

    if ((++spins & 63) == 0) {
      drain_notices();
      const std::vector<int> waiting_for = pending();
      Heard& h = heard();
      std::unique_lock<std::mutex> lock(h.mu);
      if (w.session >= 0) {
        auto it = h.sessions.find(w.session);
        if (it != h.sessions.end()) {
          const int dev = it->second.first;
          const std::string text = it->second.second;
          lock.unlock();
          const std::string where = " (process " + std::to_string(Runtime::get().process_of(dev)) + ")";
          // Wake this process's members waiting for this one.
          if (w.local) w.local->abort(dev, text + where);
          throw PeerFailed(prefix + "aborted " + w.what + ": " + device_label(dev) + where +
                           " raised an error: " + text);
        }
      }
      for (int p : waiting_for) {
        auto f = h.failed.find(p);
        if (f != h.failed.end())
          throw CollectiveError(prefix + "process " + std::to_string(p) + " failed while this process (" +
                                std::to_string(g_rank) + ") waited for it " + w.what + ": " + f->second);
        auto e = h.exited.find(p);
        if (e != h.exited.end() && Clock::now() - e->second > kExitGrace)
          throw CollectiveError(prefix + "process " + std::to_string(p) + " exited while this process (" +
                                std::to_string(g_rank) + ") waited for it " + w.what);
      }
    }
    // The clock every round: a round may include a yield that lasts a
    // whole time slice on a busy machine, and this process's other members
    // wait for this one only the timeout and a little more.
    if (Clock::now() > deadline)
      throw CollectiveError(prefix + "timed out after " + seconds_str(w.timeout_s) + " waiting " + w.what +
                            ": missing " + process_list(pending()) + " (this is process " + std::to_string(g_rank) +
                            ")");
    // A frame from a process that reached the call too usually arrives
    // within microseconds: spin briefly before giving the core away.
    if (spins < 64) continue;
    if (spins < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Every header must be a frame of the same collective.
  for (auto& r : recvs_) {
    if (r.header.magic != kMagic)
      throw CollectiveError(prefix + "mismatched collectives across processes " + w.what +
                            ": a message from process " + std::to_string(r.src) + " is not a Tessera frame");
  }
  waited_ = true;
}

}  // namespace mpi

// ------------------------------------------------------- the process group

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && x > 0 ? static_cast<int>(x) : fallback;
}
}  // namespace

int processes_on_this_host() { return env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("MPI_LOCALNRANKS", 1)); }

const char* process_backend() { return "mpi"; }

ProcessLayout start_processes(int local_devices) {
  using namespace mpi;
  int initialized = 0;
  MPI_Initialized(&initialized);
  // Not launched by an MPI launcher and MPI not started by the program: one
  // process, without touching MPI at all.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  if (!initialized && !launched) {
    ProcessLayout one;
    one.first_device = {0, local_devices};
    return one;
  }
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw DeviceError("[distributed::initialize] MPI_Init_thread failed");
    g_we_initialized = true;
    if (provided < MPI_THREAD_MULTIPLE)
      throw DeviceError("[distributed::initialize] the MPI library gives thread level " + std::to_string(provided) +
                        "; Tessera's devices need MPI_THREAD_MULTIPLE");
  } else {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      throw DeviceError("[distributed::initialize] MPI was initialized with thread level " + std::to_string(provided) +
                        "; initialize it with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let Tessera do it");
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_direct_comm);
  MPI_Comm_set_errhandler(g_direct_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g_comm, &g_rank);
  MPI_Comm_size(g_comm, &g_size);
  std::vector<int> counts(g_size, 0);
  MPI_Allgather(&local_devices, 1, MPI_INT, counts.data(), 1, MPI_INT, g_comm);
  ProcessLayout layout;
  layout.index = g_rank;
  layout.first_device.assign(g_size + 1, 0);
  for (int p = 0; p < g_size; ++p) layout.first_device[p + 1] = layout.first_device[p] + counts[p];
  if (g_size > 1) g_previous_terminate = std::set_terminate(on_terminate);
  return layout;
}

void stop_processes() {
  using namespace mpi;
  if (g_comm == MPI_COMM_NULL) return;
  // Tell the others, so one still waiting for this process in a collective
  // stops waiting (after a grace for the messages already on their way).
  Notice n;
  n.kind = NoticeKind::ProcessExited;
  n.process = g_rank;
  announce(n);
  if (g_we_initialized) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  g_comm = MPI_COMM_NULL;
  g_direct_comm = MPI_COMM_NULL;
}

}  // namespace tessera::detail
