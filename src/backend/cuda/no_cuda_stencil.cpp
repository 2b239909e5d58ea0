// A build without CUDA: the stencil kernels (stencil.hpp) exist, so the
// CUDA devices' evals link, and each raises DeviceError if it is ever
// reached (no CUDA device is made without a GPU, so it is not).
#include <string>

#include "backend/cuda/stencil.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void diff(DType, const std::vector<Segment>&, void*, const Lines&, int, void*) { no_cuda("diff"); }

void line_totals(DType, const void*, void*, const Lines&) { no_cuda("line_totals"); }

void scan_offsets(DType, const void*, int, const Lines&, void*) { no_cuda("scan_offsets"); }

void scan_block(DType, const void*, void*, const Lines&, const void*) { no_cuda("scan_block"); }

void convolve(DType, const std::vector<Segment>&, void*, const Lines&, std::int64_t, const void*, std::int64_t,
              std::int64_t) {
  no_cuda("convolve");
}

void convolve2d(DType, const void*, DType, const std::vector<Slice>&, void*, const std::vector<Slice>&, const void*,
                std::int64_t, std::int64_t) {
  no_cuda("convolve2d");
}

void gradient(DType, const std::vector<Segment>&, std::int64_t, std::int64_t, void*, const Lines&, std::int64_t,
              double) {
  no_cuda("gradient");
}

void interp(DType, DType, DType, const void*, void*, std::int64_t, const void*, const void*, std::int64_t) {
  no_cuda("interp");
}

}  // namespace tessera::cuda
