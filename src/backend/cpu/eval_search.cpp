// The per-device kernels of searchsorted and median
// (primitives/search.hpp), by the kernels of backend/cpu/search.hpp:
// searchsorted's eval_cpu, and the median's shares, which the lowering
// (spmd/lower_search.cpp) drives over each device's block of x.
#include <memory>
#include <optional>

#include "backend/cpu/search.hpp"
#include "core/array_impl.hpp"
#include "core/promote.hpp"
#include "core/validate.hpp"
#include "primitives/search.hpp"

namespace tessera::detail {

void Searchsorted::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::searchsorted(promote(in[0].dtype, in[1].dtype), in[0].data, in[0].dtype, in[0].shape[0], in[1].data,
                    in[1].dtype, num_elements(out[0].shape), right_, out[0].data, out_);
}

void MedianMiddle::eval_cpu(const LocalArgs&, LocalOuts&) const {
  throw Error(msg("median", "internal: runs on whole arrays (eval_global)"));
}

namespace {

/// A block's selections: its reduce map, and the radix selection's state
/// when they are spread over several devices.
class CpuMedianShare final : public MedianShare {
 public:
  CpuMedianShare(const Shape& block, const std::vector<bool>& reduced, DType t, int bits)
      : t_(t), map_(cpu::reduce_map(block, reduced)) {
    if (bits > 0) radix_.emplace(t, map_.outputs, bits);
  }
  std::int64_t outputs() const override { return map_.outputs; }
  void select(const void* x, const bool* mask, void* lo, void* hi) const override {
    cpu::select_middle(t_, x, mask, map_, lo, hi);
  }
  void count(int pass, const void* x, const bool* mask, std::int64_t* hist) const override {
    radix_->count(pass, x, mask, map_, hist);
  }
  void advance(int pass, const std::int64_t* hist) override { radix_->advance(pass, hist); }
  void finish(void* lo, void* hi) const override { radix_->finish(lo, hi); }

 private:
  DType t_;
  cpu::ReduceMap map_;
  std::optional<cpu::RadixSelect> radix_;
};

}  // namespace

std::unique_ptr<MedianShare> MedianMiddle::share(const Shape& block, const std::vector<bool>& reduced, DType t,
                                                 int bits) const {
  return std::make_unique<CpuMedianShare>(block, reduced, t, bits);
}

int MedianMiddle::radix_passes(DType t, int bits) const { return cpu::key_bits(t) / bits; }

}  // namespace tessera::detail
