// Devices and runtime configuration.
//
// A CPU device is a virtual device: one persistent worker thread with its own
// in-order work queue and its own caching allocator. Their number comes from
// the environment variable TESSERA_NUM_CPU_DEVICES, or from
// config::set_num_cpu_devices() called before the runtime starts; the default
// is the number of hardware threads.
#pragma once

#include <compare>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace tessera {

/// Where a shard lives and where per-device code runs.
class Device {
 public:
  Device() = default;
  /// The global device id (0..device_count()-1).
  int id() const { return id_; }
  /// Device kind: "cpu".
  std::string kind() const { return "cpu"; }
  /// Index of the process owning the device (always 0 for now).
  int process_index() const { return 0; }
  /// "CpuDevice(id=3)".
  std::string str() const;
  auto operator<=>(const Device&) const = default;

  /// Internal: the device with global id `id`.
  static Device from_id(int id) { Device d; d.id_ = id; return d; }

 private:
  int id_ = 0;
};

/// All devices, ordered by id. Starts the runtime on first use.
std::vector<Device> devices();
/// Number of devices.
int device_count();
/// This process's index (0; multi-process meshes come later).
int process_index();

namespace config {
/// Sets the number of virtual CPU devices. Must be called before the runtime
/// starts (the first call that needs devices); later calls with a different
/// number raise DeviceError.
void set_num_cpu_devices(int n);
}  // namespace config

}  // namespace tessera

template <>
struct std::hash<tessera::Device> {
  std::size_t operator()(const tessera::Device& d) const noexcept { return std::hash<int>()(d.id()); }
};
