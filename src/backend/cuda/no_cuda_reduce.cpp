// A build without CUDA: the reduction kernels (reduce.hpp) exist, so the
// CUDA devices' evals and the GPU combine link, and each raises DeviceError
// if it is ever reached (no CUDA device is made without a GPU, so it is not).
#include <string>

#include "backend/cuda/reduce.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void reduce(ReduceOp, DType, const void*, const std::vector<std::int64_t>&, const std::vector<bool>&, void*, void*) {
  no_cuda("reduce");
}

void arg_best(bool, DType, const void*, const std::vector<std::int64_t>&, int, std::int64_t, void*, std::int64_t*) {
  no_cuda("arg_best");
}

void arg_candidates(DType, const void*, const std::int64_t*, const void*, std::int64_t, std::int64_t*) {
  no_cuda("arg_candidates");
}

std::size_t reduce_scratch(ReduceOp, DType, const std::vector<std::int64_t>&, const std::vector<bool>&) { return 0; }
void arg_indices(const std::int64_t*, std::int64_t, std::int32_t*) { no_cuda("arg_indices"); }

void tree_combine(ReduceOp, DType, int, const void*, void*, std::int64_t, int, const char*) { no_cuda("tree_combine"); }

}  // namespace tessera::cuda
