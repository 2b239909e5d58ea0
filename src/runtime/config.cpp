// Runtime configuration read by more than one layer: the collective timeout
// (communicators, SPMD programs), the device-count setting (the runtime
// starts with it; the command line says where a count came from), and the
// platform and devices-per-GPU settings.
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

#include "tessera/device.hpp"
#include "tessera/error.hpp"

namespace tessera {

namespace {
double timeout_from_env() {
  if (const char* env = std::getenv("TESSERA_COLLECTIVE_TIMEOUT")) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end != env && *end == '\0' && v > 0) return v;
    throw CollectiveError(std::string("[shard_map] TESSERA_COLLECTIVE_TIMEOUT must be a positive number of seconds, "
                                      "got '") + env + "'");
  }
  return 60.0;
}

// More devices on one GPU than this is a typo, not a test mesh.
constexpr long kMaxDevicesPerGpu = 1024;

double g_timeout = -1;  // < 0: not set yet
std::mutex g_timeout_mu;
}  // namespace

namespace config {
std::optional<std::string> num_cpu_devices_setting() {
  if (const char* env = std::getenv("TESSERA_NUM_CPU_DEVICES")) return std::string(env);
  return std::nullopt;
}

std::optional<std::string> platform_setting() {
  const char* env = std::getenv("TESSERA_PLATFORM");
  if (env == nullptr || *env == '\0') return std::nullopt;  // empty means unset, as JAX_PLATFORMS=''
  return std::string(env);
}

int devices_per_gpu() {
  const char* env = std::getenv("TESSERA_DEVICES_PER_GPU");
  if (env == nullptr) return 1;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || errno == ERANGE || v < 1 || v > kMaxDevicesPerGpu)
    throw DeviceError(std::string("[devices] TESSERA_DEVICES_PER_GPU: expected a positive integer (at most ") +
                      std::to_string(kMaxDevicesPerGpu) + "), got '" + env + "'");
  return static_cast<int>(v);
}

void set_collective_timeout(double seconds) {
  if (!(seconds > 0))
    throw CollectiveError("[set_collective_timeout] expected a positive number of seconds, got " +
                          std::to_string(seconds));
  std::lock_guard<std::mutex> lock(g_timeout_mu);
  g_timeout = seconds;
}
double collective_timeout() {
  std::lock_guard<std::mutex> lock(g_timeout_mu);
  if (g_timeout < 0) g_timeout = timeout_from_env();
  return g_timeout;
}
}  // namespace config

}  // namespace tessera

