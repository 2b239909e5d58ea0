// Random primitives (see random.hpp).
#include "primitives/random.hpp"

#include "backend/cpu/random.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/creation.hpp"

namespace tessera::detail {

namespace {

std::string key_text(std::uint32_t k0, std::uint32_t k1) {
  std::string s = "[";
  s += std::to_string(k0);
  s += ',';
  s += std::to_string(k1);
  s += ']';
  return s;
}

// The spec of keys (*B, 2) for the batch dims B followed by `extra` unsharded dims.
NamedSharding batch_layout(const NamedSharding& keys, int rank, int extra) {
  auto axes = spec_axes(keys, rank);
  axes.pop_back();
  for (int i = 0; i < extra; ++i) axes.emplace_back();
  return NamedSharding(keys.mesh(), make_spec(axes));
}

// A key operand of shape (*B, 2): factors for B (pass-through, numbered from
// `first`) and the key dim (`key`, which must be whole on every device).
std::vector<int> key_dims(const Shape& shape, int first, int key) {
  std::vector<int> dims;
  for (size_t d = 0; d + 1 < shape.size(); ++d) dims.push_back(first + static_cast<int>(d));
  dims.push_back(key);
  return dims;
}

class Sample final : public Primitive {
 public:
  Sample(Sampler kind, Shape shape, DType dtype, NamedSharding sharding, std::optional<Key> key, double lo, double hi)
      : kind_(kind), shape_(std::move(shape)), dtype_(dtype), sharding_(std::move(sharding)), key_(key), lo_(lo), hi_(hi) {}
  std::string_view name() const override { return kind_ == Sampler::Uniform ? "uniform" : "normal"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray>) const override { return {TypeInfo{shape_, dtype_}}; }
  // Result dims first; a key operand's size-1 leading dims map to none and
  // its key dim to a factor that must be whole.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r = creation_rule(shape_);
    if (!in.empty()) {
      const int key = static_cast<int>(r.factors.size());
      r.factors.push_back(Factor{2, FactorKind::NeedReplication});
      std::vector<int> dims(in[0].shape.size(), -1);
      dims.back() = key;
      r.operands.push_back(dims);
    }
    return r;
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray>,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{sharding_};
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    std::uint32_t k0, k1;
    if (key_) {
      k0 = key_->k0, k1 = key_->k1;
    } else {
      const auto* w = static_cast<const std::uint32_t*>(in[0].data);  // the whole key: replicated
      k0 = w[0], k1 = w[1];
    }
    if (kind_ == Sampler::Uniform)
      cpu::uniform(dtype_, out[0].data, shape_, out[0].box, k0, k1, lo_, hi_);
    else
      cpu::normal(dtype_, out[0].data, shape_, out[0].box, k0, k1);
  }
  std::string params() const override {
    std::string s;
    if (key_) s += "key=", s += key_text(key_->k0, key_->k1);
    if (kind_ == Sampler::Uniform) {
      if (!s.empty()) s += ' ';
      s += "lo=", s += number_str(lo_), s += " hi=", s += number_str(hi_);
    }
    return s;
  }

 private:
  Sampler kind_;
  Shape shape_;
  DType dtype_;
  NamedSharding sharding_;
  std::optional<Key> key_;
  double lo_, hi_;
};

class KeyData final : public Primitive {
 public:
  KeyData(std::vector<std::uint32_t> words, Shape shape, NamedSharding sharding)
      : words_(std::move(words)), shape_(std::move(shape)), sharding_(std::move(sharding)) {}
  std::string_view name() const override { return "key_data"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray>) const override { return {TypeInfo{shape_, DType::u32}}; }
  ShardingRule rule(std::span<const AbstractArray>) const override { return creation_rule(shape_); }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray>,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{sharding_};
  }
  void eval_cpu(const LocalArgs&, LocalOuts& out) const override {
    if (num_elements(out[0].shape) == 0) return;
    copy_box(words_.data(), whole_box(shape_), out[0].data, out[0].box, out[0].box, sizeof(std::uint32_t));
  }
  std::string params() const override {
    std::string s = "keys=[";
    for (size_t i = 0; i + 1 < words_.size(); i += 2) {
      if (i) s += ',';
      s += key_text(words_[i], words_[i + 1]);
    }
    return s + "]";
  }

