// Shape primitives but reshape (see shape.hpp; reshape is in reshape.cpp).
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
// Data movement of the primitives that partition themselves. Each is an
// *affine* map: output dim j reads input dim src[j] at offset[j] + step[j] *
// o_j (step 0 broadcasts; an input dim no output dim reads is a size-1 dim
// read at 0). For each device and each operand ("part") the op names the
// sub-box of the device's output block that the part writes. Its image under
// the map is an input box I; the part of I the device already holds is read
// in place, and I minus that (at most 2 * rank boxes) is fetched through
// gather_boxes, one planner round per box index, so only the missing
// elements cross devices (halos for slice/pad/roll/concatenate along a
// sharded dim). A per-device strided copy then writes the output block. A
// device receives at most its output block (times the step of a strided
// slice, whose fetched box spans the gaps).
#include "primitives/shape.hpp"

#include <algorithm>
#include <cstring>

#include "backend/cpu/shape.hpp"
#include "core/promote.hpp"
#include "primitives/elementwise.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"
#include "tessera/ops.hpp"
#include "transforms/trace.hpp"

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
using cpu::Affine;

// ------------------------------------------------------------ small helpers

std::int64_t floor_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
std::int64_t ceil_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}


/// `s` with its entries replaced by `e` (the operand's unreduced axes kept).
NamedSharding with_entries(const NamedSharding& s, std::vector<Entry> e) {
  return NamedSharding(s.mesh(), spec_of(std::move(e), s.spec().unreduced()));
}

int rank_of(const Shape& s) { return static_cast<int>(s.size()); }

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

// ------------------------------------------------------------ affine parts

/// The input box read by the (non-empty) output box `r`.
Box image(const Affine& m, const Box& r) {
  Box b(static_cast<std::size_t>(m.in_rank), Slice{0, 1});
  for (size_t j = 0; j < r.size(); ++j) {
    if (m.src[j] < 0) continue;
    const std::int64_t a = m.offset[j] + m.step[j] * r[j].start;
    const std::int64_t z = m.offset[j] + m.step[j] * (r[j].stop - 1);
    b[m.src[j]] = {std::min(a, z), std::max(a, z) + 1};
  }
  return b;
}

/// The part of the output box `r` whose elements read from the input box `p`.
Box preimage(const Affine& m, const Box& p, const Box& r) {
  Box out = r;
  std::vector<bool> read(static_cast<std::size_t>(m.in_rank), false);
  for (size_t j = 0; j < r.size(); ++j) {
    const int d = m.src[j];
    if (d < 0) continue;
    read[d] = true;
    const std::int64_t a = m.offset[j], s = m.step[j];
    std::int64_t lo, hi;
    if (s == 0) {
      const bool in = p[d].start <= a && a < p[d].stop;
      lo = in ? r[j].start : 0;
      hi = in ? r[j].stop : 0;
    } else if (s > 0) {
      lo = ceil_div(p[d].start - a, s);
      hi = floor_div(p[d].stop - 1 - a, s) + 1;
    } else {
      lo = ceil_div(a - p[d].stop + 1, -s);
      hi = floor_div(a - p[d].start, -s) + 1;
    }
    out[j].start = std::max(lo, r[j].start);
    out[j].stop = std::max(out[j].start, std::min(hi, r[j].stop));
  }
  for (int d = 0; d < m.in_rank; ++d)
    if (!read[d] && !(p[d].start <= 0 && 0 < p[d].stop))
      for (auto& s : out) s = {0, 0};
  return out;
}

/// `a` minus `b` as disjoint boxes (at most 2 * rank).
std::vector<Box> subtract(const Box& a, const Box& b) {
  if (box_empty(intersect(a, b))) return {a};
  std::vector<Box> out;
  Box rest = a;
  for (size_t d = 0; d < a.size(); ++d) {
    if (rest[d].start < b[d].start) {
      Box lo = rest;
      lo[d] = {rest[d].start, b[d].start};
      out.push_back(lo);
    }
    if (b[d].stop < rest[d].stop) {
      Box hi = rest;
      hi[d] = {b[d].stop, rest[d].stop};
      out.push_back(hi);
    }
    rest[d] = {std::max(rest[d].start, b[d].start), std::min(rest[d].stop, b[d].stop)};
  }
  return out;
}

/// One operand of an affine op: the map, and per mesh position the sub-box
/// of that position's output block it writes (possibly empty).
struct Part {
  Array x;
  Affine map;
  std::vector<Box> region;
};

