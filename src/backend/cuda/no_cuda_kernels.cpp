// A build without CUDA (TESSERA_WITH_CUDA off, or no nvcc found): the CUDA
// kernels (kernels.hpp) exist, so the CUDA devices' evals link, and each
// raises DeviceError if it is ever reached (no CUDA device is made without
// a GPU, so it is not).
#include <string>

#include "backend/cuda/kernels.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

void unary(UnaryOp, DType, const void*, void*, std::int64_t) { no_cuda("unary"); }

void binary(BinaryOp, DType, const Operand&, const Operand&, void*, const std::vector<std::int64_t>&) {
  no_cuda("binary");
}

void select(DType, const Operand&, const Operand&, const Operand&, void*, const std::vector<std::int64_t>&) {
  no_cuda("select");
}

void convert(const void*, DType, void*, DType, std::int64_t) { no_cuda("convert"); }

void fill(DType, void*, std::int64_t, const void*) { no_cuda("fill"); }

void arange(DType, void*, Slice, double, double) { no_cuda("arange"); }

void linspace(DType, void*, Slice, const LinspaceParams&) { no_cuda("linspace"); }

void eye(DType, void*, Slice, Slice, std::int64_t) { no_cuda("eye"); }

void copy(void*, const void*, std::size_t) { no_cuda("copy"); }

}  // namespace tessera::cuda
