// Shape primitives but reshape (see shape.hpp; reshape is in reshape.cpp):
// type inference, sharding rules, layouts, parameters and the factories.
//
// Result layouts (JAX-like, plus "any size on any mesh"):
//   - transpose permutes the spec; expand_dims inserts an unsharded entry;
//     squeeze removes entries (a squeezed size-1 dim that was sharded drops
//     its axes: the one element is replicated over them); broadcast_to keeps
//     the spec of kept dims, broadcast and new dims are unsharded.
//   - slice, pad, roll, flip keep the operand's spec (balanced blocks of the
//     OUTPUT size); concatenate/stack take the sharding of the largest
//     operand (the first among equals), as elementwise ops do, so appending a
//     small replicated piece to a sharded array keeps it sharded (JAX takes
//     the first operand's, which would gather the big one everywhere).
//
// The primitives that partition themselves are *affine* maps (Affine,
// core/shape_ops.hpp): output dim j reads input dim src[j] at offset[j] +
// step[j] * o_j (step 0 broadcasts; an input dim no output dim reads is a
// size-1 dim read at 0). parts_of names, for each operand ("part"), its map
// and the output box it writes; spmd/lower_shape.cpp moves the data.
#include "primitives/shape.hpp"

#include "core/array_impl.hpp"
#include "sharding/spec.hpp"

