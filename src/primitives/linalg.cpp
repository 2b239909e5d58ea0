// The dot_general primitive (see linalg.hpp).
#include "primitives/linalg.hpp"

#include <algorithm>
#include <utility>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"
#include "tessera/ops.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

namespace {

using AxisList = std::vector<std::string>;

std::int64_t size_of(const Shape& s, int d) { return d < 0 ? std::int64_t{1} : s[d]; }

// A size-1 batch dim broadcasts against the other side's size, including 0:
// (0, 16, 7) @ (1, 7, 3) is (0, 16, 3), so max() would be wrong.
std::int64_t batch_size(const cpu::Contraction& c, const Shape& sa, const Shape& sb, size_t i) {
  const std::int64_t na = size_of(sa, c.lhs.batch[i]);
  return na == 1 ? size_of(sb, c.rhs.batch[i]) : na;
}

std::vector<int> perm_of(const cpu::Contraction& c, int rank) {
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

class DotGeneral final : public Primitive {
 public:
  DotGeneral(const char* name, cpu::Contraction c, DType t, std::optional<PartitionSpec> out_spec)
      : name_(name), c_(std::move(c)), t_(t), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{dot_shape(c_, in[0].shape, in[1].shape), t_}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override { return dot_rule(c_, in[0].shape, in[1].shape); }
  std::optional<PartitionSpec> out_spec() const override { return out_spec_; }
  std::string conflict_message(std::span<const AbstractArray> in) const override;
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    cpu::dot_general(c_, t_, in[0].data, in[0].shape, in[1].data, in[1].shape, out[0].data, out[0].shape,
                     current_device());
  }
  // Every combination of the factors' indices is one multiply-add.
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>&) const override {
    double w = 2;
    for (const Factor& f : rule(in).factors) w *= static_cast<double>(f.size);
    return w;
  }
  std::string params() const override;

  // The batch dim joins the contraction: a batch pair when both operands
  // carry it, else a free dim of the one that does (one large product
  // instead of a batched one against a broadcast operand).
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    cpu::Contraction c = c_;
    const int nb = static_cast<int>(c.lhs.batch.size()), nlf = static_cast<int>(c.lhs.free.size());
    Array a = in[0], b = in[1];
    auto shift = [](cpu::DotSide& s) {
      for (auto* v : {&s.batch, &s.contract, &s.free, &s.summed})
        for (int& d : *v)
          if (d >= 0) ++d;
    };
    if (bd[0] >= 0) a = move_dim(a, bd[0], 0), shift(c.lhs);
    if (bd[1] >= 0) b = move_dim(b, bd[1], 0), shift(c.rhs);
    int q;
    if (bd[0] >= 0 && bd[1] >= 0) {
      c.lhs.batch.insert(c.lhs.batch.begin(), 0);
      c.rhs.batch.insert(c.rhs.batch.begin(), 0);
      q = 0;
    } else if (bd[0] >= 0) {
      c.lhs.free.insert(c.lhs.free.begin(), 0);
      q = nb;
    } else {
      c.rhs.free.insert(c.rhs.free.begin(), 0);
      q = nb + nlf;
    }
    if (c_.out_perm.empty()) {
      ob = {q};  // canonical order: the batch dim lands at q
    } else {
      std::vector<int> perm{q};
      for (int p : c_.out_perm) perm.push_back(p >= q ? p + 1 : p);
      c.out_perm = std::move(perm);
      ob = {0};
    }
    auto spec = with_batch_dim(out_spec_, ob[0]);
    return {bind1(std::make_shared<DotGeneral>(name_, std::move(c), t_, std::move(spec)), {a, b})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return bilinear_jvp(*this, p, t, to);
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    if (linear[0] && linear[1]) return Primitive::transpose(ct, in, types, linear);
    std::vector<Array> r(2);
    if (!ct[0].valid()) return r;
    const bool lhs = linear[0];
    r[lhs ? 0 : 1] = transpose_side(ct[0], in[lhs ? 1 : 0], types[lhs ? 0 : 1], lhs);
    return r;
  }

