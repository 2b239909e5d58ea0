// The lowering of the shape primitives that partition themselves
// (primitives/shape.hpp): squeeze, broadcast_to, slice, pad, roll, flip,
// concatenate and stack.
//
// Data movement. Each is an *affine* map (core/shape_ops.hpp): output dim j
// reads input dim src[j] at offset[j] + step[j] * o_j (step 0 broadcasts; an
// input dim no output dim reads is a size-1 dim read at 0). For each device
// and each operand ("part") the op names the sub-box of the device's output
// block that the part writes. Its image under the map is an input box I; the
// part of I the device already holds is read in place, and I minus that (at
// most 2 * rank boxes) is fetched through gather_boxes, one planner round per
// box index, so only the missing elements cross devices (halos for
// slice/pad/roll/concatenate along a sharded dim). A per-device strided copy
// (the op's write_block, backend/cpu/eval_shape.cpp, or on a CUDA device
// write_block_cuda, backend/cuda/eval_shape.cpp) then writes the output
// block. A device receives at most its output block (times the step of a
// strided slice, whose fetched box spans the gaps).
#include <algorithm>

#include "core/array_impl.hpp"
#include "primitives/elementwise.hpp"
#include "primitives/shape.hpp"
#include "spmd/engine.hpp"
#include "spmd/exchange.hpp"

namespace tessera::detail {

namespace {

using Box = std::vector<Slice>;

// ------------------------------------------------------------ small helpers

std::int64_t floor_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
std::int64_t ceil_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
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

/// Builds the output of the affine op `op` named `name` (see the file
/// comment); op.write_block writes each device's block (and the constant
/// where no part writes, for pad). Records a "none" CommRecord when nothing
/// moves.
Array assemble(const ExecContext& ctx, const AffineOp& op, const char* name, const Shape& out_shape, DType dtype, const NamedSharding& out_s,
               const std::vector<Part>& parts) {
  const int n = out_s.mesh().size();
  const std::size_t isz = itemsize(dtype);
  struct Piece {
    Box region;      // output sub-box
    Box sbox;        // input box held by the source buffer
    int round = -1;  // -1: the position's own block
  };
  struct Planned {
    std::vector<std::vector<Piece>> local, remote;  // per position
    std::vector<std::vector<Buffer>> rounds;        // per round, per position
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
      pl.rounds.push_back(gather_boxes(ctx, part.x, boxes, name));
      moved = true;
    }
  }
  if (!moved) record_none(out_s.mesh(), name);
  return make_array(ctx, out_shape, dtype, out_s, [&](int t, Buffer& b) {
    if (b.nbytes() == 0) return;
    const Box blk = out_s.shard_index(out_shape, t);
    // Sources in their own memory space: all on device t, as `b` is.
    std::vector<AffineCopy> copies;
    for (size_t p = 0; p < parts.size(); ++p) {
      const Part& part = parts[p];
      for (const Piece& pc : plans[p].local[t])
        copies.push_back({part.map, part.x.impl()->buffers[t].device_data(), pc.sbox, pc.region});
      for (const Piece& pc : plans[p].remote[t])
        copies.push_back({part.map, plans[p].rounds[pc.round][t].device_data(), pc.sbox, pc.region});
    }
    if (b.on_host())
      op.write_block(b.data(), blk, isz, copies);
    else
      op.write_block_cuda(b.device_data(), blk, isz, copies);
  });
}

/// Per position, the output block of `s` intersected with `limit`.
std::vector<Box> regions(const NamedSharding& s, const Shape& shape, const Box& limit) {
  std::vector<Box> r(s.mesh().size());
  for (int t = 0; t < s.mesh().size(); ++t) r[t] = intersect(s.shard_index(shape, t), limit);
  return r;
}

}  // namespace

std::vector<Array> AffineOp::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                         const std::vector<NamedSharding>& layouts) const {
  std::vector<Shape> shapes;
  for (const Array& a : in) shapes.push_back(a.shape());
  std::vector<Part> parts;
  for (PartSpec& p : parts_of(shapes, out[0].shape))
    parts.push_back(Part{in[p.operand], std::move(p.map), regions(layouts[0], out[0].shape, p.limit)});
  return {assemble(ctx, *this, name_, out[0].shape, out[0].dtype, layouts[0], parts)};
}

std::vector<Array> Squeeze::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                        const std::vector<NamedSharding>& layouts) const {
  bool moves = false;
  for (size_t d = 0; d < drop_.size(); ++d)
    moves = moves || (drop_[d] && in[0].sharding().num_parts(static_cast<int>(d)) > 1);
  if (!moves) return {wrap(out[0].shape, out[0].dtype, layouts[0], in[0].impl()->buffers)};
  return AffineOp::eval_global(ctx, in, out, layouts);
}

std::vector<Array> BroadcastTo::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                            const std::vector<NamedSharding>& layouts) const {
  const int lead = rank_of(shape_) - in[0].ndim();
  bool broadcasts = false;
  for (int j = 0; j < rank_of(shape_); ++j)
    broadcasts = broadcasts || (j < lead ? shape_[j] != 1 : in[0].shape()[j - lead] != shape_[j]);
  if (!broadcasts) return {wrap(shape_, out[0].dtype, layouts[0], in[0].impl()->buffers)};
  return AffineOp::eval_global(ctx, in, out, layouts);
}

std::vector<Array> Concatenate::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                            const std::vector<NamedSharding>& layouts) const {
  std::vector<Array> xs;
  for (const Array& x : in) {
    // Converted now, eagerly, whatever trace is current: these are concrete
    // arrays, and the conversion is part of this op's evaluation (it is
    // what bind() of a convert does with no trace).
    const Array c = x.dtype() == t_ ? x : eval_eager(ctx, *make_convert(x.dtype(), t_), {x}).front();
    if (!stack_) {
      xs.push_back(c);
      continue;
    }
    Shape s = c.shape();
    s.insert(s.begin() + axis_, 1);
    xs.push_back(wrap(s, t_, stacked_sharding(c.sharding(), c.ndim(), axis_), c.impl()->buffers));
  }
  return AffineOp::eval_global(ctx, xs, out, layouts);
}

}  // namespace tessera::detail
