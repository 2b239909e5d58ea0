// The shared-math sweep's kernel: one thread per (probe, input), calling the
// same __host__ __device__ source as the host (sweep.hpp), compiled with
// --fmad=false like every CUDA source of the project.
#include <cuda_runtime_api.h>

#include "sweep_device.hpp"

namespace tessera::sweep {

namespace {

__global__ void sweep_kernel(u64* bits, u32* slow) {
  const i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= kProbes * kInputs) return;
  const Result r = run_probe(static_cast<int>(k / kInputs), k % kInputs);
  bits[k] = r.bits;
  slow[k] = r.slow;
}

std::string named(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ", " +
         std::to_string(static_cast<int>(e)) + ")";
}

}  // namespace

int gpu_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = named("cudaGetDeviceCount", e);
    (void)cudaGetLastError();
    return 0;
  }
  if (n == 0) *why = "the driver lists no device";
  return n;
}

bool run_all_on_gpu(int device, std::vector<Result>& out, std::string* why) {
  const i64 n = kProbes * kInputs;
  u64* bits = nullptr;
  u32* slow = nullptr;
  std::vector<u64> hb(static_cast<std::size_t>(n));
  std::vector<u32> hl(static_cast<std::size_t>(n));
  auto fail = [&](const char* what, cudaError_t e) {
    *why = named(what, e);
    cudaFree(bits);
    cudaFree(slow);
    return false;
  };
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return fail("cudaSetDevice", e);
  if ((e = cudaMalloc(&bits, sizeof(u64) * n)) != cudaSuccess) return fail("cudaMalloc", e);
  if ((e = cudaMalloc(&slow, sizeof(u32) * n)) != cudaSuccess) return fail("cudaMalloc", e);
  constexpr int kBlock = 256;
  sweep_kernel<<<static_cast<unsigned>((n + kBlock - 1) / kBlock), kBlock>>>(bits, slow);
  if ((e = cudaGetLastError()) != cudaSuccess) return fail("sweep_kernel launch", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return fail("sweep_kernel", e);
  if ((e = cudaMemcpy(hb.data(), bits, sizeof(u64) * n, cudaMemcpyDeviceToHost)) != cudaSuccess)
    return fail("cudaMemcpy", e);
  if ((e = cudaMemcpy(hl.data(), slow, sizeof(u32) * n, cudaMemcpyDeviceToHost)) != cudaSuccess)
    return fail("cudaMemcpy", e);
  cudaFree(bits);
  cudaFree(slow);
  out.resize(static_cast<std::size_t>(n));
  for (i64 k = 0; k < n; ++k) out[static_cast<std::size_t>(k)] = {hb[static_cast<std::size_t>(k)], hl[static_cast<std::size_t>(k)]};
  return true;
}

}  // namespace tessera::sweep
