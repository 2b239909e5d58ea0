// What NCCL can do on a GPU machine, for scripts/gpu-check.sh: which NCCL
// library it finds and its version, and whether one GPU can hold several
// NCCL ranks. NCCL before 2.30 refuses two ranks on one GPU ("Duplicate GPU
// detected"); 2.30 allows it under NCCL_MULTI_RANK_GPU_ENABLE=1. Machines
// with one GPU can check collectives that run over NCCL only in the second
// case, as several ranks of one process on the same GPU.
//
// NCCL is opened at run time (dlopen), as the library would open it, so the
// probe builds wherever nccl.h is and says plainly when libnccl is absent.
// Usage: nccl_probe [LIBNCCL ...]; tries each path given, then the
// toolkit's and the system's libnccl.so.2. Prints one "nccl: ..." line per
// finding; exits 0 when NCCL ran ranks on one GPU, 3 when it refused them,
// 77 without a GPU or without NCCL, 1 on any other failure.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Nccl {
  void* lib = nullptr;
  ncclResult_t (*get_version)(int*) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;

  template <class F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (!f) std::printf("nccl: %s missing from the library\n", name);
    return f != nullptr;
  }
  bool open(const std::string& path) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    return sym(get_version, "ncclGetVersion") && sym(error_string, "ncclGetErrorString") &&
           sym(init_all, "ncclCommInitAll") && sym(destroy, "ncclCommDestroy") &&
           sym(group_start, "ncclGroupStart") && sym(group_end, "ncclGroupEnd") &&
           sym(all_reduce, "ncclAllReduce") && sym(send, "ncclSend") && sym(recv, "ncclRecv");
  }
};

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("nccl: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("nccl: no GPU\n");
    return 77;
  }
  std::vector<std::string> paths(argv + 1, argv + argc);
  if (const char* home = std::getenv("CUDA_HOME")) {
    paths.push_back(std::string(home) + "/lib/libnccl.so.2");
    paths.push_back(std::string(home) + "/lib64/libnccl.so.2");
  }
  paths.push_back("libnccl.so.2");
  Nccl n;
  std::string found;
  for (const std::string& p : paths)
    if (n.open(p)) {
      found = p;
      break;
    }
  if (found.empty()) {
    std::printf("nccl: no libnccl.so.2 (tried %zu paths)\n", paths.size());
    return 77;
  }
  int version = 0;
  n.get_version(&version);
  std::printf("nccl: %s, version %d.%d.%d\n", found.c_str(), version / 10000, version / 100 % 100, version % 100);

  // Two ranks of this process on GPU 0, each with its own stream, as
  // TESSERA_DEVICES_PER_GPU=2 would make them.
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
  constexpr int kRanks = 2;
  constexpr size_t kCount = 1 << 20;
  const int devs[kRanks] = {0, 0};
  ncclComm_t comms[kRanks] = {};
  const ncclResult_t init = n.init_all(comms, kRanks, devs);
  if (init != ncclSuccess) {
    std::printf("nccl: %d ranks on one GPU refused: %s (%d)\n", kRanks, n.error_string(init), static_cast<int>(init));
    return 3;
  }
  std::printf("nccl: %d ranks on one GPU: communicator made\n", kRanks);
  float* buf[kRanks] = {};
  float* got[kRanks] = {};
  cudaStream_t stream[kRanks] = {};
  std::vector<float> host(kCount);
  bool ok = cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  for (int r = 0; ok && r < kRanks; ++r) {
    for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(r + 1) * 0.5f + static_cast<float>(i % 7);
    ok = cuda_ok(cudaMalloc(&buf[r], kCount * sizeof(float)), "cudaMalloc") &&
         cuda_ok(cudaMalloc(&got[r], kCount * sizeof(float)), "cudaMalloc") &&
         cuda_ok(cudaStreamCreateWithFlags(&stream[r], cudaStreamNonBlocking), "cudaStreamCreate") &&
         cuda_ok(cudaMemcpy(buf[r], host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  // A sum, then each rank's buffer to the other by send/recv.
  auto check = [&](ncclResult_t e, const char* what) {
    if (e != ncclSuccess) std::printf("nccl: %s: %s\n", what, n.error_string(e));
    return e == ncclSuccess;
  };
  if (ok) {
    ok = check(n.group_start(), "ncclGroupStart");
    for (int r = 0; ok && r < kRanks; ++r)
      ok = check(n.all_reduce(buf[r], got[r], kCount, ncclFloat32, ncclSum, comms[r], stream[r]), "ncclAllReduce");
    ok = check(n.group_end(), "ncclGroupEnd") && ok;
    for (int r = 0; ok && r < kRanks; ++r) ok = cuda_ok(cudaStreamSynchronize(stream[r]), "all-reduce");
  }
  if (ok) {
    for (int r = 0; ok && r < kRanks; ++r) {
      ok = cuda_ok(cudaMemcpy(host.data(), got[r], kCount * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
      for (size_t i = 0; ok && i < kCount; ++i)
        if (host[i] != 0.5f + 1.0f + 2.0f * static_cast<float>(i % 7)) {
          std::printf("nccl: all-reduce: rank %d element %zu is %g\n", r, i, static_cast<double>(host[i]));
          ok = false;
        }
    }
    if (ok) std::printf("nccl: all-reduce of %zu floats over %d ranks on one GPU: right\n", kCount, kRanks);
  }
  if (ok) {
    ok = check(n.group_start(), "ncclGroupStart");
    for (int r = 0; ok && r < kRanks; ++r)
      ok = check(n.send(buf[r], kCount, ncclFloat32, 1 - r, comms[r], stream[r]), "ncclSend") &&
           check(n.recv(got[r], kCount, ncclFloat32, 1 - r, comms[r], stream[r]), "ncclRecv");
    ok = check(n.group_end(), "ncclGroupEnd") && ok;
    for (int r = 0; ok && r < kRanks; ++r) ok = cuda_ok(cudaStreamSynchronize(stream[r]), "send/recv");
    for (int r = 0; ok && r < kRanks; ++r) {
      ok = cuda_ok(cudaMemcpy(host.data(), got[r], kCount * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
      const float from = static_cast<float>(2 - r) * 0.5f;
      for (size_t i = 0; ok && i < kCount; ++i)
        if (host[i] != from + static_cast<float>(i % 7)) {
          std::printf("nccl: send/recv: rank %d element %zu is %g\n", r, i, static_cast<double>(host[i]));
          ok = false;
        }
    }
    if (ok) std::printf("nccl: send/recv between %d ranks on one GPU: right\n", kRanks);
  }
  for (int r = 0; r < kRanks; ++r) {
    if (comms[r]) n.destroy(comms[r]);
    if (buf[r]) cudaFree(buf[r]);
    if (got[r]) cudaFree(got[r]);
    if (stream[r]) cudaStreamDestroy(stream[r]);
  }
  return ok ? 0 : 1;
}