namespace tessera::detail {

std::vector<Slice> empty_box(int rank) { return std::vector<Slice>(static_cast<std::size_t>(rank), Slice{0, 0}); }

PartitionSpec spec_of(std::vector<PartitionSpec::Entry> entries, const std::vector<std::string>& unreduced) {
  while (!entries.empty() && entries.back().is_none()) entries.pop_back();
  return PartitionSpec(std::move(entries), unreduced);
}

std::vector<PartitionSpec::Entry> entries_of(const NamedSharding& s, int rank) {
  std::vector<PartitionSpec::Entry> e(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d) e[d] = s.spec()[d];
  return e;
}

namespace {

using Box = std::vector<Slice>;
using Entry = PartitionSpec::Entry;

// ------------------------------------------------------------ small helpers

/// `s` with its entries replaced by `e` (the operand's unreduced axes kept).
NamedSharding with_entries(const NamedSharding& s, std::vector<Entry> e) {
  return NamedSharding(s.mesh(), spec_of(std::move(e), s.spec().unreduced()));
}

Affine identity_map(int rank) {
  Affine m;
  m.in_rank = rank;
  for (int j = 0; j < rank; ++j) {
    m.src.push_back(j);
    m.offset.push_back(0);
    m.step.push_back(1);
  }
  return m;
}

// Rule building: factors in creation order, named i, j, k, ...
struct RuleBuilder {
  ShardingRule r;
  int add(std::int64_t size, FactorKind kind = FactorKind::PassThrough) {
    r.factors.push_back(Factor{size, kind});
    return static_cast<int>(r.factors.size()) - 1;
  }
};

/// One factor per dim, shared by the operand and the result (roll and flip
/// mark `moved` as a permutation).
ShardingRule same_dims_rule(const Shape& s, int moved = -1) {
  RuleBuilder b;
  std::vector<int> dims;
  for (int d = 0; d < rank_of(s); ++d)
    dims.push_back(b.add(s[d], d == moved ? FactorKind::Permutation : FactorKind::PassThrough));
  b.r.operands = {dims};
  b.r.results = {dims};
  return b.r;
}

/// A dim whose operand and result sizes differ (slice, pad): the operand dim
/// would have to be whole on every device for a plain kernel, the result dim
/// is sharded freely. Equal sizes share one pass-through factor.
ShardingRule windowed_rule(const Shape& in, const Shape& out, const std::vector<bool>& windowed) {
  RuleBuilder b;
  std::vector<int> od, rd;
  for (int d = 0; d < rank_of(in); ++d) {
    if (!windowed[d]) {
      od.push_back(b.add(in[d]));
      rd.push_back(od.back());
      continue;
    }
    od.push_back(b.add(in[d], FactorKind::NeedReplication));
    rd.push_back(b.add(out[d]));
  }
  b.r.operands = {od};
  b.r.results = {rd};
  return b.r;
}

}  // namespace

NamedSharding stacked_sharding(const NamedSharding& s, int rank, int axis) {
  std::vector<Entry> e = entries_of(s, rank);
  e.insert(e.begin() + axis, Entry(none));
  return with_entries(s, std::move(e));
}

// ------------------------------------------------------ factor-rule primitives

std::vector<TypeInfo> Transpose::infer(std::span<const AbstractArray> in) const {
  Shape out;
  for (int d : perm_) out.push_back(in[0].shape[d]);
  return {TypeInfo{out, in[0].dtype}};
}
ShardingRule Transpose::rule(std::span<const AbstractArray> in) const {
  ShardingRule r = same_dims_rule(in[0].shape);
  r.results = {perm_};
  return r;
}
std::string Transpose::params() const { return "permutation=" + ints_str(perm_); }

std::vector<TypeInfo> ExpandDims::infer(std::span<const AbstractArray> in) const {
  Shape out = in[0].shape;
  out.insert(out.begin() + axis_, 1);
  return {TypeInfo{out, in[0].dtype}};
}
ShardingRule ExpandDims::rule(std::span<const AbstractArray> in) const {
  ShardingRule r = same_dims_rule(in[0].shape);
  r.results[0].insert(r.results[0].begin() + axis_, -1);
  return r;
}
std::string ExpandDims::params() const { return "axis=" + std::to_string(axis_); }

// ------------------------------------------------ primitives that lower themselves

std::optional<std::vector<NamedSharding>> AffineOp::layouts(std::span<const AbstractArray> in,
                                                            const std::vector<TypeInfo>& out) const {
  return std::vector<NamedSharding>{layout(in, out[0].shape)};
}

std::vector<TypeInfo> Squeeze::infer(std::span<const AbstractArray> in) const {
  Shape out;
  for (int d = 0; d < rank_of(in[0].shape); ++d)
    if (!drop_[d]) out.push_back(in[0].shape[d]);
  return {TypeInfo{out, in[0].dtype}};
}
ShardingRule Squeeze::rule(std::span<const AbstractArray> in) const {
  RuleBuilder b;
  std::vector<int> od, rd;
  for (int d = 0; d < rank_of(in[0].shape); ++d) {
    od.push_back(drop_[d] ? -1 : b.add(in[0].shape[d]));
    if (!drop_[d]) rd.push_back(od.back());
  }
  b.r.operands = {od};
  b.r.results = {rd};
  return b.r;
}
std::string Squeeze::params() const {
  std::vector<int> dims;
  for (size_t d = 0; d < drop_.size(); ++d)
    if (drop_[d]) dims.push_back(static_cast<int>(d));
  return "dimensions=" + ints_str(dims);
}
NamedSharding Squeeze::layout(std::span<const AbstractArray> in, const Shape&) const {
  std::vector<Entry> e;
  for (size_t d = 0; d < drop_.size(); ++d)
    if (!drop_[d]) e.push_back(in[0].sharding.spec()[static_cast<int>(d)]);
  return with_entries(in[0].sharding, std::move(e));
}
std::vector<PartSpec> Squeeze::parts_of(const std::vector<Shape>& in, const Shape& out) const {
  Affine m;
  m.in_rank = rank_of(in[0]);
  for (int d = 0; d < m.in_rank; ++d) {
    if (drop_[d]) continue;
    m.src.push_back(d);
    m.offset.push_back(0);
    m.step.push_back(1);
  }
  return {PartSpec{0, std::move(m), whole_box(out)}};
}

std::vector<TypeInfo> BroadcastTo::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{shape_, in[0].dtype}};
}
ShardingRule BroadcastTo::rule(std::span<const AbstractArray> in) const {
  return elementwise_rule({in[0].shape}, shape_);
}
std::string BroadcastTo::params() const { return "shape=" + ints_str(shape_); }
NamedSharding BroadcastTo::layout(std::span<const AbstractArray> in, const Shape&) const {
  const int lead = rank_of(shape_) - rank_of(in[0].shape);
  std::vector<Entry> e(shape_.size());
  for (int j = lead; j < rank_of(shape_); ++j)
    if (in[0].shape[j - lead] == shape_[j]) e[j] = in[0].sharding.spec()[j - lead];
  return with_entries(in[0].sharding, std::move(e));
}
std::vector<PartSpec> BroadcastTo::parts_of(const std::vector<Shape>& in, const Shape& out) const {
  const int lead = rank_of(out) - rank_of(in[0]);
  Affine m;
  m.in_rank = rank_of(in[0]);
  for (int j = 0; j < rank_of(out); ++j) {
    const bool kept = j >= lead && in[0][j - lead] == out[j];
    m.src.push_back(j < lead ? -1 : j - lead);
    m.offset.push_back(0);
    m.step.push_back(kept ? 1 : 0);
  }
  return {PartSpec{0, std::move(m), whole_box(out)}};
}

