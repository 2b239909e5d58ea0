// The indexing primitives (see indexing.hpp).
//
//   take(x, indices, axis)
//     Each device needs the whole of x along `axis`, so a sharded `axis` is
//     first gathered (along that dim only; the front end refuses Explicit
//     axes there). The output is x's layout with dim `axis` taking the
//     layout of the indices; index axes that x's other dims already use
//     cannot shard the output twice, so they are dropped from the indices (a
//     gather of a small 1-d integer array). Indices out of range raise
//     ShapeError on the device that holds them.
//
//   scatter_add(x, indices, updates) / segment_sum(data, ids, num_segments)
//     The update rows stay where they are, sharded over mesh axes R (the
//     axes of updates' dim 0; the indices, a small 1-d array, are moved to
//     match). Every device accumulates its rows, in order, into a zero
//     partial of the output, and reduce_over combines the partials over R in
//     mesh order: an all-reduce where the output is replicated over R, a
//     reduce-scatter where the output shards a dim over R. For a dim that the
//     output shards over axes outside R, the partial covers only the device's
//     own output block (rows that fall elsewhere are another group's work),
//     and the updates are laid out alike on the trailing dims, so no device
//     computes what it then throws away. scatter_add then adds x, laid out
//     like the output.
#include "primitives/indexing.hpp"

#include <algorithm>
#include <cstring>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {

using AxisList = std::vector<std::string>;

bool contains(const AxisList& v, const std::string& a) { return std::find(v.begin(), v.end(), a) != v.end(); }

bool disjoint(const AxisList& a, const AxisList& b) {
  return std::none_of(a.begin(), a.end(), [&](const std::string& s) { return contains(b, s); });
}

/// One factor per dim of `shape` (pass-through), mapped to the dims in order.
std::vector<int> add_dims(ShardingRule& r, const Shape& shape) {
  std::vector<int> dims;
  for (std::int64_t n : shape) {
    dims.push_back(static_cast<int>(r.factors.size()));
    r.factors.push_back(Factor{n, FactorKind::PassThrough});
  }
  return dims;
}

int add_factor(ShardingRule& r, std::int64_t size, FactorKind kind) {
  r.factors.push_back(Factor{size, kind});
  return static_cast<int>(r.factors.size()) - 1;
}

/// x's dims with `axis` whole: the layout take reads x in.
std::vector<AxisList> whole_along(const NamedSharding& x, int rank, int axis) {
  auto dims = spec_axes(x, rank);
  dims[axis].clear();
  return dims;
}

/// The axes of `indices` that none of `xdims` uses.
AxisList free_index_axes(const std::vector<AxisList>& xdims, const NamedSharding& indices) {
  AxisList kept;
  for (const auto& a : indices.spec()[0].axes())
    if (std::none_of(xdims.begin(), xdims.end(), [&](const AxisList& d) { return contains(d, a); }))
      kept.push_back(a);
  return kept;
}

/// take's result layout: x's, with dim `axis` taking the axes of `indices`
/// that x's other dims leave free.
NamedSharding take_layout(const NamedSharding& x, int rank, const NamedSharding& indices, int axis) {
  auto dims = whole_along(x, rank, axis);
  dims[axis] = free_index_axes(dims, indices);
  return NamedSharding(x.mesh(), make_spec(dims));
}

/// A primitive that partitions itself; its per-device kernels run from
/// eval_global.
class Global : public Primitive {
 public:
  bool lowers_itself() const override { return true; }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg(std::string(name()).c_str(), "internal: runs on whole arrays (eval_global)"));
  }
};

// ===================================================================== take

class Take final : public Global {
 public:
  explicit Take(int axis) : axis_(axis) {}
  std::string_view name() const override { return "take"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape s = in[0].shape;
    s[axis_] = in[1].shape[0];
    return {TypeInfo{s, in[0].dtype}};
  }
  // x's gathered dim must be whole; the indices' dim becomes the output's.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    const std::vector<int> xd = add_dims(r, in[0].shape);
    r.factors[xd[axis_]].kind = FactorKind::NeedReplication;
    const int f = add_factor(r, in[1].shape[0], FactorKind::PassThrough);
    std::vector<int> od = xd;
    od[axis_] = f;
    r.operands = {xd, {f}};
    r.results = {od};
    return r;
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{
        take_layout(in[0].sharding, static_cast<int>(in[0].shape.size()), in[1].sharding, axis_)};
  }
  std::string params() const override {
    std::string s = "axis=";
    s += std::to_string(axis_);
    return s;
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);  // indices per example: one at a time
    ob = {0};
    return {bind1(std::make_shared<Take>(axis_ + 1), {move_dim(in[0], bd[0], 0), in[1]})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    Array y = bind1(shared_from_this(), p);
    to = {t[0].valid() && has_tangent(y.dtype()) ? bind1(shared_from_this(), {t[0], p[1]}) : Array()};
    return {y};
  }
  // The gathered rows' cotangents summed back into the rows they came from.
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    if (!ct[0].valid()) return {Array(), Array()};
    AbstractArray moved = types[0];
    std::swap(moved.shape[0], moved.shape[axis_]);
    if (axis_ != 0) {
      std::vector<int> perm(moved.shape.size());
      for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int>(d);
      std::swap(perm[0], perm[axis_]);
      moved.shape = types[0].shape;
      for (size_t d = 0; d < perm.size(); ++d) moved.shape[d] = types[0].shape[perm[d]];
      moved.sharding = NamedSharding(types[0].sharding.mesh(), P());
    }
    Array c = swapaxes(ct[0], 0, axis_, {});
    Array r = scatter_add(zeros_of(moved), in[1], c, {}, {});
    return {swapaxes(r, 0, axis_, {}), Array()};
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override;

 private:
  int axis_;
};

