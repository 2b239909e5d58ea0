// Point-to-point messages between processes over MPI, for the mpi backend
// only (comm/mpi/): frames with a header naming the collective, waits that
// end in a CollectiveError instead of hanging, and notices that tell the
// other processes when one fails.
//
// Every process runs the same program, so the k-th frame a process sends to
// another on a tag is received as the k-th frame it expects from that
// process on that tag (MPI keeps messages between two processes on one tag
// in order). One tag serves the calling thread's whole-mesh collectives;
// each group of a shard_map or jit program has its own tag (its members'
// messages come from one thread per process, the group's leader), and one
// tag carries failure notices.
//
// A wait polls its requests and the notices. It ends with
//   - CollectiveError naming the processes it still waits for, after the
//     collective timeout;
//   - CollectiveError naming a process that announced its failure or exit
//     (it will never send) and that this wait still needs;
//   - PeerFailed when another process's member of the same program failed
//     (Session::abort there), after marking the local session aborted so the
//     local members waiting for this one wake up too.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace tessera::detail::mpi {

constexpr int kTagNotice = 1;
constexpr int kTagMain = 2;
constexpr int kTagGroupBase = 16;

/// The communicator all of Tessera's messages use (a duplicate of
/// MPI_COMM_WORLD, so a program's own MPI traffic never matches ours).
MPI_Comm comm();
/// A second duplicate, for the emulated direct transport's messages
/// (comm/mpi/direct_mpi.cpp), whose tags are its own.
MPI_Comm direct_comm();
int rank();
int size();

/// What a frame says about the collective it belongs to. Calls are compared
/// by a hash of the whole signature; the text travels only as far as
/// messages need it (a mismatch names both calls), so that a small frame
/// stays small.
struct Header {
  std::uint64_t magic = 0;
  std::int64_t nbytes = 0;      // payload bytes
  std::uint64_t sig_hash = 0;   // of the whole signature
  std::int32_t process = 0;     // sender
  std::int32_t device = -1;     // the sender's first member's device (messages)
  std::int32_t dtype = 0;
  std::int32_t ndim = 0;
  std::int32_t sig_len = 0;     // of the whole signature
  std::int32_t unused = 0;
  std::int64_t shape[8] = {};
  char sig[152] = {};           // the signature's beginning

  void set(const std::string& signature, const Shape& s, DType t, int dev);
  /// The sender's signature ("..." where it was cut).
  std::string signature() const;
  /// Whether the sender made the call whose signature is `s`.
  bool same_call(const std::string& s) const;
  /// Whether two headers name the same call.
  bool same_call(const Header& o) const { return sig_hash == o.sig_hash && sig_len == o.sig_len; }
  Shape shape_vec() const { return Shape(shape, shape + ndim); }
};

/// What a wait is for, for its messages, and how long it may take.
struct WaitFor {
  std::string op;          // names the collective in "[op] "
  std::string what;        // "in psum on axis 'x'"
  double timeout_s = 60;
  long session = -1;       // a program whose remote failure ends the wait
  Session* local = nullptr;  // this process's session of that program (woken on remote failure)
};

/// A batch of frames posted at once and waited for together. Buffers given
/// to it stay alive until the batch completes (or, after an error, until
/// the process ends: MPI may still touch them).
class Batch {
 public:
  explicit Batch(int tag) : tag_(tag) {}
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  /// Sends `h` and `h.nbytes` bytes of `data` (kept alive by `keep`).
  void send(int dest, const Header& h, const void* data, std::shared_ptr<const void> keep = nullptr);
  /// Expects a frame of `nbytes` payload bytes from `src`, received into
  /// `dst` (kept alive by `keep`). Returns its index for header().
  int recv(int src, std::int64_t nbytes, void* dst, std::shared_ptr<void> keep = nullptr);
  /// Sends a frame whose receiver does not know its size (recv_any).
  void send_any(int dest, const Header& h, const void* data);
  /// Expects a frame of any size from `src`; payload() holds it.
  int recv_any(int src);
  /// Completes every send and receive, or raises (see the file comment).
  void wait(const WaitFor& w);
  const Header& header(int i) const { return recvs_[i].header; }
  std::vector<unsigned char>& payload(int i) { return recvs_[i].owned; }
  int num_recvs() const { return static_cast<int>(recvs_.size()); }
  int source(int i) const { return recvs_[i].src; }

 private:
  struct Recv {
    int index = 0;
    int src = 0;
    std::int64_t nbytes = -1;  // -1: any size
    void* dst = nullptr;
    std::shared_ptr<void> keep;
    bool inline_ = true;
    Header header;
    std::vector<unsigned char> owned;  // inline frame or any-size payload
    bool probed = false;               // any size: matched and posted
    int outstanding = 0;               // its requests not yet complete
    bool done = false;
  };
  void track(MPI_Request req, int peer, int recv);
  std::vector<int> pending() const;
  void post_any(Recv& r, MPI_Message msg, int count);
  void finish_recv(Recv& r);
  int tag_;
  std::deque<Recv> recvs_;  // stable addresses: MPI writes into them
  std::vector<MPI_Request> reqs_;
  std::vector<int> req_peer_;   // the process each request waits on
  std::vector<int> req_recv_;   // the Recv it completes (-1: a send)
  std::vector<std::shared_ptr<const void>> keep_;
  std::vector<std::vector<unsigned char>> send_bufs_;
  bool waited_ = false;
};

/// A program (shard_map call, jit run) whose collectives cross processes:
/// numbered alike on every process, since every process opens them in the
/// same order.
long next_session();
/// The tag of group `group` (an index among the groups of a mesh) in
/// program `session`: programs differ in tags, so frames a failed program
/// left unreceived never match a later program's.
int group_tag(long session, int group);
/// Reads the notices that have arrived; when another process announced
/// that its member of `session` failed, returns true with that member's
/// device and "<what> (process p)". For waits outside this transport's (a
/// direct group's transfers).
bool remote_session_failure(long session, int& device, std::string& what);
/// Tells every other process that `session`'s member on `device` failed.
void announce_session_failure(long session, int device, const std::string& what);

}  // namespace tessera::detail::mpi
