// A build without CUDA (TESSERA_WITH_CUDA off, or no nvcc found): the GPU
// port answers that there are no GPUs and why, so devices("cuda"),
// TESSERA_PLATFORM=cuda and `tessera devices` say so instead of failing to
// link.
#include "runtime/gpus.hpp"

namespace tessera::detail {

int cuda_device_count(std::string* why_none) {
  if (why_none) *why_none = "built without CUDA (configure with nvcc found, or -DTESSERA_WITH_CUDA=ON)";
  return 0;
}

std::vector<GpuInfo> cuda_gpus(bool) { return {}; }

std::string cuda_runtime_version() { return {}; }

}  // namespace tessera::detail
