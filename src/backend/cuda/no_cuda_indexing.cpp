// A build without CUDA: the indexing kernels (indexing.hpp) exist, so the
// CUDA devices' per-block methods link, and each raises DeviceError if it is
// ever reached.
#include <string>

#include "backend/cuda/indexing.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void take(const void*, std::int64_t, std::int64_t, std::int64_t, std::size_t, const std::int64_t*, std::int64_t,
          void*) {
  no_cuda("take");
}

void scatter_rows(DType, void*, std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const void*) {
  no_cuda("scatter_rows");
}

void add(DType, const void*, const void*, void*, std::int64_t) { no_cuda("add"); }

}  // namespace tessera::cuda
