// The progress bar. Drawing is rate limited without making advance() wait:
// a thread that finds the next allowed draw time has come tries to take the
// draw mutex, and if another thread holds it simply skips drawing, since that
// thread is already showing a count at most a moment old.
#include "ifu/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>

namespace tessera::ifu {
namespace {

constexpr std::int64_t kRedrawNs = 100'000'000;  // at most ~10 redraws a second
constexpr int kBarCells = 30;

// Writes all of `s` to stderr, retrying short writes; a broken terminal is
// not worth failing a computation for, so errors end the attempt silently.
void write_stderr(const std::string& s) {
  const char* p = s.data();
  std::size_t left = s.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Cells for the bar so the whole line fits the terminal's width.
int bar_cells(std::size_t rest_of_line) {
  winsize ws{};
  int cols = 80;
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) cols = ws.ws_col;
  const int room = cols - 1 - static_cast<int>(rest_of_line);
  return std::clamp(room, 5, kBarCells);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--";
  const long long s = static_cast<long long>(seconds);
  char buf[48];
  if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

std::string format_bar(const std::string& label, std::int64_t done, std::int64_t total, double elapsed_s, int width) {
  width = std::max(width, 1);
  // The fraction of the work done, clamped to [0, 1]; no work counts as all done.
  double frac = 1.0;
  if (total > 0) frac = std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0);
  const int filled = static_cast<int>(std::floor(frac * width));
  const int percent = static_cast<int>(std::floor(frac * 100.0));

  std::string eta = "-:--";
  if (frac >= 1.0)
    eta = format_duration(0);
  else if (done > 0)
    // Rounded up, so "0:00" means finished; computed from the counts rather
    // than from frac so that exact cases stay exact.
    eta = format_duration(std::ceil(elapsed_s * static_cast<double>(total - done) / static_cast<double>(done)));

  std::string out = label;
  if (!out.empty()) out += ' ';
  out += '[';
  out.append(static_cast<std::size_t>(filled), '#');
  out.append(static_cast<std::size_t>(width - filled), '.');
  out += ']';
  char buf[96];
  std::snprintf(buf, sizeof buf, " %3d%% %lld/%lld ", percent, static_cast<long long>(done),
                static_cast<long long>(std::max<std::int64_t>(total, 0)));
  out += buf;
  out += format_duration(elapsed_s);
  out += " eta ";
  out += eta;
  return out;
}

Progress::Progress(std::string label, std::int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      drawing_(enabled && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

std::int64_t Progress::elapsed_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::advance(std::int64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  if (!drawing_) return;
  const std::int64_t now = elapsed_ns();
  if (now < next_draw_ns_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(draw_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;
  next_draw_ns_.store(now + kRedrawNs, std::memory_order_relaxed);
  draw(false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(draw_mutex_);
  if (finished_) return;
  finished_ = true;
  if (drawing_ && drawn_) draw(true);
}

// Called with draw_mutex_ held.
void Progress::draw(bool final) {
  const double elapsed = static_cast<double>(elapsed_ns()) * 1e-9;
  const std::int64_t d = done();
  // Measure the line with a one-cell bar, then widen the bar to fit.
  const std::string probe = format_bar(label_, d, total_, elapsed, 1);
  std::string line = "\r";
  line += format_bar(label_, d, total_, elapsed, bar_cells(probe.size() - 1));
  line += "\x1b[K";  // clear what a longer previous line left behind
  if (final) line += '\n';
  write_stderr(line);
  drawn_ = true;
}

}  // namespace tessera::ifu
