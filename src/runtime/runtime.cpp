#include "runtime/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <system_error>

#include <unistd.h>

#include "runtime/platform.hpp"
#include "runtime/processes.hpp"
#include "runtime/timeline.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace {

thread_local int t_current_device = -1;
// Inside a HostStaging scope (runtime.hpp).
thread_local bool t_host_staging = false;
thread_local std::vector<Buffer>* t_keep = nullptr;  // KeepAllocations

constexpr std::size_t kAlign = 64;
constexpr std::size_t kPage = 4096;
// Freed blocks above this total per device are returned to the OS instead of
// cached, so a long program does not hold its peak forever.
// How long an idle worker (and a caller waiting for its devices) polls
// before sleeping on a condition variable.
constexpr auto kPollTime = std::chrono::microseconds(50);
constexpr std::size_t kMaxCachedBytes = std::size_t(1) << 30;

std::atomic<int> g_requested_devices{0};
std::atomic<bool> g_started{false};
std::atomic<int> g_fail_worker_start_at{-1};

int default_device_count() {
  if (const auto setting = config::num_cpu_devices_setting()) {
    const char* env = setting->c_str();
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > kMaxCpuDevices)
      throw DeviceError(std::string("[devices] TESSERA_NUM_CPU_DEVICES must be an integer in [1, ") +
                        std::to_string(kMaxCpuDevices) + "], got '" + env + "'");
    return static_cast<int>(v);
  }
  // Processes sharing a host share its cores.
  const int hc = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, hc / processes_on_this_host());
}

}  // namespace

// ---------------------------------------------------------------- Allocator

std::size_t Allocator::round_size(std::size_t nbytes) {
  // Small blocks round to the alignment, large ones to whole pages, so a
  // cached block of one size serves every request that rounds to it.
  std::size_t g = nbytes >= kPage ? kPage : kAlign;
  return (nbytes + g - 1) / g * g;
}

namespace {

std::string bytes_str(std::size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return SIZE_MAX;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
}

}  // namespace

void* Allocator::allocate(std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  // A block larger than the machine's memory can never be backed. Refusing it
  // here gives the same DeviceError everywhere, whereas malloc's answer
  // depends on the overcommit policy (and sanitizer allocators abort).
  static const std::size_t kPhysical = physical_memory();
  if (gpu_.ordinal < 0 && nbytes > kPhysical)
    throw DeviceError("[allocate] cannot allocate " + std::to_string(nbytes) + " bytes (" + bytes_str(nbytes) +
                      ") on CPU " + std::to_string(device_id_) + ": more than the machine's memory (" +
                      bytes_str(kPhysical) + "); shard the array over more devices or make it smaller");
  if (gpu_.ordinal >= 0 && nbytes > gpu_.total_bytes)
    throw DeviceError("[allocate] cannot allocate " + std::to_string(nbytes) + " bytes (" + bytes_str(nbytes) +
                      ") on CUDA device " + std::to_string(device_id_) + " (GPU " + std::to_string(gpu_.ordinal) +
                      "): more than the GPU's memory (" + bytes_str(gpu_.total_bytes) +
                      "); shard the array over more devices or make it smaller");
  const std::size_t size = round_size(nbytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      cached_ -= size;
      count_alloc(size);
      return p;
    }
  }
  void* p = fresh(size);
  if (p == nullptr) {
    // Cached blocks of other sizes may be what stands in the way.
    release_cache();
    p = fresh(size);
  }
  if (p == nullptr && gpu_.ordinal >= 0)
    throw DeviceError("[allocate] out of memory on CUDA device " + std::to_string(device_id_) + " (GPU " +
                      std::to_string(gpu_.ordinal) + "): requested " + std::to_string(nbytes) + " bytes (" +
                      bytes_str(nbytes) + "), " + bytes_str(gpu_free_bytes(gpu_)) + " free on the GPU, " +
                      bytes_str(bytes_in_use()) + " in use by this device; shard the array over more devices or " +
                      "make it smaller");
  if (p == nullptr)
    throw DeviceError("[allocate] out of memory on CPU " + std::to_string(device_id_) + ": requested " +
                      std::to_string(nbytes) + " bytes (" + bytes_str(nbytes) + ")");
  if (gpu_.ordinal >= 0) {
    std::lock_guard<std::mutex> lock(mu_);
    count_alloc(size);
    return p;
  }
  // First touch on the owning worker places the pages near its core.
  auto touch = [p, size] {
    auto* b = static_cast<unsigned char*>(p);
    for (std::size_t off = 0; off < size; off += kPage) b[off] = 0;
  };
  if (size >= kPage) {
    if (current_device() == device_id_) {
      touch();
    } else {
      run_on_devices({Device::from_id(device_id_)}, [&](int) { touch(); });
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  count_alloc(size);
  return p;
}

void* Allocator::fresh(std::size_t size) {
  if (gpu_.ordinal >= 0) return gpu_allocate(gpu_, size);
  return std::aligned_alloc(kAlign, size);
}

void Allocator::release(void* p) {
  if (gpu_.ordinal >= 0) return gpu_deallocate(gpu_, p);
  std::free(p);
}

void Allocator::count_alloc(std::size_t size) {
  in_use_ += size;
  ++num_allocs_;
  peak_ = std::max(peak_, in_use_);
  largest_ = std::max(largest_, size);
  // Sampled under the lock, so a trace's samples of a device are in order.
  if (tracing()) [[unlikely]]
    record_memory(device_id_, static_cast<std::int64_t>(in_use_));
}

void Allocator::deallocate(void* p, std::size_t nbytes) {
  if (p == nullptr) return;
  const std::size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ -= size;
  if (tracing()) [[unlikely]]
    record_memory(device_id_, static_cast<std::int64_t>(in_use_));
  if (size > kMaxCachedBytes) {
    release(p);
    return;
  }
  // Make room by evicting other cached blocks, largest first: the block just
  // freed is the likeliest to be asked for again.
  while (cached_ + size > kMaxCachedBytes) {
    auto victim = std::prev(free_.end());
    release(victim->second);
    cached_ -= victim->first;
    free_.erase(victim);
  }
  free_.emplace(size, p);
  cached_ += size;
}

void Allocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, p] : free_) release(p);
  free_.clear();
  cached_ = 0;
}

