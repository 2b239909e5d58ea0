// Choosing a platform (TESSERA_PLATFORM, devices(platform)): which kinds of
// device the process runs on. Today only "cpu" runs; "cuda" is checked so
// that asking for GPUs says plainly why none are used, never silently
// running on the CPU instead.
#pragma once

#include <string>
#include <string_view>

namespace tessera::detail {

/// Returns when `platform` can run in this process; raises DeviceError
/// otherwise. `origin` names where the request came from in the message
/// ("TESSERA_PLATFORM=cuda", "devices(\"cuda\")").
void require_platform(std::string_view platform, std::string_view origin);

/// Checks TESSERA_PLATFORM (the runtime calls it as it starts, before
/// anything is started).
void check_platform_setting();

/// "1 GPU: 0 NVIDIA H100 80GB HBM3 (sm_90)" for messages.
std::string gpu_summary();

}  // namespace tessera::detail
