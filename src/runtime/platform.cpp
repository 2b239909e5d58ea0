#include "runtime/platform.hpp"

#include <string>

#include "runtime/gpus.hpp"
#include "tessera/device.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace {
constexpr std::string_view kPlatforms = "'cpu' or 'cuda'";
}  // namespace

std::string gpu_summary() {
  const auto gpus = cuda_gpus();
  std::string s = std::to_string(gpus.size()) + (gpus.size() == 1 ? " GPU" : " GPUs");
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const GpuInfo& g = gpus[i];
    s += (i == 0 ? ": " : ", ") + std::to_string(g.index) + " " + g.name + " (sm_" + std::to_string(g.cc_major) +
         std::to_string(g.cc_minor) + ")";
  }
  return s;
}

void require_platform(std::string_view platform, std::string_view origin) {
  if (platform == "cpu") return;
  if (platform == "cuda") {
    std::string why;
    if (cuda_device_count(&why) == 0)
      throw DeviceError("[devices] " + std::string(origin) + ": no CUDA GPU: " + why);
    // Read now, so a bad value is reported even before GPUs can run.
    const int per_gpu = config::devices_per_gpu();
    std::string found = gpu_summary();
    if (per_gpu > 1) found += "; " + std::to_string(per_gpu) + " devices each (TESSERA_DEVICES_PER_GPU)";
    throw DeviceError("[devices] " + std::string(origin) +
                      ": the CUDA execution backend is not available yet in this build (found " + found +
                      "); run on the CPU devices (TESSERA_PLATFORM=cpu, the default)");
  }
  throw DeviceError("[devices] " + std::string(origin) + ": expected a platform " + std::string(kPlatforms) +
                    ", got '" + std::string(platform) + "'");
}

void check_platform_setting() {
  if (const auto p = config::platform_setting()) require_platform(*p, "TESSERA_PLATFORM=" + *p);
}

}  // namespace tessera::detail
