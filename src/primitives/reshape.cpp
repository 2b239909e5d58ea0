// The reshape primitive (see shape.hpp).
//
// Input and output dims split into consecutive groups of equal element
// count (a merge, a split, or both). The layout a reshape keeps when it can
// ("natural") puts, per group, the axes of its input dims (in order) on the
// group's first output dim of size != 1; when the data must move anyway, on
// its first output dim with at least as many elements as parts instead (so
// no device is left empty needlessly). Explicit axes: a layout that cannot
// be kept needs out_sharding (the front end checks).
//
// The reshape is local when every device's input block and output block are
// the same set of flat indices (checked exactly, per device, on a canonical
// (offset, (len, stride)...) form): the buffers are then shared, no copy.
// Otherwise each output block is decomposed, group by group, into flat
// ranges and each range into input boxes (at most 2m - 1 for a group of m
// input dims); the product over groups gives the input boxes to gather.
// When a requested layout would need many boxes (an output sharded on an
// inner dim of a split), the data first goes to the natural layout (which
// needs few) split also over the requested layout's axes, then through the
// planner: each step moves at most the requested blocks.
#include <algorithm>

#include "backend/cpu/shape.hpp"
#include "core/nd_index.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"
#include "primitives/shape.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {

using Box = std::vector<Slice>;
using Entry = PartitionSpec::Entry;

bool box_contains(const Box& outer, const Box& inner) { return intersect(inner, outer) == inner; }

/// Consecutive input dims [in0, in1) and output dims [out0, out1) with the
/// same number of elements.
struct Group {
  int in0, in1, out0, out1;
};

std::vector<Group> reshape_groups(const Shape& in, const Shape& out) {
  const int ri = static_cast<int>(in.size()), ro = static_cast<int>(out.size());
  std::vector<Group> gs;
  int i = 0, j = 0;
  while (i < ri || j < ro) {
    Group g{i, i, j, j};
    std::int64_t pi = 1, po = 1;
    if (i < ri) pi *= in[i++];
    if (j < ro) po *= out[j++];
    while (pi != po) {
      if (pi < po && i < ri) {
        pi *= in[i++];
      } else if (po < pi && j < ro) {
        po *= out[j++];
      } else {  // only with zero sizes: one group takes the rest
        i = ri;
        j = ro;
        break;
      }
    }
    g.in1 = i;
    g.out1 = j;
    gs.push_back(g);
  }
  return gs;
}

/// Per group, the input axes (in order) on the group's first output dim of
/// size != 1 (or its first output dim): the layout a reshape keeps when it
/// can. `balanced`: on the first output dim with at least as many elements as
/// parts instead, when there is one (for layouts that must move anyway: no
/// device left empty that need not be).
NamedSharding natural_sharding(const NamedSharding& xs, const Shape& out, const std::vector<Group>& groups,
                               bool balanced = false) {
  std::vector<Entry> e(out.size());
  for (const Group& g : groups) {
    if (g.out0 == g.out1) continue;  // size-1 input dims with no output dim: their axes replicate
    std::vector<std::string> axes;
    int sharded = -1, count = 0;
    for (int d = g.in0; d < g.in1; ++d) {
      const auto& a = xs.spec()[d].axes();
      if (!a.empty()) sharded = d, ++count;
      axes.insert(axes.end(), a.begin(), a.end());
    }
    if (axes.empty()) continue;
    int target = g.out0;
    for (int j = g.out0; j < g.out1; ++j)
      if (out[j] != 1) {
        target = j;
        break;
      }
    if (balanced) {
      std::int64_t parts = 1;
      for (const auto& a : axes) parts *= xs.mesh().axis_size(a);
      for (int j = g.out0; j < g.out1; ++j)
        if (out[j] >= parts) {
          target = j;
          break;
        }
    }
    e[target] = count == 1 ? xs.spec()[sharded] : entry_of(axes);
  }
  return NamedSharding(xs.mesh(), spec_of(std::move(e), xs.spec().unreduced()));
}

/// The set of flat indices of a box of an array of shape `shape`, in a
/// canonical form: equal forms <=> equal sets (and, both being row-major
/// enumerations in increasing flat order, equal element orders).
struct FlatSet {
  bool empty = false;
  std::int64_t offset = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (len, stride), outer to inner, merged
  bool operator==(const FlatSet& o) const { return empty == o.empty && (empty || (offset == o.offset && dims == o.dims)); }
};

