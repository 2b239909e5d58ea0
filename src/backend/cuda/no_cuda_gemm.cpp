// A build without CUDA: the linear-algebra kernels (gemm.hpp) exist, so
// dot_general's eval_cuda links, and each raises DeviceError if it is ever
// reached (no CUDA device is made without a GPU, so it is not).
#include <string>

#include "backend/cuda/gemm.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void gemm(const StridedGemm&, const void*, const void*, void*) { no_cuda("gemm"); }

void gemm_exact(const StridedGemm&, const void*, const void*, void*) { no_cuda("gemm_exact"); }

void gather(const void*, const Shape&, const std::vector<std::int64_t>&, void*, std::size_t) { no_cuda("gather"); }

void sum_dims(DType, const void*, const Shape&, const std::vector<bool>&, void*) { no_cuda("sum_dims"); }

bool emulated_gpu() { no_cuda("emulated_gpu"); }

}  // namespace tessera::cuda