Allocator::~Allocator() { release_cache(); }

std::size_t Allocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

std::size_t Allocator::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats st;
  st.bytes_in_use = static_cast<std::int64_t>(in_use_);
  st.peak_bytes_in_use = static_cast<std::int64_t>(peak_);
  st.bytes_cached = static_cast<std::int64_t>(cached_);
  st.num_allocs = num_allocs_;
  st.largest_alloc_size = static_cast<std::int64_t>(largest_);
  return st;
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = in_use_;
}

// ------------------------------------------------------------------- Worker

Worker::Worker(int device_id, bool poll) : device_id_(device_id), poll_(poll) {
  if (device_id == g_fail_worker_start_at.load())
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "simulated thread creation failure");
  thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() { stop(); }

void Worker::submit(std::function<void()> task, bool poll_after) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(task), poll_after);
    queued_.fetch_add(1, std::memory_order_release);
    wake = sleeping_;
  }
  if (wake) cv_.notify_one();
}

void Worker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable() && !is_current()) thread_.join();
}

void Worker::loop() {
  t_current_device = device_id_;
  bool poll_next = poll_;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty()) {
        if (stopping_) return;
        if (poll_next) {
          // Poll for a while before sleeping; yield so a thread with work
          // gets the core first.
          lock.unlock();
          const auto until = std::chrono::steady_clock::now() + kPollTime;
          while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
          lock.lock();
        }
        sleeping_ = true;
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        sleeping_ = false;
        if (queue_.empty()) return;  // stopping and drained
      }
      task = std::move(queue_.front().first);
      poll_next = poll_ || queue_.front().second;
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();  // tasks catch their own exceptions (see run_on_devices)
  }
}

// ------------------------------------------------------------------ Runtime

