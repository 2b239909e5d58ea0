// The GPU port with the CUDA runtime (linked statically): counting the GPUs
// and describing them. The runtime opens the driver (libcuda) on its first
// call; without one it returns an error code, which becomes the reason there
// are no GPUs. Nothing here throws: the callers decide whether no GPU is an
// error.
#include <cuda_runtime_api.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

#include "runtime/gpus.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace {

// The reasons users meet, in words; any other error by the runtime's name.
std::string describe(cudaError_t e) {
  const std::string code = std::string(" (") + cudaGetErrorName(e) + ", " + std::to_string(static_cast<int>(e)) + ")";
  switch (e) {
    case cudaErrorInsufficientDriver:
      return "no CUDA driver, or one older than CUDA runtime " + cuda_runtime_version() + code;
    case cudaErrorNoDevice:
      return "no CUDA device" + code;
    default:
      return std::string("the CUDA runtime failed: ") + cudaGetErrorString(e) + code;
  }
}

struct Count {
  int n = 0;
  std::string why_none;
};

// Asked once per process: the answer does not change while it runs, and
// every later caller (each platform check) gets it without a runtime call.
const Count& count_once() {
  static std::once_flag once;
  static Count c;
  std::call_once(once, [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      c.why_none = describe(e);
      // A failed call leaves its error as the runtime's last error; clear it
      // so that later CUDA calls do not report it as theirs.
      (void)cudaGetLastError();
      return;
    }
    c.n = n;
    if (n == 0) c.why_none = "no CUDA device (the driver sees none; check CUDA_VISIBLE_DEVICES)";
  });
  return c;
}

}  // namespace

int emulated_gpus() {
  const char* env = std::getenv("TESSERA_CUDA_EMULATE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || errno == ERANGE || v < 0 || v > 64)
    throw DeviceError(std::string("[devices] TESSERA_CUDA_EMULATE: expected a number of emulated GPUs (0 to 64), got '") +
                      env + "'");
  return static_cast<int>(v);
}

std::string cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) v = CUDART_VERSION;
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

int cuda_device_count(std::string* why_none) {
  if (const int n = emulated_gpus(); n > 0) {
    if (why_none) why_none->clear();
    return n;
  }
  const Count& c = count_once();
  if (why_none) *why_none = c.why_none;
  return c.n;
}

std::vector<GpuInfo> cuda_gpus(bool free_memory) {
  std::vector<GpuInfo> out;
  if (const int n = emulated_gpus(); n > 0) {
    // What the emulation has: host memory, shared by the emulated GPUs.
    for (int i = 0; i < n; ++i) {
      GpuInfo g;
      g.index = i;
      g.name = "Emulated GPU (host memory, TESSERA_CUDA_EMULATE)";
      g.cc_major = 9;
      g.pci_bus_id = "emulated";
      out.push_back(std::move(g));
    }
    return out;
  }
  const int n = cuda_device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.total_bytes = p.totalGlobalMem;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) g.pci_bus_id = bus;
    if (free_memory) {
      int prev = 0;
      std::size_t free = 0, total = 0;
      if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(i) == cudaSuccess &&
          cudaMemGetInfo(&free, &total) == cudaSuccess) {
        g.free_bytes = free;
        g.free_known = true;
      }
      (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace tessera::detail
