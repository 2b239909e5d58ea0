// A build without CUDA: no fused GPU kernels (no GPU is ever opened).
#include "backend/cuda/fused.hpp"

#include "tessera/error.hpp"

namespace tessera::cuda {

struct FusedKernel {};

std::shared_ptr<const FusedKernel> fused_kernel(const std::string&, const std::string&, std::string* why) {
  if (why) *why = "this build has no CUDA backend";
  return nullptr;
}

void launch_fused(const FusedKernel&, const std::uint64_t*, std::size_t, std::size_t, std::size_t, int, std::int64_t,
                  const char* op) {
  throw DeviceError(std::string("[") + op + "] this build has no CUDA backend");
}

void set_fused_max_registers(int) {}

FusedStats fused_stats() { return {}; }

}  // namespace tessera::cuda