/// Builds the output of an affine op (see the file comment). `fill`: the
/// constant written where no part writes (pad). Records a "none" CommRecord
/// when nothing moves.
Array assemble(const char* op, const Shape& out_shape, DType dtype, const NamedSharding& out_s,
               const std::vector<Part>& parts, const std::optional<std::vector<unsigned char>>& fill) {
  const int n = out_s.mesh().size();
  const std::size_t isz = itemsize(dtype);
  struct Piece {
    Box region;  // output sub-box
    Box sbox;    // input box held by the source buffer
    int round = -1;  // -1: the position's own block
  };
  struct Planned {
    std::vector<std::vector<Piece>> local, remote;  // per position
    std::vector<std::vector<Buffer>> rounds;       // per round, per position
  };
  std::vector<Planned> plans(parts.size());
  bool moved = false;
  for (size_t p = 0; p < parts.size(); ++p) {
    const Part& part = parts[p];
    Planned& pl = plans[p];
    pl.local.resize(n);
    pl.remote.resize(n);
    std::size_t rounds = 0;
    for (int t = 0; t < n; ++t) {
      const Box& r = part.region[t];
      if (box_empty(r)) continue;
      const Box in = image(part.map, r);
      const Box own = local_index(part.x, t);
      const Box here = intersect(in, own);
      if (!box_empty(here)) {
        Box lr = preimage(part.map, here, r);
        if (!box_empty(lr)) pl.local[t].push_back({std::move(lr), own, -1});
      }
      for (const Box& miss : subtract(in, own)) {
        Box rr = preimage(part.map, miss, r);
        if (box_empty(rr)) continue;
        Box need = image(part.map, rr);
        pl.remote[t].push_back({std::move(rr), std::move(need), static_cast<int>(pl.remote[t].size())});
      }
      rounds = std::max(rounds, pl.remote[t].size());
    }
    for (std::size_t k = 0; k < rounds; ++k) {
      std::vector<Box> boxes(n, empty_box(part.x.ndim()));
      for (int t = 0; t < n; ++t)
        if (k < pl.remote[t].size()) boxes[t] = pl.remote[t][k].sbox;
      pl.rounds.push_back(gather_boxes(part.x, boxes, op));
      moved = true;
    }
  }
  if (!moved) record_none(out_s.mesh(), op);
  return make_array(out_shape, dtype, out_s, [&](int t, Buffer& b) {
    if (b.nbytes() == 0) return;
    const Box blk = out_s.shard_index(out_shape, t);
    if (fill) cpu::fill_bytes(static_cast<unsigned char*>(b.data()), num_elements(box_shape(blk)), *fill);
    for (size_t p = 0; p < parts.size(); ++p) {
      const Part& part = parts[p];
      for (const Piece& pc : plans[p].local[t])
        cpu::copy_affine(part.map, local_data(part.x, t), pc.sbox, b.data(), blk, pc.region, isz);
      for (const Piece& pc : plans[p].remote[t])
        cpu::copy_affine(part.map, plans[p].rounds[pc.round][t].data(), pc.sbox, b.data(), blk, pc.region, isz);
    }
  });
}

/// Per position, the output block of `s` intersected with `limit`.
std::vector<Box> regions(const NamedSharding& s, const Shape& shape, const Box& limit) {
  std::vector<Box> r(s.mesh().size());
  for (int t = 0; t < s.mesh().size(); ++t) r[t] = intersect(s.shard_index(shape, t), limit);
  return r;
}

// ------------------------------------------------------ factor-rule primitives

