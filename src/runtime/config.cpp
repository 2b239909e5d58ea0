// Runtime configuration read by more than one layer: the collective timeout
// (communicators, SPMD programs) and the device-count setting (the runtime
// starts with it; the command line says where a count came from).
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

double g_timeout = -1;  // < 0: not set yet
std::mutex g_timeout_mu;
}  // namespace

namespace config {
std::optional<std::string> num_cpu_devices_setting() {
  if (const char* env = std::getenv("TESSERA_NUM_CPU_DEVICES")) return std::string(env);
  return std::nullopt;
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