std::vector<TypeInfo> SliceOp::infer(std::span<const AbstractArray> in) const {
  Shape out;
  for (const SliceDim& s : dims_) out.push_back(s.size);
  return {TypeInfo{out, in[0].dtype}};
}
ShardingRule SliceOp::rule(std::span<const AbstractArray> in) const {
  const Shape& s = in[0].shape;
  std::vector<bool> w;
  for (size_t d = 0; d < dims_.size(); ++d)
    w.push_back(!(dims_[d].start == 0 && dims_[d].size == s[d] && (dims_[d].step == 1 || s[d] <= 1)));
  return windowed_rule(s, infer(in)[0].shape, w);
}
std::string SliceOp::params() const {
  std::vector<std::int64_t> start, step, size;
  for (const SliceDim& s : dims_) start.push_back(s.start), step.push_back(s.step), size.push_back(s.size);
  return "start=" + ints_str(start) + " step=" + ints_str(step) + " size=" + ints_str(size);
}
NamedSharding SliceOp::layout(std::span<const AbstractArray> in, const Shape&) const { return in[0].sharding; }
std::vector<PartSpec> SliceOp::parts_of(const std::vector<Shape>& in, const Shape& out) const {
  Affine m = identity_map(rank_of(in[0]));
  for (size_t d = 0; d < dims_.size(); ++d) {
    m.offset[d] = dims_[d].start;
    m.step[d] = dims_[d].step;
  }
  return {PartSpec{0, std::move(m), whole_box(out)}};
}

std::vector<TypeInfo> Pad::infer(std::span<const AbstractArray> in) const {
  Shape out = in[0].shape;
  for (size_t d = 0; d < out.size(); ++d) out[d] += widths_[d].first + widths_[d].second;
  return {TypeInfo{out, in[0].dtype}};
}
ShardingRule Pad::rule(std::span<const AbstractArray> in) const {
  std::vector<bool> w;
  for (const auto& [lo, hi] : widths_) w.push_back(lo != 0 || hi != 0);
  return windowed_rule(in[0].shape, infer(in)[0].shape, w);
}
std::string Pad::params() const {
  std::string s = "widths=(";
  for (size_t d = 0; d < widths_.size(); ++d) {
    if (d) s += ", ";
    s += '(';
    s += std::to_string(widths_[d].first);
    s += ", ";
    s += std::to_string(widths_[d].second);
    s += ')';
  }
  s += ") value=";
  s += text_;
  return s;
}
NamedSharding Pad::layout(std::span<const AbstractArray> in, const Shape&) const { return in[0].sharding; }
std::vector<PartSpec> Pad::parts_of(const std::vector<Shape>& in, const Shape&) const {
  const int r = rank_of(in[0]);
  Affine m = identity_map(r);
  Box limit(static_cast<std::size_t>(r));
  for (int d = 0; d < r; ++d) {
    limit[d] = {widths_[d].first, widths_[d].first + in[0][d]};
    m.offset[d] = -widths_[d].first;
  }
  return {PartSpec{0, std::move(m), std::move(limit)}};
}

std::vector<TypeInfo> Roll::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, in[0].dtype}};
}
ShardingRule Roll::rule(std::span<const AbstractArray> in) const { return same_dims_rule(in[0].shape, axis_); }
std::string Roll::params() const { return "shift=" + std::to_string(shift_) + " axis=" + std::to_string(axis_); }
NamedSharding Roll::layout(std::span<const AbstractArray> in, const Shape&) const { return in[0].sharding; }
std::vector<PartSpec> Roll::parts_of(const std::vector<Shape>& in, const Shape&) const {
  const Shape& s = in[0];
  const std::int64_t n = s[axis_];
  Box wrapped = whole_box(s), straight = whole_box(s);
  wrapped[axis_] = {0, shift_};
  straight[axis_] = {shift_, n};
  Affine mw = identity_map(rank_of(s)), ms = identity_map(rank_of(s));
  mw.offset[axis_] = n - shift_;
  ms.offset[axis_] = -shift_;
  return {PartSpec{0, std::move(mw), std::move(wrapped)}, PartSpec{0, std::move(ms), std::move(straight)}};
}

