// A build without CUDA: the spectra kernels (spectra.hpp) exist, so the
// CUDA evals link, and each raises DeviceError if it is ever reached.
#include <string>

#include "backend/cuda/spectra.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

[[noreturn]] void no_cuda(const char* fn) {
  throw DeviceError(std::string("[") + fn + "] this build has no CUDA backend");
}

}  // namespace

std::size_t resample_scratch(const ResampleRows&) { no_cuda("resample_scratch"); }
std::string resample_accumulate(const ResampleRows&, double, const double[3], const double*, double*, void*) {
  no_cuda("resample_accumulate");
}
void resample_tangent(const ResampleRows&, const ResampleTangents&, const double[3], double*, double*, void*) {
  no_cuda("resample_tangent");
}
void resample_transpose(const ResampleRows&, const double*, double*, double*, double*, void*) {
  no_cuda("resample_transpose");
}
void fill_f64(double*, std::int64_t, double) { no_cuda("fill_f64"); }
double read_f64(const double*) { no_cuda("read_f64"); }

}  // namespace tessera::cuda
