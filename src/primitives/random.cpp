// Random primitives (see random.hpp): rules, layouts, parameters and the
// factories. The kernels are in backend/cpu/eval_random.cpp.
#include "primitives/random.hpp"

#include "core/validate.hpp"
#include "sharding/spec.hpp"

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

// A key operand of shape (*B, 2): factors for B (pass-through, numbered from
// `first`) and the key dim (`key`, which must be whole on every device).
std::vector<int> key_dims(const Shape& shape, int first, int key) {
  std::vector<int> dims;
  for (size_t d = 0; d + 1 < shape.size(); ++d) dims.push_back(first + static_cast<int>(d));
  dims.push_back(key);
  return dims;
}

}  // namespace

NamedSharding key_batch_layout(const NamedSharding& keys, int rank, int extra) {
  auto axes = spec_axes(keys, rank);
  axes.pop_back();
  for (int i = 0; i < extra; ++i) axes.emplace_back();
  return NamedSharding(keys.mesh(), make_spec(axes));
}

// Result dims first; a key operand's size-1 leading dims map to none and
// its key dim to a factor that must be whole.
ShardingRule Sample::rule(std::span<const AbstractArray> in) const {
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

std::optional<std::vector<NamedSharding>> Sample::layouts(std::span<const AbstractArray> in,
                                                          const std::vector<TypeInfo>& out) const {
  if (on_key_mesh_ && !in.empty()) return std::vector<NamedSharding>{NamedSharding(in[0].sharding.mesh(), P())};
  return Creation::layouts(in, out);
}

std::string Sample::params() const {
  std::string s;
  if (key_) s += "key=", s += key_text(key_->k0, key_->k1);
  if (kind_ == Sampler::Uniform) {
    if (!s.empty()) s += ' ';
    s += "lo=", s += number_str(lo_), s += " hi=", s += number_str(hi_);
  }
  return s;
}

std::string KeyData::params() const {
  std::string s = "keys=[";
  for (size_t i = 0; i + 1 < words_.size(); i += 2) {
    if (i) s += ',';
    s += key_text(words_[i], words_[i + 1]);
  }
  return s + "]";
}

std::vector<TypeInfo> Split::infer(std::span<const AbstractArray> in) const {
  Shape shape = in[0].shape;
  shape.back() = num_;
  shape.push_back(2);
  return {TypeInfo{shape, DType::u32}};
}

// ([b..., k]) -> ([b..., n, k]): the batch dims pass through, n is new.
ShardingRule Split::rule(std::span<const AbstractArray> in) const {
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

std::optional<std::vector<NamedSharding>> Split::layouts(std::span<const AbstractArray> in,
                                                         const std::vector<TypeInfo>&) const {
  return std::vector<NamedSharding>{key_batch_layout(in[0].sharding, static_cast<int>(in[0].shape.size()), 2)};
}

// ([b..., k], [b...] or []) -> ([b..., k]).
ShardingRule FoldIn::rule(std::span<const AbstractArray> in) const {
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

PrimitivePtr make_sampler(Sampler kind, const Shape& shape, DType dtype, const NamedSharding& sharding,
                          std::optional<KeyWords> key, double lo, double hi, bool on_key_mesh) {
  return std::make_shared<Sample>(kind, shape, dtype, sharding, key, lo, hi, on_key_mesh);
}
PrimitivePtr make_key_data(const std::vector<KeyWords>& keys, const Shape& shape, const NamedSharding& sharding) {
  std::vector<std::uint32_t> words;
  words.reserve(keys.size() * 2);
  for (const KeyWords& k : keys) words.push_back(k.k0), words.push_back(k.k1);
  return std::make_shared<KeyData>(std::move(words), shape, sharding);
}
PrimitivePtr make_split(int num) { return std::make_shared<Split>(num); }
PrimitivePtr make_fold_in(std::optional<std::uint32_t> data) { return std::make_shared<FoldIn>(data); }

}  // namespace tessera::detail
