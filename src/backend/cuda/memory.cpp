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
//
// Transfers: host memory given to gpu_copy is usually pageable (a vector's).
// A copy of at least pinned::kStageThreshold bytes from or to pageable
// memory goes through two page-locked bounce buffers of the device, chunk
// by chunk (pinned::staged_copy), so the copy engine runs at bus speed and
// the host's memcpy of one chunk overlaps the DMA of the one before. Smaller
// copies, and host memory already page-locked (cudaHostAlloc'd or
// registered), go straight to cudaMemcpyAsync. Page-locked blocks come from
// the cache behind gpu_host_allocate (pinned.hpp).
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/pinned.hpp"
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
  cudaStream_t rs = nullptr;
  check(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking), g, "devices", "creating a recording stream");
  g.record_stream = rs;
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
  // (Rare: the allocator above keeps freed blocks and reuses them.) While
  // the device's worker records, its kernels go to the recording stream:
  // this stream is not being captured, so it may still be waited for.
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
  cuda::refuse_while_recording(op, "waiting for the GPU");
  if (g.emulated) return;
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(g.stream)), g, op, "waiting for the stream");
}

namespace {

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + std::to_string(static_cast<int>(e)) + "): " + cudaGetErrorString(e);
}

// True when the CUDA runtime knows `p`: page-locked (cudaHostAlloc'd or
// registered), device or managed memory. Pageable memory is
// cudaMemoryTypeUnregistered.
bool known_to_cuda(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type != cudaMemoryTypeUnregistered;
}

// One device's bounce buffers and, on a GPU, the events that mark each
// buffer's last DMA. Locked for a whole staged copy: gpu_copy comes from
// any thread, and a copy's chunks must not interleave with another's.
struct Stager {
  std::mutex mu;
  unsigned char* bounce[2] = {nullptr, nullptr};
  std::size_t chunk = 0;
  cudaEvent_t done[2] = {nullptr, nullptr};
};

// The device's Stager, made at its first staged copy. Keyed by the stream
// too: a runtime started again may open the same device id on another
// stream. Never destroyed (copies may run during exit); the buffers stay
// with the device for the process's life.
Stager& stager_for(const GpuHandle& g) {
  static std::mutex mu;
  static auto* stagers = new std::map<std::tuple<int, int, void*>, std::unique_ptr<Stager>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& s = (*stagers)[{g.device_id, g.ordinal, g.stream}];
  if (!s) s = std::make_unique<Stager>();
  return *s;
}

// Gives `st` bounce buffers of `chunk` bytes (the first time, or after a
// test changed the sizes) and, on a GPU, its events. Under st.mu, with the
// GPU current. False when there is no page-locked memory for them: the
// copy then goes straight through.
bool ready(Stager& st, const GpuHandle& g, std::size_t chunk, const char* op) {
  if (!g.emulated && st.done[0] == nullptr) {
    cudaEvent_t e[2] = {nullptr, nullptr};
    for (cudaEvent_t& x : e) {
      const cudaError_t err = cudaEventCreateWithFlags(&x, cudaEventDisableTiming);
      if (err != cudaSuccess) {
        if (e[0] != nullptr) (void)cudaEventDestroy(e[0]);
        check(err, g, op, "creating an event");
      }
    }
    st.done[0] = e[0];
    st.done[1] = e[1];
  }
  if (st.chunk == chunk) return true;
  for (int b = 0; b < 2; ++b) {
    if (st.bounce[b] == nullptr) continue;
    if (!g.emulated) check(cudaEventSynchronize(st.done[b]), g, op, "waiting for a staged copy");
    pinned::host_cache().free(st.bounce[b], st.chunk);
    st.bounce[b] = nullptr;
  }
  st.chunk = 0;
  try {
    st.bounce[0] = static_cast<unsigned char*>(pinned::host_cache().allocate(chunk, op));
    st.bounce[1] = static_cast<unsigned char*>(pinned::host_cache().allocate(chunk, op));
  } catch (const DeviceError&) {
    if (st.bounce[0] != nullptr) pinned::host_cache().free(st.bounce[0], chunk);
    st.bounce[0] = nullptr;
    return false;
  }
  st.chunk = chunk;
  return true;
}

