// Internal runtime: per-device worker threads, caching allocators, and the
// executor that runs one task per device.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/gpus.hpp"
#include "tessera/device.hpp"
#include "tessera/observe.hpp"

namespace tessera::detail {

/// Most CPU devices a process may ask for (config::set_num_cpu_devices,
/// TESSERA_NUM_CPU_DEVICES). Each is a thread; far more than any machine's
/// cores, far fewer than would exhaust a default thread limit.
inline constexpr int kMaxCpuDevices = 4096;

/// Caching allocator of one device. Blocks are 64-byte aligned. A fresh block
/// has its pages first touched on the owning worker (so the OS places them
/// near that core); freed blocks are kept in size-keyed free lists and reused.
///
/// The allocator of a CUDA device (`gpu` given) keeps the same accounts and
/// the same cache over its GPU memory pool (runtime/gpus.hpp): no first
/// touch, and blocks go back to the pool instead of the OS. Its blocks
/// are freed on the host once the work that used them is done (every task
/// waits for its stream), so a cached block is free to reuse at once.
class Allocator {
 public:
  explicit Allocator(int device_id, const GpuHandle* gpu = nullptr) : device_id_(device_id) {
    if (gpu) gpu_ = *gpu;
  }
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// A block of at least `nbytes` (nullptr for 0). Thread-safe.
  void* allocate(std::size_t nbytes);
  /// Returns a block to the cache. Thread-safe.
  void deallocate(void* p, std::size_t nbytes);
  /// Frees every cached block.
  void release_cache();

  std::size_t bytes_in_use() const;
  std::size_t bytes_cached() const;
  /// All counters at once (consistent with each other).
  MemoryStats stats() const;
  /// Sets the peak to the bytes in use now.
  void reset_peak();

  /// Size actually reserved for a request of `nbytes`.
  static std::size_t round_size(std::size_t nbytes);

 private:
  void count_alloc(std::size_t size);  // under mu_
  void* fresh(std::size_t size);       // a new block from the OS or the GPU's pool
  void release(void* p);               // back to where fresh() took it

  int device_id_;
  GpuHandle gpu_;  // ordinal < 0: host memory
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> free_;  // rounded size -> block
  std::size_t in_use_ = 0;
  std::size_t cached_ = 0;
  std::size_t peak_ = 0;
  std::size_t largest_ = 0;
  std::int64_t num_allocs_ = 0;
};

/// A persistent thread with an in-order queue of tasks. After its queue runs
/// dry the thread may poll briefly (yielding the core) before it sleeps, so a
/// stream of small ops does not pay a sleep/wake-up per op: it does when the
/// last task asked for it (work spread over no more devices than cores), or
/// always when constructed with `poll`.
class Worker {
 public:
  explicit Worker(int device_id, bool poll = false);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Appends a task; tasks run in submission order. `poll_after`: poll for
  /// more work after it instead of sleeping at once.
  void submit(std::function<void()> task, bool poll_after = false);
  /// Stops after the queued tasks and joins the thread.
  void stop();
  /// True when called from this worker's thread.
  bool is_current() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void loop();
  int device_id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, bool>> queue_;
  std::atomic<int> queued_{0};  // queue_.size(), readable without the lock
  bool sleeping_ = false;       // guarded by mu_
  bool stopping_ = false;
  bool poll_;
  std::thread thread_;
};

/// What a process's devices are: CPU threads, or GPUs (TESSERA_PLATFORM,
/// devices("cuda") before the runtime starts). One platform per process.
enum class Platform { Cpu, Cuda };

/// The process-wide set of devices. Created on first use, never destroyed
/// (buffers may outlive static destructors); workers are joined at exit.
/// With several processes (comm/process.hpp) device ids are global, ordered
/// by process; this process has workers and allocators only for its own
/// devices, ids first_local() .. first_local() + num_local() - 1.
class Runtime {
 public:
  static Runtime& get();
  /// True once get() has been called.
  static bool started();

  /// Devices of every process.
  int num_devices() const { return first_device_.back(); }
  /// This process's devices.
  int num_local() const { return static_cast<int>(workers_.size()); }
  int first_local() const { return first_device_[process_]; }
  int process_index() const { return process_; }
  int process_count() const { return static_cast<int>(first_device_.size()) - 1; }
  /// The process owning device `id`.
  int process_of(int id) const;
  bool is_local(int id) const { return id >= first_local() && id < first_local() + num_local(); }
  Worker& worker(int id) { return *workers_.at(local_index(id)); }
  Allocator& allocator(int id) { return *allocators_.at(local_index(id)); }
  Platform platform() const { return platform_; }
  /// The GPU of local CUDA device `id`; nullptr on the CPU platform.
  const GpuHandle* gpu(int id) const {
    return platform_ == Platform::Cuda ? &gpus_.at(local_index(id)) : nullptr;
  }
  /// Whether work over `n` devices should poll (yielding, for a while)
  /// before it sleeps while waiting. When each device has a core the others
  /// are microseconds away. With more devices than cores it pays too: a
  /// yield hands the core to a member that has work (often the one being
  /// waited for), where a sleep costs a futex wake and two context switches
  /// per member per collective (8 devices on 2 cores: a shard_map with two
  /// pmeans ran in 530 us sleeping, 280 us polling).
  bool polls_for(int) const { return true; }