std::vector<Array> Take::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                     const std::vector<NamedSharding>& layouts) const {
  constexpr const char* op = "take";
  const int axis = axis_;
  const Array& x = in[0];
  const Array& indices = in[1];
  const int rank = x.ndim();
  const Mesh& mesh = x.sharding().mesh();
  const auto xdims = whole_along(x.sharding(), rank, axis);
  const Array xw = reshard_for(x, NamedSharding(mesh, make_spec(xdims)), op);
  const Array iw = reshard_for(indices, NamedSharding(mesh, make_spec({free_index_axes(xdims, indices.sharding())})), op);
  const std::int64_t n_axis = x.shape()[axis];
  const std::size_t isz = itemsize(x.dtype());

  // Indices out of range: each device checks its own, then every process
  // learns the first one of any device (in mesh order), so all raise the
  // same error, not only the processes whose devices hold it.
  // The indices stay loaded (and wrapped) for the kernels below.
  std::vector<std::vector<std::int64_t>> idx_at(static_cast<size_t>(mesh.size()));
  std::vector<std::optional<std::int64_t>> bad_at(static_cast<size_t>(mesh.size()));
  for_each_device(mesh, [&](int t) {
    auto& idx = idx_at[static_cast<size_t>(t)];
    idx = cpu::load_indices(local_data(iw, t), iw.dtype(), local_shape(iw, t)[0]);
    for (auto& r : idx) {
      if (r < -n_axis || r >= n_axis) {
        bad_at[static_cast<size_t>(t)] = r;
        break;
      }
      if (r < 0) r += n_axis;
    }
  });
  if (const auto bad = first_over_processes(mesh, bad_at, op))
    throw ShapeError(msg(op, "index " + std::to_string(*bad) + " is out of range for axis " + std::to_string(axis) +
                                 " of size " + std::to_string(n_axis) + " (x " + shape_str(x.shape()) + ")"));

  return {make_array(out[0].shape, x.dtype(), layouts[0], [&](int t, Buffer& b) {
    const std::vector<std::int64_t>& idx = idx_at[static_cast<size_t>(t)];
    const Shape xshape = local_shape(xw, t);
    std::int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= xshape[d];
    for (int d = axis + 1; d < rank; ++d) inner *= xshape[d];
    cpu::take(local_data(xw, t), outer, n_axis, inner * static_cast<std::int64_t>(isz), idx, b.data());
  })};
}

// ================================================================ scatters

