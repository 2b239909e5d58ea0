// The per-device timeline: buffers, start/stop, and the trace file.
//
// Each device worker records into its own buffer (slot d + 1); every other
// thread shares slot 0. A buffer is written under its own lock, which only
// host threads (and stop()) ever contend for. Every event carries the number
// of the recording that opened it, and is kept only if that recording is
// still the current one when it is pushed, checked under the slot's lock;
// stop() clears the current number before it collects the slots. So an event
// either reaches the file of its recording or is dropped: none is left behind
// for the next one.
#include "runtime/timeline.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <system_error>
#include <utility>
#include <vector>

#include "runtime/runtime.hpp"
#include "tessera/error.hpp"
#include "tessera/observe.hpp"
#include "tessera/version.hpp"

namespace tessera::detail {

std::atomic<std::uint32_t> g_trace_recording{0};

namespace {

// Rows (trace "tid"s): device d is d + 1, because Perfetto has merged tid 0
// with tid 1; threads that are no device's worker follow every device.
constexpr int kHostTidBase = kMaxCpuDevices + 1;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Slot {
  std::mutex mu;
  std::uint32_t number = 0;  // of the recording `events` belong to
  std::vector<TimelineEvent> events;
};

// Slot 0: host threads; slot d + 1: device d. Made on first use and never
// freed, since workers may record until the process ends.
std::atomic<Slot*> g_slots[kMaxCpuDevices + 1];

Slot& slot_for(int device) {
  std::atomic<Slot*>& a = g_slots[device + 1];
  Slot* s = a.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  auto* fresh = new Slot;
  if (a.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread made it first
  return *s;
}

std::atomic<int> g_host_threads{0};
thread_local int t_host_tid = 0;  // 0 until this thread first records
thread_local const TimelineScope* t_innermost = nullptr;

int current_tid() {
  const int d = current_device();
  if (d >= 0) return d + 1;
  if (t_host_tid == 0) t_host_tid = kHostTidBase + g_host_threads.fetch_add(1, std::memory_order_relaxed);
  return t_host_tid;
}

void push(TimelineEvent&& e, std::uint32_t number) {
  Slot& s = slot_for(current_device());
  std::lock_guard<std::mutex> lock(s.mu);
  if (g_trace_recording.load(std::memory_order_relaxed) != number) return;  // stopped since the event opened
  if (s.number != number) {
    s.events.clear();
    s.events.reserve(1024);  // skips the first few regrowths
    s.number = number;
  }
  s.events.push_back(std::move(e));
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

void append_key(std::string& args, std::string_view key) {
  if (!args.empty()) args += ',';
  append_json_string(args, key);
  args += ':';
}

// Microseconds with nanosecond digits, the unit of the trace format.
void append_us(std::string& out, std::int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  out += buf;
}

std::string row_name(int tid) {
  if (tid < kHostTidBase) return "device " + std::to_string(tid - 1);
  const int k = tid - kHostTidBase;
  return k == 0 ? "host" : "host " + std::to_string(k + 1);
}

std::string to_json(std::vector<TimelineEvent>& events, std::int64_t start_ns) {
  // Parents before their children: by start, then longest first.
  std::sort(events.begin(), events.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.dur_ns > b.dur_ns;
  });
  std::vector<int> rows;
  for (const auto& e : events)
    if (e.phase == 'X') rows.push_back(e.tid);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());

  const std::string pid = std::to_string(static_cast<long long>(getpid()));
  std::string out = "{\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"tessera\"}}";
  for (const int tid : rows) {
    const std::string head = ",\n{\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid);
    out += head + ",\"name\":\"thread_name\",\"args\":{\"name\":";
    append_json_string(out, row_name(tid));
    // Host rows first, then devices in id order.
    const int sort_index = tid < kHostTidBase ? tid : kHostTidBase - tid - 1;
    out +=
        "}}" + head + ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" + std::to_string(sort_index) + "}}";
  }
  for (const auto& e : events) {
    out += ",\n{\"name\":";
    append_json_string(out, e.name);
    out += ",\"cat\":";
    append_json_string(out, e.category);
    out += ",\"ph\":\"";
    out += e.phase;
    out += "\",\"ts\":";
    append_us(out, std::max<std::int64_t>(0, e.begin_ns - start_ns));
    if (e.phase == 'X') {
      out += ",\"dur\":";
      append_us(out, std::max<std::int64_t>(0, e.dur_ns));
    }
    out += ",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.tid);
    if (e.bytes >= 0 || !e.args.empty()) {
      out += ",\"args\":{";
      if (e.bytes >= 0) {
        out += e.phase == 'C' ? "\"bytes_in_use\":" : "\"bytes\":";
        out += std::to_string(e.bytes);
        if (!e.args.empty()) out += ',';
      }
      out += e.args + "}";
    }
    out += '}';
  }
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"tessera ";
  out += kVersion;
  out += "\"}}\n";
  return out;
}