Runtime::Runtime(int n, int process, std::vector<int> first_device, Platform platform)
    : process_(process), first_device_(std::move(first_device)), platform_(platform) {
  const int first = first_device_[process_];
  allocators_.reserve(n);
  workers_.reserve(n);
  if (platform_ == Platform::Cuda) {
    // Device i of this process is on GPU i / k (k devices per GPU).
    const int per_gpu = config::devices_per_gpu();
    for (int i = 0; i < n; ++i) gpus_.push_back(gpu_open(i / per_gpu, first + i));
  }
  for (int i = 0; i < n; ++i)
    allocators_.push_back(std::make_unique<Allocator>(first + i, platform_ == Platform::Cuda ? &gpus_[i] : nullptr));
  try {
    for (int i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(first + i));
  } catch (const std::system_error& e) {
    // The system ran out of threads (ulimit -u, cgroup pids.max, memory for
    // stacks). Join the workers already started, so a later start with fewer
    // devices begins clean, and say how far we got.
    const int made = static_cast<int>(workers_.size());
    workers_.clear();
    throw DeviceError("[devices] could start only " + std::to_string(made) + " of " + std::to_string(n) +
                      " CPU devices (one worker thread each): " + e.what() +
                      "; ask for fewer with config::set_num_cpu_devices or TESSERA_NUM_CPU_DEVICES");
  }
  // Each CUDA device's worker drives its GPU: bind it there, once.
  for (int i = 0; i < static_cast<int>(gpus_.size()); ++i) {
    std::promise<void> bound;
    auto done = bound.get_future();
    workers_[i]->submit([&bound, g = gpus_[i]] {
      try {
        gpu_bind(g);
        bound.set_value();
      } catch (...) {
        bound.set_exception(std::current_exception());
      }
    });
    done.get();
  }
}

void Runtime::shutdown() {
  for (auto& w : workers_) w->stop();
  stop_processes();
}

int Runtime::process_of(int id) const {
  const auto it = std::upper_bound(first_device_.begin(), first_device_.end(), id);
  return static_cast<int>(it - first_device_.begin()) - 1;
}

std::size_t Runtime::local_index(int id) const {
  if (!is_local(id))
    throw DeviceError("[devices] internal: CPU " + std::to_string(id) + " belongs to process " +
                      std::to_string(process_of(id)) + ", not to this process (" + std::to_string(process_) + ")");
  return static_cast<std::size_t>(id - first_local());
}

Runtime& Runtime::get() {
  // Leaked on purpose: buffers held by static Arrays may be freed after
  // static destructors run. Workers are joined at exit.
  static Runtime* rt = [] {
    // First of all: a platform this process cannot run on leaves nothing
    // started.
    const Platform platform = chosen_platform();
    // Before the workers start, so they record from their first task and a
    // bad TESSERA_TRACE path leaves nothing started.
    start_trace_from_env();
    int n = g_requested_devices.load();
    if (platform == Platform::Cuda) {
      // Every GPU this process sees, k devices each.
      n = cuda_device_count() * config::devices_per_gpu();
    } else if (n == 0) {
      n = default_device_count();
    }
    // Join the other processes (MPI under mpirun): every process learns how
    // many devices each has, so device ids are global.
    ProcessLayout layout = start_processes(n);
    auto* r = new Runtime(n, layout.index, std::move(layout.first_device), platform);
    g_started = true;
    std::atexit([] { Runtime::get().shutdown(); });
    return r;
  }();
  return *rt;
}

bool Runtime::started() { return g_started.load(); }

int current_device() { return t_current_device; }

std::string device_label(int id) { return device_labels({id}); }

std::string device_labels(const std::vector<int>& ids) {
  const bool gpu = Runtime::started() && Runtime::get().platform() == Platform::Cuda;
  std::string s = gpu ? (ids.size() == 1 ? "CUDA device " : "CUDA devices ") : "CPU ";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s;
}

void fail_worker_start_at(int device_id) { g_fail_worker_start_at = device_id; }