/// The shared body of scatter_add and segment_sum: accumulate the rows of
/// `updates` (dtype = output dtype) at rows `ids` of a zero array of
/// `out_shape`, combine over the mesh axes sharding the rows, and add `base`
/// when given (laid out as `out_s` then).
Array scatter_rows(const char* op, const Array* base, const Array& ids, const Array& updates, const Shape& out_shape,
                   const NamedSharding& out_s, bool wrap_negative) {
  const Mesh& mesh = out_s.mesh();
  const int rank = static_cast<int>(out_shape.size());
  const DType dtype = updates.dtype();
  const std::size_t isz = itemsize(dtype);

  // R: the mesh axes the update rows are split over. The ids follow the
  // updates (they are the smaller array): rows replicated in `updates` give
  // R = {} and every device scatters all rows, with no reduction at all.
  const AxisList row_axes = updates.sharding().spec()[0].axes();

  // The partial's layout: the output's on dims not sharded over R (each
  // device sums only its own block there), whole on dims sharded over R
  // (those are what the reduce-scatter splits).
  const auto out_axes = spec_axes(out_s, rank);
  std::vector<AxisList> pdims(rank);
  for (int d = 0; d < rank; ++d)
    if (disjoint(out_axes[d], row_axes)) pdims[d] = out_axes[d];
  const NamedSharding partial_s(mesh, make_spec(pdims));
  // Updates: rows over R, trailing dims like the partial.
  auto work = pdims;
  work[0] = row_axes;
  const Array upd = reshard_for(updates, NamedSharding(mesh, make_spec(work)), op);
  const Array idx = reshard_for(ids, NamedSharding(mesh, make_spec({row_axes})), op);

  const int n = mesh.size();
  std::vector<std::vector<Slice>> partial_boxes(n), out_boxes(n);
  for (int t = 0; t < n; ++t) {
    partial_boxes[t] = partial_s.shard_index(out_shape, t);
    out_boxes[t] = out_s.shard_index(out_shape, t);
  }

  std::vector<Buffer> partial(n);
  for_each_device(mesh, [&](int t) {
    const Shape pshape = box_shape(partial_boxes[t]);
    Buffer b(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(pshape)) * isz);
    if (b.nbytes() > 0) {
      std::memset(b.data(), 0, b.nbytes());
      const std::int64_t nrows = local_shape(upd, t)[0];
      std::int64_t inner = 1;
      for (int d = 1; d < rank; ++d) inner *= pshape[d];
      cpu::scatter_rows(dtype, b.data(), partial_boxes[t][0], inner, idx.dtype(), local_data(idx, t),
                        local_data(upd, t), nrows, out_shape[0], wrap_negative);
    }
    partial[t] = std::move(b);
  });

  std::vector<Buffer> reduced = reduce_over(mesh, row_axes, ReduceOp::Sum, dtype, partial, partial_boxes, out_boxes, op);
  if (!base) return wrap(out_shape, dtype, out_s, std::move(reduced));

  const Array xb = reshard_for(*base, out_s, op);
  std::vector<Buffer> out(n);
  for_each_device(mesh, [&](int t) {
    const std::int64_t count = num_elements(box_shape(out_boxes[t]));
    Buffer b(mesh.devices()[t].id(), static_cast<std::size_t>(count) * isz);
    if (count > 0) cpu::add(dtype, local_data(xb, t), reduced[t].data(), b.data(), count);
    out[t] = std::move(b);
  });
  return wrap(out_shape, dtype, out_s, std::move(out));
}

std::string out_spec_param(const std::optional<PartitionSpec>& spec) {
  std::string s;
  if (spec) s += "out_sharding=", s += spec->str();
  return s;
}

// The transpose of a scatter of rows along dim 0 into n rows: row i of the
// result is ct's row ids[i], or zero where ids[i] names no row (negative
// ids wrapped once when `wrap_negative`), since the scatter dropped those
// updates (scatter_rows). take() alone would wrap or raise instead: it
// reads a clipped id, and the dropped rows are zeroed.
Array kept_rows(const Array& ct_in, const Array& ids_in, std::int64_t n, bool wrap_negative) {
  // The gather reads any row from anywhere: ct whole along its rows, and
  // the (1-d) ids on every device, so that no mesh axis (Explicit ones
  // included) shards both.
  std::vector<PartitionSpec::Entry> rows_whole = ct_in.sharding().spec().entries();
  rows_whole.resize(static_cast<std::size_t>(ct_in.ndim()), none);
  rows_whole[0] = none;
  const Array ct = reshard(ct_in, PartitionSpec(rows_whole, ct_in.sharding().spec().unreduced()));
  const Array ids = reshard(ids_in, PartitionSpec());
  if (n == 0) {
    // Every row was dropped.
    Shape s = ct.shape();
    s[0] = ids.shape()[0];
    return zeros(s, ct.dtype(), NamedSharding(ct.sharding().mesh(), PartitionSpec()));
  }
  Array id = ids;
  if (wrap_negative) id = where(equal(clip(ids, Scalar(0), std::nullopt), ids), ids, ids + Scalar(n));
  const Array safe = clip(id, Scalar(0), Scalar(std::max<std::int64_t>(n - 1, 0)));
  Array rows = take(ct, safe, 0, {});
  Array kept = equal(safe, id);
  while (kept.ndim() < rows.ndim()) kept = expand_dims(kept, -1);
  return where(kept, rows, Scalar(0));
}

