// The dot_general primitive (see linalg.hpp): result type, sharding rule,
// the conflict messages of Explicit axes, parameters and the factory. The
// kernel is in backend/cpu/eval_linalg.cpp, the transformation rules in
// transforms/rules/linalg.cpp.
#include "primitives/linalg.hpp"

#include <algorithm>
#include <utility>

#include "core/validate.hpp"
#include "sharding/spec.hpp"

namespace tessera::detail {

namespace {

using AxisList = std::vector<std::string>;

std::int64_t size_of(const Shape& s, int d) { return d < 0 ? std::int64_t{1} : s[d]; }

// A size-1 batch dim broadcasts against the other side's size, including 0:
// (0, 16, 7) @ (1, 7, 3) is (0, 16, 3), so max() would be wrong.
std::int64_t batch_size(const Contraction& c, const Shape& sa, const Shape& sb, size_t i) {
  const std::int64_t na = size_of(sa, c.lhs.batch[i]);
  return na == 1 ? size_of(sb, c.rhs.batch[i]) : na;
}

std::vector<int> perm_of(const Contraction& c, int rank) {
  std::vector<int> perm = c.out_perm;
  if (perm.empty())
    for (int i = 0; i < rank; ++i) perm.push_back(i);
  return perm;
}

std::string entry_str(const AxisList& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return "'" + axes[0] + "'";
  return PartitionSpec::Entry(axes).str();
}

std::string ints_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (v[i] < 0 ? std::string("-") : std::to_string(v[i]));
  return s + "]";
}

// One sharded operand dim as the conflict messages describe it.
struct DimUse {
  int factor;
  int operand;  // 0 lhs, 1 rhs
  int dim;
  AxisList axes;
};

}  // namespace

std::vector<TypeInfo> DotGeneral::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{dot_shape(c_, in[0].shape, in[1].shape), t_}};
}

ShardingRule DotGeneral::rule(std::span<const AbstractArray> in) const {
  return dot_rule(c_, in[0].shape, in[1].shape);
}

std::optional<PartitionSpec> DotGeneral::out_spec() const { return out_spec_; }

// Every combination of the factors' indices is one multiply-add.
double DotGeneral::work(std::span<const AbstractArray> in, const std::vector<TypeInfo>&) const {
  double w = 2;
  for (const Factor& f : rule(in).factors) w *= static_cast<double>(f.size);
  return w;
}

// The operands conflict on Explicit axes: the messages name the dims and
// the way out, in the order the old hand-written rule checked them.
std::string DotGeneral::conflict_message(std::span<const AbstractArray> in) const {
  const auto axa = spec_axes(in[0].sharding, static_cast<int>(in[0].shape.size()));
  const auto axb = spec_axes(in[1].sharding, static_cast<int>(in[1].shape.size()));
  const ShardingRule r = rule(in);
  for (size_t i = 0; i < c_.lhs.batch.size(); ++i) {
    const int da = c_.lhs.batch[i], db = c_.rhs.batch[i];
    const AxisList la = da >= 0 && r.operands[0][da] >= 0 ? axa[da] : AxisList{};
    const AxisList rb = db >= 0 && r.operands[1][db] >= 0 ? axb[db] : AxisList{};
    if (!la.empty() && !rb.empty() && la != rb)
      return msg(name_, "batch dim " + std::to_string(i) + " is sharded differently: lhs " + entry_str(la) +
                            " vs rhs " + entry_str(rb) +
                            "; reshard one operand to match the other, or pass out_sharding");
  }
  for (size_t j = 0; j < c_.lhs.contract.size(); ++j) {
    const AxisList& la = axa[c_.lhs.contract[j]];
    const AxisList& rb = axb[c_.rhs.contract[j]];
    if (!la.empty() && !rb.empty() && la != rb)
      return msg(name_, "contracting dimension is sharded on both sides differently: lhs " + entry_str(la) +
                            " vs rhs " + entry_str(rb) +
                            "; reshard one operand to match the other, or pass out_sharding");
  }
  // One mesh axis on two factors.
  std::vector<DimUse> uses;
  for (int o = 0; o < 2; ++o) {
    const auto& ax = o == 0 ? axa : axb;
    for (size_t d = 0; d < ax.size(); ++d)
      if (r.operands[o][d] >= 0 && !ax[d].empty()) uses.push_back({r.operands[o][d], o, static_cast<int>(d), ax[d]});
  }
  auto is_out = [&](int f) { return r.factors[f].kind != FactorKind::Reduction; };
  auto side = [](const DimUse& u) { return std::string(u.operand == 0 ? "lhs" : "rhs"); };
  auto dim_str = [&](const DimUse& u) { return side(u) + " dim " + std::to_string(u.dim); };
  for (size_t p = 0; p < uses.size(); ++p)
    for (size_t q = p + 1; q < uses.size(); ++q) {
      const DimUse& u = uses[p];
      const DimUse& v = uses[q];
      if (u.factor == v.factor) continue;
      std::string axis;
      for (const auto& a : u.axes)
        if (axis.empty() && std::find(v.axes.begin(), v.axes.end(), a) != v.axes.end()) axis = a;
      if (axis.empty()) continue;
      if (is_out(u.factor) && is_out(v.factor))
        return msg(name_, "mesh axis '" + axis + "' would shard two dims of the output (" + dim_str(u) + " and " +
                              dim_str(v) + "); pass out_sharding to choose the output layout");
      if (is_out(u.factor) != is_out(v.factor)) {
        // A contracting (or summed) dim sharded on one side, its axis also
        // on the other operand's output dim.
        const DimUse& red = is_out(u.factor) ? v : u;
        const DimUse& kept = is_out(u.factor) ? u : v;
        const auto& other = r.operands[1 - red.operand];
        if (std::find(other.begin(), other.end(), red.factor) == other.end())
          return msg(name_, "mesh axis '" + axis + "' shards both " + dim_str(red) + ", summed away, and " +
                                dim_str(kept) + " of the output; reshard one operand, or pass out_sharding");
        const std::string l = red.operand == 0 ? entry_str(red.axes) : "None";
        const std::string rr = red.operand == 1 ? entry_str(red.axes) : "None";
        return msg(name_, "contracting dimension is sharded on one side only: lhs " + l + " vs rhs " + rr + ", and " +
                              dim_str(kept) + " of the output is sharded over '" + axis +
                              "' too; reshard one operand, or pass out_sharding");
      }
      return msg(name_, "mesh axis '" + axis + "' shards two different contracting dims (" + dim_str(u) + " and " +
                            dim_str(v) + "); reshard one operand, or pass out_sharding");
    }
  return Primitive::conflict_message(in);
}