// Each output dim has the size and axes of its input dim, so the output
// block is the input block permuted: a local copy, no communication.
class Transpose final : public Primitive {
 public:
  Transpose(const char* name, std::vector<int> perm) : name_(name), perm_(std::move(perm)) {}
  std::string_view name() const override { return name_; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape out;
    for (int d : perm_) out.push_back(in[0].shape[d]);
    return {TypeInfo{out, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r = same_dims_rule(in[0].shape);
    r.results = {perm_};
    return r;
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const std::size_t isz = itemsize(in[0].dtype);
    const auto is = static_cast<std::int64_t>(isz);
    const auto sst = cpu::strides_of(in[0].shape);
    auto dst = cpu::strides_of(out[0].shape);
    std::vector<std::int64_t> src(perm_.size());
    for (size_t j = 0; j < perm_.size(); ++j) {
      src[j] = sst[perm_[j]] * is;
      dst[j] *= is;
    }
    cpu::strided_copy(static_cast<const unsigned char*>(in[0].data), src, static_cast<unsigned char*>(out[0].data),
                      dst, out[0].shape, isz);
  }
  std::string params() const override { return "permutation=" + ints_str(perm_); }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    std::vector<int> perm{0};
    for (int d : perm_) perm.push_back(d + 1);
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Transpose>(name_, perm); });
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return linear_jvp(*this, p, t, to);
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>&, const std::vector<bool>&) const override {
    std::vector<int> inv(perm_.size());
    for (size_t j = 0; j < perm_.size(); ++j) inv[perm_[j]] = static_cast<int>(j);
    return {ct[0].valid() ? tessera::transpose(ct[0], inv, {}) : Array()};
  }

 private:
  const char* name_;
  std::vector<int> perm_;
};

// A new size-1 dim leaves the row-major data of every block as it is.
class ExpandDims final : public Primitive {
 public:
  explicit ExpandDims(int axis) : axis_(axis) {}
  std::string_view name() const override { return "expand_dims"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape out = in[0].shape;
    out.insert(out.begin() + axis_, 1);
    return {TypeInfo{out, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r = same_dims_rule(in[0].shape);
    r.results[0].insert(r.results[0].begin() + axis_, -1);
    return r;
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const auto n = static_cast<std::size_t>(num_elements(in[0].shape)) * itemsize(in[0].dtype);
    if (n) std::memcpy(out[0].data, in[0].data, n);
  }
  std::string params() const override { return "axis=" + std::to_string(axis_); }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<ExpandDims>(axis_ + 1); });
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return linear_jvp(*this, p, t, to);
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    // Laid out as the operand (a reshape may not keep ct's own layout).
    return {ct[0].valid() ? reshape(ct[0], types[0].shape, {.out_sharding = types[0].sharding.spec()}, {}) : Array()};
  }

 private:
  int axis_;
};

// ------------------------------------------------ primitives that lower themselves

/// One operand's share of an affine op: the map, and the output box it
/// writes (clipped to each device's block by regions()).
struct PartSpec {
  int operand = 0;
  Affine map;
  Box limit;
};

// The affine ops: layouts() is the op's layout rule applied to the abstract
// operands; eval_global runs assemble() over the parts.
class AffineOp : public Primitive {
 public:
  explicit AffineOp(const char* name) : name_(name) {}
  // Every affine op is linear in its operands (pad's fill aside: Pad
  // overrides this).
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return linear_jvp(*this, p, t, to);
  }
  std::string_view name() const override { return name_; }
  bool lowers_itself() const override { return true; }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg(name_, "internal: a primitive that lowers itself has no per-device kernel"));
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>& out) const override {
    return std::vector<NamedSharding>{layout(in, out[0].shape)};
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override {
    std::vector<Shape> shapes;
    for (const Array& a : in) shapes.push_back(a.shape());
    std::vector<Part> parts;
    for (PartSpec& p : parts_of(shapes, out[0].shape))
      parts.push_back(Part{in[p.operand], std::move(p.map), regions(layouts[0], out[0].shape, p.limit)});
    return {assemble(name_, out[0].shape, out[0].dtype, layouts[0], parts, fill())};
  }

 protected:
  virtual NamedSharding layout(std::span<const AbstractArray> in, const Shape& out) const = 0;
  virtual std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const = 0;
  virtual std::optional<std::vector<unsigned char>> fill() const { return std::nullopt; }
  const char* name_;
};

