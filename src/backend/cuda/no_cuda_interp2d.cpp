// A build without CUDA: the interp2d kernels (interp2d.hpp) exist, so the
// CUDA evals link, and each raises DeviceError if it is ever reached.
#include <string>

#include "backend/cuda/interp2d.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

std::size_t interp2d_scratch(const Interp2dParams&, const Interp2dGrid&, std::int64_t, bool) {
  no_cuda("interp2d_scratch");
}
void interp2d(const Interp2dParams&, const Interp2dGrid&, const void*, DType, const void*, DType, std::int64_t,
              const void*, DType, std::int64_t, void*, void*) {
  no_cuda("interp2d");
}
void interp2d_transpose(const Interp2dParams&, const Interp2dGrid&, const void*, DType, const void*, DType,
                        std::int64_t, const void*, DType, std::int64_t, void*, void*) {
  no_cuda("interp2d_transpose");
}

}  // namespace tessera::cuda
