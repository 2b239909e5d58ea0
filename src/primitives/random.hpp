// Random primitives: the samplers (uniform, normal), key_data, and split and
// fold_in on key arrays (u32 arrays of shape (*B, 2)).
//
// A sampler draws with a host key (a parameter: params() prints its words,
// so the program text and cache tell keys apart) or with a key array holding
// one key (an operand, replicated by the front end first). Either way it has
// no operand that fixes its result layout, so it fixes it itself
// (layouts(): the sharding asked for) and every device draws its own block
// from the block's global box.
//
// split and fold_in transform keys locally: the front end brings the key
// dim whole first (and the data of fold_in to the keys' batch layout), and
// the results keep the keys' batch layout. They fix their layouts too, so
// the key array's layout decides, never a cost model.
//
// The primitives' parts live in their layers: types, rules, layouts and
// parameters here (primitives/random.cpp), the per-device kernels in
// backend/cpu/eval_random.cpp and backend/cuda/eval_random.cpp. They have no
// transformation rules of their own (the Primitive defaults apply).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/threefry.hpp"
#include "primitives/creation.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

enum class Sampler { Uniform, Normal };

/// A sampler over `shape` laid out as `sharding`. With `key` it has no
/// operands; without, its one operand is a replicated key array of one key.
/// lo and hi (uniform) are already values of `dtype`. With `on_key_mesh`
/// (a draw the caller gave no sharding) the result is replicated on the
/// key operand's mesh as the trace sees it (a shard_map body's local mesh
/// for a captured key), and `sharding` is only the eager default.
PrimitivePtr make_sampler(Sampler kind, const Shape& shape, DType dtype, const NamedSharding& sharding,
                          std::optional<KeyWords> key, double lo = 0.0, double hi = 1.0, bool on_key_mesh = false);
/// `keys` as a key array of `shape` ((2,) or (n, 2)) laid out as `sharding`.
PrimitivePtr make_key_data(const std::vector<KeyWords>& keys, const Shape& shape, const NamedSharding& sharding);
/// Keys (*B, 2) with the key dim whole -> (*B, num, 2).
PrimitivePtr make_split(int num);
/// Keys (*B, 2) with the key dim whole, folded with `data` (a parameter), or
/// without it with a u32 operand of shape () or B laid out like the keys' batch.
PrimitivePtr make_fold_in(std::optional<std::uint32_t> data);

/// The layout of keys (*B, 2) of rank `rank` laid out as `keys`, for the
/// batch dims B followed by `extra` unsharded dims.
NamedSharding key_batch_layout(const NamedSharding& keys, int rank, int extra);

// Samplers and key_data are created arrays (primitives/creation.hpp): their
// type and layout are parameters.
class Sample final : public Creation {
 public:
  Sample(Sampler kind, Shape shape, DType dtype, NamedSharding sharding, std::optional<KeyWords> key, double lo,
         double hi, bool on_key_mesh)
      : Creation(kind == Sampler::Uniform ? "uniform" : "normal", std::move(shape), dtype, std::move(sharding)),
        kind_(kind),
        key_(key),
        lo_(lo),
        hi_(hi),
        on_key_mesh_(on_key_mesh) {}
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  std::string params() const override;
  // backend/cpu/eval_random.cpp, backend/cuda/eval_random.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  Sampler kind_;
  std::optional<KeyWords> key_;
  double lo_, hi_;
  bool on_key_mesh_;
};

class KeyData final : public Creation {
 public:
  KeyData(std::vector<std::uint32_t> words, Shape shape, NamedSharding sharding)
      : Creation("key_data", std::move(shape), DType::u32, std::move(sharding)), words_(std::move(words)) {}
  std::string params() const override;
  // backend/cpu/eval_random.cpp, backend/cuda/eval_random.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  std::vector<std::uint32_t> words_;
};

class Split final : public Primitive {
 public:
  explicit Split(int num) : num_(num) {}
  std::string_view name() const override { return "split"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override;
  std::string params() const override { return "num=" + std::to_string(num_); }
  // backend/cpu/eval_random.cpp, backend/cuda/eval_random.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  int num_;
};

class FoldIn final : public Primitive {
 public:
  explicit FoldIn(std::optional<std::uint32_t> data) : data_(data) {}
  std::string_view name() const override { return "fold_in"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, DType::u32}};
  }
  TESSERA_DECLARE_RULE;
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{in[0].sharding};
  }
  std::string params() const override { return data_ ? "data=" + std::to_string(*data_) : std::string(); }
  // backend/cpu/eval_random.cpp, backend/cuda/eval_random.cpp
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

 private:
  std::optional<std::uint32_t> data_;
};

}  // namespace tessera::detail