// A dropped size-1 dim sharded over more than one part is held by part 0
// only: devices whose block of it is empty fetch the element. Otherwise the
// blocks keep their row-major data and the buffers are shared.
class Squeeze final : public AffineOp {
 public:
  explicit Squeeze(std::vector<bool> drop) : AffineOp("squeeze"), drop_(std::move(drop)) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape out;
    for (int d = 0; d < rank_of(in[0].shape); ++d)
      if (!drop_[d]) out.push_back(in[0].shape[d]);
    return {TypeInfo{out, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
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
  std::string params() const override {
    std::vector<int> dims;
    for (size_t d = 0; d < drop_.size(); ++d)
      if (drop_[d]) dims.push_back(static_cast<int>(d));
    return "dimensions=" + ints_str(dims);
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    std::vector<bool> drop{false};
    drop.insert(drop.end(), drop_.begin(), drop_.end());
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Squeeze>(drop); });
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    // Laid out as the operand (a reshape may not keep ct's own layout).
    return {ct[0].valid() ? reshape(ct[0], types[0].shape, {.out_sharding = types[0].sharding.spec()}, {}) : Array()};
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override {
    bool moves = false;
    for (size_t d = 0; d < drop_.size(); ++d) moves = moves || (drop_[d] && in[0].sharding().num_parts(static_cast<int>(d)) > 1);
    if (!moves) return {wrap(out[0].shape, out[0].dtype, layouts[0], in[0].impl()->buffers)};
    return AffineOp::eval_global(in, out, layouts);
  }

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override {
    std::vector<Entry> e;
    for (size_t d = 0; d < drop_.size(); ++d)
      if (!drop_[d]) e.push_back(in[0].sharding.spec()[static_cast<int>(d)]);
    return with_entries(in[0].sharding, std::move(e));
  }
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override {
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

 private:
  std::vector<bool> drop_;
};

// Kept dims keep their axes; a broadcast dim reads its one element (fetched
// by devices whose block of a sharded size-1 dim is empty). Only new leading
// size-1 dims: the blocks' row-major data is unchanged, buffers are shared.
class BroadcastTo final : public AffineOp {
 public:
  explicit BroadcastTo(Shape shape) : AffineOp("broadcast_to"), shape_(std::move(shape)) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{shape_, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    return elementwise_rule({in[0].shape}, shape_);
  }
  std::string params() const override { return "shape=" + ints_str(shape_); }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    Shape target{size};
    target.insert(target.end(), shape_.begin(), shape_.end());
    ob = {0};
    return {broadcast_to(batch_first_aligned(in[0], bd[0], rank_of(shape_)), target, {})};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    return {ct[0].valid() ? unbroadcast(ct[0], types[0]) : Array()};
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override {
    const int lead = rank_of(shape_) - in[0].ndim();
    bool broadcasts = false;
    for (int j = 0; j < rank_of(shape_); ++j)
      broadcasts = broadcasts || (j < lead ? shape_[j] != 1 : in[0].shape()[j - lead] != shape_[j]);
    if (!broadcasts) return {wrap(shape_, out[0].dtype, layouts[0], in[0].impl()->buffers)};
    return AffineOp::eval_global(in, out, layouts);
  }

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override {
    const int lead = rank_of(shape_) - rank_of(in[0].shape);
    std::vector<Entry> e(shape_.size());
    for (int j = lead; j < rank_of(shape_); ++j)
      if (in[0].shape[j - lead] == shape_[j]) e[j] = in[0].sharding.spec()[j - lead];
    return with_entries(in[0].sharding, std::move(e));
  }
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override {
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

 private:
  Shape shape_;
};

class SliceOp final : public AffineOp {
 public:
  explicit SliceOp(std::vector<SliceDim> dims) : AffineOp("slice"), dims_(std::move(dims)) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape out;
    for (const SliceDim& s : dims_) out.push_back(s.size);
    return {TypeInfo{out, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    const Shape& s = in[0].shape;
    std::vector<bool> w;
    for (size_t d = 0; d < dims_.size(); ++d)
      w.push_back(!(dims_[d].start == 0 && dims_[d].size == s[d] && (dims_[d].step == 1 || s[d] <= 1)));
    return windowed_rule(s, infer(in)[0].shape, w);
  }
  std::string params() const override {
    std::vector<std::int64_t> start, step, size;
    for (const SliceDim& s : dims_) start.push_back(s.start), step.push_back(s.step), size.push_back(s.size);
    return "start=" + ints_str(start) + " step=" + ints_str(step) + " size=" + ints_str(size);
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    std::vector<SliceDim> dims{SliceDim{0, 1, size}};
    dims.insert(dims.end(), dims_.begin(), dims_.end());
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<SliceOp>(dims); });
  }
  // The cotangent goes back where the slice read it, zeros elsewhere: steps
  // are undone one dim at a time by interleaving zeros (a size-1 dim after
  // it padded to the step, then merged), reversed steps by a flip.
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    if (!ct[0].valid()) return {Array()};
    Array c = ct[0];
    const Shape& in = types[0].shape;
    const int r = rank_of(in);
    std::vector<std::pair<std::int64_t, std::int64_t>> widths(static_cast<size_t>(r), {0, 0});
    for (int d = 0; d < r; ++d) {
      const SliceDim& sd = dims_[d];
      if (sd.size == 0) return {zeros_of(types[0])};
      std::int64_t lo = sd.start, step = sd.step;
      if (step < 0) {
        c = flip(c, d, {});
        lo = sd.start + step * (sd.size - 1);
        step = -step;
      }
      if (step > 1) {
        Shape sh = c.shape();
        Array e = expand_dims(c, d + 1, {});
        std::vector<std::pair<std::int64_t, std::int64_t>> w(static_cast<size_t>(r + 1), {0, 0});
        w[d + 1] = {0, step - 1};
        e = pad(e, w, 0, {});
        sh[d] = sd.size * step;
        // Dim d whole: merging it with the padding's dim keeps no layout of
        // d that splits it unevenly (the other dims keep theirs).
        std::vector<PartitionSpec::Entry> keep_spec = c.sharding().spec().entries();
        keep_spec.resize(static_cast<size_t>(r), none);
        keep_spec[static_cast<size_t>(d)] = none;
        c = reshape(e, sh, {.out_sharding = PartitionSpec(keep_spec)}, {});
        std::vector<SliceSpec> keep(static_cast<size_t>(r));
        keep[d] = SliceSpec{0, (sd.size - 1) * step + 1, 1};
        c = slice(c, keep, {});
      }
      widths[d] = {lo, in[d] - lo - c.shape()[d]};
    }
    return {pad(c, widths, 0, {})};
  }

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override { return in[0].sharding; }
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override {
    Affine m = identity_map(rank_of(in[0]));
    for (size_t d = 0; d < dims_.size(); ++d) {
      m.offset[d] = dims_[d].start;
      m.step[d] = dims_[d].step;
    }
    return {PartSpec{0, std::move(m), whole_box(out)}};
  }

 private:
  std::vector<SliceDim> dims_;
};

class Pad final : public AffineOp {
 public:
  Pad(std::vector<std::pair<std::int64_t, std::int64_t>> widths, std::vector<unsigned char> fill, std::string text)
      : AffineOp("pad"), widths_(std::move(widths)), fill_(std::move(fill)), text_(std::move(text)) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape out = in[0].shape;
    for (size_t d = 0; d < out.size(); ++d) out[d] += widths_[d].first + widths_[d].second;
    return {TypeInfo{out, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    std::vector<bool> w;
    for (const auto& [lo, hi] : widths_) w.push_back(lo != 0 || hi != 0);
    return windowed_rule(in[0].shape, infer(in)[0].shape, w);
  }
  std::string params() const override {
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
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    std::vector<std::pair<std::int64_t, std::int64_t>> w{{0, 0}};
    w.insert(w.end(), widths_.begin(), widths_.end());
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Pad>(w, fill_, text_); });
  }
  // The padding value is a constant: tangents are padded with zeros.
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    Array y = bind1(shared_from_this(), p);
    to = {t[0].valid() && has_tangent(y.dtype()) ? pad(t[0], widths_, 0, {}) : Array()};
    return {y};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    if (!ct[0].valid()) return {Array()};
    std::vector<SliceSpec> sl;
    for (size_t d = 0; d < widths_.size(); ++d)
      sl.push_back(SliceSpec{widths_[d].first, widths_[d].first + types[0].shape[d], 1});
    return {slice(ct[0], sl, {})};
  }

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override { return in[0].sharding; }
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape&) const override {
    const int r = rank_of(in[0]);
    Affine m = identity_map(r);
    Box limit(static_cast<std::size_t>(r));
    for (int d = 0; d < r; ++d) {
      limit[d] = {widths_[d].first, widths_[d].first + in[0][d]};
      m.offset[d] = -widths_[d].first;
    }
    return {PartSpec{0, std::move(m), std::move(limit)}};
  }
  std::optional<std::vector<unsigned char>> fill() const override { return fill_; }

 private:
  std::vector<std::pair<std::int64_t, std::int64_t>> widths_;
  std::vector<unsigned char> fill_;
  std::string text_;
};