 private:
  std::vector<std::uint32_t> words_;
  Shape shape_;
  NamedSharding sharding_;
};

class Split final : public Primitive {
 public:
  explicit Split(int num) : num_(num) {}
  std::string_view name() const override { return "split"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape shape = in[0].shape;
    shape.back() = num_;
    shape.push_back(2);
    return {TypeInfo{shape, DType::u32}};
  }
  // ([b..., k]) -> ([b..., n, k]): the batch dims pass through, n is new.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    const Shape& s = in[0].shape;
    const int nb = static_cast<int>(s.size()) - 1;
    ShardingRule r;
    for (int d = 0; d < nb; ++d) r.factors.push_back(Factor{s[d], FactorKind::PassThrough});
    r.factors.push_back(Factor{num_, FactorKind::PassThrough});
    r.factors.push_back(Factor{2, FactorKind::NeedReplication});
    r.operands.push_back(key_dims(s, 0, nb + 1));
    std::vector<int> res = key_dims(s, 0, nb);
    res.push_back(nb + 1);
    r.results.push_back(res);
    return r;
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{batch_layout(in[0].sharding, static_cast<int>(in[0].shape.size()), 2)};
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    cpu::split_keys(static_cast<const std::uint32_t*>(in[0].data), num_elements(in[0].shape) / 2, num_,
                    static_cast<std::uint32_t*>(out[0].data));
  }
  std::string params() const override { return "num=" + std::to_string(num_); }

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
  // ([b..., k], [b...] or []) -> ([b..., k]).
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    const Shape& s = in[0].shape;
    const int nb = static_cast<int>(s.size()) - 1;
    ShardingRule r;
    for (int d = 0; d < nb; ++d) r.factors.push_back(Factor{s[d], FactorKind::PassThrough});
    r.factors.push_back(Factor{2, FactorKind::NeedReplication});
    r.operands.push_back(key_dims(s, 0, nb));
    if (in.size() > 1) {
      std::vector<int> data;
      for (size_t d = 0; d < in[1].shape.size(); ++d) data.push_back(static_cast<int>(d));
      r.operands.push_back(data);
    }
    r.results.push_back(key_dims(s, 0, nb));
    return r;
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{in[0].sharding};
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const std::uint32_t* data = data_ ? &*data_ : static_cast<const std::uint32_t*>(in[1].data);
    const std::int64_t stride = data_ || in[1].shape.empty() ? 0 : 1;
    cpu::fold_in_keys(static_cast<const std::uint32_t*>(in[0].data), num_elements(in[0].shape) / 2, data, stride,
                      static_cast<std::uint32_t*>(out[0].data));
  }
  std::string params() const override { return data_ ? "data=" + std::to_string(*data_) : std::string(); }

 private:
  std::optional<std::uint32_t> data_;
};

}  // namespace

PrimitivePtr make_sampler(Sampler kind, const Shape& shape, DType dtype, const NamedSharding& sharding,
                          std::optional<Key> key, double lo, double hi) {
  return std::make_shared<Sample>(kind, shape, dtype, sharding, key, lo, hi);
}
PrimitivePtr make_key_data(std::vector<Key> keys, const Shape& shape, const NamedSharding& sharding) {
  std::vector<std::uint32_t> words;
  words.reserve(keys.size() * 2);
  for (const Key& k : keys) words.push_back(k.k0), words.push_back(k.k1);
  return std::make_shared<KeyData>(std::move(words), shape, sharding);
}
PrimitivePtr make_split(int num) { return std::make_shared<Split>(num); }
PrimitivePtr make_fold_in(std::optional<std::uint32_t> data) { return std::make_shared<FoldIn>(data); }

}  // namespace tessera::detail