// The recording in progress. Leaked: the exit hook may write it after static
// destructors have run.
struct Recording {
  std::mutex mu;
  std::uint32_t number = 0;  // 0 when none
  std::uint32_t last = 0;
  std::FILE* file = nullptr;
  std::string path;
  std::int64_t start_ns = 0;
  bool exit_hook = false;
};

Recording& recording() {
  static auto* r = new Recording;
  return *r;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

void stop_locked(Recording& r) {
  if (r.number == 0) return;
  g_trace_recording.store(0);
  std::vector<TimelineEvent> events;
  for (auto& a : g_slots) {
    Slot* s = a.load(std::memory_order_acquire);
    if (s == nullptr) continue;
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->number != r.number) continue;
    std::move(s->events.begin(), s->events.end(), std::back_inserter(events));
    s->events.clear();
  }
  r.number = 0;
  std::FILE* f = std::exchange(r.file, nullptr);
  const std::string text = to_json(events, r.start_ns);
  int err = 0;
  if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err != 0) throw DeviceError("[trace] failed writing '" + r.path + "': " + errno_text(err));
}

// A trace nobody stopped is written as the process exits.
void write_at_exit() {
  Recording& r = recording();
  try {
    std::lock_guard<std::mutex> lock(r.mu);
    stop_locked(r);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: %s\n", e.what());
  }
}

void start_locked(Recording& r, const std::string& path, const char* origin) {
  if (r.number != 0)
    throw DeviceError("[trace] a trace is already recording to '" + r.path + "'; call trace::stop() before starting '" +
                      path + "'");
  if (path.empty()) throw DeviceError("[trace] expected the path of the file to write, got an empty string");
  // Opened now, so that a bad path fails here rather than after the work.
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr)
    throw DeviceError("[trace] cannot open '" + path + "'" + origin + " for writing: " + errno_text(errno));
  if (!r.exit_hook) {
    // Registered before the runtime's own exit hook when the trace starts with
    // the runtime, so the workers are joined before the file is written.
    std::atexit(write_at_exit);
    r.exit_hook = true;
  }
  r.file = f;
  r.path = path;
  r.start_ns = now_ns();
  if (++r.last == 0) ++r.last;  // 0 means "not recording"
  r.number = r.last;
  g_trace_recording.store(r.number);
}

}  // namespace

// ------------------------------------------------------------ TimelineScope

void TimelineScope::open(std::string_view name, std::string_view category) {
  recording_ = g_trace_recording.load(std::memory_order_relaxed);
  if (recording_ == 0) return;  // stopped since the caller looked
  event_.emplace();
  event_->name.assign(name);
  event_->category.assign(category);
  event_->tid = current_tid();
  parent_ = t_innermost;
  t_innermost = this;
  event_->begin_ns = now_ns();  // last, so the setup above is not counted
}

void TimelineScope::close() noexcept {
  const std::int64_t end = now_ns();
  t_innermost = parent_;
  event_->dur_ns = end - event_->begin_ns;
  try {
    push(std::move(*event_), recording_);
  } catch (...) {
    // Out of memory: the event is lost, the work goes on.
  }
}

void TimelineScope::arg(std::string_view key, std::int64_t value) {
  if (!event_) return;
  if (key == "bytes") {
    event_->bytes = value;
    return;
  }
  append_key(event_->args, key);
  event_->args += std::to_string(value);
}

void TimelineScope::arg(std::string_view key, std::string_view value) {
  if (!event_) return;
  append_key(event_->args, key);
  append_json_string(event_->args, value);
}

std::string_view TimelineScope::innermost_name(std::string_view fallback) noexcept {
  if (!tracing() || t_innermost == nullptr) return fallback;
  return t_innermost->event_->name;
}

void record_memory(int device_id, std::int64_t bytes_in_use) {
  const std::uint32_t number = g_trace_recording.load(std::memory_order_relaxed);
  if (number == 0) return;
  try {
    TimelineEvent e;
    e.name = "device " + std::to_string(device_id) + " memory";
    e.category = "memory";
    e.phase = 'C';
    e.tid = current_tid();
    e.bytes = bytes_in_use;
    e.begin_ns = now_ns();
    push(std::move(e), number);
  } catch (...) {
    // Out of memory: the sample is lost, the allocation goes on.
  }
}

void start_trace_from_env() {
  const char* env = std::getenv("TESSERA_TRACE");
  if (env == nullptr || *env == '\0') return;
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.number != 0) return;  // trace::start() ran before the runtime: that recording stands
  start_locked(r, env, " (TESSERA_TRACE)");
}

}  // namespace tessera::detail

// ------------------------------------------------------------------ public API

namespace tessera::trace {

void start(const std::string& path) {
  detail::Recording& r = detail::recording();
  std::lock_guard<std::mutex> lock(r.mu);
  detail::start_locked(r, path, "");
}

void stop() {
  detail::Recording& r = detail::recording();
  std::lock_guard<std::mutex> lock(r.mu);
  detail::stop_locked(r);
}

bool active() { return detail::tracing(); }

}  // namespace tessera::trace
