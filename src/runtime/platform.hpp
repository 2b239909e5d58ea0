// Choosing a platform (TESSERA_PLATFORM, devices(platform)): which kind of
// device this process runs on, CPU threads or CUDA GPUs. One platform per
// process, fixed when the runtime starts; asking for GPUs where there are
// none says why, never silently running on the CPU instead.
#pragma once

#include <string>
#include <string_view>

#include "runtime/runtime.hpp"

namespace tessera::detail {

/// The platform `name` stands for; raises DeviceError for another name
/// (`origin` names where it came from in the message).
Platform platform_named(std::string_view name, std::string_view origin);

/// Returns when `platform` can run in this process; raises DeviceError
/// otherwise: no CUDA GPU (and why), or an unknown name. `origin` names
/// where the request came from in the message ("TESSERA_PLATFORM=cuda",
/// "devices(\"cuda\")").
void require_platform(std::string_view platform, std::string_view origin);

/// Before the runtime starts: run on `platform` (devices(platform) called
/// first). Checked now; TESSERA_PLATFORM, when set, wins.
void request_platform(std::string_view platform, std::string_view origin);

/// "1 GPU: 0 NVIDIA H100 80GB HBM3 (sm_90)" for messages.
std::string gpu_summary();

}  // namespace tessera::detail