FlatSet flat_set(const Shape& shape, const Box& box) {
  FlatSet f;
  if (box_empty(box)) {
    f.empty = true;
    return f;
  }
  const auto st = cpu::strides_of(shape);
  for (size_t d = 0; d < box.size(); ++d) {
    f.offset += box[d].start * st[d];
    const std::int64_t len = box[d].size();
    if (len == 1) continue;
    if (!f.dims.empty() && f.dims.back().second == len * st[d])
      f.dims.back() = {f.dims.back().first * len, st[d]};
    else
      f.dims.emplace_back(len, st[d]);
  }
  return f;
}

bool is_local(const Shape& in, const NamedSharding& xs, const Shape& out, const NamedSharding& s) {
  for (int t = 0; t < s.mesh().size(); ++t)
    if (!(flat_set(in, xs.shard_index(in, t)) == flat_set(out, s.shard_index(out, t)))) return false;
  return true;
}

/// Boxes of the dims `n` (row-major) that tile the flat range [lo, hi).
void range_boxes(std::int64_t lo, std::int64_t hi, const Shape& n, size_t k, Box& prefix, std::vector<Box>& out) {
  if (lo >= hi) return;
  if (k == n.size()) {  // no dims left: the range is [0, 1)
    out.push_back(prefix);
    return;
  }
  std::int64_t inner = 1;
  for (size_t d = k + 1; d < n.size(); ++d) inner *= n[d];
  auto with = [&](Slice s, auto&& f) {
    prefix.push_back(s);
    f();
    prefix.pop_back();
  };
  std::int64_t a = lo / inner;
  const std::int64_t b = hi / inner, lr = lo % inner, hr = hi % inner;
  if (a == b) {
    with({a, a + 1}, [&] { range_boxes(lr, hr, n, k + 1, prefix, out); });
    return;
  }
  if (lr != 0) {
    with({a, a + 1}, [&] { range_boxes(lr, inner, n, k + 1, prefix, out); });
    ++a;
  }
  if (a < b) {
    Box full = prefix;
    full.push_back({a, b});
    for (size_t d = k + 1; d < n.size(); ++d) full.push_back({0, n[d]});
    out.push_back(std::move(full));
  }
  if (hr != 0) with({b, b + 1}, [&] { range_boxes(0, hr, n, k + 1, prefix, out); });
}

/// The input boxes (exactly) holding the elements of the output box `blk`;
/// nullopt when more than `cap` would be needed.
std::optional<std::vector<Box>> reshape_sources(const Shape& in, const Shape& out, const std::vector<Group>& groups,
                                                const Box& blk, std::size_t cap) {
  if (box_empty(blk)) return std::vector<Box>{};
  std::vector<Box> acc{Box{}};
  for (const Group& g : groups) {
    Shape gin(in.begin() + g.in0, in.begin() + g.in1);
    std::vector<Box> list;
    if (g.out0 == g.out1) {
      list.push_back(Box(gin.size(), Slice{0, 1}));
    } else {
      const Shape gout(out.begin() + g.out0, out.begin() + g.out1);
      const Box gb(blk.begin() + g.out0, blk.begin() + g.out1);
      const auto gst = cpu::strides_of(gout);
      const int m = static_cast<int>(gout.size());
      int p = m - 1;  // dims after p are whole: each run is one flat range
      while (p > 0 && gb[p].start == 0 && gb[p].stop == gout[p]) --p;
      std::int64_t first = 0;  // flat index of the box's first element
      for (int j = 0; j <= p; ++j) first += gb[j].start * gst[j];
      const Shape gsz = box_shape(gb);
      for (NdIndex it(first_dims(gsz, p), gst); !it.done(); it.next()) {
        const std::int64_t lo = first + it.offset(0);
        Box prefix;
        range_boxes(lo, lo + gb[p].size() * gst[p], gin, 0, prefix, list);
        if (list.size() > cap) return std::nullopt;
      }
    }
    std::vector<Box> next;
    if (acc.size() * list.size() > cap) return std::nullopt;
    for (const Box& a : acc)
      for (const Box& b : list) {
        Box c = a;
        c.insert(c.end(), b.begin(), b.end());
        next.push_back(std::move(c));
      }
    acc = std::move(next);
  }
  return acc;
}

