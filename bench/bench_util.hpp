// Timing helpers and the host-memory baselines (memcpy, STREAM-like copy)
// that Tessera's benchmarks and the `tessera demo` compare against. Header
// only; the one place where these baselines are measured.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "tessera/explain.hpp"
#include <thread>
#include <vector>

namespace tessera::bench {

/// Seconds on a monotonic clock.
inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// Median of `v` (mean of the two middle values for an even count); 0 if empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Runs `f` `warmup` times untimed, then `reps` times timed; returns the
/// times in seconds.
template <class F>
std::vector<double> time_reps(int warmup, int reps, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  t.reserve(static_cast<std::size_t>(std::max(reps, 0)));
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_seconds();
    f();
    t.push_back(now_seconds() - t0);
  }
  return t;
}

using tessera::format_bytes;

/// "1.20 s", "12.3 ms", "45.0 us", "12 ns".
inline std::string format_seconds(double s) {
  char buf[48];
  if (s >= 1.0)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else if (s >= 1e-6)
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f ns", s * 1e9);
  return buf;
}

/// Decimal gigabytes per second (1 GB = 1e9 bytes); 0 when s <= 0.
inline double gbps(double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0.0; }

/// A 64-byte aligned host buffer whose pages are touched at construction, so
/// timed copies never page-fault.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::size_t nbytes, unsigned char fill = 0) : n_(nbytes) {
    if (n_ == 0) return;
    const std::size_t rounded = (n_ + 63) / 64 * 64;
    p_.reset(static_cast<unsigned char*>(std::aligned_alloc(64, rounded)));
    if (!p_) throw std::bad_alloc();
    std::memset(p_.get(), fill, n_);
  }
  unsigned char* data() const { return p_.get(); }
  std::size_t size() const { return n_; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> p_;
  std::size_t n_ = 0;
};

namespace detail {
// Keeps copies observable so the compiler cannot drop them.
inline volatile unsigned char sink = 0;
}  // namespace detail

/// The memcpy baseline: the time of a single-threaded std::memcpy of `nbytes`
/// between two pre-touched buffers, median of `reps` (after one untimed run).
/// A total above `max_chunk` is copied as consecutive memcpys of one
/// `max_chunk` buffer (same bytes, same bandwidth, bounded memory). A tiny
/// total is repeated inside each rep until a rep takes >= ~1 ms, and the
/// per-copy time returned, so clock resolution does not dominate.
inline double memcpy_seconds(std::int64_t nbytes, int reps = 5, std::size_t max_chunk = std::size_t(512) << 20) {
  if (nbytes <= 0) return 0.0;
  const auto total = static_cast<std::size_t>(nbytes);
  const std::size_t chunk = std::min(total, max_chunk);
  HostBuffer src(chunk, 1), dst(chunk, 0);
  auto copy_total = [&] {
    for (std::size_t done = 0; done < total;) {
      const std::size_t c = std::min(chunk, total - done);
      std::memcpy(dst.data(), src.data(), c);
      done += c;
    }
    detail::sink = detail::sink + dst.data()[chunk - 1];
  };
  // Inner repetitions for tiny copies.
  copy_total();
  int inner = 1;
  for (;;) {
    const double t0 = now_seconds();
    for (int i = 0; i < inner; ++i) copy_total();
    const double dt = now_seconds() - t0;
    if (dt >= 1e-3 || inner >= (1 << 24)) break;
    inner *= 4;
  }
  std::vector<double> t = time_reps(0, std::max(reps, 1), [&] {
    for (int i = 0; i < inner; ++i) copy_total();
  });
  return median(t) / inner;
}

/// The machine's streaming bandwidth, measured like STREAM's Copy kernel
/// (c[i] = a[i] on doubles, arrays far larger than the caches).
struct StreamResult {
  int threads = 1;                  // threads used
  std::size_t array_bytes = 0;      // bytes per array
  double seconds = 0.0;             // median time of one copy of the arrays
  /// STREAM's convention: bytes read + bytes written per second (2x the
  /// bytes copied), in GB/s.
  double stream_gbps = 0.0;
  /// Bytes copied per second (comparable with memcpy and reshard GB/s here).
  double copy_gbps = 0.0;
};

/// STREAM-like copy over `threads` threads, each on its own contiguous part
/// (first touched by the thread that copies it), fastest of `reps`.
inline StreamResult stream_copy(std::size_t array_bytes, int threads, int reps = 5) {
  threads = std::max(threads, 1);
  const std::size_t n = array_bytes / sizeof(double);
  StreamResult r;
  r.threads = threads;
  r.array_bytes = n * sizeof(double);
  if (n == 0) return r;
  std::unique_ptr<double[]> a(new double[n]), c(new double[n]);  // untouched until the threads write
  auto part = [&](int t) {
    const std::size_t lo = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
    const std::size_t hi = n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
    return std::make_pair(lo, hi);
  };
  auto parallel = [&](auto&& body) {
    if (threads == 1) {
      body(0);
      return;
    }
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { body(t); });
    for (auto& th : pool) th.join();
  };
  parallel([&](int t) {
    auto [lo, hi] = part(t);
    for (std::size_t i = lo; i < hi; ++i) {
      a[i] = 1.0;
      c[i] = 0.0;
    }
  });
  auto copy = [&](int t) {
    auto [lo, hi] = part(t);
    double* __restrict cc = c.get();
    const double* __restrict aa = a.get();
    for (std::size_t i = lo; i < hi; ++i) cc[i] = aa[i];
  };
  std::vector<double> times = time_reps(1, std::max(reps, 1), [&] { parallel(copy); });
  detail::sink = detail::sink + static_cast<unsigned char>(c[n - 1]);
  // The limit is what the machine can do: the fastest rep.
  r.seconds = *std::min_element(times.begin(), times.end());
  r.copy_gbps = gbps(static_cast<double>(r.array_bytes), r.seconds);
  r.stream_gbps = 2.0 * r.copy_gbps;
  return r;
}

}  // namespace tessera::bench