 private:
  Runtime(int n, int process, std::vector<int> first_device, Platform platform);
  void shutdown();
  // Index of local device `id` among this process's; raises DeviceError for
  // another process's device (its memory is not here).
  std::size_t local_index(int id) const;
  int process_ = 0;
  std::vector<int> first_device_;  // per process, its first device id; then the total
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::unique_ptr<Allocator>> allocators_;
  Platform platform_ = Platform::Cpu;
  std::vector<GpuHandle> gpus_;  // CUDA platform: per local device
};

/// The platform the runtime starts (or started) on: TESSERA_PLATFORM, else
/// what config::set_platform / devices(platform) asked for first, else the
/// CPU. Raises DeviceError when that platform cannot run here.
Platform chosen_platform();

/// "CPU 3", or "CUDA device 3" on the CUDA platform: a device in messages.
std::string device_label(int id);
/// The same for several: "CPU 0, 1", "CUDA devices 0, 1".
std::string device_labels(const std::vector<int>& ids);

/// Id of the device whose worker runs the current thread, or -1.
int current_device();

/// Test hook: starting the worker of `device_id` fails as thread creation
/// does when the system has no threads left (std::system_error); -1 (the
/// default) turns it off. Lets tests check that a failed start raises
/// DeviceError and leaves the runtime startable, without exhausting threads.
void fail_worker_start_at(int device_id);

/// Runs fn(i) for every i on the worker of devices[i] and waits for all.
/// Devices of other processes are skipped: their own process runs their
/// entries. Work for the device whose worker is the caller runs inline. If tasks throw,
/// every task still finishes, then the exception of the lowest i is rethrown
/// as its original type.
void run_on_devices(const std::vector<Device>& devices, const std::function<void(int)>& fn);

/// Runs fn(i) for every local device, one after another on the calling
/// thread, each as that device (current_device() is its id while it runs):
/// for work so small that waking the device threads costs more than doing
/// it. fn must need no other device's task to be running at the same time
/// (no collective). Errors as run_on_devices: every entry runs, then the
/// exception of the lowest i is rethrown.
void run_inline_on_devices(const std::vector<Device>& devices, const std::function<void(int)>& fn);

/// While one is open on a thread, Buffer(device_id, n) there allocates host
/// staging memory (Buffer::host_staging), and so do the tasks that
/// run_on_devices starts from that thread. The cross-process collectives
/// run their host algorithms this way on GPU devices' bytes: whatever they
/// allocate is host memory, and only their inputs and results cross to the
/// GPU. Scopes nest; a scope with `on == false` changes nothing.
class HostStaging {
 public:
  explicit HostStaging(bool on = true);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  /// Whether one is open on this thread.
  static bool active();

 private:
  bool prev_ = false;
};

class Buffer;

/// While one is open on a thread, every Buffer that thread allocates on a
/// device (not host staging) is also appended to `keep`, which so holds it
/// past the allocating code's own references: jit's graph replay keeps the
/// temporaries a recorded graph reads and writes (their addresses are in
/// it) for as long as the graph lives. Scopes nest; the innermost keeps.
class KeepAllocations {
 public:
  explicit KeepAllocations(std::vector<Buffer>* keep);
  ~KeepAllocations();
  KeepAllocations(const KeepAllocations&) = delete;
  KeepAllocations& operator=(const KeepAllocations&) = delete;

 private:
  std::vector<Buffer>* prev_ = nullptr;
};

/// Work touching fewer bytes than this over all devices runs inline (1 MiB
/// is about 20 us of copying or elementwise math on one core; waking eight
/// device threads on two cores costs 40-60 us).
constexpr std::int64_t kInlineBytes = std::int64_t(1) << 20;

/// run_inline_on_devices when `bytes` (what fn reads and writes over all
/// devices) is below kInlineBytes and there is more than one device, else
/// run_on_devices. The same conditions on fn as run_inline_on_devices.
void run_on_devices_sized(const std::vector<Device>& devices, const std::function<void(int)>& fn, std::int64_t bytes);

/// A device buffer: `nbytes` bytes on one device, returned to that device's
/// allocator when the last reference goes.
class Buffer {
 public:
  Buffer() = default;
  /// Allocates on device `device_id` (call from any thread); in host
  /// staging memory instead while a HostStaging scope is open on the thread.
  Buffer(int device_id, std::size_t nbytes);
  /// `nbytes` of host memory standing for device `device_id`'s: page-locked
  /// staging memory on GPUs (gpu_host_allocate), the device's own memory on
  /// the CPU. For host code that must hold a GPU's bytes (transfers between
  /// processes).
  static Buffer host_staging(int device_id, std::size_t nbytes);
  /// The memory, for host code: raises DeviceError when it is a GPU's
  /// (host code must copy it with the GPU port, or run a CUDA kernel).
  void* data() const {
    if (!host_) [[unlikely]]
      not_host_memory();
    return ptr_.get();
  }
  /// The memory in its own space (a device pointer on a GPU), for kernels
  /// and copies that know which space it is.
  void* device_data() const { return ptr_.get(); }
  /// True for host memory (CPU devices).
  bool on_host() const { return host_; }
  std::size_t nbytes() const { return nbytes_; }
  int device_id() const { return device_id_; }
  /// `nbytes` starting `offset` bytes in, sharing this buffer's memory (which
  /// stays allocated while the view lives). Buffers are immutable once
  /// filled, so a view is a cheap copy.
  Buffer view(std::size_t offset, std::size_t nbytes) const {
    Buffer b;
    b.ptr_ = std::shared_ptr<void>(ptr_, static_cast<unsigned char*>(ptr_.get()) + offset);
    b.nbytes_ = nbytes;
    b.device_id_ = device_id_;
    b.host_ = host_;
    return b;
  }

 private:
  [[noreturn]] void not_host_memory() const;
  std::shared_ptr<void> ptr_;
  bool host_ = true;
  std::size_t nbytes_ = 0;
  int device_id_ = -1;
};

}  // namespace tessera::detail
