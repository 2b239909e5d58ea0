// The processes of one program and what crosses between them. Built over
// MPI (comm/mpi/) when Tessera is built with it; otherwise (comm/no_mpi.cpp)
// there is one process and asking for more is an error. Only the runtime,
// the communicators and the host-side gathers call these: ops and traces go
// through a Communicator or a Group.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tessera::detail {

class Communicator;

/// Where each process's devices are among the global device ids.
struct ProcessLayout {
  int index = 0;  // this process
  /// Per process, the id of its first device; then the total device count.
  std::vector<int> first_device;
};

/// Joins the processes launched together (MPI under mpirun; one process
/// otherwise), this one bringing `local_devices` devices. Called once, by the
/// runtime as it starts. DeviceError when several processes were launched
/// and this build cannot join them, or when joining fails.
ProcessLayout start_processes(int local_devices);
/// Leaves the process group at exit (after the workers stopped).
void stop_processes();
/// How many processes of this program run on this host, from the launcher's
/// environment (1 without one): they share its cores.
int processes_on_this_host();
/// "mpi", or "none" in a build without MPI.
const char* process_backend();

/// The communicator of meshes whose devices span processes.
Communicator& cross_process_communicator();

/// Every process's `nbytes` bytes (sizes may differ), in process order. A
/// collective over all processes, run from the calling (main) thread; `op`
/// names the caller in errors (a process that fails to arrive within the
/// collective timeout is named).
std::vector<std::vector<unsigned char>> allgather_processes(const void* data, std::size_t nbytes, const char* op);

}  // namespace tessera::detail
