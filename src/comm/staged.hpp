// GPU meshes across processes (comm/staged.cpp): a communicator that runs
// another's host algorithms on page-locked host copies of GPU memory.
#pragma once

#include "comm/communicator.hpp"

namespace tessera::detail {

/// `inner` (the cross-process communicator, whose algorithms move and
/// combine host memory) for meshes of GPU devices: inputs are staged to
/// page-locked host memory, `inner` runs inside a HostStaging scope, and
/// results go back to their devices. Groups whose members are all in this
/// process are `inner`'s own. Made once, for the one `inner` there is.
Communicator& staged_on_host(Communicator& inner);

}  // namespace tessera::detail
