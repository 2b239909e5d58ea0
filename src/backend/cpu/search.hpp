// Per-device kernels of searchsorted and median (src/primitives/search; the
// primitives call them from backend/cpu/eval_search.cpp).
//
// The median kernels order floats by their bit patterns: key(v) maps an f32
// (f64) to a u32 (u64) whose unsigned order is the total order of the
// values, -inf < ... < -0.0 < 0.0 < ... < inf (NaN is kept apart). So "the
// k-th smallest value" is "the k-th smallest key", which integer counting
// finds exactly, and key -> value gives the value back bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail::cpu {

/// jnp.searchsorted of n values (dtype vdt) in the sorted sequence `seq`
/// (len elements of dtype sdt), both compared in dtype t, NaN last; indices
/// of dtype `out_dt` (i32 or i64) into out.
void searchsorted(DType t, const void* seq, DType sdt, std::int64_t len, const void* values, DType vdt, std::int64_t n,
                  bool right, void* out, DType out_dt);

/// A block's elements as seen by a reduction over some of its dims: each
/// element belongs to the output given by its coordinates on the kept dims
/// (row-major over the block's kept extents). Adjacent dims of the same
/// kind are merged and size-1 dims dropped, so the innermost loop is as long
/// as possible.
struct ReduceMap {
  std::vector<std::int64_t> extent;      // merged dims, outermost first
  std::vector<std::int64_t> out_stride;  // output index step per merged dim (0 on reduced dims)
  std::int64_t outputs = 1;              // kept elements (product of the kept extents)
  std::int64_t size = 0;                 // elements of the block
};
ReduceMap reduce_map(const Shape& block, const std::vector<bool>& reduced);

/// Bits of a key of dtype t (f32: 32, f64: 64).
int key_bits(DType t);

/// The two middle elements of every output of a block that holds its
/// outputs' selections whole: lo and hi (m.outputs values of dtype t each)
/// receive the elements of rank (c - 1) / 2 and c / 2 among the c selected
/// (mask true, or every element when mask is null), NaN where c = 0 or a
/// selected element is NaN. Exact (std::nth_element on the keys).
void select_middle(DType t, const void* x, const bool* mask, const ReduceMap& m, void* lo, void* hi);

/// The same for selections spread over several devices: a radix selection
/// run in lockstep by every device holding part of a selection, `bits` bits
/// of the key per pass (bits divides key_bits(t)). Per pass each device
/// counts its elements into a histogram (count), the histograms are summed
/// across the devices (the caller's all-reduce), and every device advances
/// the same way from the same sums (advance). See search.cpp for the
/// invariants.
class RadixSelect {
 public:
  RadixSelect(DType t, std::int64_t outputs, int bits);
  int passes() const { return key_bits_ / bits_; }
  /// Histogram entries per output of pass p: pass 0 counts one selection's
  /// digits plus the selected NaNs (2^bits + 1); later passes count the
  /// digits of the two middle elements' candidates separately (2 x 2^bits).
  std::int64_t hist_per_output(int pass) const;
  /// This device's histogram of pass p (outputs x hist_per_output(p), i64).
  void count(int pass, const void* x, const bool* mask, const ReduceMap& m, std::int64_t* hist) const;
  /// Advances from the histogram of pass p summed over every device.
  void advance(int pass, const std::int64_t* hist);
  /// After the last pass: the middle elements (dtype t) of every output.
  void finish(void* lo, void* hi) const;

 private:
  DType t_;
  std::int64_t outputs_;
  int bits_, key_bits_;
  // Per output and middle element s (index 2 * o + s): the key's bits
  // found so far and the element's rank among the selected elements that
  // share them.
  std::vector<std::uint64_t> prefix_;
  std::vector<std::int64_t> rank_;
  std::vector<unsigned char> valid_;  // per output: a nonempty selection without NaN
};

}  // namespace tessera::detail::cpu
