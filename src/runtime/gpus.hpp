// The GPU port: which CUDA GPUs this process sees. The runtime asks when a
// platform is chosen (TESSERA_PLATFORM, devices("cuda")) and the command line
// lists them; backend/cuda answers, with the CUDA runtime
// (backend/cuda/discovery.cpp) or, in a build without CUDA, with
// backend/cuda/no_cuda.cpp. Which one is chosen at link time, as for the
// process port (docs/layers.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tessera::detail {

/// One GPU as the CUDA runtime describes it.
struct GpuInfo {
  int index = 0;  // CUDA's device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;
  std::size_t total_bytes = 0;
  /// Free memory; known only when asked for (reading it starts a context).
  std::size_t free_bytes = 0;
  bool free_known = false;
  int cc_major = 0, cc_minor = 0;  // compute capability: 9.0 for H100
  std::string pci_bus_id;          // "0000:41:00.0"
};

/// The number of CUDA GPUs this process sees. Zero when there are none, with
/// *why_none (when given) saying why: "built without CUDA", no driver, no
/// device, or the CUDA runtime's error by name and number. Never throws and
/// never aborts: a machine without a driver is an answer, not a failure.
int cuda_device_count(std::string* why_none = nullptr);

/// The GPUs, in CUDA's order; empty where cuda_device_count is 0. With
/// `free_memory`, each GPU's free memory too: that creates a context on
/// every GPU (a fraction of a second and some memory each), so only the
/// command line asks for it.
std::vector<GpuInfo> cuda_gpus(bool free_memory = false);

/// "13.0": the CUDA runtime this build links; empty in a build without CUDA.
std::string cuda_runtime_version();

}  // namespace tessera::detail
