// Groups of GPU devices whose bytes move GPU to GPU through a transport
// (NCCL), while the members' agreement (signatures, shapes, failures,
// timeouts) goes over another group, the control group (comm/direct.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/group.hpp"

namespace tessera::detail {

/// One send or receive of a transport exchange: `nbytes` of `buffer` (a
/// buffer of the calling member's device) to or from member `peer`.
struct Transfer {
  int peer = 0;
  Buffer buffer;
  std::size_t nbytes = 0;
};

/// A member's connection to the other members of its group.
class DeviceLink {
 public:
  virtual ~DeviceLink() = default;
  /// Posts every send and receive at once and returns when all are done:
  /// received bytes are in place on this device, and sent buffers may be
  /// reused. Members post matching lists: for each receive at b from a of n
  /// bytes, a send from a to b of n bytes, in the same order per pair.
  /// Raises CollectiveError naming `op` when the transfers are not done
  /// after `timeout_s` seconds, and PeerFailed as soon as `aborted()` gives
  /// a reason (another member failed); the link is then broken, and the
  /// group's next link is made anew.
  virtual void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, const std::string& op,
                        double timeout_s, const std::function<std::string()>& aborted) = 0;
};

/// Moves device memory between the members of groups.
class DeviceTransport {
 public:
  /// A collective of the group's control path: every member gets member
  /// 0's bytes.
  using Share = std::function<std::vector<unsigned char>(const std::vector<unsigned char>&)>;
  virtual ~DeviceTransport() = default;
  /// "nccl", "emulated".
  virtual std::string name() const = 0;
  /// Member `rank`'s link among `device_ids` (member order). Every member
  /// of the group calls it with the same device ids; `share(bytes)` is a
  /// collective of the group's control path that returns member 0's bytes
  /// to every member (the transport's rendezvous: NCCL's unique id).
  virtual std::shared_ptr<DeviceLink> link(const std::vector<int>& device_ids, int rank, const Share& share) = 0;
};

/// How the collectives of a GPU mesh move bytes (TESSERA_GPU_COLLECTIVES):
enum class GpuCollectives {
  Host,      // "host" (the default): peer copies within a process, host memory and MPI across processes
  Nccl,      // "nccl": NCCL for every group, within a process too (NCCL 2.30 on one GPU:
             // NCCL_MULTI_RANK_GPU_ENABLE=1)
  Emulated,  // "emulated": a transport of this process's memory, for the tests of direct groups
};
/// Read once; an unknown value raises DeviceError naming the choices.
GpuCollectives gpu_collectives();

/// The transport `gpu_collectives()` asks for; nullptr for Host. Raises
/// DeviceError when it cannot be had (no libnccl, a build without CUDA).
DeviceTransport* gpu_transport();

/// NCCL's transport (backend/cuda/nccl.cpp), opened at its first use.
/// Raises DeviceError saying why it cannot be had.
DeviceTransport& nccl_transport();

/// The emulated transport's path to members in other processes: the
/// transfers whose peers are there, through host copies and MPI messages
/// (comm/mpi/direct_mpi.cpp; a build without MPI has no other processes).
/// Same contract as DeviceLink::exchange, `device_ids` and `rank` naming the
/// group's members and this one.
void exchange_across_processes(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                               const std::vector<int>& device_ids, int rank, const std::string& op, double timeout_s,
                               const std::function<std::string()>& aborted);

/// The op name the control group of a direct group is made with: members'
/// records then agree whatever collective each calls (their own calls are
/// compared from the records), and the direct group puts its own op name
/// back into the control group's messages.
inline constexpr const char* kControlOp = "direct-control";

/// A group over `control` (the same members, any backend, made with op
/// kControlOp) whose collectives
/// compare the members' calls over `control` and then move each member's
/// value through `transport` to the members that read it, each computing its
/// result on its own device in the fixed order (the threads backend's
/// functions over every member's value). `op` and `axes` name the group in
/// messages.
std::unique_ptr<Group> make_direct_group(std::unique_ptr<Group> control, DeviceTransport& transport,
                                         Session& session, std::vector<int> device_ids, int rank, std::string op,
                                         std::string axes, double timeout_s);

/// What the direct groups of this process have done (for tests).
struct DirectStats {
  std::int64_t collectives = 0;  // collectives that moved bytes through a transport
  std::int64_t transfers = 0;    // sends posted
  std::int64_t bytes = 0;        // bytes sent
};
DirectStats direct_stats();

}  // namespace tessera::detail
