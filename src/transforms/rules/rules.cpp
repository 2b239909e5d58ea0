// Shared parts of the transformation rules, and the Primitive defaults.
#include "transforms/rules/rules.hpp"

#include <numeric>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

Array move_dim(const Array& x, int from, int to) {
  if (from == to) return x;
  std::vector<int> perm;
  for (int d = 0; d < x.ndim(); ++d)
    if (d != from) perm.push_back(d);
  perm.insert(perm.begin() + to, from);
  return transpose(x, perm, {});
}

Array batch_first(const Array& x, int bdim, std::int64_t size) {
  if (bdim >= 0) return move_dim(x, bdim, 0);
  Shape s = x.shape();
  s.insert(s.begin(), size);
  return broadcast_to(x, s, {});
}

Array batch_first_aligned(const Array& x, int bdim, int rank) {
  Array y = move_dim(x, bdim, 0);
  if (y.ndim() - 1 >= rank) return y;
  // expand_dims, not reshape: the new dims are unsharded and every old dim
  // keeps its own layout (a reshape may move a sharded size-1 dim's axes
  // onto a new one, which then meets the unbatched operands' dims wrongly).
  for (int k = y.ndim() - 1; k < rank; ++k) y = expand_dims(y, 1, {});
  return y;
}

bool has_tangent(DType dtype) { return dtype == DType::f32 || dtype == DType::f64; }

Array zeros_of(const AbstractArray& t) { return zeros(t.shape, t.dtype, t.sharding, {}); }

AbstractArray type_of(const Array& a) { return AbstractArray{a.shape(), a.dtype(), a.sharding()}; }

Array instantiate(const Array& t, const AbstractArray& like) { return t.valid() ? t : zeros_of(like); }

Array add_tangents(const Array& a, const Array& b) {
  if (!a.valid()) return b;
  if (!b.valid()) return a;
  return add(a, b, {}, {});
}

Array unbroadcast(const Array& ct, const AbstractArray& to) {
  Array r = ct;
  const int lead = r.ndim() - static_cast<int>(to.shape.size());
  std::vector<int> axes;
  for (int d = 0; d < r.ndim(); ++d)
    if (d < lead || (to.shape[d - lead] == 1 && r.shape()[d] != 1)) axes.push_back(d);
  if (!axes.empty()) r = sum(r, axes, {}, {});
  if (r.shape() != to.shape) r = reshape(r, to.shape, {.out_sharding = to.sharding.spec()}, {});
  if (r.dtype() != to.dtype) r = astype(r, to.dtype, {});
  return r;
}

std::vector<Array> linear_jvp(const Primitive& p, const std::vector<Array>& primals,
                              const std::vector<Array>& tangents, std::vector<Array>& tangents_out) {
  auto out = bind(p.shared_from_this(), primals);
  bool any = false;
  for (const Array& t : tangents) any = any || t.valid();
  tangents_out.assign(out.size(), Array());
  if (!any) return out;
  std::vector<Array> ts;
  for (size_t i = 0; i < primals.size(); ++i) ts.push_back(instantiate(tangents[i], type_of(primals[i])));
  tangents_out = bind(p.shared_from_this(), ts);
  for (size_t r = 0; r < out.size(); ++r)
    if (!has_tangent(out[r].dtype())) tangents_out[r] = Array();
  return out;
}

std::vector<Array> bilinear_jvp(const Primitive& p, const std::vector<Array>& primals,
                                const std::vector<Array>& tangents, std::vector<Array>& tangents_out) {
  Array y = bind1(p.shared_from_this(), primals);
  tangents_out = {Array()};
  if (!has_tangent(y.dtype())) return {y};
  if (tangents[0].valid()) tangents_out[0] = bind1(p.shared_from_this(), {tangents[0], primals[1]});
  if (tangents[1].valid())
    tangents_out[0] = add_tangents(tangents_out[0], bind1(p.shared_from_this(), {primals[0], tangents[1]}));
  return {y};
}