std::vector<TypeInfo> Flip::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, in[0].dtype}};
}
ShardingRule Flip::rule(std::span<const AbstractArray> in) const { return same_dims_rule(in[0].shape, axis_); }
std::string Flip::params() const { return "axis=" + std::to_string(axis_); }
NamedSharding Flip::layout(std::span<const AbstractArray> in, const Shape&) const { return in[0].sharding; }
std::vector<PartSpec> Flip::parts_of(const std::vector<Shape>& in, const Shape& out) const {
  Affine m = identity_map(rank_of(in[0]));
  m.offset[axis_] = in[0][axis_] - 1;
  m.step[axis_] = -1;
  return {PartSpec{0, std::move(m), whole_box(out)}};
}

std::vector<TypeInfo> Concatenate::infer(std::span<const AbstractArray> in) const {
  Shape out = in[0].shape;
  if (stack_) {
    out.insert(out.begin() + axis_, static_cast<std::int64_t>(in.size()));
  } else {
    out[axis_] = 0;
    for (const auto& a : in) out[axis_] += a.shape[axis_];
  }
  return {TypeInfo{out, t_}};
}
// Dims other than the concatenated one are shared by all; stack's new dim
// is the result's only; each operand's concatenated dim is its own factor,
// which a plain kernel would need whole.
ShardingRule Concatenate::rule(std::span<const AbstractArray> in) const {
  RuleBuilder b;
  const Shape out = infer(in)[0].shape;
  const int r = rank_of(in[0].shape);
  std::vector<int> shared(static_cast<std::size_t>(r), -1);
  for (int d = 0; d < r; ++d)
    if (stack_ || d != axis_) shared[d] = b.add(in[0].shape[d]);
  for (const auto& a : in) {
    std::vector<int> od = shared;
    if (!stack_) od[axis_] = b.add(a.shape[axis_], FactorKind::NeedReplication);
    b.r.operands.push_back(od);
  }
  std::vector<int> rd = shared;
  if (stack_)
    rd.insert(rd.begin() + axis_, b.add(out[axis_]));
  else
    rd[axis_] = b.add(out[axis_]);
  b.r.results = {rd};
  return b.r;
}
std::string Concatenate::params() const {
  std::string s = "axis=" + std::to_string(axis_);
  s += " dtype=";
  s += dtype_name(t_);
  return s;
}
NamedSharding Concatenate::layout(std::span<const AbstractArray> in, const Shape&) const {
  size_t big = 0;
  for (size_t k = 1; k < in.size(); ++k)
    if (num_elements(in[k].shape) > num_elements(in[big].shape)) big = k;
  return stack_ ? stacked_sharding(in[big].sharding, rank_of(in[big].shape), axis_) : in[big].sharding;
}
std::vector<PartSpec> Concatenate::parts_of(const std::vector<Shape>& in, const Shape& out) const {
  std::vector<PartSpec> parts;
  std::int64_t off = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const std::int64_t n = in[k][axis_];
    Box limit = whole_box(out);
    limit[axis_] = {off, off + n};
    Affine m = identity_map(rank_of(out));
    m.offset[axis_] = -off;
    off += n;
    if (n == 0) continue;
    parts.push_back(PartSpec{static_cast<int>(k), std::move(m), std::move(limit)});
  }
  return parts;
}

PrimitivePtr make_transpose(const char* name, std::vector<int> perm) {
  return std::make_shared<Transpose>(name, std::move(perm));
}
PrimitivePtr make_expand_dims(int axis) { return std::make_shared<ExpandDims>(axis); }
PrimitivePtr make_squeeze(std::vector<bool> drop) { return std::make_shared<Squeeze>(std::move(drop)); }
PrimitivePtr make_broadcast_to(Shape shape) { return std::make_shared<BroadcastTo>(std::move(shape)); }
PrimitivePtr make_slice(std::vector<SliceDim> dims) { return std::make_shared<SliceOp>(std::move(dims)); }
PrimitivePtr make_pad(std::vector<std::pair<std::int64_t, std::int64_t>> widths, std::vector<unsigned char> fill,
                      std::string value_text) {
  return std::make_shared<Pad>(std::move(widths), std::move(fill), std::move(value_text));
}
PrimitivePtr make_roll(std::int64_t shift, int axis) { return std::make_shared<Roll>(shift, axis); }
PrimitivePtr make_flip(int axis) { return std::make_shared<Flip>(axis); }
PrimitivePtr make_concatenate(const char* name, int axis, bool stack, DType t) {
  return std::make_shared<Concatenate>(name, axis, stack, t);
}

}  // namespace tessera::detail
