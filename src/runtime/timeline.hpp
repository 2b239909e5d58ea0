// Internal recording side of the per-device timeline (public side:
// tessera/observe.hpp). Code anywhere in the library marks a span of work with
//
//   TimelineScope scope("psum", "collective", bytes);
//   if (scope) scope.arg("shape", text);   // costly args only while recording
//
// which records one complete event (Chrome "ph":"X") on the row of the device
// whose worker runs the scope, or on a host row for other threads. Categories
// in use: "task" (run_on_devices, host-side calls), "collective", "reshard",
// "kernel" and "fused" (executor). Scopes nest; a per-device task started by
// run_on_devices is named after the caller's innermost open scope, so a
// device row shows which call its work belongs to.
//
// Cost: with no trace recording, constructing and destroying a scope is one
// relaxed atomic load and a branch (no clock read, no allocation). While
// recording, each thread writes to its own device's buffer under that
// buffer's lock (uncontended but for host threads), and trace::stop() merges
// the buffers. A scope still open when the trace stops is dropped.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::detail {

/// Non-zero while a trace records: the number of the recording (each
/// trace::start takes a new one). Read through tracing().
extern std::atomic<std::uint32_t> g_trace_recording;

/// True while a trace is recording. One relaxed atomic load.
inline bool tracing() noexcept { return g_trace_recording.load(std::memory_order_relaxed) != 0; }

/// One recorded event, as written to the trace file.
struct TimelineEvent {
  std::string name;
  std::string category;
  std::string args;  // further JSON members, without braces: "\"kind\":\"all-gather\""
  // The "bytes" argument (of a counter: its value), kept as a number until
  // the file is written; -1 when absent.
  std::int64_t bytes = -1;
  std::int64_t begin_ns = 0;
  std::int64_t dur_ns = 0;
  int tid = 0;
  char phase = 'X';  // 'X' complete event, 'C' counter
};

/// Records the span from construction to destruction as one event on the
/// current thread's row (see the file comment). Not copyable or movable: it
/// marks a lexical scope.
class TimelineScope {
 public:
  /// `name` and `category` are copied (only while recording), so any string
  /// will do.
  TimelineScope(std::string_view name, std::string_view category) {
    if (tracing()) [[unlikely]]
      open(name, category);
  }
  /// With the argument "bytes": what the work moved or produced; cheap to
  /// pass even when not recording.
  TimelineScope(std::string_view name, std::string_view category, std::int64_t bytes) {
    if (tracing()) [[unlikely]] {
      open(name, category);
      if (event_) event_->bytes = bytes;
    }
  }
  ~TimelineScope() {
    if (event_) [[unlikely]]
      close();
  }
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

  /// True when this scope records: compute costly arguments only then.
  explicit operator bool() const noexcept { return event_.has_value(); }
  /// Adds an argument shown with the event (ignored when not recording).
  void arg(std::string_view key, std::int64_t value);
  void arg(std::string_view key, std::string_view value);

  /// The name of the innermost recording scope on this thread, or `fallback`
  /// when none (or when not recording). Valid while that scope is open.
  static std::string_view innermost_name(std::string_view fallback) noexcept;

 private:
  void open(std::string_view name, std::string_view category);
  void close() noexcept;

  std::optional<TimelineEvent> event_;
  std::uint32_t recording_ = 0;
  const TimelineScope* parent_ = nullptr;
};

/// Records the bytes in use on a device as a counter event ("device 3
/// memory"), so the viewer draws memory over time. Call only while tracing().
void record_memory(int device_id, std::int64_t bytes_in_use);

/// Starts recording to the file named by TESSERA_TRACE, if it is set and no
/// trace records yet; the file is written at exit or by trace::stop(). Called
/// once, as the runtime starts. Raises DeviceError when the file cannot be
/// opened.
void start_trace_from_env();

}  // namespace tessera::detail
