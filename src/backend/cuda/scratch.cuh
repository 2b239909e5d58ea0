// One scratch allocation cut into a kernel's regions: each region's offset
// taken in order, 256-byte aligned (what cub and vector loads want), and
// the typed pointer at an offset.
#pragma once

#include <cstddef>

namespace tessera::cuda {

/// Hands out the regions of one scratch allocation in order.
class ScratchRegions {
 public:
  /// The offset of a new region of `bytes`.
  std::size_t take(std::size_t bytes) {
    const std::size_t o = end_;
    end_ += (bytes + 255) / 256 * 256;
    return o;
  }
  /// The bytes of the whole allocation.
  std::size_t total() const { return end_; }

 private:
  std::size_t end_ = 0;
};

/// The region at `off` of the scratch memory, as P.
template <class P>
P* at(void* scratch, std::size_t off) {
  return reinterpret_cast<P*>(static_cast<unsigned char*>(scratch) + off);
}

}  // namespace tessera::cuda