// out[i] = in[i - shift] for i >= shift, in[i - shift + n] for i < shift:
// two parts of the one operand.
class Roll final : public AffineOp {
 public:
  Roll(std::int64_t shift, int axis) : AffineOp("roll"), shift_(shift), axis_(axis) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override { return same_dims_rule(in[0].shape, axis_); }
  std::string params() const override { return "shift=" + std::to_string(shift_) + " axis=" + std::to_string(axis_); }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Roll>(shift_, axis_ + 1); });
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    return {ct[0].valid() ? roll(ct[0], types[0].shape[axis_] - shift_, axis_, {}) : Array()};
  }

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override { return in[0].sharding; }
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape&) const override {
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

 private:
  std::int64_t shift_;
  int axis_;
};

class Flip final : public AffineOp {
 public:
  explicit Flip(int axis) : AffineOp("flip"), axis_(axis) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, in[0].dtype}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override { return same_dims_rule(in[0].shape, axis_); }
  std::string params() const override { return "axis=" + std::to_string(axis_); }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Flip>(axis_ + 1); });
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>&, const std::vector<bool>&) const override {
    return {ct[0].valid() ? flip(ct[0], axis_, {}) : Array()};
  }

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override { return in[0].sharding; }
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override {
    Affine m = identity_map(rank_of(in[0]));
    m.offset[axis_] = in[0][axis_] - 1;
    m.step[axis_] = -1;
    return {PartSpec{0, std::move(m), whole_box(out)}};
  }

 private:
  int axis_;
};

