// The transformation rules of the reduction primitives
// (primitives/reduce.hpp): batching, JVP and transposition, written with ops
// so that they bind to whatever trace is outside the transformation.
#include "primitives/reduce.hpp"

#include <algorithm>
#include <vector>

#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

std::vector<Array> Reduce::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                 std::vector<int>& ob) const {
  std::vector<int> axes;
  for (int a : axes_) axes.push_back(a + 1);
  auto spec = with_batch_dim(out_spec_, 0);
  return batch_unary_first(in[0], bd[0], ob,
                           [&] { return std::make_shared<Reduce>(name_, op_, t_, axes, keepdims_, spec); });
}

std::vector<Array> Reduce::jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const {
  if (op_ == ReduceOp::Sum) return linear_jvp(*this, p, t, to);
  Array y = bind1(shared_from_this(), p);
  to = {Array()};
  if (!t[0].valid() || !has_tangent(y.dtype())) return {y};
  const Array& x = p[0];
  // y (with out_sharding, say) may be laid out unlike x: the rule meets
  // them elementwise, so yk takes x's layout on the kept dims.
  std::vector<PartitionSpec::Entry> e = x.sharding().spec().entries();
  e.resize(static_cast<size_t>(x.ndim()), none);
  for (int a : axes_) e[static_cast<size_t>(a)] = none;
  const Array yk = reshard(keepdims_ ? y : expanded(y), PartitionSpec(e));
  if (op_ == ReduceOp::Prod) {
    to[0] = sum(t[0] * (yk / x), axes_, {keepdims_}, {});
  } else if (op_ == ReduceOp::Max || op_ == ReduceOp::Min) {
    // Ties share the derivative equally, as in JAX.
    const Array mask = astype(equal(x, yk, {}, {}), y.dtype());
    to[0] = sum(t[0] * mask, axes_, {keepdims_}, {}) / sum(mask, axes_, {keepdims_}, {});
  }
  return {y};
}

std::vector<Array> Reduce::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                     const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const {
  if (op_ != ReduceOp::Sum) return Primitive::transpose(ct, in, types, linear);
  if (!ct[0].valid()) return {Array()};
  Array r = broadcast_to(keepdims_ ? ct[0] : expanded(ct[0]), types[0].shape, {});
  return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {})};
}

Array Reduce::expanded(const Array& y) const {
  Shape s = y.shape();
  std::vector<int> axes = axes_;
  std::sort(axes.begin(), axes.end());
  for (int a : axes) s.insert(s.begin() + a, 1);
  return reshape(y, s, {}, {});
}

std::vector<Array> ArgReduce::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                    std::vector<int>& ob) const {
  auto spec = with_batch_dim(out_spec_, 0);
  return batch_unary_first(in[0], bd[0], ob,
                           [&] { return std::make_shared<ArgReduce>(name_, is_max_, axis_ + 1, keepdims_, spec); });
}

}  // namespace tessera::detail