std::string DotGeneral::params() const {
  std::string s = "dimension_numbers=((" + ints_str(c_.lhs.contract) + ", " + ints_str(c_.rhs.contract) + "), (" +
                  ints_str(c_.lhs.batch) + ", " + ints_str(c_.rhs.batch) + "))";
  if (!c_.lhs.summed.empty() || !c_.rhs.summed.empty())
    s += " summed=(" + ints_str(c_.lhs.summed) + ", " + ints_str(c_.rhs.summed) + ")";
  bool identity = true;
  for (size_t i = 0; i < c_.out_perm.size(); ++i) identity = identity && c_.out_perm[i] == static_cast<int>(i);
  if (!identity) s += " out_perm=" + ints_str(c_.out_perm);
  if (out_spec_) s += " out_sharding=" + out_spec_->str();
  return s;
}

Shape dot_shape(const Contraction& c, const Shape& sa, const Shape& sb) {
  Shape canon;
  for (size_t i = 0; i < c.lhs.batch.size(); ++i) canon.push_back(batch_size(c, sa, sb, i));
  for (int d : c.lhs.free) canon.push_back(sa[d]);
  for (int d : c.rhs.free) canon.push_back(sb[d]);
  const int rank = static_cast<int>(canon.size());
  const std::vector<int> perm = perm_of(c, rank);
  Shape out(rank);
  for (int i = 0; i < rank; ++i) out[i] = canon[perm[i]];
  return out;
}

ShardingRule dot_rule(const Contraction& c, const Shape& sa, const Shape& sb) {
  ShardingRule r;
  r.operands = {std::vector<int>(sa.size(), -1), std::vector<int>(sb.size(), -1)};
  auto& ta = r.operands[0];
  auto& tb = r.operands[1];
  auto add = [&](std::int64_t size, FactorKind kind) {
    r.factors.push_back(Factor{size, kind});
    return static_cast<int>(r.factors.size()) - 1;
  };
  std::vector<int> canon;  // factor of each canonical result dim
  for (size_t i = 0; i < c.lhs.batch.size(); ++i) {
    const int da = c.lhs.batch[i], db = c.rhs.batch[i];
    const std::int64_t n = batch_size(c, sa, sb, i);
    const int f = add(n, FactorKind::PassThrough);
    if (da >= 0 && sa[da] == n) ta[da] = f;
    if (db >= 0 && sb[db] == n) tb[db] = f;
    canon.push_back(f);
  }
  for (int d : c.lhs.free) canon.push_back(ta[d] = add(sa[d], FactorKind::PassThrough));
  for (int d : c.rhs.free) canon.push_back(tb[d] = add(sb[d], FactorKind::PassThrough));
  for (size_t j = 0; j < c.lhs.contract.size(); ++j)
    ta[c.lhs.contract[j]] = tb[c.rhs.contract[j]] = add(sa[c.lhs.contract[j]], FactorKind::Reduction);
  for (int d : c.lhs.summed) ta[d] = add(sa[d], FactorKind::Reduction);
  for (int d : c.rhs.summed) tb[d] = add(sb[d], FactorKind::Reduction);
  const int rank = static_cast<int>(canon.size());
  const std::vector<int> perm = perm_of(c, rank);
  std::vector<int> out(rank);
  for (int i = 0; i < rank; ++i) out[i] = canon[perm[i]];
  r.results = {out};
  return r;
}

PrimitivePtr make_dot_general(const char* name, Contraction c, DType t, std::optional<PartitionSpec> out_spec) {
  return std::make_shared<DotGeneral>(name, std::move(c), t, std::move(out_spec));
}

}  // namespace tessera::detail
