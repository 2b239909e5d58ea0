// The GPU port: which CUDA GPUs this process sees. The runtime asks when a
// platform is chosen (TESSERA_PLATFORM, devices("cuda")) and the command line
// lists them; backend/cuda answers, with the CUDA runtime
// (backend/cuda/discovery.cpp) or, in a build without CUDA, with
// backend/cuda/no_cuda.cpp. Which one is chosen at link time, as for the
// process port (docs/layers.md).
#pragma once

#include <cstddef>
#include <memory>
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
  void* record_stream = nullptr;  // cudaStream_t that gpu_record_begin captures
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

/// The wait at the end of an op's kernels (gpu_wait), skipped while the
/// calling thread records for g (gpu_record_begin): the recording's replay
/// is waited for as a whole.
void gpu_op_done(const GpuHandle& g, const char* op);

// ---- Recording a device's work for replay (jit's graph replay,
// transforms/jit.cpp). Between gpu_record_begin and gpu_record_end, the
// kernels and device-to-device copies that the calling thread (g's worker)
// queues for g are recorded, not run: on a GPU by capturing them into a
// CUDA graph (on g's recording stream, so other threads' copies on g's own
// stream are not captured), on an emulated GPU as host closures. Memory
// allocated meanwhile is allocated at once (not recorded). What needs the
// GPU's results on the host now (gpu_wait, copies from or to the host)
// raises DeviceError "[op] cannot be recorded into a CUDA graph: ...", and
// the recording is then to be ended and discarded.

/// A recording, instantiated: replayable any number of times. Freed (any
/// thread) with its last reference.
struct GpuGraph;

/// Starts recording on the calling thread, which must be g's worker.
/// Raises DeviceError if it cannot start.
void gpu_record_begin(const GpuHandle& g);
/// Ends the calling thread's recording (always call it after
/// gpu_record_begin, also when the recorded code threw): the graph, or
/// nullptr with *why set when the recording cannot be replayed.
std::shared_ptr<GpuGraph> gpu_record_end(const GpuHandle& g, std::string* why);
/// Queues a replay of `graph` on g's stream (does not wait). Raises
/// DeviceError naming `op` if the launch fails.
void gpu_graph_launch(const GpuHandle& g, const GpuGraph& graph, const char* op);

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
