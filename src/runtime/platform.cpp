#include "runtime/platform.hpp"

#include <atomic>
#include <string>

#include "runtime/gpus.hpp"
#include "tessera/device.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace {
constexpr std::string_view kPlatforms = "'cpu' or 'cuda'";
// What devices(platform) asked for before the runtime started.
std::atomic<int> g_requested{-1};
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

Platform platform_named(std::string_view name, std::string_view origin) {
  if (name == "cpu") return Platform::Cpu;
  if (name == "cuda") return Platform::Cuda;
  throw DeviceError("[devices] " + std::string(origin) + ": expected a platform " + std::string(kPlatforms) +
                    ", got '" + std::string(name) + "'");
}

void require_platform(std::string_view platform, std::string_view origin) {
  if (platform_named(platform, origin) == Platform::Cpu) return;
  std::string why;
  if (cuda_device_count(&why) == 0) throw DeviceError("[devices] " + std::string(origin) + ": no CUDA GPU: " + why);
  (void)config::devices_per_gpu();  // a bad value is reported before anything starts
}

void request_platform(std::string_view platform, std::string_view origin) {
  require_platform(platform, origin);
  if (config::platform_setting()) return;  // the environment decides
  g_requested = static_cast<int>(platform_named(platform, origin));
}

Platform chosen_platform() {
  if (const auto p = config::platform_setting()) {
    const std::string origin = "TESSERA_PLATFORM=" + *p;
    require_platform(*p, origin);
    return platform_named(*p, origin);
  }
  const int r = g_requested.load();
  return r < 0 ? Platform::Cpu : static_cast<Platform>(r);
}

void require_cpu_platform(const std::string& op, const char* what) {
  if (!Runtime::started() || Runtime::get().platform() == Platform::Cpu) return;
  throw DeviceError("[" + op + "] " + what + " on CUDA devices: not implemented yet (docs/gpu.md lists what runs " +
                    "on GPUs)");
}

}  // namespace tessera::detail
