// Threads backend of the manual-mode collectives: where the members of a
// group meet.
//
// Every collective a device runs inside a shard_map body is identified by
// (group key, sequence number): the k-th collective a member runs on a group
// meets the k-th of every other member. The session counts each member's
// collectives per key, so a member may build a new Group object for every
// collective or keep one for many. The first member to arrive creates
// the slot; each deposits its value and waits, on the slot's condition
// variable (so an event wakes only the members it concerns: with more
// devices than cores, waking every waiting thread of the session on each
// event cost more than the collectives themselves), until
//   - all members have deposited: the signatures are compared (an op, axis,
//     parameter, dtype or shape mismatch is an error for every member, never
//     a silent combination) and the slot leaves the table, its deposits kept
//     alive by the members' references;
//   - the timeout passes: the slot records an error naming the devices that
//     arrived and those that did not, so late arrivals fail the same way;
//   - the session is aborted because a body failed: PeerFailed.
// Deposits are immutable local arrays, so members read one another's memory
// directly (zero-copy). barrier() and shared() wait the same way.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/threads/threads.hpp"

namespace tessera::detail {

namespace {

using Clock = std::chrono::steady_clock;

std::string device_list(const std::vector<int>& ids) {
  if (ids.empty()) return "none";
  return device_labels(ids);
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

class ThreadsSession;

class Slot final : public Rendezvous {
 public:
  Slot(ThreadsSession* s, const GroupSpec& g, long seq)
      : session_(s), group_(g), seq_(seq), deps_(g.size()), arrived_(g.size(), false) {}
  const std::vector<Deposit>& deposits() const override { return deps_; }
  Buffer shared(std::size_t nbytes, int rank, int device_id) override;
  void barrier() override;

  ThreadsSession* session_;
  GroupSpec group_;  // as the first member saw it (messages)
  long seq_;         // how many collectives each member ran on the key before this one
  std::vector<Deposit> deps_;
  std::vector<bool> arrived_;
  int count_ = 0;
  std::string error_;
  Buffer shared_;
  bool allocated_ = false;
  int at_barrier_ = 0;
  std::condition_variable cv_;  // waited on with the session's mutex
};

class ThreadsSession final : public Session {
 public:
  ThreadsSession(double timeout, bool poll) : timeout_(timeout), poll_(poll) {}

  void abort(int device_id, const std::string& what) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) {
      aborted_ = true;
      reason_ = device_label(device_id) + " raised an error: " + what;
    }
    // Every slot a member may wait on, including those that left the table
    // and wait at their barrier.
    for (const std::weak_ptr<Slot>& w : all_slots_)
      if (std::shared_ptr<Slot> slot = w.lock()) slot->cv_.notify_all();
  }

  std::shared_ptr<Rendezvous> meet(const GroupSpec& g, Deposit mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const long seq = seq_[{g.key, g.rank}]++;
    auto key = std::make_pair(g.key, seq);
    auto it = slots_.find(key);
    if (it == slots_.end()) {
      it = slots_.emplace(key, std::make_shared<Slot>(this, g, seq)).first;
      std::erase_if(all_slots_, [](const std::weak_ptr<Slot>& w) { return w.expired(); });
      all_slots_.push_back(it->second);
    }
    std::shared_ptr<Slot> slot = it->second;
    if (!slot->error_.empty()) throw CollectiveError(group_prefix(*slot) + slot->error_);
    check_abort(g);
    slot->deps_[g.rank] = std::move(mine);
    slot->arrived_[g.rank] = true;
    if (++slot->count_ == g.size()) {
      slot->error_ = mismatch(*slot);
      if (slot->error_.empty()) slots_.erase(it);
      slot->cv_.notify_all();
    }
    wait(lock, g, *slot, [&] { return slot->count_ == g.size(); }, "for all devices");
    if (!slot->error_.empty()) throw CollectiveError(slot->count_ == g.size() ? group_prefix(*slot) + slot->error_
                                                                               : prefix(g) + slot->error_);
    return slot;
  }

