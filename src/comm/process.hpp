// The processes of one program and what crosses between them. Built over
// MPI (comm/mpi/) when Tessera is built with it; otherwise (comm/no_mpi.cpp)
// there is one process and asking for more is an error. Only the runtime,
// the communicators and the host-side gathers call these: ops and traces go
// through a Communicator or a Group.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/processes.hpp"

namespace tessera::detail {

class Communicator;

/// The communicator of meshes whose devices span processes.
Communicator& cross_process_communicator();

/// Every process's `nbytes` bytes (sizes may differ), in process order. A
/// collective over all processes, run from the calling (main) thread; `op`
/// names the caller in errors (a process that fails to arrive within the
/// collective timeout is named).
std::vector<std::vector<unsigned char>> allgather_processes(const void* data, std::size_t nbytes, const char* op);

}  // namespace tessera::detail
