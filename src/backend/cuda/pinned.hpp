// Page-locked host memory for transfers between host and GPUs: the cache of
// blocks behind gpu_host_allocate / gpu_host_free (runtime/gpus.hpp), and
// the loop that moves a large copy from or to pageable host memory in
// chunks through two page-locked bounce buffers (gpu_copy, memory.cpp).
//
// Why: a GPU's copy engines read and write only page-locked memory. From
// pageable memory the driver copies through a small staging area of its own,
// at roughly half the bus speed and in step with the host. Allocating
// page-locked memory is slow (it maps and locks every page: milliseconds
// for megabytes) and synchronises the GPUs, so blocks are kept and reused.
//
// Plain C++ (no CUDA headers): the bookkeeping and the chunking run the same
// on emulated GPUs, where the tests exercise them; memory.cpp supplies the
// CUDA calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::detail::pinned {

/// The smallest block the cache hands out; requests are rounded up to a
/// power of two from here.
inline constexpr std::size_t kMinClass = std::size_t(64) << 10;
/// What the process's cache keeps of freed blocks, at most; a block freed
/// beyond it goes back to the system.
inline constexpr std::size_t kKeepLimit = std::size_t(1) << 30;

/// Freed blocks of page-locked memory kept by size class and reused;
/// thread-safe (allocate and free from any thread). A request is rounded up
/// to its class (a power of two, at least kMinClass); one whose class would
/// exceed the cache's bound is allocated at its own size and never kept.
class HostBlockCache {
 public:
  /// Allocates n bytes; nullptr when there is no memory, with *why saying
  /// what the system said.
  using Alloc = std::function<void*(std::size_t n, std::string* why)>;
  /// Returns a block from Alloc (with its size).
  using Free = std::function<void(void* p, std::size_t n)>;

  struct Stats {
    std::size_t kept_bytes = 0, kept_blocks = 0;  // freed blocks waiting for reuse
    std::size_t in_use_bytes = 0, in_use_blocks = 0;
    std::uint64_t fresh = 0;     // blocks obtained from Alloc
    std::uint64_t reused = 0;    // requests met from kept blocks
    std::uint64_t released = 0;  // blocks given back through Free
  };

  HostBlockCache(Alloc alloc, Free free, std::size_t keep_limit);
  /// Gives every kept block back (blocks still in use are the caller's).
  ~HostBlockCache();
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  /// The block's size for a request of n bytes.
  std::size_t size_class(std::size_t n) const;
  /// At least n bytes (a kept block of n's class, or a fresh one). When the
  /// system has none, gives the kept blocks back and tries once more, then
  /// raises DeviceError "[op] cannot allocate N bytes of page-locked host
  /// memory: <why>"; the cache stays usable.
  void* allocate(std::size_t n, const char* op);
  /// Takes back a block from allocate(n) (the same n).
  void free(void* p, std::size_t n);
  /// Gives every kept block back.
  void trim();
  Stats stats() const;

 private:
  std::size_t release_all_locked(std::vector<std::pair<void*, std::size_t>>& out);

  Alloc alloc_;
  Free free_;
  const std::size_t limit_;
  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> kept_;  // class -> freed blocks
  Stats stats_;
};

/// The process's cache (gpu_host_allocate's): cudaHostAlloc'd blocks on
/// GPUs, plain host memory on emulated GPUs (chosen at first use), bound
/// kKeepLimit. Never destroyed: blocks may come back during exit, and the
/// system reclaims page-locked memory with the process.
HostBlockCache& host_cache();

// ---- Staged copies.

/// Copies from or to pageable host memory at least this large go through
/// the bounce buffers; smaller ones go straight to cudaMemcpyAsync (the
/// driver's own staging costs little there, the chunks' round trips more).
inline constexpr std::size_t kStageThreshold = std::size_t(1) << 20;
/// The bounce buffers' size: large enough that each DMA runs at bus speed,
/// small enough that the first chunk's host copy, which nothing overlaps,
/// is short.
inline constexpr std::size_t kStageChunk = std::size_t(4) << 20;

/// The sizes gpu_copy uses now; tests lower them to make small copies run
/// through many chunks. Changing them while copies run is not supported.
struct StageSizes {
  std::size_t threshold = kStageThreshold;
  std::size_t chunk = kStageChunk;
};
StageSizes stage_sizes();
void set_stage_sizes(StageSizes s);

enum class Direction { ToDevice, ToHost };

/// The two bounce buffers of one device and the device-side steps, for
/// staged_copy.
struct Stage {
  unsigned char* bounce[2] = {nullptr, nullptr};
  std::size_t chunk = 0;  // each bounce buffer's size
  /// Queues the copy of n bytes between bounce[b] and the device memory at
  /// byte `offset` of the transfer (into it for ToDevice, out of it for
  /// ToHost); bounce[b] is busy until it is done.
  std::function<void(int b, std::size_t offset, std::size_t n)> dma;
  /// Returns once bounce[b]'s last queued copy is done (at once if none).
  std::function<void(int b)> wait;
};

/// Moves nbytes between `host` (pageable) and the device through the two
/// bounce buffers, chunk by chunk, alternating between them so that the
/// host's memcpy of one chunk overlaps the DMA of the one before:
///
///   ToDevice, chunk i in buffer b = i % 2: wait(b) (the DMA of chunk i-2
///     has read it), memcpy host -> bounce[b], dma(b). Returns with the
///     last two DMAs possibly still queued: `host` is free to reuse at
///     once, and a later staged_copy waits before refilling either buffer.
///   ToHost: dma(b) for chunk i, then wait on chunk i-1's buffer and memcpy
///     it out while chunk i's DMA runs; the last chunk is waited for and
///     copied out before returning, so `host` holds every byte on return.
///
/// The caller holds the device's lock for the whole call (the buffers are
/// the device's, and a copy's chunks must not interleave with another's).
void staged_copy(const Stage& s, Direction d, unsigned char* host, std::size_t nbytes);

}  // namespace tessera::detail::pinned
