// The GPU port's running half (runtime/gpus.hpp) with the CUDA runtime:
// each device's stream and memory pool, its allocations and its copies; and
// the same for emulated GPUs (host memory, memcpy).
//
// Memory: one cudaMemPool_t per Tessera device (not the GPU's default pool),
// so TESSERA_DEVICES_PER_GPU devices on one GPU keep separate accounts as
// separate GPUs would. Blocks come from cudaMallocAsync on the device's
// stream; the runtime's allocator (runtime/runtime.cpp) keeps freed blocks
// in its size-keyed cache and returns them to the pool only when it must.
// No managed memory.
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/stream.hpp"
#include "runtime/gpus.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace {

void check(cudaError_t e, const GpuHandle& g, const char* op, const std::string& what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw DeviceError(std::string("[") + op + "] " + what + " on CUDA device " + std::to_string(g.device_id) + " (GPU " +
                    std::to_string(g.ordinal) + ") failed: " + cudaGetErrorName(e) + " (" +
                    std::to_string(static_cast<int>(e)) + "): " + cudaGetErrorString(e));
}

// Makes `ordinal` the calling thread's current GPU for a scope, then gives
// the thread back the one it had: these calls come from any thread, and a
// device's worker must keep its own GPU current (its kernels launch there).
class OnGpu {
 public:
  OnGpu(const GpuHandle& g, const char* op) {
    check(cudaGetDevice(&prev_), g, op, "reading the current GPU");
    if (prev_ != g.ordinal) check(cudaSetDevice(g.ordinal), g, op, "selecting the GPU");
    ordinal_ = g.ordinal;
  }
  ~OnGpu() {
    if (prev_ != ordinal_) (void)cudaSetDevice(prev_);
  }
  OnGpu(const OnGpu&) = delete;
  OnGpu& operator=(const OnGpu&) = delete;

 private:
  int prev_ = 0, ordinal_ = 0;
};

}  // namespace

GpuHandle gpu_open(int ordinal, int device_id) {
  GpuHandle g;
  g.ordinal = ordinal;
  g.device_id = device_id;
  if (emulated_gpus() > 0) {
    g.emulated = true;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    g.total_bytes = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : SIZE_MAX;
    return g;
  }
  OnGpu on(g, "devices");
  std::size_t free = 0;
  check(cudaMemGetInfo(&free, &g.total_bytes), g, "devices", "reading the GPU's memory size");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), g, "devices", "creating a stream");
  g.stream = s;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  cudaMemPool_t pool = nullptr;
  check(cudaMemPoolCreate(&pool, &props), g, "devices", "creating a memory pool");
  // Keep what the pool has (the runtime's allocator caches on top of it):
  // without a threshold the pool hands memory back at every synchronize.
  std::uint64_t keep = ~std::uint64_t(0);
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), g, "devices",
        "configuring the memory pool");
  g.pool = pool;
  return g;
}

void gpu_bind(const GpuHandle& g) {
  if (!g.emulated) check(cudaSetDevice(g.ordinal), g, "devices", "selecting the GPU");
  cuda::bind_current({g.ordinal, g.stream, g.emulated, g.device_id});
}

void* gpu_allocate(const GpuHandle& g, std::size_t nbytes) {
  if (g.emulated) return std::aligned_alloc(256, (nbytes + 255) / 256 * 256);
  OnGpu on(g, "allocate");
  void* p = nullptr;
  const cudaError_t e =
      cudaMallocFromPoolAsync(&p, nbytes, static_cast<cudaMemPool_t>(g.pool), static_cast<cudaStream_t>(g.stream));
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  check(e, g, "allocate", "allocating " + std::to_string(nbytes) + " bytes");
  // The block is ordered on this device's stream, but collectives hand
  // buffers to other devices' streams: wait, so it is usable everywhere.
  // (Rare: the allocator above keeps freed blocks and reuses them.)
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(g.stream)), g, "allocate", "allocating");
  return p;
}

void gpu_deallocate(const GpuHandle& g, void* p) {
  if (p == nullptr) return;
  if (g.emulated) {
    std::free(p);
    return;
  }
  // Called from any thread (a cache being released); the stream orders it
  // after the device's work. Errors here have nowhere to go: a failed free
  // leaks the block into the pool, which is destroyed with the process.
  int prev = 0;
  if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(g.ordinal) == cudaSuccess) {
    (void)cudaFreeAsync(p, static_cast<cudaStream_t>(g.stream));
    (void)cudaSetDevice(prev);
  }
  (void)cudaGetLastError();
}

std::size_t gpu_free_bytes(const GpuHandle& g) {
  if (g.emulated) return 0;
  std::size_t free = 0, total = 0;
  int prev = 0;
  const bool ok = cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(g.ordinal) == cudaSuccess &&
                  cudaMemGetInfo(&free, &total) == cudaSuccess;
  (void)cudaSetDevice(prev);
  if (!ok) {
    (void)cudaGetLastError();
    return 0;
  }
  return free;
}

void gpu_wait(const GpuHandle& g, const char* op) {
  if (g.emulated) return;
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(g.stream)), g, op, "waiting for the stream");
}

void gpu_copy(const GpuHandle& g, void* dst, const void* src, std::size_t nbytes, CopyKind kind, const char* op,
              bool wait) {
  if (nbytes == 0) return;
  if (g.emulated) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  OnGpu on(g, op);
  const cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDefault;  // peer copies too (UVA)
  const auto s = static_cast<cudaStream_t>(g.stream);
  check(cudaMemcpyAsync(dst, src, nbytes, k, s), g, op, "a copy of " + std::to_string(nbytes) + " bytes");
  if (wait) check(cudaStreamSynchronize(s), g, op, "a copy of " + std::to_string(nbytes) + " bytes");
}

}  // namespace tessera::detail
