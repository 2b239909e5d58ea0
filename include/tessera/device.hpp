// Devices and runtime configuration.
//
// A CPU device is a virtual device: one persistent worker thread with its own
// in-order work queue and its own caching allocator. Their number per process
// comes from the environment variable TESSERA_NUM_CPU_DEVICES, or from
// config::set_num_cpu_devices() called before the runtime starts; the default
// is the number of hardware threads (shared out among the processes of one
// host when launched by mpirun).
//
// Several processes (mpirun -np N) form one set of devices: every process
// runs the same program, global device ids are ordered by process then by
// local id, and each process holds data only for its own (local, or
// addressable) devices. See tessera/distributed.hpp.
#pragma once

#include <compare>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

/// This process's index among the processes (0 without mpirun).
int process_index();

/// Where a shard lives and where per-device code runs.
class Device {
 public:
  Device() = default;
  /// The global device id (0..device_count()-1).
  int id() const { return id_; }
  /// Device kind: "cpu", or "cuda" for a GPU (or one of the
  /// TESSERA_DEVICES_PER_GPU devices of a GPU).
  std::string kind() const;
  /// Index of the process owning the device.
  int process_index() const;
  /// True when this process owns the device (holds its memory and runs its
  /// worker).
  bool is_local() const { return process_index() == tessera::process_index(); }
  /// "CpuDevice(id=3)", "CudaDevice(id=3)".
  std::string str() const;
  auto operator<=>(const Device&) const = default;

  /// Internal: the device with global id `id`.
  static Device from_id(int id) { Device d; d.id_ = id; return d; }

 private:
  int id_ = 0;
};

/// All devices of every process, ordered by id (by process, then by local
/// id). Starts the runtime on first use.
std::vector<Device> devices();
/// The devices of one platform ("cpu" or "cuda"), as JAX's
/// jax.devices(backend). A process runs on one platform: TESSERA_PLATFORM,
/// else the one named by the first devices(platform) before the runtime
/// starts, else the CPU. Asking for the other one afterwards raises
/// DeviceError saying how to choose. "cuda" without a usable GPU raises
/// DeviceError saying why (no driver, no device, a build without CUDA). Any
/// other name raises DeviceError listing the platforms.
std::vector<Device> devices(std::string_view platform);
/// Number of devices of every process.
int device_count();
/// This process's devices, ordered by id.
std::vector<Device> local_devices();
/// Number of this process's devices.
int local_device_count();
/// Number of processes (1 without mpirun).
int process_count();

namespace config {
/// Sets the number of virtual CPU devices. Must be called before the runtime
/// starts (the first call that needs devices); later calls with a different
/// number raise DeviceError.
void set_num_cpu_devices(int n);
/// The TESSERA_NUM_CPU_DEVICES setting as given (nullopt when unset): the
/// device count the runtime starts with unless set_num_cpu_devices says
/// otherwise. Read here only, so messages can say where a count came from.
std::optional<std::string> num_cpu_devices_setting();
/// The TESSERA_PLATFORM setting as given (nullopt when unset or empty), as
/// JAX_PLATFORMS: "cpu" (the default) or "cuda". The runtime checks it as
/// it starts and raises DeviceError for a platform it cannot run on.
std::optional<std::string> platform_setting();
/// Tessera devices per GPU, from TESSERA_DEVICES_PER_GPU (default 1): k > 1
/// splits each GPU into k devices, to test meshes on one GPU. DeviceError
/// when the setting is not a positive integer.
int devices_per_gpu();
/// Seconds a collective waits for the rest of its group before raising
/// CollectiveError (default: TESSERA_COLLECTIVE_TIMEOUT, else 60).
void set_collective_timeout(double seconds);
double collective_timeout();
}  // namespace config

}  // namespace tessera

template <>
struct std::hash<tessera::Device> {
  std::size_t operator()(const tessera::Device& d) const noexcept { return std::hash<int>()(d.id()); }
};