std::optional<PartitionSpec> with_batch_dim(const std::optional<PartitionSpec>& spec, int at) {
  if (!spec) return std::nullopt;
  std::vector<PartitionSpec::Entry> e = spec->entries();
  if (static_cast<int>(e.size()) < at) e.resize(static_cast<size_t>(at));
  e.insert(e.begin() + at, PartitionSpec::Entry());
  return PartitionSpec(std::move(e), spec->unreduced());
}


std::vector<Array> batch_unary_first(const Array& x, int bdim, std::vector<int>& out_bdims,
                                     const std::function<PrimitivePtr()>& rebuild) {
  auto out = bind(rebuild(), {move_dim(x, bdim, 0)});
  out_bdims.assign(out.size(), 0);
  return out;
}

// The fallback batching rule: one application per example, stacked. Every
// primitive is right under it; the ones that matter have rules of their own.
std::vector<Array> Primitive::batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t size,
                                    std::vector<int>& out_bdims) const {
  if (size == 0) {
    // No example to apply the op to (a device's block of a batch sharded
    // unevenly, in a chunked vmap): the results are empty along the batch,
    // with the types one example would give.
    std::vector<AbstractArray> one;
    for (size_t k = 0; k < in.size(); ++k) {
      AbstractArray a{in[k].shape(), in[k].dtype(), NamedSharding(in[k].sharding().mesh(), P())};
      if (bdims[k] >= 0) a.shape.erase(a.shape.begin() + bdims[k]);
      one.push_back(std::move(a));
    }
    std::vector<Array> out;
    for (const TypeInfo& t : infer(one)) {
      Shape s = t.shape;
      s.insert(s.begin(), 0);
      out.push_back(zeros(s, t.dtype, NamedSharding(in[0].sharding().mesh(), P())));
    }
    out_bdims.assign(out.size(), 0);
    return out;
  }
  std::vector<std::vector<Array>> per_result;
  for (std::int64_t i = 0; i < size; ++i) {
    std::vector<Array> args;
    for (size_t k = 0; k < in.size(); ++k) {
      if (bdims[k] < 0) {
        args.push_back(in[k]);
        continue;
      }
      std::vector<SliceSpec> sl(static_cast<size_t>(in[k].ndim()));
      sl[bdims[k]] = SliceSpec{i, i + 1, 1};
      args.push_back(squeeze(slice(in[k], sl, {}), {bdims[k]}, {}));
    }
    auto outs = bind(shared_from_this(), args);
    per_result.resize(outs.size());
    for (size_t r = 0; r < outs.size(); ++r) per_result[r].push_back(outs[r]);
  }
  std::vector<Array> out;
  for (auto& rs : per_result) out.push_back(stack(rs, 0, {}));
  out_bdims.assign(out.size(), 0);
  return out;
}

std::vector<Array> Primitive::jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                                  std::vector<Array>& tangents_out) const {
  bool any = false;
  for (const Array& t : tangents) any = any || t.valid();
  auto out = bind(shared_from_this(), primals);
  tangents_out.assign(out.size(), Array());
  bool inexact = false;
  for (const Array& o : out) inexact = inexact || has_tangent(o.dtype());
  // Nothing to differentiate, or results (integers, booleans) without tangents.
  if (!any || !inexact) return out;
  throw Error(msg(std::string(name()).c_str(), "is not differentiable (no JVP rule); apply stop_gradient to its "
                                               "inputs if their derivative is not needed"));
}

std::vector<Array> Primitive::transpose(const std::vector<Array>&, const std::vector<Array>&,
                                        const std::vector<AbstractArray>&, const std::vector<bool>&) const {
  throw Error(msg(std::string(name()).c_str(), "internal: no transpose rule (the op is not linear in its inputs)"));
}

}  // namespace tessera::detail
