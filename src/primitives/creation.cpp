// Creation primitives (see creation.hpp).
#include "primitives/creation.hpp"

#include <cstring>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

ShardingRule creation_rule(const Shape& shape) {
  ShardingRule r;
  r.results.emplace_back();
  for (size_t d = 0; d < shape.size(); ++d) {
    r.factors.push_back(Factor{shape[d], FactorKind::PassThrough});
    r.results[0].push_back(static_cast<int>(d));
  }
  return r;
}

namespace {

// Base: no operands, the result's type and layout are parameters.
class Creation : public Primitive {
 public:
  Creation(const char* name, Shape shape, DType dtype, NamedSharding sharding)
      : name_(name), shape_(std::move(shape)), dtype_(dtype), sharding_(std::move(sharding)) {}
  std::string_view name() const override { return name_; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray>) const override { return {TypeInfo{shape_, dtype_}}; }
  ShardingRule rule(std::span<const AbstractArray>) const override { return creation_rule(shape_); }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray>,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{sharding_};
  }

 protected:
  const char* name_;
  Shape shape_;
  DType dtype_;
  NamedSharding sharding_;
};

class Fill final : public Creation {
 public:
  Fill(const char* name, Shape shape, DType dtype, NamedSharding sharding, const void* value, std::string text)
      : Creation(name, std::move(shape), dtype, std::move(sharding)), text_(std::move(text)) {
    std::memcpy(value_, value, itemsize(dtype));
  }
  void eval_cpu(const LocalArgs&, LocalOuts& out) const override {
    cpu::fill(dtype_, out[0].data, num_elements(out[0].shape), value_);
  }
  std::string params() const override { return "value=" + text_; }

 private:
  alignas(8) unsigned char value_[8] = {};
  std::string text_;
};

class Arange final : public Creation {
 public:
  Arange(std::int64_t n, double start, double step, DType dtype, NamedSharding sharding)
      : Creation("arange", Shape{n}, dtype, std::move(sharding)), start_(start), step_(step) {}
  void eval_cpu(const LocalArgs&, LocalOuts& out) const override {
    cpu::arange(dtype_, out[0].data, out[0].box[0], start_, step_);
  }
  std::string params() const override {
    std::string s = "start=";
    s += number_str(start_);
    s += " step=";
    s += number_str(step_);
    return s;
  }

 private:
  double start_, step_;
};

class Linspace final : public Creation {
 public:
  Linspace(const cpu::LinspaceParams& p, DType dtype, NamedSharding sharding)
      : Creation("linspace", Shape{p.num}, dtype, std::move(sharding)), p_(p) {}
  void eval_cpu(const LocalArgs&, LocalOuts& out) const override {
    cpu::linspace(dtype_, out[0].data, out[0].box[0], p_);
  }
  std::string params() const override {
    std::string s = "start=";
    s += number_str(p_.start);
    s += " stop=";
    s += number_str(p_.stop);
    s += " num=";
    s += std::to_string(p_.num);
    s += p_.endpoint ? " endpoint=true" : " endpoint=false";
    return s;
  }

 private:
  cpu::LinspaceParams p_;
};

class Eye final : public Creation {
 public:
  Eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, NamedSharding sharding)
      : Creation("eye", Shape{n, m}, dtype, std::move(sharding)), k_(k) {}
  void eval_cpu(const LocalArgs&, LocalOuts& out) const override {
    cpu::eye(dtype_, out[0].data, out[0].box[0], out[0].box[1], k_);
  }
  std::string params() const override { return "k=" + std::to_string(k_); }

 private:
  std::int64_t k_;
};

}  // namespace

PrimitivePtr make_fill(const char* name, const Shape& shape, DType dtype, const NamedSharding& sharding,
                       const void* value, std::string text) {
  return std::make_shared<Fill>(name, shape, dtype, sharding, value, std::move(text));
}
PrimitivePtr make_arange(std::int64_t n, double start, double step, DType dtype, const NamedSharding& sharding) {
  return std::make_shared<Arange>(n, start, step, dtype, sharding);
}
PrimitivePtr make_linspace(const cpu::LinspaceParams& p, DType dtype, const NamedSharding& sharding) {
  return std::make_shared<Linspace>(p, dtype, sharding);
}
PrimitivePtr make_eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, const NamedSharding& sharding) {
  return std::make_shared<Eye>(n, m, k, dtype, sharding);
}

}  // namespace tessera::detail
