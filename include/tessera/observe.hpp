// Observability: per-device memory statistics and a per-device timeline.
//
//   ts::MemoryStats st = ts::memory_stats(ts::devices()[0]);
//   st.bytes_in_use; st.peak_bytes_in_use;
//
//   ts::trace::start("out.json");   // or run with TESSERA_TRACE=out.json
//   ...                             // work to record
//   ts::trace::stop();              // writes out.json
//
// The trace is a Chrome trace-event JSON file: open it in ui.perfetto.dev or
// chrome://tracing. Each device is one row ("device 3"), threads that are not
// device workers are "host" rows; events are per-device tasks, collectives and
// reshards (with the bytes they moved), plus a memory counter per device.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/device.hpp"

namespace tessera {

/// Memory of one device's caching allocator. Sizes are of the blocks
/// reserved: requests round up to 64 bytes, and to whole 4 KiB pages from one
/// page on.
struct MemoryStats {
  /// Bytes in blocks held by live buffers (arrays, temporaries).
  std::int64_t bytes_in_use = 0;
  /// The most bytes_in_use has been since the runtime started or since
  /// reset_peak_memory().
  std::int64_t peak_bytes_in_use = 0;
  /// Bytes in freed blocks the allocator keeps for reuse (not in use, not
  /// returned to the system; at most 1 GiB per device).
  std::int64_t bytes_cached = 0;
  /// Allocations served since the runtime started (from the cache or not).
  std::int64_t num_allocs = 0;
  /// The largest block allocated since the runtime started.
  std::int64_t largest_alloc_size = 0;
};

/// The memory statistics of `device`. Starts the runtime on first use; raises
/// DeviceError for a device that does not exist.
MemoryStats memory_stats(const Device& device);

/// Sets the device's peak_bytes_in_use to its current bytes_in_use, so the
/// next memory_stats() gives the peak of what runs in between.
void reset_peak_memory(const Device& device);

namespace trace {

/// Starts recording a timeline, to be written to `path` (created or
/// truncated now, so a bad path fails here) by stop() or, if stop() is never
/// called, at process exit. Setting TESSERA_TRACE=path in the environment
/// does the same as the runtime starts. Raises DeviceError ("[trace] ...")
/// when the file cannot be opened or when a trace is already recording.
void start(const std::string& path);

/// Stops recording and writes the file. Work still running when stop() is
/// called is left out. Does nothing when no trace is recording. Raises
/// DeviceError when the file cannot be written.
void stop();

/// True while a trace is recording.
bool active();

}  // namespace trace

}  // namespace tessera
