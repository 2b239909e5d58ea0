// A build without CUDA: the shape ops' CUDA kernels (shape.hpp) exist, so
// their evals link, and each raises DeviceError if it is ever reached (no
// CUDA device is made without a GPU, so it is not).
#include <string>

#include "backend/cuda/shape.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void strided_copy(const char*, const void*, const std::vector<std::int64_t>&, void*, const std::vector<std::int64_t>&,
                  const std::vector<std::int64_t>&, std::size_t) {
  no_cuda("strided_copy");
}

void fill_bytes(const char*, void*, std::int64_t, const std::vector<unsigned char>&) { no_cuda("fill_bytes"); }

void flat_copy(const char*, const void*, const std::vector<Slice>&, const std::vector<Slice>&,
               const std::vector<std::int64_t>&, void*, const std::vector<Slice>&, const std::vector<std::int64_t>&,
               std::size_t) {
  no_cuda("flat_copy");
}

}  // namespace tessera::cuda
