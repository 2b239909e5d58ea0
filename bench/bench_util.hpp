// Timing functions and the host-memory baselines (memcpy, the N-thread
// streaming limit) that Tessera's benchmarks and the `tessera demo` compare
// against. Header only; the one place where these baselines are measured.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "tessera/explain.hpp"
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
// Tells the compiler that the memory at `p` may be read here, so a copy into
// a buffer that never escapes is not removed as a dead store (as Google
// Benchmark's DoNotOptimize / ClobberMemory do).
inline void clobber(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// A reusable barrier for `count` threads (mutex + condition variable: simple,
// and correct when the threads outnumber the cores).
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    const long gen = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int count_;
  int arrived_ = 0;
  long generation_ = 0;
};
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
      detail::clobber(dst.data());
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

/// The streaming limit of `threads` threads, the bound every ratio to a
/// memory limit in these benchmarks is taken against. Each thread copies its
/// own source buffer into its own destination buffer (both allocated and
/// first touched by that thread, like a device's memory); the threads are
/// released together by a barrier, and a rep lasts from the first thread's
/// start to the last thread's end (timestamps taken by the threads
/// themselves, so a late wake-up of the timing thread does not shorten it).
/// The limit is the median rep: the benchmarks report median times, and a
/// ratio of a median time to a fastest copy would mix two statistics (on a
/// shared machine the fastest rep is the luckiest one, not the typical one).
struct StreamResult {
  int threads = 1;                  // threads used
  std::size_t array_bytes = 0;      // bytes copied per rep, all threads together
  double seconds = 0.0;             // median rep: what the rates below use
  double fastest_seconds = 0.0;     // fastest rep, for reference only
  /// STREAM's convention: bytes read + bytes written per second (2x the
  /// bytes copied), all threads together, in GB/s.
  double stream_gbps = 0.0;
  /// Bytes copied per second (comparable with memcpy and reshard GB/s here).
  double copy_gbps = 0.0;
  /// The least time to read plus write `bytes` in total at this rate: the
  /// limit of work whose memory traffic is `bytes` spread over the threads.
  double seconds_for(double bytes) const { return stream_gbps > 0 ? bytes / (stream_gbps * 1e9) : 0.0; }
};

/// Measures the streaming limit of `threads` threads copying `array_bytes`
/// in total (array_bytes / threads each, in separate buffers); median of
/// `reps` after one untimed rep. The threads live for the whole measurement,
/// so no rep pays for starting them.
inline StreamResult stream_copy(std::size_t array_bytes, int threads, int reps = 5) {
  threads = std::max(threads, 1);
  reps = std::max(reps, 1);
  const std::size_t per = array_bytes / static_cast<std::size_t>(threads) / 64 * 64;
  StreamResult r;
  r.threads = threads;
  r.array_bytes = per * static_cast<std::size_t>(threads);
  if (per == 0) return r;
  detail::Barrier start(threads + 1), done(threads + 1);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  std::vector<unsigned char> last(static_cast<std::size_t>(threads), 0);
  std::vector<double> begin(static_cast<std::size_t>(threads)), end(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const auto k = static_cast<std::size_t>(t);
      HostBuffer src(per, 1), dst(per, 0);  // first touched by this thread
      start.arrive_and_wait();              // ready
      for (int i = 0; i <= reps; ++i) {
        start.arrive_and_wait();
        begin[k] = now_seconds();
        std::memcpy(dst.data(), src.data(), per);
        detail::clobber(dst.data());
        end[k] = now_seconds();
        done.arrive_and_wait();
      }
      last[k] = dst.data()[per - 1];
    });
  start.arrive_and_wait();  // every buffer allocated and touched
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    start.arrive_and_wait();
    done.arrive_and_wait();
    // Rep 0 is the warm-up.
    if (i > 0)
      times.push_back(*std::max_element(end.begin(), end.end()) - *std::min_element(begin.begin(), begin.end()));
  }
  for (auto& th : pool) th.join();
  for (unsigned char c : last) detail::sink = detail::sink + c;
  r.seconds = median(times);
  r.fastest_seconds = *std::min_element(times.begin(), times.end());
  r.copy_gbps = gbps(static_cast<double>(r.array_bytes), r.seconds);
  r.stream_gbps = 2.0 * r.copy_gbps;
  return r;
}

