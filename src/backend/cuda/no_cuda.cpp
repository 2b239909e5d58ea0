// A build without CUDA (TESSERA_WITH_CUDA off, or no nvcc found): the GPU
// port answers that there are no GPUs and why, so devices("cuda"),
// TESSERA_PLATFORM=cuda and `tessera devices` say so instead of failing to
// link.
#include "backend/cuda/stream.hpp"
#include "runtime/gpus.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

int cuda_device_count(std::string* why_none) {
  if (why_none) *why_none = "built without CUDA (configure with nvcc found, or -DTESSERA_WITH_CUDA=ON)";
  return 0;
}

std::vector<GpuInfo> cuda_gpus(bool) { return {}; }

std::string cuda_runtime_version() { return {}; }

// Emulated GPUs run the CUDA backend's kernels, which this build lacks.
int emulated_gpus() { return 0; }

// No GPU is ever opened in this build (cuda_device_count is 0), so these
// are unreachable; they say why if they are reached anyway.
namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(std::string("[") + op + "] this build has no CUDA backend");
}
}  // namespace

GpuHandle gpu_open(int, int) { no_cuda("devices"); }
void gpu_bind(const GpuHandle&) { no_cuda("devices"); }
void* gpu_allocate(const GpuHandle&, std::size_t) { no_cuda("allocate"); }
void gpu_deallocate(const GpuHandle&, void*) {}
std::size_t gpu_free_bytes(const GpuHandle&) { return 0; }
void gpu_copy(const GpuHandle&, void*, const void*, std::size_t, CopyKind, const char* op, bool) { no_cuda(op); }
void gpu_wait(const GpuHandle&, const char*) {}
void gpu_op_done(const GpuHandle&, const char*) {}
struct GpuGraph {};
void gpu_record_begin(const GpuHandle&) { no_cuda("jit"); }
std::shared_ptr<GpuGraph> gpu_record_end(const GpuHandle&, std::string* why) {
  if (why) *why = "this build has no CUDA backend";
  return nullptr;
}
void gpu_graph_launch(const GpuHandle&, const GpuGraph&, const char* op) { no_cuda(op); }
void* gpu_host_allocate(std::size_t, const char* op) { no_cuda(op); }
void gpu_host_free(void*, std::size_t) {}

}  // namespace tessera::detail

// The stream port's wait (backend/cuda/stream.hpp), which the CUDA evals
// (built everywhere) call: no GPU is ever opened in this build.
namespace tessera::cuda {
void synchronize(const char* op) { throw DeviceError(std::string("[") + op + "] this build has no CUDA backend"); }
}  // namespace tessera::cuda
