// Search and selection primitives: searchsorted and the middle elements of
// a median (see src/primitives/search.cpp).
//
// The classes are defined in parts, one per layer:
//   primitives/search.cpp          types, rules, layouts, parameters, factories
//   spmd/lower_search.cpp          the median's eval_global (it partitions itself)
//   backend/cpu/eval_search.cpp    the per-device kernels (eval_cpu, the median's shares)
//   backend/cuda/eval_search.cpp   the same on CUDA devices (eval_cuda, cuda_share)
//   transforms/rules/search.cpp    batching and JVP rules
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "primitives/primitive.hpp"

namespace tessera::detail {

class Searchsorted final : public Primitive {
 public:
  Searchsorted(bool right, DType out) : right_(right), out_(out) {}
  std::string_view name() const override { return "searchsorted"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const override;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  // Integer results: Primitive::jvp gives them no tangent.

 private:
  bool right_;
  DType out_;
};

/// One device's share of a median's selections: its block of x, seen as a
/// reduction over the median's dims. Made by the backend
/// (MedianMiddle::share, backend/cpu/eval_search.cpp), driven by the
/// lowering (spmd/lower_search.cpp).
class MedianShare {
 public:
  virtual ~MedianShare() = default;
  /// The block's outputs: its elements on the kept dims.
  virtual std::int64_t outputs() const = 0;
  /// Selections the block holds whole: lo and hi (outputs() values of x's
  /// dtype each) receive the two middle elements of every output. `mask`:
  /// the block of the where= mask, or null.
  virtual void select(const void* x, const bool* mask, void* lo, void* hi) const = 0;
  /// Selections spread over several devices, found by a radix selection run
  /// in lockstep by every device sharing them: per pass, count() fills this
  /// block's histogram (a box of the histogram array the lowering lays out),
  /// the histograms are summed over the devices, and advance() reads the sum.
  virtual void count(int pass, const void* x, const bool* mask, std::int64_t* hist) const = 0;
  virtual void advance(int pass, const std::int64_t* hist) = 0;
  /// After the last pass: the middle elements of every output.
  virtual void finish(void* lo, void* hi) const = 0;
};

class MedianMiddle final : public Primitive {
 public:
  MedianMiddle(std::vector<int> axes, bool keepdims, bool masked)
      : axes_(std::move(axes)), keepdims_(keepdims), masked_(masked) {}
  std::string_view name() const override { return "median"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  bool lowers_itself() const override { return true; }
  // The lowering moves data with the memory-space-aware exchanges and runs
  // each device's share on its own memory (cuda_share on GPUs).
  bool lowers_on_cuda() const override { return true; }
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_GLOBAL;
  std::string params() const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;

  /// The share of a block of shape `block` of x (dtype t, f32 or f64);
  /// `reduced` marks x's reduced dims. `bits`: the key bits per radix pass
  /// (0: the block holds its selections whole, select() only).
  virtual std::unique_ptr<MedianShare> share(const Shape& block, const std::vector<bool>& reduced, DType t,
                                             int bits) const;
  /// The same on a CUDA device (backend/cuda/eval_search.cpp): its
  /// pointers are that GPU's, and each call returns once its kernels are
  /// done. Selections held whole run the radix passes locally.
  std::unique_ptr<MedianShare> cuda_share(const Shape& block, const std::vector<bool>& reduced, DType t,
                                          int bits) const;
  /// The radix selection's passes over keys of dtype t, `bits` per pass.
  virtual int radix_passes(DType t, int bits) const;

 private:
  Shape out_shape(const Shape& s, bool keep) const;
  bool reduced(int d) const;
  // x's axes on the kept dims; the reduced dims whole (size 1) in keepdims
  // form (`keep`) or dropped.
  NamedSharding natural(const NamedSharding& xs, int rank, bool keep) const;
  // A result with the reduced dims back as size-1 dims.
  Array expanded(const Array& y) const;

  std::vector<int> axes_;
  bool keepdims_, masked_;
};

/// jnp.searchsorted (operands: sorted_sequence (1-d), values), comparing in
/// their promoted dtype; results of dtype `out` (i32 or i64).
PrimitivePtr make_searchsorted(bool right, DType out);

/// The two middle elements of each selection of a median over `axes`
/// (sorted, unique): results (lo, hi), of x's dtype (f32 or f64), the
/// elements of rank (c - 1) / 2 and c / 2 among the c selected ones (equal
/// for odd c); NaN where the selection is empty or holds a NaN. Operands:
/// x, then with `masked` a bool mask of x's shape.
PrimitivePtr make_median_middle(std::vector<int> axes, bool keepdims, bool masked);

}  // namespace tessera::detail
