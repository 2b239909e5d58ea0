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

namespace tessera::detail {

// ---- Running on GPUs (backend/cuda/memory.cpp, or no_cuda.cpp). Each CUDA
// device of the runtime is one worker thread bound to one GPU, with its own
// stream and memory pool (TESSERA_DEVICES_PER_GPU puts several on one GPU).

/// Emulated GPUs (TESSERA_CUDA_EMULATE=n): n GPUs whose memory is host
/// memory and whose kernels run as host loops on the device's worker. They
/// run the CUDA backend's own code paths (allocator, copies, every eval_cuda
/// and its kernels' per-element code) on machines without a GPU, for tests;
/// 0 when unset. Raises DeviceError for a value that is not a count.
int emulated_gpus();

/// One device's GPU: its ordinal, stream and memory pool.
struct GpuHandle {
  int ordinal = -1;
  void* stream = nullptr;  // cudaStream_t
  void* pool = nullptr;    // cudaMemPool_t
  bool emulated = false;
  int device_id = -1;
  std::size_t total_bytes = 0;  // the GPU's memory (an emulated GPU: the host's)
};

/// Opens GPU `ordinal` for Tessera device `device_id`: a stream and a memory
/// pool of its own. Raises DeviceError saying what failed.
GpuHandle gpu_open(int ordinal, int device_id);
/// Binds the calling thread to the device (its worker, once): kernels and
/// copies from this thread go onto its stream.
void gpu_bind(const GpuHandle& g);
/// `nbytes` of the device's memory, ordered on its stream; nullptr when the
/// GPU has no memory left (never throws for that).
void* gpu_allocate(const GpuHandle& g, std::size_t nbytes);
/// Returns a block to the device's pool (any thread).
void gpu_deallocate(const GpuHandle& g, void* p);
/// The GPU's free memory in bytes (what cudaMemGetInfo says).
std::size_t gpu_free_bytes(const GpuHandle& g);

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
/// Copies `nbytes` on `g`'s stream (from any thread) and, with `wait`,
/// waits for it. Host memory may be pageable; DeviceToDevice may cross GPUs
/// (a peer copy). Raises DeviceError naming `op`.
void gpu_copy(const GpuHandle& g, void* dst, const void* src, std::size_t nbytes, CopyKind kind, const char* op,
              bool wait = true);
/// Waits for everything queued on `g`'s stream; raises DeviceError naming
/// `op` if some of it failed.
void gpu_wait(const GpuHandle& g, const char* op);

/// `nbytes` of page-locked host memory (cudaMallocHost, kept in a cache of
/// freed blocks), for staging copies between host and GPUs: the GPU's copy
/// engines read and write it directly, at full bus speed. Plain host memory
/// on emulated GPUs. Raises DeviceError naming `op` when none is left.
void* gpu_host_allocate(std::size_t nbytes, const char* op);
/// Returns a block from gpu_host_allocate (any thread).
void gpu_host_free(void* p, std::size_t nbytes);

}  // namespace tessera::detail

namespace tessera::detail {
/// Raises DeviceError "[op] <what> on CUDA devices: not implemented yet"
/// when this process runs on GPUs: the parts of the library that have no
/// CUDA path say so, instead of running on the host or failing elsewhere.
void require_cpu_platform(const std::string& op, const char* what);
}  // namespace tessera::detail
