// Contraction layout planning (see gemm_plan.hpp).
#include "core/gemm_plan.hpp"

#include <cstddef>

namespace tessera::detail {

std::int64_t shape_product(const Shape& s, std::size_t from, std::size_t to) {
  std::int64_t n = 1;
  for (std::size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

bool already_ordered(const Shape& shape, const std::vector<int>& order) {
  int last = -1;
  for (int d : order) {
    if (shape[d] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

std::vector<std::int64_t> strides_in(const Shape& shape, const std::vector<int>& order) {
  std::vector<std::int64_t> st(shape.size(), 0);
  std::int64_t acc = 1;
  for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
    st[order[i]] = acc;
    acc *= shape[order[i]];
  }
  return st;
}

DotOperandPlan plan_dot_operand(const Shape& shape, const DotSide& side, bool is_lhs,
                                const std::vector<std::int64_t>& out_batch) {
  DotOperandPlan p;
  p.shape = shape;
  if (!side.summed.empty()) {
    p.sum_flag.assign(shape.size(), false);
    for (int d : side.summed) p.sum_flag[d] = true;
    for (int d : side.summed) p.shape[d] = 1;
  }
  std::vector<int> head;
  for (int d : side.batch)
    if (d >= 0) head.push_back(d);
  head.insert(head.end(), side.summed.begin(), side.summed.end());
  // lhs: (m, k) plain, (k, m) transposed; rhs: (k, n) plain, (n, k) transposed.
  std::vector<int> plain = head, trans = head;
  const auto& first = is_lhs ? side.free : side.contract;
  const auto& second = is_lhs ? side.contract : side.free;
  plain.insert(plain.end(), first.begin(), first.end());
  plain.insert(plain.end(), second.begin(), second.end());
  trans.insert(trans.end(), second.begin(), second.end());
  trans.insert(trans.end(), first.begin(), first.end());
  std::vector<int> order = plain;
  if (!already_ordered(p.shape, plain)) {
    if (already_ordered(p.shape, trans)) {
      order = trans;
      p.trans = true;
    } else {
      p.permute = plain;
    }
  }
  p.matrix = 1;
  for (int d : side.free) p.matrix *= p.shape[d];
  for (int d : side.contract) p.matrix *= p.shape[d];
  const auto st = strides_in(p.shape, order);
  for (std::size_t i = 0; i < side.batch.size(); ++i) {
    const int d = side.batch[i];
    p.batch_stride.push_back(d < 0 || (p.shape[d] == 1 && out_batch[i] != 1) ? 0 : st[d]);
  }
  return p;
}

DotResultPlan plan_dot_result(const Contraction& c, const Shape& sa, const Shape& out_shape) {
  DotResultPlan r;
  const int rank = static_cast<int>(out_shape.size());
  r.perm = c.out_perm;
  if (r.perm.empty())
    for (int i = 0; i < rank; ++i) r.perm.push_back(i);
  r.local.resize(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) r.local[r.perm[i]] = out_shape[i];
  r.in_place = already_ordered(r.local, r.perm);
  r.k = 1;
  for (int d : c.lhs.contract) r.k *= sa[d];
  const std::size_t nb = c.lhs.batch.size();
  r.batch.assign(r.local.begin(), r.local.begin() + static_cast<std::ptrdiff_t>(nb));
  const std::size_t nlf = c.lhs.free.size();
  r.m = shape_product(r.local, nb, nb + nlf);
  r.n = shape_product(r.local, nb + nlf, r.local.size());
  return r;
}

}  // namespace tessera::detail