// The cores' floating-point limit: `threads` threads each run 12
// independent FMA chains on the widest vectors the CPU has (AVX-512, else
// AVX2 with FMA), for `seconds` or so; GFLOP/s of all threads together.
// Zen 4 runs 512-bit FMAs as two 256-bit halves, so there the AVX-512 limit
// is the AVX2 one. A GEMM's ratio to it is its share of what the cores can
// compute (the BLAS-free limit the matmul rows are held to).
struct FmaPeak {
  double f32_gflops = 0, f64_gflops = 0;
  std::string isa = "none";
};

#if defined(__x86_64__)
namespace fma_detail {
constexpr int kChains = 12;
__attribute__((target("avx512f"))) inline double chains_avx512(long iters, bool f64) {
  double sum = 0;
  if (f64) {
    __m512d a[kChains];
    for (auto& v : a) v = _mm512_set1_pd(0.0);
    const __m512d x = _mm512_set1_pd(1.0000001), y = _mm512_set1_pd(1e-9);
    for (long i = 0; i < iters; ++i)
      for (int k = 0; k < kChains; ++k) a[k] = _mm512_fmadd_pd(a[k], x, y);
    alignas(64) double t[8];
    for (auto& v : a) {
      _mm512_store_pd(t, v);
      for (double e : t) sum += e;
    }
  } else {
    __m512 a[kChains];
    for (auto& v : a) v = _mm512_set1_ps(0.0f);
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(1e-9f);
    for (long i = 0; i < iters; ++i)
      for (int k = 0; k < kChains; ++k) a[k] = _mm512_fmadd_ps(a[k], x, y);
    alignas(64) float t[16];
    for (auto& v : a) {
      _mm512_store_ps(t, v);
      for (float e : t) sum += e;
    }
  }
  return sum;
}
__attribute__((target("avx2,fma"))) inline double chains_avx2(long iters, bool f64) {
  double sum = 0;
  if (f64) {
    __m256d a[kChains];
    for (auto& v : a) v = _mm256_set1_pd(0.0);
    const __m256d x = _mm256_set1_pd(1.0000001), y = _mm256_set1_pd(1e-9);
    for (long i = 0; i < iters; ++i)
      for (int k = 0; k < kChains; ++k) a[k] = _mm256_fmadd_pd(a[k], x, y);
    alignas(32) double t[4];
    for (auto& v : a) {
      _mm256_store_pd(t, v);
      sum += t[0] + t[1] + t[2] + t[3];
    }
  } else {
    __m256 a[kChains];
    for (auto& v : a) v = _mm256_set1_ps(0.0f);
    const __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(1e-9f);
    for (long i = 0; i < iters; ++i)
      for (int k = 0; k < kChains; ++k) a[k] = _mm256_fmadd_ps(a[k], x, y);
    alignas(32) float t[8];
    for (auto& v : a) {
      _mm256_store_ps(t, v);
      for (float e : t) sum += e;
    }
  }
  return sum;
}

// GFLOP/s of `threads` threads running `chains` for `iters` rounds each.
inline double run(int threads, long iters, int lanes, double (*chains)(long, bool), bool f64) {
  std::vector<std::thread> pool;
  std::vector<double> sink(static_cast<std::size_t>(threads));
  const double t0 = now_seconds();
  for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { sink[static_cast<std::size_t>(i)] = chains(iters, f64); });
  for (auto& th : pool) th.join();
  const double t = now_seconds() - t0;
  volatile double keep = 0;
  for (double v : sink) keep = keep + v;  // the chains' results are used
  return 2.0 * kChains * lanes * static_cast<double>(iters) * threads / t / 1e9;
}
}  // namespace fma_detail
#endif

// The median of 5 runs per figure, the statistic of the times compared with it.
inline FmaPeak fma_peak([[maybe_unused]] int threads) {
  FmaPeak p;
#if defined(__x86_64__)
  const long iters = 10000000;  // about 0.05-0.1 s per run on a 3-4 GHz core
  auto med = [&](int lanes, double (*chains)(long, bool), bool f64) {
    std::vector<double> v;
    for (int r = 0; r < 5; ++r) v.push_back(fma_detail::run(threads, iters, lanes, chains, f64));
    return median(v);
  };
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    p.isa = "AVX-512";
    p.f32_gflops = med(16, fma_detail::chains_avx512, false);
    p.f64_gflops = med(8, fma_detail::chains_avx512, true);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.isa = "AVX2";
    p.f32_gflops = med(8, fma_detail::chains_avx2, false);
    p.f64_gflops = med(4, fma_detail::chains_avx2, true);
  }
#endif
  return p;
}

}  // namespace tessera::bench
