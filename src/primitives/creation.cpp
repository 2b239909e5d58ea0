// Creation primitives (see creation.hpp): the rule, parameters and the
// factories. The kernels are in backend/cpu/eval_creation.cpp.
#include "primitives/creation.hpp"

#include <cstring>

#include "core/validate.hpp"

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

Fill::Fill(const char* name, Shape shape, DType dtype, NamedSharding sharding, const void* value, std::string text)
    : Creation(name, std::move(shape), dtype, std::move(sharding)), text_(std::move(text)) {
  std::memcpy(value_, value, itemsize(dtype));
}

std::string Arange::params() const {
  std::string s = "start=";
  s += number_str(start_);
  s += " step=";
  s += number_str(step_);
  return s;
}

std::string Linspace::params() const {
  std::string s = "start=";
  s += number_str(p_.start);
  s += " stop=";
  s += number_str(p_.stop);
  s += " num=";
  s += std::to_string(p_.num);
  s += p_.endpoint ? " endpoint=true" : " endpoint=false";
  return s;
}

PrimitivePtr make_fill(const char* name, const Shape& shape, DType dtype, const NamedSharding& sharding,
                       const void* value, std::string text) {
  return std::make_shared<Fill>(name, shape, dtype, sharding, value, std::move(text));
}
PrimitivePtr make_arange(std::int64_t n, double start, double step, DType dtype, const NamedSharding& sharding) {
  return std::make_shared<Arange>(n, start, step, dtype, sharding);
}
PrimitivePtr make_linspace(const LinspaceParams& p, DType dtype, const NamedSharding& sharding) {
  return std::make_shared<Linspace>(p, dtype, sharding);
}
PrimitivePtr make_eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, const NamedSharding& sharding) {
  return std::make_shared<Eye>(n, m, k, dtype, sharding);
}

}  // namespace tessera::detail