class ScatterAdd final : public Global {
 public:
  explicit ScatterAdd(std::optional<PartitionSpec> out_spec) : out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return "scatter_add"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, in[0].dtype}};
  }
  // The update rows are summed into the rows the indices name.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    const std::vector<int> xd = add_dims(r, in[0].shape);
    const int k = add_factor(r, in[1].shape[0], FactorKind::Reduction);
    std::vector<int> ud = xd;
    ud[0] = k;
    r.operands = {xd, {k}, ud};
    r.results = {xd};
    return r;
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    const NamedSharding& x = in[0].sharding;
    if (!out_spec_) return std::vector<NamedSharding>{x};
    return std::vector<NamedSharding>{
        resolve_spec(x.mesh(), *out_spec_, static_cast<int>(in[0].shape.size()), "scatter_add")};
  }
  std::string params() const override { return out_spec_param(out_spec_); }
  // Rows stay dim 0: the batch goes second.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);
    const Array x = move_dim(batch_first(in[0], bd[0], size), 0, 1);
    const Array u = move_dim(batch_first(in[2], bd[2], size), 0, 1);
    auto spec = with_batch_dim(out_spec_, 1);
    ob = {1};
    return {bind1(std::make_shared<ScatterAdd>(std::move(spec)), {x, in[1], u})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    Array y = bind1(shared_from_this(), p);
    to = {Array()};
    if ((t[0].valid() || t[2].valid()) && has_tangent(y.dtype()))
      to[0] = bind1(shared_from_this(), {instantiate(t[0], type_of(p[0])), p[1], instantiate(t[2], type_of(p[2]))});
    return {y};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types,
                               const std::vector<bool>& linear) const override {
    std::vector<Array> r(3);
    if (!ct[0].valid()) return r;
    if (linear[0]) r[0] = ct[0];
    // The target's row count from its type: a linear target (differentiated
    // itself) has no value here, only a cotangent to receive.
    if (linear[2]) r[2] = kept_rows(ct[0], in[1], types[0].shape[0], /*wrap_negative=*/true);
    return r;
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>&,
                                 const std::vector<NamedSharding>& layouts) const override {
    return {scatter_rows("scatter_add", &in[0], in[1], in[2], in[0].shape(), layouts[0], /*wrap_negative=*/true)};
  }

 private:
  std::optional<PartitionSpec> out_spec_;
};

class SegmentSum final : public Global {
 public:
  SegmentSum(std::int64_t num_segments, std::optional<PartitionSpec> out_spec)
      : num_segments_(num_segments), out_spec_(std::move(out_spec)) {}
  std::string_view name() const override { return "segment_sum"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape s = in[0].shape;
    s[0] = num_segments_;
    return {TypeInfo{s, in[0].dtype}};
  }
  // The data rows are summed into the segments the ids name.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    Shape out = in[0].shape;
    out[0] = num_segments_;
    const std::vector<int> od = add_dims(r, out);
    const int k = add_factor(r, in[0].shape[0], FactorKind::Reduction);
    std::vector<int> dd = od;
    dd[0] = k;
    r.operands = {dd, {k}};
    r.results = {od};
    return r;
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    const NamedSharding& data = in[0].sharding;
    const int rank = static_cast<int>(in[0].shape.size());
    if (out_spec_) return std::vector<NamedSharding>{resolve_spec(data.mesh(), *out_spec_, rank, "segment_sum")};
    // Replicated along the segments, data's layout on the trailing dims.
    auto dims = spec_axes(data, rank);
    dims[0].clear();
    return std::vector<NamedSharding>{NamedSharding(data.mesh(), make_spec(dims))};
  }
  std::string params() const override {
    std::string s = "num_segments=";
    s += std::to_string(num_segments_);
    if (out_spec_) s += ' ', s += out_spec_param(out_spec_);
    return s;
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);
    auto spec = with_batch_dim(out_spec_, 1);
    ob = {1};
    return {bind1(std::make_shared<SegmentSum>(num_segments_, std::move(spec)), {move_dim(in[0], bd[0], 1), in[1]})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    Array y = bind1(shared_from_this(), p);
    to = {t[0].valid() && has_tangent(y.dtype()) ? bind1(shared_from_this(), {t[0], p[1]}) : Array()};
    return {y};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>&, const std::vector<bool>&) const override {
    if (!ct[0].valid()) return {Array(), Array()};
    return {kept_rows(ct[0], in[1], num_segments_, /*wrap_negative=*/false), Array()};
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override {
    return {scatter_rows("segment_sum", nullptr, in[1], in[0], out[0].shape, layouts[0], /*wrap_negative=*/false)};
  }

 private:
  std::int64_t num_segments_;
  std::optional<PartitionSpec> out_spec_;
};

}  // namespace

PrimitivePtr make_take(int axis) { return std::make_shared<Take>(axis); }
PrimitivePtr make_scatter_add(std::optional<PartitionSpec> out_spec) {
  return std::make_shared<ScatterAdd>(std::move(out_spec));
}
PrimitivePtr make_segment_sum(std::int64_t num_segments, std::optional<PartitionSpec> out_spec) {
  return std::make_shared<SegmentSum>(num_segments, std::move(out_spec));
}

}  // namespace tessera::detail
