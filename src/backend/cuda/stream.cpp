// The calling thread's GPU (backend/cuda/stream.hpp) with the CUDA runtime.
#include "backend/cuda/stream.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <map>
#include <string>
#include <utility>

#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {
thread_local Current t_current;

// The calling thread's recording (stream.hpp).
struct Recording {
  int device_id = -1;
  void* own_stream = nullptr;  // the thread's stream, given back at the end
  std::vector<std::function<void()>> work;
};
thread_local Recording t_record;

std::string where(const Current& c) {
  std::string s = "CUDA device " + std::to_string(c.device_id);
  if (c.emulated) return s + " (emulated)";
  return s + " (GPU " + std::to_string(c.ordinal) + ")";
}
}  // namespace

const Current& current(const char* op) {
  if (t_current.ordinal < 0)
    throw DeviceError(std::string("[") + op + "] internal: a CUDA kernel was called from a thread that drives no GPU");
  return t_current;
}

void bind_current(const Current& c) { t_current = c; }

void check(int err, const char* op, const char* what) {
  if (err == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(err);
  (void)cudaGetLastError();  // clear a non-sticky error so later calls do not report it
  std::string msg = std::string("[") + op + "] " + what + " failed";
  if (t_current.ordinal >= 0) msg += " on " + where(t_current);
  msg += std::string(": ") + cudaGetErrorName(e) + " (" + std::to_string(err) + "): " + cudaGetErrorString(e);
  throw DeviceError(msg);
}

namespace {
std::atomic<std::int64_t> g_grid_cap{0};  // set_grid_blocks_cap
}  // namespace

void set_grid_blocks_cap(std::int64_t blocks) { g_grid_cap.store(blocks < 0 ? 0 : blocks); }

unsigned grid_blocks(const void* kernel, std::int64_t n) {
  // Per thread (no lock), by kernel and GPU: a thread that runs small work
  // inline acts as several devices in turn, which may be different GPUs.
  thread_local std::map<std::pair<const void*, int>, std::int64_t> t_wave;
  const std::pair<const void*, int> key{kernel, t_current.ordinal};
  auto it = t_wave.find(key);
  if (it == t_wave.end()) {
    std::int64_t wave = 4096;
    int per_sm = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kLaunchThreads, 0) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, t_current.ordinal) == cudaSuccess &&
        per_sm > 0 && sms > 0) {
      wave = static_cast<std::int64_t>(per_sm) * sms;
    } else {
      (void)cudaGetLastError();  // not sticky: the launch reports real failures
    }
    it = t_wave.emplace(key, wave).first;
  }
  const std::int64_t wanted = (n + kLaunchThreads - 1) / kLaunchThreads;
  const std::int64_t cap = g_grid_cap.load(std::memory_order_relaxed);
  const std::int64_t most = cap > 0 ? cap : it->second;
  const std::int64_t blocks = wanted < most ? wanted : most;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

int recording_device() { return t_record.device_id; }

void record_begin(int device_id, void* record_stream) {
  t_record.device_id = device_id;
  t_record.own_stream = t_current.stream;
  t_record.work.clear();
  if (record_stream != nullptr) t_current.stream = record_stream;
}

std::vector<std::function<void()>> record_end() {
  if (t_record.device_id >= 0) t_current.stream = t_record.own_stream;
  t_record.device_id = -1;
  std::vector<std::function<void()>> work = std::move(t_record.work);
  t_record.work.clear();
  return work;
}

void run_emulated(std::function<void()> work) {
  if (t_record.device_id >= 0)
    t_record.work.push_back(std::move(work));
  else
    work();
}

void refuse_while_recording(const char* op, const char* what) {
  if (t_record.device_id < 0) return;
  throw DeviceError(std::string("[") + op + "] cannot be recorded into a CUDA graph: " + what +
                    " needs the GPU's results on the host while the work is only being recorded");
}

void synchronize(const char* op) {
  refuse_while_recording(op, "waiting for the GPU");
  const Current& c = current(op);
  if (c.emulated) return;
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(c.stream)), op, "a kernel");
}

}  // namespace tessera::cuda