// A copy between pageable host memory and the device through the device's
// bounce buffers. HostToDevice returns with the last chunks' DMAs possibly
// queued (with `wait`, after waiting for them): the caller's memory is free
// at once either way. DeviceToHost returns with every byte in `host`,
// whatever `wait` says: the last memcpy out of a bounce buffer needs its
// DMA done. False when there are no bounce buffers (nothing was copied).
bool staged(const GpuHandle& g, void* dst, const void* src, std::size_t nbytes, CopyKind kind, const char* op,
            bool wait, std::size_t chunk) {
  Stager& st = stager_for(g);
  std::lock_guard<std::mutex> lock(st.mu);
  if (!ready(st, g, chunk, op)) return false;
  const bool to_device = kind == CopyKind::HostToDevice;
  auto* dev = static_cast<unsigned char*>(to_device ? dst : const_cast<void*>(src));
  auto* host = static_cast<unsigned char*>(to_device ? const_cast<void*>(src) : dst);
  pinned::Stage s;
  s.bounce[0] = st.bounce[0];
  s.bounce[1] = st.bounce[1];
  s.chunk = chunk;
  if (g.emulated) {
    s.dma = [&](int b, std::size_t off, std::size_t n) {
      if (to_device) {
        std::memcpy(dev + off, st.bounce[b], n);
      } else {
        std::memcpy(st.bounce[b], dev + off, n);
      }
    };
    s.wait = [](int) {};
  } else {
    const auto stream = static_cast<cudaStream_t>(g.stream);
    const std::string what = "a staged copy of " + std::to_string(nbytes) + " bytes";
    s.dma = [&](int b, std::size_t off, std::size_t n) {
      check(to_device ? cudaMemcpyAsync(dev + off, st.bounce[b], n, cudaMemcpyHostToDevice, stream)
                      : cudaMemcpyAsync(st.bounce[b], dev + off, n, cudaMemcpyDeviceToHost, stream),
            g, op, what);
      check(cudaEventRecord(st.done[b], stream), g, op, what);
    };
    s.wait = [&](int b) { check(cudaEventSynchronize(st.done[b]), g, op, what); };
  }
  pinned::staged_copy(s, to_device ? pinned::Direction::ToDevice : pinned::Direction::ToHost, host, nbytes);
  if (to_device && wait && !g.emulated)
    check(cudaStreamSynchronize(static_cast<cudaStream_t>(g.stream)), g, op,
          "a staged copy of " + std::to_string(nbytes) + " bytes");
  return true;
}

}  // namespace

void gpu_copy(const GpuHandle& g, void* dst, const void* src, std::size_t nbytes, CopyKind kind, const char* op,
              bool wait) {
  if (nbytes == 0) return;
  if (const int rec = cuda::recording_device(); rec >= 0) {
    // Recording: a copy within the recorded device is recorded (onto the
    // recording stream, current on this thread); host memory may be gone
    // by the replay, and another device is not being recorded.
    if (kind != CopyKind::DeviceToDevice) cuda::refuse_while_recording(op, "a copy between host and GPU");
    if (rec != g.device_id) cuda::refuse_while_recording(op, "a copy on another device");
    if (g.emulated) {
      cuda::run_emulated([=] { std::memcpy(dst, src, nbytes); });
      return;
    }
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, static_cast<cudaStream_t>(cuda::current(op).stream)),
          g, op, "recording a copy of " + std::to_string(nbytes) + " bytes");
    return;
  }
  const pinned::StageSizes sizes = pinned::stage_sizes();
  const bool stageable = kind != CopyKind::DeviceToDevice && nbytes >= sizes.threshold;
  if (g.emulated) {
    // The staged loop runs on emulated GPUs too (memcpy for the DMAs), so
    // its chunking is what the tests here exercise.
    if (stageable && staged(g, dst, src, nbytes, kind, op, wait, sizes.chunk)) return;
    std::memcpy(dst, src, nbytes);
    return;
  }
  OnGpu on(g, op);
  if (stageable && !known_to_cuda(kind == CopyKind::HostToDevice ? src : dst) &&
      staged(g, dst, src, nbytes, kind, op, wait, sizes.chunk))
    return;
  const cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDefault;  // peer copies too (UVA)
  const auto s = static_cast<cudaStream_t>(g.stream);
  check(cudaMemcpyAsync(dst, src, nbytes, k, s), g, op, "a copy of " + std::to_string(nbytes) + " bytes");
  if (wait) check(cudaStreamSynchronize(s), g, op, "a copy of " + std::to_string(nbytes) + " bytes");
}

