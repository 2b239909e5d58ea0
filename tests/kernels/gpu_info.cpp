// The GPUs as the GPU port (src/runtime/gpus.hpp) sees them, built from
// backend/cuda/discovery.cpp alone: scripts/gpu-check.sh compiles it on GPU
// machines that cannot build the whole library (no BLAS or test packages),
// where `tessera devices` is out of reach. Prints "GPUs: N" and one line per
// GPU, or "GPUs: none: <why>"; exits 0 either way.
#include <cstdio>
#include <string>

#include "runtime/gpus.hpp"

int main() {
  namespace td = tessera::detail;
  std::string why;
  const int n = td::cuda_device_count(&why);
  if (n == 0) {
    std::printf("GPUs: none: %s\n", why.c_str());
    return 0;
  }
  std::printf("GPUs: %d (CUDA runtime %s)\n", n, td::cuda_runtime_version().c_str());
  for (const td::GpuInfo& g : td::cuda_gpus(/*free_memory=*/true)) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("  GPU %d  %s  sm_%d%d  %.1f GiB total", g.index, g.name.c_str(), g.cc_major, g.cc_minor,
                static_cast<double>(g.total_bytes) / gib);
    if (g.free_known) std::printf(", %.1f GiB free", static_cast<double>(g.free_bytes) / gib);
    std::printf("  pci %s\n", g.pci_bus_id.c_str());
  }
  return 0;
}
