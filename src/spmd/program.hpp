// One SPMD program on a mesh: a task per device whose members may meet in
// collectives (shard_map bodies, compiled jit programs).
#pragma once

#include <functional>

#include "comm/communicator.hpp"

namespace tessera::detail {

/// Runs fn(pos, session) once per mesh position, each on its device's
/// worker, all members of one fresh session (collective timeout:
/// config::collective_timeout()).
///
/// - Programs run one at a time (a process-wide lock): two programs whose
///   tasks were queued in different orders on two workers would otherwise
///   wait on each other in their collectives. A program started from a
///   device's own worker (a jitted call inside a shard_map body) runs inline
///   without the lock; its mesh must then be that one device.
/// - A member that throws aborts the session, which wakes every member
///   waiting in a collective (they raise PeerFailed). The caller gets the
///   first error that is not such an echo.
void run_spmd(const Mesh& mesh, const std::function<void(int pos, Session& session)>& fn);

}  // namespace tessera::detail