// Each operand writes its slab of the concatenated dim. Operands are
// converted to the result dtype first (locally; their layouts, which choose
// the result's, as they came). stack gives every operand a new size-1 dim at
// `axis` (sharing its buffers), then concatenates those.
class Concatenate final : public AffineOp {
 public:
  Concatenate(const char* name, int axis, bool stack, DType t) : AffineOp(name), axis_(axis), stack_(stack), t_(t) {}
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
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
  ShardingRule rule(std::span<const AbstractArray> in) const override {
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
  std::string params() const override {
    std::string s = "axis=" + std::to_string(axis_);
    s += " dtype=";
    s += dtype_name(t_);
    return s;
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    std::vector<Array> xs;
    for (size_t k = 0; k < in.size(); ++k) xs.push_back(batch_first(in[k], bd[k], size));
    ob = {0};
    return {bind1(std::make_shared<Concatenate>(name_, axis_ + 1, stack_, t_), xs)};
  }
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    std::vector<Array> r(types.size());
    if (!ct[0].valid()) return r;
    std::int64_t off = 0;
    for (size_t k = 0; k < types.size(); ++k) {
      const std::int64_t n = stack_ ? 1 : types[k].shape[axis_];
      if (linear[k]) {
        std::vector<SliceSpec> sl(static_cast<size_t>(ct[0].ndim()));
        sl[axis_] = SliceSpec{off, off + n, 1};
        Array c = slice(ct[0], sl, {});
        if (stack_) c = squeeze(c, {axis_}, {});
        r[k] = c.dtype() == types[k].dtype ? c : astype(c, types[k].dtype, {});
      }
      off += n;
    }
    return r;
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override {
    std::vector<Array> xs;
    for (const Array& x : in) {
      // Evaluated now whatever trace is current: these are concrete arrays.
      const TraceScope eager(nullptr);
      const Array c = cast(x, t_);
      if (!stack_) {
        xs.push_back(c);
        continue;
      }
      Shape s = c.shape();
      s.insert(s.begin() + axis_, 1);
      xs.push_back(wrap(s, t_, expanded(c.sharding(), c.ndim()), c.impl()->buffers));
    }
    return AffineOp::eval_global(xs, out, layouts);
  }

 protected:
  NamedSharding layout(std::span<const AbstractArray> in, const Shape&) const override {
    size_t big = 0;
    for (size_t k = 1; k < in.size(); ++k)
      if (num_elements(in[k].shape) > num_elements(in[big].shape)) big = k;
    return stack_ ? expanded(in[big].sharding, rank_of(in[big].shape)) : in[big].sharding;
  }
  std::vector<PartSpec> parts_of(const std::vector<Shape>& in, const Shape& out) const override {
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

 private:
  // The layout of an operand given a new unsharded size-1 dim at axis_.
  NamedSharding expanded(const NamedSharding& s, int rank) const {
    std::vector<Entry> e = entries_of(s, rank);
    e.insert(e.begin() + axis_, Entry(none));
    return with_entries(s, std::move(e));
  }

  int axis_;
  bool stack_;
  DType t_;
};

}  // namespace

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