/// Reshape into layout `s` by gathering, per position, the input boxes of
/// its output block; nullopt when some position would need more than `cap`.
std::optional<Array> reshape_gather(const Array& x, const Shape& out, const std::vector<Group>& groups,
                                    const NamedSharding& s, std::size_t cap) {
  const int n = s.mesh().size();
  std::vector<std::vector<Box>> src(n);
  std::size_t rounds = 0;
  for (int t = 0; t < n; ++t) {
    auto b = reshape_sources(x.shape(), out, groups, s.shard_index(out, t), cap);
    if (!b) return std::nullopt;
    src[t] = std::move(*b);
  }
  // Boxes the position holds are read in place; the others are fetched, one
  // planner round per box index.
  std::vector<std::vector<int>> round_of(n);
  for (int t = 0; t < n; ++t) {
    const Box own = local_index(x, t);
    int k = 0;
    for (const Box& b : src[t]) round_of[t].push_back(box_contains(own, b) ? -1 : k++);
    rounds = std::max(rounds, static_cast<std::size_t>(k));
  }
  std::vector<std::vector<Buffer>> fetched;
  for (std::size_t k = 0; k < rounds; ++k) {
    std::vector<Box> boxes(n, empty_box(x.ndim()));
    for (int t = 0; t < n; ++t)
      for (size_t i = 0; i < src[t].size(); ++i)
        if (round_of[t][i] == static_cast<int>(k)) boxes[t] = src[t][i];
    fetched.push_back(gather_boxes(x, boxes, "reshape"));
  }
  if (rounds == 0) record_none(s.mesh(), "reshape");
  const std::size_t isz = itemsize(x.dtype());
  return make_array(out, x.dtype(), s, [&](int t, Buffer& buf) {
    if (buf.nbytes() == 0) return;
    const Box blk = s.shard_index(out, t);
    const Box own = local_index(x, t);
    for (size_t i = 0; i < src[t].size(); ++i) {
      const int k = round_of[t][i];
      if (k < 0)
        cpu::copy_flat(local_data(x, t), own, src[t][i], x.shape(), buf.data(), blk, out, isz);
      else
        cpu::copy_flat(fetched[k][t].data(), src[t][i], src[t][i], x.shape(), buf.data(), blk, out, isz);
    }
  });
}


// Input boxes per device beyond which a layout is reached through the
// natural one (see the file comment).
constexpr std::size_t kMaxBoxes = 16;

/// True when every device's block of layout `s` is made of at most `cap`
/// input boxes.
bool few_sources(const Shape& in, const Shape& out, const std::vector<Group>& groups, const NamedSharding& s,
                 std::size_t cap) {
  for (int t = 0; t < s.mesh().size(); ++t)
    if (!reshape_sources(in, out, groups, s.shard_index(out, t), cap)) return false;
  return true;
}

/// The layout of a reshape without out_sharding: the natural layout when it
/// moves nothing; else the balanced one when it needs few boxes; else the
/// natural one.
NamedSharding reshape_layout(const Shape& in, const NamedSharding& s, const Shape& out) {
  const auto groups = reshape_groups(in, out);
  const NamedSharding natural = natural_sharding(s, out, groups);
  if (is_local(in, s, out, natural)) return natural;
  const NamedSharding balanced = natural_sharding(s, out, groups, /*balanced=*/true);
  if (!(balanced == natural) && few_sources(in, out, groups, balanced, kMaxBoxes)) return balanced;
  return natural;
}

// Factors: a group of one input and one output dim of the same size is one
// pass-through factor; in a merge or split each input dim is a factor a
// plain kernel would need whole, each output dim one of its own.
ShardingRule reshape_rule(const Shape& in, const Shape& out) {
  ShardingRule r;
  r.operands = {std::vector<int>(in.size(), -1)};
  r.results = {std::vector<int>(out.size(), -1)};
  auto add = [&](std::int64_t size, FactorKind kind) {
    r.factors.push_back(Factor{size, kind});
    return static_cast<int>(r.factors.size()) - 1;
  };
  for (const Group& g : reshape_groups(in, out)) {
    if (g.in1 - g.in0 == 1 && g.out1 - g.out0 == 1 && in[g.in0] == out[g.out0]) {
      r.operands[0][g.in0] = r.results[0][g.out0] = add(in[g.in0], FactorKind::PassThrough);
      continue;
    }
    for (int d = g.in0; d < g.in1; ++d) r.operands[0][d] = add(in[d], FactorKind::NeedReplication);
    for (int j = g.out0; j < g.out1; ++j) r.results[0][j] = add(out[j], FactorKind::PassThrough);
  }
  return r;
}

std::string shape_param(const Shape& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) t += ", ";
    t += std::to_string(s[i]);
  }
  if (s.size() == 1) t += ",";
  return t + ")";
}