void gpu_op_done(const GpuHandle& g, const char* op) {
  if (cuda::recording_device() == g.device_id) return;
  gpu_wait(g, op);
}

// A recording: the instantiated CUDA graph (none when nothing was
// recorded), or an emulated GPU's closures.
struct GpuGraph {
  cudaGraphExec_t exec = nullptr;
  int ordinal = -1;
  std::vector<std::function<void()>> emulated;

  GpuGraph() = default;
  GpuGraph(const GpuGraph&) = delete;
  GpuGraph& operator=(const GpuGraph&) = delete;
  ~GpuGraph() {
    if (exec == nullptr) return;
    int prev = 0;
    if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(ordinal) == cudaSuccess) {
      (void)cudaGraphExecDestroy(exec);
      (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
  }
};

void gpu_record_begin(const GpuHandle& g) {
  if (cuda::recording_device() >= 0)
    throw DeviceError("[jit] internal: a recording is already open on this thread");
  if (g.emulated) {
    cuda::record_begin(g.device_id, nullptr);
    return;
  }
  const auto rs = static_cast<cudaStream_t>(g.record_stream);
  // Relaxed: allocating memory (cudaMallocFromPoolAsync on the device's own
  // stream, and waiting for that stream) stays allowed while this stream
  // is captured.
  check(cudaStreamBeginCapture(rs, cudaStreamCaptureModeRelaxed), g, "jit", "starting a CUDA graph capture");
  cuda::record_begin(g.device_id, rs);
}

std::shared_ptr<GpuGraph> gpu_record_end(const GpuHandle& g, std::string* why) {
  std::vector<std::function<void()>> work = cuda::record_end();
  auto graph = std::make_shared<GpuGraph>();
  graph->ordinal = g.ordinal;
  if (g.emulated) {
    graph->emulated = std::move(work);
    return graph;
  }
  cudaGraph_t cg = nullptr;
  cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(g.record_stream), &cg);
  std::size_t nodes = 0;
  if (e == cudaSuccess && cg != nullptr) e = cudaGraphGetNodes(cg, nullptr, &nodes);
  if (e == cudaSuccess && cg != nullptr && nodes > 0) e = cudaGraphInstantiate(&graph->exec, cg, 0);
  if (cg != nullptr) (void)cudaGraphDestroy(cg);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string("the CUDA graph could not be made: ") + cuda_error_text(e);
    return nullptr;
  }
  return graph;
}

void gpu_graph_launch(const GpuHandle& g, const GpuGraph& graph, const char* op) {
  if (g.emulated) {
    for (const auto& f : graph.emulated) f();
    return;
  }
  if (graph.exec == nullptr) return;
  check(cudaGraphLaunch(graph.exec, static_cast<cudaStream_t>(g.stream)), g, op, "launching a CUDA graph");
}

pinned::HostBlockCache& pinned::host_cache() {
  static HostBlockCache* cache = [] {
    if (emulated_gpus() > 0)
      return new HostBlockCache(
          [](std::size_t n, std::string* why) -> void* {
            // Page-aligned, as cudaHostAlloc's blocks are.
            constexpr std::size_t page = 4096;
            void* p = n <= SIZE_MAX - page ? std::aligned_alloc(page, (n + page - 1) / page * page) : nullptr;
            if (p == nullptr) *why = "out of host memory";
            return p;
          },
          [](void* p, std::size_t) { std::free(p); }, kKeepLimit);
    return new HostBlockCache(
        [](std::size_t n, std::string* why) -> void* {
          // Portable: usable by every GPU of the process, whichever is
          // current on the calling thread.
          void* p = nullptr;
          const cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
          if (e == cudaSuccess) return p;
          (void)cudaGetLastError();
          *why = cuda_error_text(e);
          return nullptr;
        },
        [](void* p, std::size_t) {
          // Nowhere to report a failure: the block stays locked until exit.
          (void)cudaFreeHost(p);
          (void)cudaGetLastError();
        },
        kKeepLimit);
  }();
  return *cache;
}

void* gpu_host_allocate(std::size_t nbytes, const char* op) { return pinned::host_cache().allocate(nbytes, op); }

void gpu_host_free(void* p, std::size_t nbytes) { pinned::host_cache().free(p, nbytes); }

}  // namespace tessera::detail
