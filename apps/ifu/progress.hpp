// A text progress bar on stderr for long pipeline stages.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace tessera::ifu {

/// "m:ss" below an hour, "h:mm:ss" above; "-:--" for a negative or non-finite time.
std::string format_duration(double seconds);

/// One line of the bar: "label [#####.....]  45% 4500/10000 0:03 eta 0:04".
/// `width` is the number of cells between the brackets (at least 1). The eta
/// extrapolates the mean rate so far, rounded up to whole seconds; it is
/// "-:--" before anything is done. A
/// total of 0 or less counts as finished.
std::string format_bar(const std::string& label, std::int64_t done, std::int64_t total, double elapsed_s, int width);

/// A progress bar redrawn in place on stderr, at most about 10 times a second,
/// only when `enabled` and stderr is a terminal. advance() may be called from
/// several threads at once. finish() (or the destructor) draws the final state
/// and a newline if anything was drawn.
class Progress {
 public:
  Progress(std::string label, std::int64_t total, bool enabled = true);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress();

  void advance(std::int64_t n);
  void finish();

  /// Units counted so far.
  std::int64_t done() const { return done_.load(std::memory_order_relaxed); }
  std::int64_t total() const { return total_; }
  /// Whether the bar draws at all (enabled and stderr is a terminal).
  bool drawing() const { return drawing_; }

 private:
  void draw(bool final);
  std::int64_t elapsed_ns() const;

  const std::string label_;
  const std::int64_t total_;
  const bool drawing_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<std::int64_t> done_{0};
  std::atomic<std::int64_t> next_draw_ns_{0};  // no redraw before this time since start
  std::mutex draw_mutex_;                      // one writer at a time; guards the two flags below
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace tessera::ifu