class Reshape final : public Primitive {
 public:
  Reshape(Shape out, std::optional<NamedSharding> requested) : out_(std::move(out)), requested_(std::move(requested)) {}
  std::string_view name() const override { return "reshape"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{out_, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override { return reshape_rule(in[0].shape, out_); }
  std::string params() const override {
    std::string s = "shape=" + shape_param(out_);
    if (requested_) s += " out_sharding=" + requested_->spec().str();
    return s;
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    const Array x = move_dim(in[0], bd[0], 0);
    Shape out{size};
    out.insert(out.end(), out_.begin(), out_.end());
    std::optional<NamedSharding> req;
    if (requested_) {
      std::vector<PartitionSpec::Entry> e = requested_->spec().entries();
      const auto& xs = x.sharding().spec();
      e.insert(e.begin(), xs.size() > 0 ? xs[0] : PartitionSpec::Entry());
      req = NamedSharding(requested_->mesh(), PartitionSpec(std::move(e)));
    }
    ob = {0};
    return {bind1(std::make_shared<Reshape>(std::move(out), std::move(req)), {x})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return linear_jvp(*this, p, t, to);
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    // Laid out as the operand: the cotangent's own layout may not survive
    // the reshape back (a sharded dim split or merged unevenly).
    return {ct[0].valid() ? reshape(ct[0], types[0].shape, {.out_sharding = types[0].sharding.spec()}, {}) : Array()};
  }
  bool lowers_itself() const override { return true; }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg("reshape", "internal: a primitive that lowers itself has no per-device kernel"));
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{requested_ ? *requested_ : reshape_layout(in[0].shape, in[0].sharding, out_)};
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>&,
                                 const std::vector<NamedSharding>& layouts) const override;

 private:
  Shape out_;
  std::optional<NamedSharding> requested_;
};

std::vector<Array> Reshape::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>&,
                                        const std::vector<NamedSharding>& layouts) const {
  const Array& x = in[0];
  const Shape& out = out_;
  const NamedSharding& target = layouts[0];
  const Mesh& mesh = x.sharding().mesh();
  const int rank = static_cast<int>(out.size());
  if (is_local(x.shape(), x.sharding(), out, target)) {
    record_none(mesh, "reshape");
    return {wrap(out, x.dtype(), target, x.impl()->buffers)};
  }
  const auto groups = reshape_groups(x.shape(), out);
  const NamedSharding natural = natural_sharding(x.sharding(), out, groups);
  // Few boxes per device: straight to the layout. The natural layout always
  // needs few (each group's block is one flat range); other layouts that
  // would need many go through it and then the planner.
  // Without a requested layout the target is the natural or the balanced
  // layout (see reshape_layout): both need few boxes.
  if (!requested_) return {*reshape_gather(x, out, groups, target, SIZE_MAX)};
  if (target == natural) return {*reshape_gather(x, out, groups, natural, SIZE_MAX)};
  if (auto direct = reshape_gather(x, out, groups, target, kMaxBoxes)) return {*direct};
  if (is_local(x.shape(), x.sharding(), out, natural))
    return {reshard_for(wrap(out, x.dtype(), natural, x.impl()->buffers), target, "reshape")};
  // The intermediate also splits over the target's other axes, so its blocks
  // are no larger than the target's: each step moves at most the target's
  // blocks. They go on the dim carrying the first group's axes (or the first
  // dim of size != 1), keeping one flat range per group.
  std::vector<Entry> e = entries_of(natural, rank);
  std::vector<std::string> extra;
  for (const auto& en : target.spec().entries())
    for (const auto& a : en.axes()) {
      bool used = false;
      for (const auto& ne : e) used = used || std::find(ne.axes().begin(), ne.axes().end(), a) != ne.axes().end();
      if (!used) extra.push_back(a);
    }
  int dim = -1;
  for (int j = 0; j < rank && dim < 0; ++j)
    if (!e[j].is_none()) dim = j;
  for (int j = 0; j < rank && dim < 0; ++j)
    if (out[j] != 1) dim = j;
  if (dim < 0 && rank > 0) dim = 0;
  if (dim >= 0 && !extra.empty()) {
    std::vector<std::string> axes = e[dim].axes();
    axes.insert(axes.end(), extra.begin(), extra.end());
    e[dim] = entry_of(axes);
  }
  const NamedSharding mid(mesh, spec_of(std::move(e), natural.spec().unreduced()));
  return {reshard_for(*reshape_gather(x, out, groups, mid, SIZE_MAX), target, "reshape")};
}

}  // namespace

NamedSharding reshape_natural(const Shape& in, const NamedSharding& s, const Shape& out) {
  return natural_sharding(s, out, reshape_groups(in, out));
}

bool reshape_is_local(const Shape& in, const NamedSharding& s, const Shape& out, const NamedSharding& target) {
  return is_local(in, s, out, target);
}

PrimitivePtr make_reshape(Shape out, std::optional<NamedSharding> requested) {
  return std::make_shared<Reshape>(std::move(out), std::move(requested));
}

}  // namespace tessera::detail
