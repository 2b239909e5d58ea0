// Reduction primitives (see reduce.hpp).
//
// A reduction is a factor rule: kept dims are pass-through factors, reduced
// dims reduction factors. Each device reduces its block locally
// (backend/cpu/reduce); where a reduced dim is sharded, every device of a
// reduction group (devices that differ only on the reduced dims' mesh axes)
// holds a partial result for the same box of the output, and the engine
// combines the partials with partial_op() over those axes: an all-reduce
// into the natural layout (the kept dims' axes, replicated over the reduced
// ones), or a reduce-scatter straight into a requested out_sharding whose
// blocks lie inside the partial ones; any other out_sharding is reached by
// a reshard afterwards. The operand is reduced where it lies (see
// keeps_operand_layouts below).
//
// argmax/argmin need two cross-device reductions whose second depends on
// the first (the best value, then the lowest index holding it), so that
// primitive lowers itself.
#include "primitives/reduce.hpp"

#include <algorithm>
#include <utility>

#include "backend/cpu/reduce.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {

std::string axes_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

bool contains(const std::vector<int>& v, int d) { return std::find(v.begin(), v.end(), d) != v.end(); }

Shape result_shape(const Shape& shape, const std::vector<int>& axes, bool keepdims) {
  Shape out;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (!contains(axes, d))
      out.push_back(shape[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

std::string common_params(const std::vector<int>& axes, bool keepdims, const std::optional<PartitionSpec>& out_spec) {
  std::string s = "axes=";
  s += axes_str(axes);
  if (keepdims) s += " keepdims=true";
  if (out_spec) {
    s += " out_sharding=";
    s += out_spec->str();
  }
  return s;
}

class Reduce final : public Primitive {
 public:
  Reduce(const char* name, ReduceOp op, DType t, std::vector<int> axes, bool keepdims,
         std::optional<PartitionSpec> out_spec)
      : name_(name), op_(op), t_(t), axes_(std::move(axes)), keepdims_(keepdims), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{result_shape(in[0].shape, axes_, keepdims_), t_}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    return reduce_rule(in[0].shape, axes_, keepdims_);
  }
  std::optional<PartitionSpec> out_spec() const override { return out_spec_; }
  bool sinkable() const override { return true; }
  std::unique_ptr<TileSink> sink(const LocalIn& in, const LocalOut& out) const override {
    struct Sink final : TileSink {
      std::unique_ptr<cpu::Reducer> r;
      void feed(const void* tile, std::int64_t n) override { r->feed(tile, n); }
      void finish() override { r->finish(); }
    };
    auto s = std::make_unique<Sink>();
    s->r = cpu::make_reducer(op_, t_, in.shape, reduced(in.shape.size()), out.data);
    return s;
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    cpu::reduce(op_, t_, in[0].data, in[0].shape, reduced(in[0].shape.size()), out[0].data);
  }
  // Every operand element is read and combined once.
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>&) const override {
    return static_cast<double>(num_elements(in[0].shape));
  }
  std::string params() const override {
    // mean's sum is named "mean": say what it combines.
    std::string s = name_ == std::string_view(detail::name(op_)) ? "" : std::string("op=") + detail::name(op_) + " ";
    return s + common_params(axes_, keepdims_, out_spec_);
  }
  ReduceOp partial_op() const override { return op_; }
  bool keeps_operand_layouts() const override { return true; }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    std::vector<int> axes;
    for (int a : axes_) axes.push_back(a + 1);
    auto spec = with_batch_dim(out_spec_, 0);
    return batch_unary_first(in[0], bd[0], ob,
                             [&] { return std::make_shared<Reduce>(name_, op_, t_, axes, keepdims_, spec); });
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
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
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    if (op_ != ReduceOp::Sum) return Primitive::transpose(ct, in, types, linear);
    if (!ct[0].valid()) return {Array()};
    Array r = broadcast_to(keepdims_ ? ct[0] : expanded(ct[0]), types[0].shape, {});
    return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {})};
  }

 private:
  // A result with the reduced dims back as size-1 dims.
  Array expanded(const Array& y) const {
    Shape s = y.shape();
    std::vector<int> axes = axes_;
    std::sort(axes.begin(), axes.end());
    for (int a : axes) s.insert(s.begin() + a, 1);
    return reshape(y, s, {}, {});
  }
  std::vector<bool> reduced(size_t rank) const {
    std::vector<bool> r(rank, false);
    for (int a : axes_) r[a] = true;
    return r;
  }

  const char* name_;
  ReduceOp op_;
  DType t_;
  std::vector<int> axes_;
  bool keepdims_;
  std::optional<PartitionSpec> out_spec_;
};

