// The reshape primitive (see reshape.hpp): its groups, layouts, rule and
// parameters, the input boxes of its blocks, and its factory.
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
// input dims); the product over groups gives the input boxes to gather
// (spmd/lower_reshape.cpp gathers them).
#include "primitives/reshape.hpp"

#include "core/array_impl.hpp"
#include "core/nd_index.hpp"
#include "sharding/spec.hpp"

namespace tessera::detail {

namespace {

using Box = std::vector<Slice>;
using Entry = PartitionSpec::Entry;

/// The set of flat indices of a box of an array of shape `shape`, in a
/// canonical form: equal forms <=> equal sets (and, both being row-major
/// enumerations in increasing flat order, equal element orders).
struct FlatSet {
  bool empty = false;
  std::int64_t offset = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (len, stride), outer to inner, merged
  bool operator==(const FlatSet& o) const {
    return empty == o.empty && (empty || (offset == o.offset && dims == o.dims));
  }
};

FlatSet flat_set(const Shape& shape, const Box& box) {
  FlatSet f;
  if (box_empty(box)) {
    f.empty = true;
    return f;
  }
  const auto st = strides_of(shape);
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

/// True when every device's block of layout `s` is made of at most `cap`
/// input boxes.
bool few_sources(const Shape& in, const Shape& out, const std::vector<ReshapeGroup>& groups, const NamedSharding& s,
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
  const NamedSharding natural = reshape_natural_sharding(s, out, groups);
  if (is_local(in, s, out, natural)) return natural;
  const NamedSharding balanced = reshape_natural_sharding(s, out, groups, /*balanced=*/true);
  if (!(balanced == natural) && few_sources(in, out, groups, balanced, kReshapeMaxBoxes)) return balanced;
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
  for (const ReshapeGroup& g : reshape_groups(in, out)) {
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

}  // namespace

std::vector<ReshapeGroup> reshape_groups(const Shape& in, const Shape& out) {
  const int ri = static_cast<int>(in.size()), ro = static_cast<int>(out.size());
  std::vector<ReshapeGroup> gs;
  int i = 0, j = 0;
  while (i < ri || j < ro) {
    ReshapeGroup g{i, i, j, j};
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

NamedSharding reshape_natural_sharding(const NamedSharding& xs, const Shape& out,
                                       const std::vector<ReshapeGroup>& groups, bool balanced) {
  std::vector<Entry> e(out.size());
  for (const ReshapeGroup& g : groups) {
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

std::optional<std::vector<Box>> reshape_sources(const Shape& in, const Shape& out,
                                                const std::vector<ReshapeGroup>& groups, const Box& blk,
                                                std::size_t cap) {
  if (box_empty(blk)) return std::vector<Box>{};
  std::vector<Box> acc{Box{}};
  for (const ReshapeGroup& g : groups) {
    Shape gin(in.begin() + g.in0, in.begin() + g.in1);
    std::vector<Box> list;
    if (g.out0 == g.out1) {
      list.push_back(Box(gin.size(), Slice{0, 1}));
    } else {
      const Shape gout(out.begin() + g.out0, out.begin() + g.out1);
      const Box gb(blk.begin() + g.out0, blk.begin() + g.out1);
      const auto gst = strides_of(gout);
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

std::vector<TypeInfo> Reshape::infer(std::span<const AbstractArray> in) const { return {TypeInfo{out_, in[0].dtype}}; }
ShardingRule Reshape::rule(std::span<const AbstractArray> in) const { return reshape_rule(in[0].shape, out_); }
std::string Reshape::params() const {
  std::string s = "shape=" + shape_param(out_);
  if (requested_) s += " out_sharding=" + requested_->spec().str();
  return s;
}
std::optional<std::vector<NamedSharding>> Reshape::layouts(std::span<const AbstractArray> in,
                                                           const std::vector<TypeInfo>&) const {
  return std::vector<NamedSharding>{requested_ ? *requested_ : reshape_layout(in[0].shape, in[0].sharding, out_)};
}

NamedSharding reshape_natural(const Shape& in, const NamedSharding& s, const Shape& out) {
  return reshape_natural_sharding(s, out, reshape_groups(in, out));
}

bool reshape_is_local(const Shape& in, const NamedSharding& s, const Shape& out, const NamedSharding& target) {
  return is_local(in, s, out, target);
}

PrimitivePtr make_reshape(Shape out, std::optional<NamedSharding> requested) {
  return std::make_shared<Reshape>(std::move(out), std::move(requested));
}

}  // namespace tessera::detail