  // Waits until done(), the slot fails, the session aborts, or the timeout.
  template <class Done>
  void wait(std::unique_lock<std::mutex>& lock, const GroupSpec& g, Slot& slot, Done done, const char* what) {
    // The others are usually microseconds away (or, with more devices than
    // cores, waiting for this core): poll briefly, yielding, before sleeping
    // on the condition variable (Runtime::polls_for).
    if (poll_) {
      const auto until = Clock::now() + std::chrono::microseconds(50);
      while (!done() && slot.error_.empty() && !aborted_ && Clock::now() < until) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
    while (!done() && slot.error_.empty() && !aborted_) {
      if (slot.cv_.wait_until(lock, deadline) == std::cv_status::timeout && !done() && slot.error_.empty() &&
          !aborted_) {
        std::vector<int> in, out;
        for (int r = 0; r < g.size(); ++r) (slot.arrived_[r] ? in : out).push_back(g.device_ids[r]);
        slot.error_ = "timed out after " + seconds_str(timeout_) + " waiting " + what + " on axis " + g.axes +
                      " (collective #" + std::to_string(slot.seq_) + " of this group): arrived " + device_list(in) +
                      "; missing " + device_list(out);
        slot.cv_.notify_all();
      }
    }
    check_abort(g);
  }

  std::string abort_reason() override {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_ ? reason_ : std::string();
  }

  void check_abort(const GroupSpec& g) {
    if (aborted_) throw PeerFailed(prefix(g) + "aborted on axis " + g.axes + ": " + reason_);
  }

  static std::string prefix(const GroupSpec& g) { return "[" + g.op + "] "; }
  // Errors about the whole group name member 0's op, so every member (and
  // every run) reports the same text.
  static std::string group_prefix(const Slot& s) {
    const std::string& sig = s.deps_[0].signature;
    if (sig.empty()) return prefix(s.group_);
    std::string p = "[";
    p += sig.substr(0, sig.find('('));
    p += "] ";
    return p;
  }

  static std::string mismatch(const Slot& s) { return mismatch_text(s.deps_, s.group_.device_ids, s.group_.axes); }

  std::mutex mu_;
  double timeout_;
  bool poll_;
  bool aborted_ = false;
  std::string reason_;
  std::map<std::pair<std::string, long>, std::shared_ptr<Slot>> slots_;
  std::map<std::pair<std::string, int>, long> seq_;  // (key, rank) -> collectives run
  std::vector<std::weak_ptr<Slot>> all_slots_;        // for abort: every slot made, while it lives
};

Buffer Slot::shared(std::size_t nbytes, int rank, int device_id) {
  ThreadsSession& s = *session_;
  if (rank == 0) {
    Buffer b(device_id, nbytes);  // on the caller's own device: its worker is the caller
    std::lock_guard<std::mutex> lock(s.mu_);
    shared_ = std::move(b);
    allocated_ = true;
    cv_.notify_all();
    return shared_;
  }
  std::unique_lock<std::mutex> lock(s.mu_);
  s.wait(lock, group_, *this, [&] { return allocated_; }, "for the shared buffer");
  if (!error_.empty()) throw CollectiveError(ThreadsSession::prefix(group_) + error_);
  return shared_;
}

void Slot::barrier() {
  ThreadsSession& s = *session_;
  std::unique_lock<std::mutex> lock(s.mu_);
  if (++at_barrier_ == group_.size()) cv_.notify_all();
  s.wait(lock, group_, *this, [&] { return at_barrier_ == group_.size(); }, "at the barrier");
  if (!error_.empty()) throw CollectiveError(ThreadsSession::prefix(group_) + error_);
}

}  // namespace

std::string mismatch_text(const std::vector<Deposit>& d, const std::vector<int>& device_ids, const std::string& axes) {
  // The signature without the "[...]" shape part.
  auto unshaped = [](const std::string& sig) {
    const auto a = sig.find('['), b = sig.find(']');
    return a == std::string::npos || b == std::string::npos ? sig : sig.substr(0, a) + sig.substr(b + 1);
  };
  for (size_t r = 1; r < d.size(); ++r) {
    if (d[r].signature == d[0].signature) continue;
    const std::string who0 = device_label(device_ids[0]);
    const std::string whor = device_label(device_ids[r]);
    if (unshaped(d[r].signature) == unshaped(d[0].signature))
      return "needs the same shape on every device of axis " + axes + ": " + who0 + " has " + dtype_name(d[0].dtype) +
             shape_str(d[0].shape) + ", " + whor + " has " + dtype_name(d[r].dtype) + shape_str(d[r].shape);
    return "mismatched collectives on axis " + axes + ": " + who0 + " called " + d[0].signature + " but " + whor +
           " called " + d[r].signature;
  }
  return "";
}

std::shared_ptr<Session> make_threads_session(double timeout_s, bool poll) {
  return std::make_shared<ThreadsSession>(timeout_s, poll);
}

std::shared_ptr<Rendezvous> threads_meet(const GroupSpec& g, Deposit mine) {
  return static_cast<ThreadsSession*>(g.session)->meet(g, std::move(mine));
}

}  // namespace tessera::detail
