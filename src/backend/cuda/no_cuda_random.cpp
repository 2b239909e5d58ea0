// A build without CUDA: the random kernels (random.hpp) exist, so the CUDA
// devices' evals link, and each raises DeviceError if it is ever reached.
#include <string>

#include "backend/cuda/random.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void uniform(DType, void*, const std::vector<std::int64_t>&, const std::vector<Slice>&, const SampleKey&, double,
             double) {
  no_cuda("uniform");
}

void normal(DType, void*, const std::vector<std::int64_t>&, const std::vector<Slice>&, const SampleKey&) {
  no_cuda("normal");
}

void split_keys(const std::uint32_t*, std::int64_t, int, std::uint32_t*) { no_cuda("split_keys"); }

void fold_in_keys(const std::uint32_t*, std::int64_t, const std::uint32_t*, std::int64_t, std::uint32_t,
                  std::uint32_t*) {
  no_cuda("fold_in_keys");
}

}  // namespace tessera::cuda
