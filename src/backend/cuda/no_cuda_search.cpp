// A build without CUDA: the search kernels (search.hpp) exist, so the CUDA
// evals link, and each raises DeviceError if it is ever reached.
#include <string>

#include "backend/cuda/search.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void searchsorted(DType, const void*, DType, std::int64_t, const void*, DType, std::int64_t, bool, void*, DType, void*) {
  no_cuda("searchsorted");
}
std::size_t searchsorted_scratch(DType, std::int64_t) { no_cuda("searchsorted_scratch"); }
void median_reset(const MedianState&, std::int64_t) { no_cuda("median_reset"); }
void median_count(DType, int, int, const MedianWalk&, const void*, const bool*, const MedianState&, std::int64_t*) {
  no_cuda("median_count");
}
void median_advance(DType, int, int, std::int64_t, const std::int64_t*, const MedianState&) {
  no_cuda("median_advance");
}
void median_finish(DType, std::int64_t, const MedianState&, void*, void*) { no_cuda("median_finish"); }

}  // namespace tessera::cuda