void run_on_devices(const std::vector<Device>& all_devices, const std::function<void(int)>& fn) {
  Runtime& rt = Runtime::get();
  // Another process's devices run on that process.
  std::vector<int> index;  // entries of all_devices to run here
  index.reserve(all_devices.size());
  for (int i = 0; i < static_cast<int>(all_devices.size()); ++i)
    if (rt.is_local(all_devices[i].id())) index.push_back(i);
  const int n = static_cast<int>(index.size());
  if (n == 0) return;
  // Shared with the tasks: the last task to finish may still be notifying
  // when the caller, having seen the count reach zero, returns.
  struct State {
    std::atomic<int> remaining;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::exception_ptr> errors;
  };
  auto st = std::make_shared<State>();
  st->remaining.store(n, std::memory_order_relaxed);
  st->errors.resize(n);
  auto finish = [](State& s) {
    if (s.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      { std::lock_guard<std::mutex> lock(s.mu); }
      s.cv.notify_all();
    }
  };
  const bool poll = rt.polls_for(n);
  // Each device's task shows on its timeline row, named after the call that
  // started it (the caller's innermost scope, e.g. "reshard").
  const std::string_view label = TimelineScope::innermost_name("task");
  // Tasks allocate as their caller does (HostStaging).
  const bool staging = t_host_staging;
  auto task = [&fn, &index, label, staging](int i) {
    TimelineScope scope(label, "task");
    HostStaging stage(staging);
    fn(index[i]);
  };
  std::vector<int> inline_indices;
  for (int i = 0; i < n; ++i) {
    Worker& w = rt.worker(all_devices[index[i]].id());
    if (w.is_current()) {
      inline_indices.push_back(i);  // run after dispatching the others, so they overlap
      continue;
    }
    w.submit([st, &task, i, finish] {
      try {
        task(i);
      } catch (...) {
        st->errors[i] = std::current_exception();
      }
      finish(*st);
    }, poll);
  }
  for (int i : inline_indices) {
    try {
      task(i);
    } catch (...) {
      st->errors[i] = std::current_exception();
    }
    finish(*st);
  }
  if (poll) {
    const auto until = std::chrono::steady_clock::now() + kPollTime;
    while (st->remaining.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  }
  if (st->remaining.load(std::memory_order_acquire) > 0) {
    std::unique_lock<std::mutex> lock(st->mu);
    st->cv.wait(lock, [&] { return st->remaining.load(std::memory_order_acquire) == 0; });
  }
  for (auto& e : st->errors) {
    if (e) {
      // Take the only reference, so the exception dies on this thread and
      // not with the state a worker may still be releasing.
      std::exception_ptr first = std::move(e);
      std::rethrow_exception(first);
    }
  }
}

void run_inline_on_devices(const std::vector<Device>& all_devices, const std::function<void(int)>& fn) {
  Runtime& rt = Runtime::get();
  // A GPU is driven by its worker's thread alone (its stream is bound there).
  if (rt.platform() == Platform::Cuda) return run_on_devices(all_devices, fn);
  const std::string_view label = TimelineScope::innermost_name("task");
  std::exception_ptr first;
  const int outer = t_current_device;
  for (int i = 0; i < static_cast<int>(all_devices.size()); ++i) {
    const int id = all_devices[i].id();
    if (!rt.is_local(id)) continue;
    // As the device: its allocations are touched here, and the timeline
    // shows the task on the device's row, as when its worker runs it.
    t_current_device = id;
    try {
      TimelineScope scope(label, "task");
      fn(i);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    t_current_device = outer;
  }
  if (first) std::rethrow_exception(first);
}

void run_on_devices_sized(const std::vector<Device>& devices, const std::function<void(int)>& fn, std::int64_t bytes) {
  if (devices.size() > 1 && bytes < kInlineBytes) return run_inline_on_devices(devices, fn);
  run_on_devices(devices, fn);
}

// ------------------------------------------------------------------- Buffer

HostStaging::HostStaging(bool on) : prev_(t_host_staging) { t_host_staging = prev_ || on; }
HostStaging::~HostStaging() { t_host_staging = prev_; }
bool HostStaging::active() { return t_host_staging; }

KeepAllocations::KeepAllocations(std::vector<Buffer>* keep) : prev_(t_keep) { t_keep = keep; }
KeepAllocations::~KeepAllocations() { t_keep = prev_; }

Buffer Buffer::host_staging(int device_id, std::size_t nbytes) {
  if (Runtime::get().platform() == Platform::Cpu) return Buffer(device_id, nbytes);
  Buffer b;
  void* p = gpu_host_allocate(nbytes, "host staging");
  b.ptr_ = std::shared_ptr<void>(p, [nbytes](void* q) { gpu_host_free(q, nbytes); });
  b.nbytes_ = nbytes;
  b.device_id_ = device_id;
  b.host_ = true;
  return b;
}

Buffer::Buffer(int device_id, std::size_t nbytes) : nbytes_(nbytes), device_id_(device_id) {
  Runtime& rt = Runtime::get();
  if (t_host_staging && rt.platform() != Platform::Cpu) {
    *this = host_staging(device_id, nbytes);
    return;
  }
  host_ = rt.platform() == Platform::Cpu;
  Allocator& a = rt.allocator(device_id);
  void* p = a.allocate(nbytes);
  ptr_ = std::shared_ptr<void>(p, [&a, nbytes](void* q) { a.deallocate(q, nbytes); });
  if (t_keep != nullptr) t_keep->push_back(*this);
}

void Buffer::not_host_memory() const {
  throw DeviceError("[internal] host code reached for the memory of CUDA device " + std::to_string(device_id_) +
                    " directly; it must be copied to the host (or the op needs a CUDA kernel)");
}

}  // namespace tessera::detail

// ------------------------------------------------------------ public device API

namespace tessera {

std::string Device::kind() const {
  return detail::Runtime::get().platform() == detail::Platform::Cuda ? "cuda" : "cpu";
}

std::string Device::str() const {
  return (kind() == "cuda" ? "CudaDevice(id=" : "CpuDevice(id=") + std::to_string(id_) + ")";
}

int Device::process_index() const { return detail::Runtime::get().process_of(id_); }

std::vector<Device> devices() {
  int n = detail::Runtime::get().num_devices();
  std::vector<Device> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.push_back(Device::from_id(i));
  return out;
}

std::vector<Device> devices(std::string_view platform) {
  // Before the runtime starts, asking for a platform chooses it (checked
  // first, so no runtime starts on a platform that cannot run).
  const std::string origin = "devices(\"" + std::string(platform) + "\")";
  if (!detail::Runtime::started()) detail::request_platform(platform, origin);
  const detail::Platform have = detail::Runtime::get().platform();
  const detail::Platform want = detail::platform_named(platform, origin);
  if (want != have)
    throw DeviceError("[devices] " + origin + ": this process runs on the " +
                      (have == detail::Platform::Cuda ? "CUDA devices" : "CPU devices") +
                      " (one platform per process); choose the platform before the first use of devices, with "
                      "TESSERA_PLATFORM=" + std::string(platform) + " or by calling devices(\"" +
                      std::string(platform) + "\") first");
  return devices();
}

int device_count() { return detail::Runtime::get().num_devices(); }

std::vector<Device> local_devices() {
  const detail::Runtime& rt = detail::Runtime::get();
  std::vector<Device> out;
  for (int i = 0; i < rt.num_local(); ++i) out.push_back(Device::from_id(rt.first_local() + i));
  return out;
}

int local_device_count() { return detail::Runtime::get().num_local(); }

int process_index() { return detail::Runtime::get().process_index(); }

int process_count() { return detail::Runtime::get().process_count(); }

namespace distributed {
void initialize() { (void)detail::Runtime::get(); }
bool is_initialized() { return detail::Runtime::started(); }
const char* backend() { return detail::Runtime::get().process_count() > 1 ? detail::process_backend() : "none"; }
}  // namespace distributed

namespace {
detail::Allocator& allocator_of(const Device& device, const char* op) {
  detail::Runtime& rt = detail::Runtime::get();
  const int n = rt.num_devices();
  if (device.id() < 0 || device.id() >= n)
    throw DeviceError(std::string("[") + op + "] expected a device id in [0, " + std::to_string(n) + "), got " +
                      std::to_string(device.id()));
  if (!rt.is_local(device.id()))
    throw DeviceError(std::string("[") + op + "] " + device.str() + " belongs to process " +
                      std::to_string(rt.process_of(device.id())) + "; this is process " +
                      std::to_string(rt.process_index()) + ", which sees only its own devices' memory");
  return rt.allocator(device.id());
}
}  // namespace

MemoryStats memory_stats(const Device& device) { return allocator_of(device, "memory_stats").stats(); }

void reset_peak_memory(const Device& device) { allocator_of(device, "reset_peak_memory").reset_peak(); }

namespace config {
void set_num_cpu_devices(int n) {
  if (n < 1) throw DeviceError("[set_num_cpu_devices] expected a device count >= 1, got " + std::to_string(n));
  if (n > detail::kMaxCpuDevices)
    throw DeviceError("[set_num_cpu_devices] expected a device count <= " + std::to_string(detail::kMaxCpuDevices) +
                      " (each CPU device is a worker thread), got " + std::to_string(n));
  if (detail::Runtime::started()) {
    int have = detail::Runtime::get().num_local();
    if (have != n)
      throw DeviceError("[set_num_cpu_devices] the runtime already started with " + std::to_string(have) +
                        " devices; call it before first use (asked for " + std::to_string(n) + ")");
    return;
  }
  detail::g_requested_devices = n;
}
}  // namespace config

}  // namespace tessera
