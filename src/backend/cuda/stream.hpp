// The GPU that the calling thread drives. Each CUDA device of the runtime is
// one worker thread (runtime/runtime.hpp) bound at its start to one GPU and
// one stream of it; every kernel launched and every copy made from that
// thread goes onto that stream, in order, and an eval returns only after
// its stream has finished (synchronize()), so a buffer freed on the host is
// never still in use on the GPU.
//
// Emulated GPUs (TESSERA_CUDA_EMULATE=n, for testing the backend on
// machines without one): the same code paths, with device memory in host
// memory, copies by memcpy, and each kernel run as a loop over its
// elements on the worker thread (launch.cuh). The kernels' per-element
// code is the same source either way.
//
// Plain C++ (no CUDA headers), so host code compiled by the C++ compiler
// can include it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera::cuda {

/// The calling thread's GPU: its CUDA ordinal and stream (a cudaStream_t).
struct Current {
  int ordinal = -1;
  void* stream = nullptr;
  bool emulated = false;
  int device_id = -1;  // the Tessera device, for messages
};

/// The calling thread's GPU; raises DeviceError ("[op] ...") when the thread
/// drives none (a CUDA kernel called off a CUDA device's worker).
const Current& current(const char* op);

/// Binds the calling thread to a GPU (the worker of a CUDA device, once).
void bind_current(const Current& c);

/// Waits until everything queued on the calling thread's stream is done;
/// raises DeviceError naming `op` and the CUDA error if a kernel failed.
void synchronize(const char* op);

// ---- Recording (runtime/gpus.hpp's gpu_record_begin/end, for jit's graph
// replay). While the calling thread records, what it queues for its GPU is
// kept instead of run: on a GPU its kernels and device copies go onto the
// device's recording stream, which is being captured into a CUDA graph; on
// an emulated GPU each would-be kernel (a host loop) is kept as a closure.
// Host code that needs the GPU's results now (a copy to the host, a wait)
// cannot be recorded: refuse_while_recording raises.

/// The Tessera device the calling thread records for, or -1.
int recording_device();

/// Starts recording on the calling thread, for `device_id`: its launches go
/// to `record_stream` (a cudaStream_t being captured; nullptr on emulated
/// GPUs) until record_end.
void record_begin(int device_id, void* record_stream);

/// Ends the calling thread's recording: its launches go to its own stream
/// again. Returns the emulated work kept (empty on a GPU).
std::vector<std::function<void()>> record_end();

/// An emulated GPU's work (a kernel's loop, a copy): run now, or kept when
/// the calling thread records.
void run_emulated(std::function<void()> work);

/// Raises DeviceError "[op] cannot be recorded ..." when the calling thread
/// records: for code that needs the GPU's results on the host now.
void refuse_while_recording(const char* op, const char* what);

/// Threads per block of the grid-stride kernels (for_each, the fused loops).
inline constexpr int kLaunchThreads = 256;

/// The blocks of kLaunchThreads threads to launch `kernel` (a __global__
/// function, or a cudaKernel_t cast to a pointer) with, a grid-stride loop
/// over n elements, on the calling thread's GPU: one a thread, but at most
/// one full wave, as many blocks as its SMs hold at once given the kernel's
/// registers. A grid of several waves whose blocks all take the same work
/// ends with a partial wave on a mostly idle GPU (4096 blocks of 5 resident
/// per SM on 132 SMs: 6.2 waves, the last at a fifth of the GPU). Where the
/// occupancy is unknown, at most 4096 blocks.
unsigned grid_blocks(const void* kernel, std::int64_t n);

/// For benchmarks comparing launch shapes in one run: with `blocks` > 0,
/// grid_blocks launches up to that many blocks whatever a wave holds (the
/// launch shape before one-wave grids was 4096); 0 restores one wave.
void set_grid_blocks_cap(std::int64_t blocks);

/// Raises DeviceError "[op] CUDA error on <device>: <name> (<code>): <text>"
/// when `err` (a cudaError_t) is not cudaSuccess.
void check(int err, const char* op, const char* what);

}  // namespace tessera::cuda
