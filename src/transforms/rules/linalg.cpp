// The transformation rules of the dot_general primitive
// (primitives/linalg.hpp): batching, JVP and transposition, written with ops
// so that they bind to whatever trace is outside the transformation.
#include "primitives/linalg.hpp"

#include <algorithm>
#include <utility>

#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

// The batch dim joins the contraction: a batch pair when both operands
// carry it, else a free dim of the one that does (one large product
// instead of a batched one against a broadcast operand).
std::vector<Array> DotGeneral::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                     std::vector<int>& ob) const {
  Contraction c = c_;
  const int nb = static_cast<int>(c.lhs.batch.size()), nlf = static_cast<int>(c.lhs.free.size());
  Array a = in[0], b = in[1];
  auto shift = [](DotSide& s) {
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

std::vector<Array> DotGeneral::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                   std::vector<Array>& to) const {
  return bilinear_jvp(*this, p, t, to);
}

std::vector<Array> DotGeneral::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                         const std::vector<AbstractArray>& types,
                                         const std::vector<bool>& linear) const {
  if (linear[0] && linear[1]) return Primitive::transpose(ct, in, types, linear);
  std::vector<Array> r(2);
  if (!ct[0].valid()) return r;
  const bool lhs = linear[0];
  r[lhs ? 0 : 1] = transpose_side(ct[0], in[lhs ? 1 : 0], types[lhs ? 0 : 1], lhs);
  return r;
}

// Jacobians push one-hot directions through the function; where the first
// op on them is a product, its value is a column (or row) of the other
// operand, exactly: sum_k a[i,k] e[k] has one nonzero term. The gather
// gives the same numbers as the GEMM with the basis except that a -0 entry
// stays -0 and an inf stays inf (the GEMM adds +0 and inf * 0 = NaN terms).
Array DotGeneral::with_basis(int side, const Array& other, const Array& index) const {
  const DotSide& me = side == 0 ? c_.lhs : c_.rhs;
  const DotSide& ot = side == 0 ? c_.rhs : c_.lhs;
  if (!c_.out_perm.empty() || !c_.lhs.batch.empty() || other.dtype() != t_) return {};
  if (me.contract.size() != 1 || !me.free.empty() || !me.summed.empty()) return {};
  if (ot.contract.size() != 1 || !ot.summed.empty()) return {};
  const int d = ot.contract[0];
  std::vector<int> rest;
  for (int i = 0; i < other.ndim(); ++i)
    if (i != d) rest.push_back(i);
  if (ot.free != rest) return {};  // the result keeps the other operand's dims in order
  // A sharded contraction dim would gather the operand; the GEMM's partial
  // sums move only the result.
  if (d < other.sharding().spec().size() && !other.sharding().spec()[d].axes().empty()) return {};
  Shape s = other.shape();
  s.erase(s.begin() + d);
  return reshape(take(other, index, d, {}), s, {}, {});
}

// The cotangent of one operand: a contraction of the result's cotangent
// with the other operand. The result's dims that came from the other
// operand's free dims contract with them; those from this operand's free
// dims stay; the other operand's contracting dims become this one's; batch
// pairs stay batch pairs (a pair this operand lacked is summed over). Dims
// this operand summed away get the cotangent broadcast along them, and a
// size-1 batch dim broadcast against the other side sums it.
Array DotGeneral::transpose_side(const Array& ct, const Array& other, const AbstractArray& me_t, bool lhs) const {
  const DotSide& me = lhs ? c_.lhs : c_.rhs;
  const DotSide& ot = lhs ? c_.rhs : c_.lhs;
  const int nb = static_cast<int>(c_.lhs.batch.size()), nlf = static_cast<int>(c_.lhs.free.size());
  const int ncanon = nb + nlf + static_cast<int>(c_.rhs.free.size());
  std::vector<int> ct_dim(static_cast<size_t>(ncanon));
  for (int i = 0; i < ncanon; ++i) ct_dim[c_.out_perm.empty() ? i : c_.out_perm[i]] = i;
  const int my_start = lhs ? nb : nb + nlf, ot_start = lhs ? nb + nlf : nb;
  Contraction t;  // operands (ct, other)
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
    Contraction u;
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

}  // namespace tessera::detail
