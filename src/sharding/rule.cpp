// Rule text, the elementwise rule, and the defaults of Partitionable.
#include "sharding/rule.hpp"

#include "core/validate.hpp"

namespace tessera::detail {

std::string type_text(const Shape& shape, DType dtype, const NamedSharding& sharding);

std::string type_str(const AbstractArray& a) { return type_text(a.shape, a.dtype, a.sharding); }

namespace {

// Factor names i, j, k, ... then f12, f13, ...
std::string factor_name(int f) {
  static const char* names = "ijklmnopqrstuvwxyzabcdefgh";
  if (f < 26) return std::string(names + f, 1);
  std::string s = "f";
  s += std::to_string(f);
  return s;
}

std::string dims_text(const std::vector<std::vector<int>>& lists) {
  std::string s = "(";
  for (size_t i = 0; i < lists.size(); ++i) {
    s += i ? ",[" : "[";
    for (size_t d = 0; d < lists[i].size(); ++d) {
      if (d) s += ',';
      s += lists[i][d] < 0 ? std::string("1") : factor_name(lists[i][d]);
    }
    s += "]";
  }
  return s + ")";
}

}  // namespace

std::string ShardingRule::str() const {
  std::string s = dims_text(operands);
  s += "->";
  s += dims_text(results);
  if (!factors.empty()) {
    s += " {";
    for (size_t f = 0; f < factors.size(); ++f) {
      if (f) s += ',';
      s += factor_name(static_cast<int>(f));
      s += '=';
      s += std::to_string(factors[f].size);
    }
    s += "}";
  }
  const std::pair<FactorKind, const char*> kinds[] = {{FactorKind::Reduction, "reduction"},
                                                      {FactorKind::NeedReplication, "need_replication"},
                                                      {FactorKind::Permutation, "permutation"},
                                                      {FactorKind::Halo, "halo"}};
  for (const auto& [kind, label] : kinds) {
    std::string list;
    for (size_t f = 0; f < factors.size(); ++f) {
      if (factors[f].kind != kind) continue;
      if (!list.empty()) list += ',';
      list += factor_name(static_cast<int>(f));
      if (kind == FactorKind::Halo)
        list += '(', list += std::to_string(factors[f].halo_lo), list += ',',
            list += std::to_string(factors[f].halo_hi), list += ')';
    }
    if (!list.empty()) s += ' ', s += label, s += "={", s += list, s += '}';
  }
  return s;
}

ShardingRule elementwise_rule(const std::vector<Shape>& operands, const Shape& out, int num_results) {
  ShardingRule r;
  const int rank = static_cast<int>(out.size());
  for (int d = 0; d < rank; ++d) r.factors.push_back(Factor{out[d], FactorKind::PassThrough});
  for (const Shape& s : operands) {
    const int k = static_cast<int>(s.size());
    std::vector<int> dims(k);
    for (int d = 0; d < k; ++d) {
      const int od = d + rank - k;
      dims[d] = s[d] == out[od] ? od : -1;
    }
    r.operands.push_back(dims);
  }
  std::vector<int> all(rank);
  for (int d = 0; d < rank; ++d) all[d] = d;
  r.results.assign(num_results, all);
  return r;
}

std::string Partitionable::conflict_message(std::span<const AbstractArray> in) const {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + type_str(in[i]);
  return msg(std::string(name()).c_str(), "incompatible shardings: " + s + "; reshard an operand or pass out_sharding");
}

double Partitionable::work(std::span<const AbstractArray>, const std::vector<TypeInfo>& out) const {
  double w = 0;
  for (const auto& o : out) w += static_cast<double>(num_elements(o.shape));
  return w;
}

std::optional<std::vector<NamedSharding>> Partitionable::layouts(std::span<const AbstractArray>,
                                                            const std::vector<TypeInfo>&) const {
  return std::nullopt;
}

ShardingRule own_factor_rule(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) {
  ShardingRule r;
  auto dims = [&](const Shape& shape) {
    std::vector<int> f;
    for (auto n : shape) {
      f.push_back(static_cast<int>(r.factors.size()));
      r.factors.push_back(Factor{n, FactorKind::PassThrough});
    }
    return f;
  };
  for (const auto& a : in) r.operands.push_back(dims(a.shape));
  for (const auto& t : out) r.results.push_back(dims(t.shape));
  return r;
}

}  // namespace tessera::detail