 private:
  // The cotangent of one operand: a contraction of the result's cotangent
  // with the other operand. The result's dims that came from the other
  // operand's free dims contract with them; those from this operand's free
  // dims stay; the other operand's contracting dims become this one's; batch
  // pairs stay batch pairs (a pair this operand lacked is summed over). Dims
  // this operand summed away get the cotangent broadcast along them, and a
  // size-1 batch dim broadcast against the other side sums it.
  Array transpose_side(const Array& ct, const Array& other, const AbstractArray& me_t, bool lhs) const {
    const cpu::DotSide& me = lhs ? c_.lhs : c_.rhs;
    const cpu::DotSide& ot = lhs ? c_.rhs : c_.lhs;
    const int nb = static_cast<int>(c_.lhs.batch.size()), nlf = static_cast<int>(c_.lhs.free.size());
    const int ncanon = nb + nlf + static_cast<int>(c_.rhs.free.size());
    std::vector<int> ct_dim(static_cast<size_t>(ncanon));
    for (int i = 0; i < ncanon; ++i) ct_dim[c_.out_perm.empty() ? i : c_.out_perm[i]] = i;
    const int my_start = lhs ? nb : nb + nlf, ot_start = lhs ? nb + nlf : nb;
    cpu::Contraction t;  // operands (ct, other)
    // This operand's dim for each canonical dim of the transposed product:
    // its batch dims, then those from ct's free dims, then those from the
    // other operand's free dims.
    std::vector<int> rb, rl, rr;
    for (int i = 0; i < nb; ++i) {
      const int mine = me.batch[i], theirs = ot.batch[i];
      if (mine >= 0) {
        t.lhs.batch.push_back(ct_dim[i]);
        t.rhs.batch.push_back(theirs);
        rb.push_back(mine);
      } else if (theirs >= 0) {
        t.lhs.contract.push_back(ct_dim[i]);
        t.rhs.contract.push_back(theirs);
      } else {
        t.lhs.summed.push_back(ct_dim[i]);
      }
    }
    for (size_t k = 0; k < me.free.size(); ++k) {
      t.lhs.free.push_back(ct_dim[my_start + static_cast<int>(k)]);
      rl.push_back(me.free[k]);
    }
    for (size_t k = 0; k < ot.free.size(); ++k) {
      t.lhs.contract.push_back(ct_dim[ot_start + static_cast<int>(k)]);
      t.rhs.contract.push_back(ot.free[k]);
    }
    for (size_t k = 0; k < ot.contract.size(); ++k) {
      t.rhs.free.push_back(ot.contract[k]);
      rr.push_back(me.contract[k]);
    }
    t.rhs.summed = ot.summed;
    const int rank = static_cast<int>(me_t.shape.size());
    std::vector<int> kept;
    for (int d = 0; d < rank; ++d)
      if (std::find(me.summed.begin(), me.summed.end(), d) == me.summed.end()) kept.push_back(d);
    // The permutation from the canonical order `res` to this operand's.
    auto perm_for = [&](const std::vector<int>& res, bool& identity) {
      std::vector<int> perm;
      identity = true;
      for (size_t j = 0; j < kept.size(); ++j) {
        const int at = static_cast<int>(std::find(res.begin(), res.end(), kept[j]) - res.begin());
        perm.push_back(at);
        identity = identity && at == static_cast<int>(j);
      }
      return perm;
    };
    auto cat = [&](const std::vector<int>& a, const std::vector<int>& b) {
      std::vector<int> v = rb;
      v.insert(v.end(), a.begin(), a.end());
      v.insert(v.end(), b.begin(), b.end());
      return v;
    };
    // The cotangent is laid out as this operand (its kept dims): without
    // it, the product's layout could shard two dims over one axis (the
    // result's and the other operand's free dims) and raise.
    std::vector<PartitionSpec::Entry> kept_spec;
    for (int d : kept) kept_spec.push_back(me_t.sharding.spec()[d]);
    const std::optional<PartitionSpec> out_spec = PartitionSpec(kept_spec);
    bool identity = false, swapped_identity = false;
    t.out_perm = perm_for(cat(rl, rr), identity);
    const std::vector<int> swapped_perm = perm_for(cat(rr, rl), swapped_identity);
    Array r;
    if (!identity && swapped_identity) {
      // (other, ct) gives this operand's order directly: no permuted copy
      // (the weight gradient x^T ct of x @ w).
      cpu::Contraction u;
      u.lhs = t.rhs;
      u.rhs = t.lhs;
      r = bind1(std::make_shared<DotGeneral>("dot_general", std::move(u), t_, out_spec), {other, ct});
    } else {
      if (identity) t.out_perm.clear();
      r = bind1(std::make_shared<DotGeneral>("dot_general", std::move(t), t_, out_spec), {ct, other});
    }
    if (!me.summed.empty()) {
      Shape s = me_t.shape;
      for (int d : me.summed) s[d] = 1;
      r = broadcast_to(reshape(r, s, {}, {}), me_t.shape, {});
    }
    if (r.shape() != me_t.shape) {
      std::vector<int> axes;
      for (int d = 0; d < rank; ++d)
        if (me_t.shape[d] == 1 && r.shape()[d] != 1) axes.push_back(d);
      r = sum(r, axes, {true}, {});
    }
    return r.dtype() == me_t.dtype ? r : astype(r, me_t.dtype, {});
  }

  const char* name_;
  cpu::Contraction c_;
  DType t_;
  std::optional<PartitionSpec> out_spec_;
};

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

}  // namespace

Shape dot_shape(const cpu::Contraction& c, const Shape& sa, const Shape& sb) {
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

ShardingRule dot_rule(const cpu::Contraction& c, const Shape& sa, const Shape& sb) {
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

PrimitivePtr make_dot_general(const char* name, cpu::Contraction c, DType t, std::optional<PartitionSpec> out_spec) {
  return std::make_shared<DotGeneral>(name, std::move(c), t, std::move(out_spec));
}

}  // namespace tessera::detail