// argmax/argmin. Each device finds the first best element of its lines
// (value and global index); across devices the best pair is then found by
// two reductions over the mesh axes of the reduced dim: the best value (Max
// or Min, NaN winning), then the lowest index among the devices whose best
// value equals it. That is the order the local kernel uses (NaN first, then
// the value, ties to the lower index), and each device's pair is already
// the first best of its block. A device with nothing on the axis offers the
// worst value and no index. The second reduction reads the first one's
// result, which a single partial_op cannot express, so the primitive
// partitions itself: the operand stays where it lies, the result takes the
// natural layout (the kept dims' axes) and then out_sharding, if any.
class ArgReduce final : public Primitive {
 public:
  ArgReduce(const char* name, bool is_max, int axis, bool keepdims, std::optional<PartitionSpec> out_spec)
      : name_(name), is_max_(is_max), axis_(axis), keepdims_(keepdims), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return name_; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{result_shape(in[0].shape, {axis_}, keepdims_), DType::i32}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    return reduce_rule(in[0].shape, {axis_}, keepdims_);
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override {
    const Mesh& mesh = in[0].sharding.mesh();
    if (out_spec_) return std::vector<NamedSharding>{resolve_spec(mesh, *out_spec_, static_cast<int>(out[0].shape.size()), name_)};
    return std::vector<NamedSharding>{natural(in[0], false)};
  }
  bool lowers_itself() const override { return true; }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override;
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg(name_, "internal: runs on whole arrays (eval_global)"));
  }
  std::string params() const override { return common_params({axis_}, keepdims_, out_spec_); }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    auto spec = with_batch_dim(out_spec_, 0);
    return batch_unary_first(in[0], bd[0], ob,
                             [&] { return std::make_shared<ArgReduce>(name_, is_max_, axis_ + 1, keepdims_, spec); });
  }

 private:
  // The kept dims' axes; the reduced dim whole (size 1) in keepdims form
  // (`kform`) or dropped.
  NamedSharding natural(const AbstractArray& x, bool kform) const {
    const auto axes = spec_axes(x.sharding, static_cast<int>(x.shape.size()));
    std::vector<std::vector<std::string>> dims;
    for (int d = 0; d < static_cast<int>(x.shape.size()); ++d) {
      if (d != axis_)
        dims.push_back(axes[d]);
      else if (kform || keepdims_)
        dims.emplace_back();
    }
    return NamedSharding(x.sharding.mesh(), make_spec(dims));
  }

  const char* name_;
  bool is_max_;
  int axis_;
  bool keepdims_;
  std::optional<PartitionSpec> out_spec_;
};

std::vector<Array> ArgReduce::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                          const std::vector<NamedSharding>& layouts) const {
  const Array& x = in[0];
  const AbstractArray ax{x.shape(), x.dtype(), x.sharding()};
  const Mesh& mesh = x.sharding().mesh();
  const int n = mesh.size();
  const DType dt = x.dtype();
  Shape kshape = x.shape();
  kshape[axis_] = 1;
  const NamedSharding kform = natural(ax, true);
  const std::vector<std::string> mesh_axes = x.sharding().spec()[axis_].axes();
  std::vector<std::vector<Slice>> pbox(n);
  std::vector<Buffer> vals(n), idx(n);
  for (int pos = 0; pos < n; ++pos) pbox[pos] = kform.shard_index(kshape, pos);
  for_each_device(mesh, [&](int pos) {
    const std::int64_t cnt = num_elements(box_shape(pbox[pos]));
    const int dev = mesh.devices()[pos].id();
    vals[pos] = Buffer(dev, static_cast<std::size_t>(cnt) * itemsize(dt));
    idx[pos] = Buffer(dev, static_cast<std::size_t>(cnt) * sizeof(std::int64_t));
    cpu::arg_best(is_max_, dt, local_data(x, pos), local_shape(x, pos), axis_, local_index(x, pos)[axis_].start,
                  vals[pos].data(), static_cast<std::int64_t*>(idx[pos].data()));
  });
  const auto best = reduce_over(mesh, mesh_axes, is_max_ ? ReduceOp::Max : ReduceOp::Min, dt, vals, pbox, pbox, name_);
  std::vector<Buffer> cands(n);
  for_each_device(mesh, [&](int pos) {
    const std::int64_t cnt = num_elements(box_shape(pbox[pos]));
    cands[pos] = Buffer(mesh.devices()[pos].id(), static_cast<std::size_t>(cnt) * sizeof(std::int64_t));
    cpu::arg_candidates(dt, vals[pos].data(), static_cast<const std::int64_t*>(idx[pos].data()), best[pos].data(),
                        cnt, static_cast<std::int64_t*>(cands[pos].data()));
  });
  const auto first = reduce_over(mesh, mesh_axes, ReduceOp::Min, DType::i64, cands, pbox, pbox, name_);
  // The indices as i32, as jnp.argmax returns them.
  std::vector<Buffer> res(n);
  for_each_device(mesh, [&](int pos) {
    const std::int64_t cnt = num_elements(box_shape(pbox[pos]));
    res[pos] = Buffer(mesh.devices()[pos].id(), static_cast<std::size_t>(cnt) * sizeof(std::int32_t));
    const auto* s = static_cast<const std::int64_t*>(first[pos].data());
    auto* d = static_cast<std::int32_t*>(res[pos].data());
    for (std::int64_t k = 0; k < cnt; ++k) d[k] = static_cast<std::int32_t>(s[k]);
  });
  // Dropping the size-1 dim changes no block's data.
  const Array r = wrap(out[0].shape, DType::i32, natural(ax, false), std::move(res));
  return {reshard_for(r, layouts[0], name_)};
}

}  // namespace

ShardingRule reduce_rule(const Shape& shape, const std::vector<int>& axes, bool keepdims) {
  ShardingRule r;
  std::vector<int> dims, out;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    const bool red = contains(axes, d);
    r.factors.push_back(Factor{shape[d], red ? FactorKind::Reduction : FactorKind::PassThrough});
    dims.push_back(d);
    if (!red)
      out.push_back(d);
    else if (keepdims)
      out.push_back(-1);
  }
  r.operands = {dims};
  r.results = {out};
  return r;
}

PrimitivePtr make_reduce(const char* name, ReduceOp op, DType t, std::vector<int> axes, bool keepdims,
                         std::optional<PartitionSpec> out_spec) {
  return std::make_shared<Reduce>(name, op, t, std::move(axes), keepdims, std::move(out_spec));
}

PrimitivePtr make_arg_reduce(const char* name, bool is_max, int axis, bool keepdims,
                             std::optional<PartitionSpec> out_spec) {
  return std::make_shared<ArgReduce>(name, is_max, axis, keepdims, std::move(out_spec));
}

}  // namespace tessera::detail
