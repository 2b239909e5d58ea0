// The process port: where this process's devices sit among the processes
// launched together. The runtime calls it as it starts and as it stops; the
// process group in comm/ (MPI, or one process without it) implements it,
// chosen at link time (docs/layers.md).
#pragma once

#include <vector>

namespace tessera::detail {

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

}  // namespace tessera::detail
