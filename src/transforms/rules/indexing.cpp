// The transformation rules of the indexing primitives
// (primitives/indexing.hpp): batching, JVP and transposition, written with
// ops.
#include <algorithm>
#include <memory>
#include <utility>

#include "primitives/indexing.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

namespace {

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

}  // namespace

// ===================================================================== take

std::vector<Array> Take::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                               std::vector<int>& ob) const {
  bool idx_whole = true;  // replicated indices: their reshapes move nothing
  for (const auto& e : in[1].sharding().spec().entries()) idx_whole = idx_whole && e.axes().empty();
  if (bd[1] >= 0 && bd[0] < 0 && idx_whole) {
    // Indices per example into a shared x: one gather with every example's
    // indices in a row, its gathered dim then split into (example, index).
    const Array idx = move_dim(in[1], bd[1], 0);
    const std::int64_t n = idx.shape()[1];
    const Array g = bind1(shared_from_this(), {in[0], reshape(idx, {size * n}, {}, {})});
    Shape s = g.shape();
    s[axis_] = n;
    s.insert(s.begin() + axis_, size);
    ob = {axis_};
    return {reshape(g, s, {}, {})};
  }
  if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);  // x and indices per example: one at a time
  ob = {0};
  return {bind1(std::make_shared<Take>(axis_ + 1), {move_dim(in[0], bd[0], 0), in[1]})};
}

std::vector<Array> Take::jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const {
  Array y = bind1(shared_from_this(), p);
  to = {t[0].valid() && has_tangent(y.dtype()) ? bind1(shared_from_this(), {t[0], p[1]}) : Array()};
  return {y};
}

// The gathered rows' cotangents summed back into the rows they came from.
std::vector<Array> Take::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                   const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
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

// ============================================================= scatter_add

// Rows stay dim 0: the batch goes second.
std::vector<Array> ScatterAdd::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                     std::vector<int>& ob) const {
  if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);
  const Array x = move_dim(batch_first(in[0], bd[0], size), 0, 1);
  const Array u = move_dim(batch_first(in[2], bd[2], size), 0, 1);
  auto spec = with_batch_dim(out_spec_, 1);
  ob = {1};
  return {bind1(std::make_shared<ScatterAdd>(std::move(spec)), {x, in[1], u})};
}

std::vector<Array> ScatterAdd::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                   std::vector<Array>& to) const {
  Array y = bind1(shared_from_this(), p);
  to = {Array()};
  if ((t[0].valid() || t[2].valid()) && has_tangent(y.dtype()))
    to[0] = bind1(shared_from_this(), {instantiate(t[0], type_of(p[0])), p[1], instantiate(t[2], type_of(p[2]))});
  return {y};
}

std::vector<Array> ScatterAdd::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                         const std::vector<AbstractArray>& types,
                                         const std::vector<bool>& linear) const {
  std::vector<Array> r(3);
  if (!ct[0].valid()) return r;
  if (linear[0]) r[0] = ct[0];
  // The target's row count from its type: a linear target (differentiated
  // itself) has no value here, only a cotangent to receive.
  if (linear[2]) r[2] = kept_rows(ct[0], in[1], types[0].shape[0], /*wrap_negative=*/true);
  return r;
}

// ============================================================= segment_sum

std::vector<Array> SegmentSum::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                     std::vector<int>& ob) const {
  if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);
  auto spec = with_batch_dim(out_spec_, 1);
  ob = {1};
  return {bind1(std::make_shared<SegmentSum>(num_segments_, std::move(spec)), {move_dim(in[0], bd[0], 1), in[1]})};
}

std::vector<Array> SegmentSum::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                   std::vector<Array>& to) const {
  Array y = bind1(shared_from_this(), p);
  to = {t[0].valid() && has_tangent(y.dtype()) ? bind1(shared_from_this(), {t[0], p[1]}) : Array()};
  return {y};
}

std::vector<Array> SegmentSum::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                         const std::vector<AbstractArray>&, const std::vector<bool>&) const {
  if (!ct[0].valid()) return {Array(), Array()};
  return {kept_rows(ct[0], in[1], num_segments_, /*wrap_negative=*/false), Array()};
}

}  // namespace tessera::detail
