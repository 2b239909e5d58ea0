// searchsorted and the median (primitives/search.hpp) on a CUDA device, by
// the kernels of backend/cuda/search.hpp: searchsorted's eval_cuda, and the
// median's shares on a GPU's blocks, which the lowering
// (spmd/lower_search.cpp) drives as it drives the CPU's.
#include <algorithm>
#include <memory>
#include <string>

#include "backend/cuda/search.hpp"
#include "backend/cuda/stream.hpp"
#include "core/array_impl.hpp"
#include "core/promote.hpp"
#include "core/validate.hpp"
#include "primitives/search.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

void Searchsorted::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const DType t = promote(in[0].dtype, in[1].dtype);
  const std::int64_t len = in[0].shape[0], n = num_elements(out[0].shape);
  if (n == 0) return;
  const Buffer scratch(current_device(), cuda::searchsorted_scratch(t, len));
  cuda::searchsorted(t, in[0].data, in[0].dtype, len, in[1].data, in[1].dtype, n, right_, out[0].data, out_,
                     scratch.device_data());
}

namespace {

/// cpu::reduce_map's walk of a block: adjacent dims of the same kind
/// merged, size-1 dims dropped.
cuda::MedianWalk walk_of(const Shape& block, const std::vector<bool>& reduced) {
  cuda::MedianWalk w;
  w.size = num_elements(block);
  std::vector<std::int64_t> extent;
  std::vector<bool> kind;
  for (std::size_t d = 0; d < block.size(); ++d) {
    if (!reduced[d]) w.outputs *= block[d];
    if (block[d] == 1) continue;
    if (!extent.empty() && kind.back() == reduced[d]) {
      extent.back() *= block[d];
    } else {
      extent.push_back(block[d]);
      kind.push_back(reduced[d]);
    }
  }
  if (extent.size() > 8)
    throw ShapeError("[median] CUDA kernels take arrays of at most 8 dims, got " + std::to_string(block.size()));
  w.nd = static_cast<int>(extent.size());
  std::int64_t s = 1;
  for (int i = w.nd; i-- > 0;) {
    w.extent[i] = extent[i];
    if (kind[i]) continue;
    w.out_stride[i] = s;
    s *= extent[i];
  }
  return w;
}

/// Key bits per radix pass for selections held whole: the widest digit
/// whose histograms (2 x 2^bits counts per output) hold no more counts than
/// the block's elements (or 4096 in all), as the lowering chooses them for
/// selections spread over devices.
int local_bits(std::int64_t size, std::int64_t outputs) {
  const double limit = std::max(static_cast<double>(size), 4096.0);
  for (int b : {8, 4, 2})
    if (static_cast<double>(outputs) * static_cast<double>(2 << b) <= limit) return b;
  return 1;
}

/// A block's selections on a GPU: the radix selection's state in the GPU's
/// memory. Every call waits for its kernels, as the lowering reads the
/// histograms and results right after.
class CudaMedianShare final : public MedianShare {
 public:
  CudaMedianShare(const Shape& block, const std::vector<bool>& reduced, DType t, int bits)
      : t_(t), walk_(walk_of(block, reduced)), bits_(bits) {
    const int dev = current_device();
    const std::size_t o = static_cast<std::size_t>(std::max<std::int64_t>(walk_.outputs, 1));
    prefix_ = Buffer(dev, 2 * o * sizeof(std::uint64_t));
    rank_ = Buffer(dev, 2 * o * sizeof(std::int64_t));
    valid_ = Buffer(dev, o);
    error_ = Buffer(dev, sizeof(int));
    state_.prefix = static_cast<std::uint64_t*>(prefix_.device_data());
    state_.rank = static_cast<std::int64_t*>(rank_.device_data());
    state_.valid = static_cast<unsigned char*>(valid_.device_data());
    state_.error = static_cast<int*>(error_.device_data());
  }
  std::int64_t outputs() const override { return walk_.outputs; }
  void select(const void* x, const bool* mask, void* lo, void* hi) const override {
    if (walk_.outputs == 0) return;
    const int bits = local_bits(walk_.size, walk_.outputs);
    const int passes = (t_ == DType::f64 ? 64 : 32) / bits;
    const Buffer hist(current_device(), static_cast<std::size_t>(walk_.outputs) *
                                            static_cast<std::size_t>(2 << bits) * sizeof(std::int64_t));
    auto* h = static_cast<std::int64_t*>(hist.device_data());
    cuda::median_reset(state_, walk_.outputs);
    for (int p = 0; p < passes; ++p) {
      cuda::median_count(t_, bits, p, walk_, x, mask, state_, h);
      cuda::median_advance(t_, bits, p, walk_.outputs, h, state_);
    }
    finish(lo, hi);
  }
  void count(int pass, const void* x, const bool* mask, std::int64_t* hist) const override {
    if (walk_.outputs == 0) return;
    if (pass == 0) cuda::median_reset(state_, walk_.outputs);
    cuda::median_count(t_, bits_, pass, walk_, x, mask, state_, hist);
    cuda::synchronize("median");
  }
  void advance(int pass, const std::int64_t* hist) override {
    if (walk_.outputs == 0) return;
    cuda::median_advance(t_, bits_, pass, walk_.outputs, hist, state_);
    cuda::synchronize("median");
  }
  void finish(void* lo, void* hi) const override {
    if (walk_.outputs == 0) return;
    cuda::median_finish(t_, walk_.outputs, state_, lo, hi);
    cuda::synchronize("median");
    int error = 0;
    read_buffer(error_, &error, sizeof error, "median");
    if (error) throw Error("[median] internal: the digit counts of a selection do not add up across devices");
  }

 private:
  DType t_;
  cuda::MedianWalk walk_;
  int bits_;
  Buffer prefix_, rank_, valid_, error_;
  cuda::MedianState state_;
};

}  // namespace

std::unique_ptr<MedianShare> MedianMiddle::cuda_share(const Shape& block, const std::vector<bool>& reduced, DType t,
                                                      int bits) const {
  return std::make_unique<CudaMedianShare>(block, reduced, t, bits);
}

}  // namespace tessera::detail
