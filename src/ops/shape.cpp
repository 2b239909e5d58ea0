// Shape ops: reshape, transpose, swapaxes, broadcast_to, expand_dims, squeeze,
// slice, concatenate, stack, pad, roll, flip.
//
// Sharding rules (JAX-like, plus "any size on any mesh"):
//   - transpose/swapaxes permute the spec; expand_dims/squeeze insert/remove an
//     unsharded entry (a squeezed size-1 dim that was sharded drops its axes:
//     the one element is replicated over them); broadcast_to keeps the spec of
//     kept dims, broadcast and new dims are unsharded.
//   - slice, pad, roll, flip keep the operand's spec (balanced blocks of the
//     OUTPUT size); concatenate/stack take the sharding of the largest
//     operand (the first among equals), as elementwise ops do, so appending a
//     small replicated piece to a sharded array keeps it sharded (JAX takes
//     the first operand's, which would gather the big one everywhere).
//   - reshape keeps the layout when it can (see below); otherwise each group
//     of merged/split dims puts the axes of its input dims (in order) on the
//     group's first output dim with at least as many elements as parts (so
//     no device is left empty needlessly), or its first dim of size != 1.
//     Explicit axes: a layout that cannot be kept needs out_sharding.
//
// Data movement. Every op except reshape is an *affine* map: output dim j
// reads input dim src[j] at offset[j] + step[j] * o_j (step 0 broadcasts; an
// input dim no output dim reads is a size-1 dim read at 0). For each device
// and each operand ("part") the op names the sub-box of the device's output
// block that the part writes. Its image under the map is an input box I; the
// part of I the device already holds is read in place, and I minus that
// (at most 2 * rank boxes) is fetched through gather_boxes, one planner round
// per box index, so only the missing elements cross devices (halos for
// slice/pad/roll/concatenate along a sharded dim). A per-device strided copy
// then writes the output block. A device receives at most its output block
// (times the step of a strided slice, whose fetched box spans the gaps).
//
// reshape. Input and output dims split into consecutive groups of equal
// element count (a merge, a split, or both). The reshape is local when every
// device's input block and output block are the same set of flat indices
// (checked exactly, per device, on a canonical (offset, (len, stride)...)
// form): the buffers are then shared, no copy. Otherwise each output block is
// decomposed, group by group, into flat ranges and each range into input
// boxes (at most 2m - 1 for a group of m input dims); the product over groups
// gives the input boxes to gather. When a requested layout would need many
// boxes (an output sharded on an inner dim of a split), the data first goes
// to the natural layout (which needs few) split also over the requested
// layout's axes, then through the planner: each step moves at most the
// requested blocks.
#include <algorithm>
#include <cstring>
#include <optional>

#include "core/nd_index.hpp"
#include "ops/common.hpp"

namespace tessera {

using detail::Buffer;
using detail::box_empty;
using detail::box_shape;
using detail::whole_box;
using detail::check_valid;
using detail::intersect;
using detail::msg;
using detail::first_dims;
using detail::NdIndex;
using detail::num_elements;

namespace {

using Box = std::vector<Slice>;
using Entry = PartitionSpec::Entry;

// ------------------------------------------------------------ small helpers

std::int64_t floor_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
std::int64_t ceil_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

Box empty_box(int rank) { return Box(static_cast<std::size_t>(rank), Slice{0, 0}); }

bool box_contains(const Box& outer, const Box& inner) { return intersect(inner, outer) == inner; }

/// Row-major strides, in elements, of a block of shape `s`.
std::vector<std::int64_t> strides_of(const Shape& s) {
  std::vector<std::int64_t> st(s.size());
  std::int64_t acc = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= s[d];
  }
  return st;
}

std::string ints_str(const std::vector<int>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) s += ",";
  return s + ")";
}

/// A spec from per-dim entries (trailing none entries dropped) and unreduced axes.
PartitionSpec spec_of(std::vector<Entry> entries, const std::vector<std::string>& unreduced) {
  while (!entries.empty() && entries.back().is_none()) entries.pop_back();
  return PartitionSpec(std::move(entries), unreduced);
}

std::vector<Entry> entries_of(const NamedSharding& s, int rank) {
  std::vector<Entry> e(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d) e[d] = s.spec()[d];
  return e;
}


/// Moving data of an array whose value is a pending sum over mesh axes would
/// mix partial values; not supported yet.

// ------------------------------------------------------------ copy kernel

template <class T>
void copy_line(const unsigned char* s, std::int64_t ss, unsigned char* d, std::int64_t ds, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, s + i * ss, sizeof(T));
    std::memcpy(d + i * ds, &v, sizeof(T));
  }
}

/// A 2-d strided copy in square tiles, so that both the reads along `a` and
/// the writes along `b` stay in cache (a transpose).
template <class T>
void copy_tiled(const unsigned char* s, unsigned char* d, std::int64_t an, std::int64_t as, std::int64_t ad,
                std::int64_t bn, std::int64_t bs, std::int64_t bd) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t a0 = 0; a0 < an; a0 += kTile)
    for (std::int64_t b0 = 0; b0 < bn; b0 += kTile) {
      const std::int64_t a1 = std::min(an, a0 + kTile), b1 = std::min(bn, b0 + kTile);
      for (std::int64_t a = a0; a < a1; ++a)
        for (std::int64_t b = b0; b < b1; ++b) {
          T v;
          std::memcpy(&v, s + a * as + b * bs, sizeof(T));
          std::memcpy(d + a * ad + b * bd, &v, sizeof(T));
        }
    }
}

/// Copies a box of `len` elements: element (i_0, ..., i_{r-1}) is read at
/// src + sum i_j * sstr[j] and written at dst + sum i_j * dstr[j] (byte
/// strides, any sign, 0 broadcasts). Dims contiguous in both are merged so
/// whole runs go through one memcpy; when the innermost destination dim reads
/// with a stride and another dim reads contiguously (a transpose), the two
/// are copied in tiles.
void strided_copy(const unsigned char* src, const std::vector<std::int64_t>& sstr, unsigned char* dst,
                  const std::vector<std::int64_t>& dstr, const Shape& len, std::size_t isz) {
  struct Dim {
    std::int64_t n, s, d;
  };
  std::vector<Dim> dims;
  for (size_t j = 0; j < len.size(); ++j) {
    if (len[j] == 0) return;
    if (len[j] == 1) continue;
    Dim x{len[j], sstr[j], dstr[j]};
    if (!dims.empty() && dims.back().s == x.n * x.s && dims.back().d == x.n * x.d)
      dims.back() = {dims.back().n * x.n, x.s, x.d};
    else
      dims.push_back(x);
  }
  if (dims.empty()) {
    std::memcpy(dst, src, isz);
    return;
  }
  // Extents and byte strides of the dims left in `dims` once the inner ones
  // are taken out. The NdIndex is built in place by each loop: one returned
  // from a call would have its address escape, and then every byte copy
  // could alias its offsets, which would be reloaded per row.
  struct Outer {
    std::vector<std::int64_t> n, s, d;
  };
  auto outer = [&dims] {
    Outer o;
    for (const Dim& x : dims) {
      o.n.push_back(x.n);
      o.s.push_back(x.s);
      o.d.push_back(x.d);
    }
    return o;
  };
  const auto step = static_cast<std::int64_t>(isz);
  if (dims.back().s != step && (isz == 1 || isz == 4 || isz == 8)) {
    int k = -1;  // the dim read contiguously, if any
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0 && k < 0; --i)
      if (dims[i].s == step && dims[i].n >= 8) k = i;
    if (k >= 0 && dims.back().n >= 8) {
      const Dim a = dims[k], b = dims.back();
      dims.erase(dims.begin() + k);
      dims.pop_back();
      const Outer o = outer();
      for (NdIndex it(o.n, o.s, o.d); !it.done(); it.next()) {
        const unsigned char* s = src + it.offset(0);
        unsigned char* d = dst + it.offset(1);
        switch (isz) {
          case 1: copy_tiled<std::uint8_t>(s, d, a.n, a.s, a.d, b.n, b.s, b.d); break;
          case 4: copy_tiled<std::uint32_t>(s, d, a.n, a.s, a.d, b.n, b.s, b.d); break;
          default: copy_tiled<std::uint64_t>(s, d, a.n, a.s, a.d, b.n, b.s, b.d); break;
        }
      }
      return;
    }
  }
  const Dim in = dims.back();
  dims.pop_back();
  auto line = [&](const unsigned char* s, unsigned char* d) {
    if (in.s == step && in.d == step) {
      std::memcpy(d, s, static_cast<std::size_t>(in.n) * isz);
      return;
    }
    switch (isz) {
      case 1: copy_line<std::uint8_t>(s, in.s, d, in.d, in.n); break;
      case 4: copy_line<std::uint32_t>(s, in.s, d, in.d, in.n); break;
      case 8: copy_line<std::uint64_t>(s, in.s, d, in.d, in.n); break;
      default:
        for (std::int64_t i = 0; i < in.n; ++i) std::memcpy(d + i * in.d, s + i * in.s, isz);
    }
  };
  const Outer o = outer();
  for (NdIndex it(o.n, o.s, o.d); !it.done(); it.next()) line(src + it.offset(0), dst + it.offset(1));
}

/// Fills `n` elements of `isz` bytes with `value`.
void fill_bytes(unsigned char* dst, std::int64_t n, const std::vector<unsigned char>& value) {
  const std::size_t isz = value.size();
  if (n <= 0) return;
  std::memcpy(dst, value.data(), isz);
  // Doubling copies: log(n) memcpys.
  std::int64_t done = 1;
  while (done < n) {
    const std::int64_t c = std::min(done, n - done);
    std::memcpy(dst + done * isz, dst, static_cast<std::size_t>(c) * isz);
    done += c;
  }
}

/// The bytes of `v` converted to `dtype`.
std::vector<unsigned char> scalar_bytes(const Scalar& v, DType dtype) {
  std::vector<unsigned char> b(itemsize(dtype));
  detail::dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    T x;
    if (dtype == DType::bool_)
      x = static_cast<T>(v.kind() == Scalar::Kind::Float ? v.as_double() != 0.0 : v.as_int() != 0);
    else if constexpr (std::is_floating_point_v<T>)
      x = static_cast<T>(v.as_double());
    else
      x = static_cast<T>(v.kind() == Scalar::Kind::Float ? static_cast<std::int64_t>(v.as_double()) : v.as_int());
    std::memcpy(b.data(), &x, sizeof(T));
  });
  return b;
}

// ------------------------------------------------------------ affine parts

/// out dim j reads input dim src[j] at offset[j] + step[j] * o_j; src[j] < 0
/// for a new dim. Input dims no output dim reads have size 1 and are read at 0.
struct Affine {
  int in_rank = 0;
  std::vector<int> src;
  std::vector<std::int64_t> offset, step;
};

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

/// Copies the output sub-box `r` (inside the output block `blk`, whose buffer
/// is `dst`) from a source buffer holding the input box `sbox`.
void copy_affine(const Affine& m, const void* src, const Box& sbox, void* dst, const Box& blk, const Box& r,
                 std::size_t isz) {
  const auto is = static_cast<std::int64_t>(isz);
  const auto sst = strides_of(box_shape(sbox));
  const auto dst_st = strides_of(box_shape(blk));
  std::vector<std::int64_t> c(static_cast<std::size_t>(m.in_rank), 0);
  std::vector<std::int64_t> ss(r.size()), ds(r.size());
  std::int64_t doff = 0;
  for (size_t j = 0; j < r.size(); ++j) {
    if (m.src[j] >= 0) c[m.src[j]] = m.offset[j] + m.step[j] * r[j].start;
    ss[j] = m.src[j] >= 0 ? m.step[j] * sst[m.src[j]] * is : 0;
    ds[j] = dst_st[j] * is;
    doff += (r[j].start - blk[j].start) * dst_st[j];
  }
  std::int64_t soff = 0;
  for (int d = 0; d < m.in_rank; ++d) soff += (c[d] - sbox[d].start) * sst[d];
  strided_copy(static_cast<const unsigned char*>(src) + soff * is, ss, static_cast<unsigned char*>(dst) + doff * is,
               ds, box_shape(r), isz);
}

/// One operand of an affine op: the map, and per mesh position the sub-box
/// of that position's output block it writes (possibly empty).
struct Part {
  Array x;
  Affine map;
  std::vector<Box> region;
};

/// Builds the output of an affine op (see the file comment). `fill`: the
/// constant written where no part writes (pad); `record_none`: record a
/// "none" CommRecord when nothing moves.
Array assemble(const char* op, const Shape& out_shape, DType dtype, const NamedSharding& out_s,
               const std::vector<Part>& parts, const std::optional<std::vector<unsigned char>>& fill,
               bool record_none = true) {
  const int n = out_s.mesh().size();
  const std::size_t isz = itemsize(dtype);
  struct Piece {
    Box region;  // output sub-box
    Box sbox;    // input box held by the source buffer
    const void* data = nullptr;
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
      const Box own = detail::local_index(part.x, t);
      const Box here = intersect(in, own);
      if (!box_empty(here)) {
        Box lr = preimage(part.map, here, r);
        if (!box_empty(lr)) pl.local[t].push_back({std::move(lr), own, nullptr, -1});
      }
      for (const Box& miss : subtract(in, own)) {
        Box rr = preimage(part.map, miss, r);
        if (box_empty(rr)) continue;
        Box need = image(part.map, rr);
        pl.remote[t].push_back({std::move(rr), std::move(need), nullptr, static_cast<int>(pl.remote[t].size())});
      }
      rounds = std::max(rounds, pl.remote[t].size());
    }
    for (std::size_t k = 0; k < rounds; ++k) {
      std::vector<Box> boxes(n, empty_box(part.x.ndim()));
      for (int t = 0; t < n; ++t)
        if (k < pl.remote[t].size()) boxes[t] = pl.remote[t][k].sbox;
      pl.rounds.push_back(detail::gather_boxes(part.x, boxes, op));
      moved = true;
    }
  }
  if (!moved && record_none) detail::record_none(out_s.mesh(), op);
  return detail::make_array(out_shape, dtype, out_s, [&](int t, Buffer& b) {
    if (b.nbytes() == 0) return;
    const Box blk = out_s.shard_index(out_shape, t);
    if (fill) fill_bytes(static_cast<unsigned char*>(b.data()), num_elements(box_shape(blk)), *fill);
    for (size_t p = 0; p < parts.size(); ++p) {
      const Part& part = parts[p];
      for (const Piece& pc : plans[p].local[t])
        copy_affine(part.map, detail::local_data(part.x, t), pc.sbox, b.data(), blk, pc.region, isz);
      for (const Piece& pc : plans[p].remote[t])
        copy_affine(part.map, plans[p].rounds[pc.round][t].data(), pc.sbox, b.data(), blk, pc.region, isz);
    }
  });
}

/// Per position, the output block of `s` intersected with `limit`.
std::vector<Box> regions(const NamedSharding& s, const Shape& shape, const Box& limit) {
  std::vector<Box> r(s.mesh().size());
  for (int t = 0; t < s.mesh().size(); ++t) r[t] = intersect(s.shard_index(shape, t), limit);
  return r;
}

// ------------------------------------------------------------ transpose

Array transpose_impl(const Array& x, std::vector<int> perm, const char* op) {
  const int r = x.ndim();
  if (perm.empty() && r > 0)
    for (int j = 0; j < r; ++j) perm.push_back(r - 1 - j);
  if (static_cast<int>(perm.size()) != r)
    throw ShapeError(msg(op, "perm " + ints_str(perm) + " has " + std::to_string(perm.size()) +
                                 " entries but the array has rank " + std::to_string(r) + " (shape " +
                                 shape_str(x.shape()) + ")"));
  std::vector<bool> seen(static_cast<std::size_t>(r), false);
  bool identity = true;
  for (int j = 0; j < r; ++j) {
    const int d = perm[j] < 0 ? perm[j] + r : perm[j];
    if (d < 0 || d >= r || seen[d])
      throw ShapeError(msg(op, "perm " + ints_str(perm) + " is not a permutation of the dims of an array of rank " +
                                   std::to_string(r)));
    seen[d] = true;
    perm[j] = d;
    identity = identity && d == j;
  }
  if (identity) return x;
  Shape out_shape(r);
  std::vector<Entry> e(r);
  Affine m;
  m.in_rank = r;
  for (int j = 0; j < r; ++j) {
    out_shape[j] = x.shape()[perm[j]];
    e[j] = x.sharding().spec()[perm[j]];
    m.src.push_back(perm[j]);
    m.offset.push_back(0);
    m.step.push_back(1);
  }
  // Each output dim has the size and axes of its input dim, so the output
  // block is the input block permuted: a local copy, no communication.
  NamedSharding s(x.sharding().mesh(), spec_of(std::move(e), x.sharding().spec().unreduced()));
  Part part{x, m, regions(s, out_shape, whole_box(out_shape))};
  return assemble(op, out_shape, x.dtype(), s, {part}, std::nullopt, /*record_none=*/false);
}

// ------------------------------------------------------------ reshape

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
NamedSharding natural_sharding(const Array& x, const Shape& out, const std::vector<Group>& groups,
                               bool balanced = false) {
  std::vector<Entry> e(out.size());
  for (const Group& g : groups) {
    if (g.out0 == g.out1) continue;  // size-1 input dims with no output dim: their axes replicate
    std::vector<std::string> axes;
    int sharded = -1, count = 0;
    for (int d = g.in0; d < g.in1; ++d) {
      const auto& a = x.sharding().spec()[d].axes();
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
      for (const auto& a : axes) parts *= x.sharding().mesh().axis_size(a);
      for (int j = g.out0; j < g.out1; ++j)
        if (out[j] >= parts) {
          target = j;
          break;
        }
    }
    e[target] = count == 1 ? x.sharding().spec()[sharded] : detail::entry_of(axes);
  }
  return NamedSharding(x.sharding().mesh(), spec_of(std::move(e), x.sharding().spec().unreduced()));
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

bool reshape_is_local(const Array& x, const Shape& out, const NamedSharding& s) {
  for (int t = 0; t < s.mesh().size(); ++t)
    if (!(flat_set(x.shape(), detail::local_index(x, t)) == flat_set(out, s.shard_index(out, t)))) return false;
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

/// Copies the input box `box` (global input coords; the source buffer holds
/// `sbox`) into the output block `blk` (global output coords), element k of
/// the flat order going to flat position k.
void copy_flat(const void* src, const Box& sbox, const Box& box, const Shape& in, void* dst, const Box& blk,
               const Shape& out, std::size_t isz) {
  if (box_empty(box)) return;
  const int ri = static_cast<int>(in.size()), ro = static_cast<int>(out.size());
  const auto gin = strides_of(in), sst = strides_of(box_shape(sbox));
  const auto gout = strides_of(out), bst = strides_of(box_shape(blk));
  // Input runs: dims after q are whole in the array and in the source buffer.
  int q = ri - 1;
  while (q > 0 && box[q].start == 0 && box[q].stop == in[q] && sbox[q] == box[q]) --q;
  std::int64_t run = 1;
  if (ri > 0) {
    run = box[q].size();
    for (int d = q + 1; d < ri; ++d) run *= in[d];
  }
  // Output segments: dims after p are whole in the array (hence in the block).
  int p = ro - 1;
  while (p > 0 && blk[p].start == 0 && blk[p].stop == out[p]) --p;
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  // Flat input index and source-buffer offset of the box's first element.
  std::int64_t f0 = 0, so0 = 0;
  for (int k = 0; k < ri; ++k) {
    f0 += box[k].start * gin[k];
    so0 += (box[k].start - sbox[k].start) * sst[k];
  }
  std::vector<std::int64_t> o(static_cast<std::size_t>(ro));
  const Shape bsz = box_shape(box);
  for (NdIndex it(first_dims(bsz, std::max(q, 0)), gin, sst); !it.done(); it.next()) {
    std::int64_t f = f0 + it.offset(0), so = so0 + it.offset(1);
    std::int64_t left = run;
    while (left > 0) {
      std::int64_t rem = f, doff = 0, inner = 0;
      for (int j = 0; j < ro; ++j) {
        o[j] = rem / gout[j];
        rem %= gout[j];
        doff += (o[j] - blk[j].start) * bst[j];
        if (j > p) inner += o[j] * gout[j];
      }
      std::int64_t seg = 1;
      if (ro > 0) seg = (blk[p].stop - o[p]) * gout[p] - inner;
      seg = std::min(seg, left);
      std::memcpy(d + doff * static_cast<std::int64_t>(isz), s + so * static_cast<std::int64_t>(isz),
                  static_cast<std::size_t>(seg) * isz);
      f += seg;
      so += seg;
      left -= seg;
    }
  }
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
    const Box own = detail::local_index(x, t);
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
    fetched.push_back(detail::gather_boxes(x, boxes, "reshape"));
  }
  if (rounds == 0) detail::record_none(s.mesh(), "reshape");
  const std::size_t isz = itemsize(x.dtype());
  return detail::make_array(out, x.dtype(), s, [&](int t, Buffer& buf) {
    if (buf.nbytes() == 0) return;
    const Box blk = s.shard_index(out, t);
    const Box own = detail::local_index(x, t);
    for (size_t i = 0; i < src[t].size(); ++i) {
      const int k = round_of[t][i];
      if (k < 0)
        copy_flat(detail::local_data(x, t), own, src[t][i], x.shape(), buf.data(), blk, out, isz);
      else
        copy_flat(fetched[k][t].data(), src[t][i], src[t][i], x.shape(), buf.data(), blk, out, isz);
    }
  });
}

// ------------------------------------------------------------ concatenate

Array concat_impl(const std::vector<Array>& xs, int axis, const char* op) {
  if (xs.empty()) throw ShapeError(msg(op, "needs at least one array, got none"));
  std::vector<const Array*> ptrs;
  for (const auto& x : xs) {
    check_valid(x, op);
    ptrs.push_back(&x);
  }
  detail::check_same_mesh(ptrs, op);
  const int r = xs[0].ndim();
  if (r == 0) throw ShapeError(msg(op, "zero-dimensional arrays cannot be concatenated, got shape ()"));
  axis = detail::normalize_axis(axis, r, op);
  DType dtype = xs[0].dtype();
  Shape out = xs[0].shape();
  out[axis] = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Shape& s = xs[k].shape();
    if (xs[k].ndim() != r)
      throw ShapeError(msg(op, "all arrays must have the same rank: array 0 has shape " + shape_str(xs[0].shape()) +
                                   ", array " + std::to_string(k) + " has shape " + shape_str(s)));
    for (int d = 0; d < r; ++d)
      if (d != axis && s[d] != xs[0].shape()[d])
        throw ShapeError(msg(op, "shapes must agree except along axis " + std::to_string(axis) + ": array 0 has " +
                                     shape_str(xs[0].shape()) + ", array " + std::to_string(k) + " has " +
                                     shape_str(s)));
    out[axis] = detail::checked_add(out[axis], s[axis], op, [&] {
      return "the concatenation along axis " + std::to_string(axis) + " of " + std::to_string(xs.size()) + " arrays";
    });
    dtype = detail::promote(dtype, xs[k].dtype());
  }
  detail::checked_nbytes(out, dtype, op);
  for (size_t k = 1; k < xs.size(); ++k)
    if ((detail::has_explicit_axes(xs[0].sharding()) || detail::has_explicit_axes(xs[k].sharding())) &&
        !(xs[k].sharding().spec() == xs[0].sharding().spec()))
      throw ShardingError(msg(op, "operands have different shardings in Explicit mode: " + detail::describe(xs[0]) +
                                      " and " + detail::describe(xs[k]) +
                                      "; reshard them to one sharding first"));
  size_t big = 0;
  for (size_t k = 1; k < xs.size(); ++k)
    if (xs[k].size() > xs[big].size()) big = k;
  const NamedSharding& s = xs[big].sharding();
  std::vector<Part> parts;
  std::int64_t off = 0;
  for (const auto& x : xs) {
    Box limit = whole_box(out);
    limit[axis] = {off, off + x.shape()[axis]};
    Affine m = identity_map(r);
    m.offset[axis] = -off;
    off += x.shape()[axis];
    if (x.shape()[axis] == 0) continue;
    parts.push_back(Part{detail::cast(x, dtype), m, regions(s, out, limit)});
  }
  return assemble(op, out, dtype, s, parts, std::nullopt);
}

Array expand_impl(const Array& x, int axis, const char* op) {
  const int r = x.ndim();
  axis = detail::normalize_axis(axis, r + 1, op);
  Shape out = x.shape();
  out.insert(out.begin() + axis, 1);
  std::vector<Entry> e = entries_of(x.sharding(), r);
  e.insert(e.begin() + axis, Entry(none));
  // Row-major data of a block is unchanged by a new size-1 dim: share buffers.
  NamedSharding s(x.sharding().mesh(), spec_of(std::move(e), x.sharding().spec().unreduced()));
  return detail::wrap(out, x.dtype(), s, x.impl()->buffers);
}

}  // namespace

// ================================================================= public

Array reshape(const Array& x, const Shape& shape, const OutOptions& opt) {
  check_valid(x, "reshape");
  const std::int64_t total = x.size();
  Shape out = shape;
  int infer = -1;
  for (size_t j = 0; j < out.size(); ++j) {
    if (out[j] == -1) {
      if (infer >= 0)
        throw ShapeError(msg("reshape", "only one dim may be -1, got shape " + shape_str(shape)));
      infer = static_cast<int>(j);
    } else if (out[j] < 0) {
      throw ShapeError(msg("reshape", "dims must be >= 0 (or -1 for one inferred dim), got shape " + shape_str(shape)));
    }
  }
  if (infer >= 0) {
    // Product of the given dims; a zero among them leaves -1 undetermined.
    std::int64_t known = 1;
    for (size_t j = 0; j < out.size(); ++j)
      if (static_cast<int>(j) != infer)
        known = detail::checked_mul(known, out[j], "reshape", [&] { return "shape " + shape_str(shape); });
    if (known == 0 || total % known != 0)
      throw ShapeError(msg("reshape", "cannot infer the -1 dim: array of shape " + shape_str(x.shape()) + " (" +
                                          std::to_string(total) + " elements) into shape " + shape_str(shape)));
    out[infer] = total / known;
  }
  if (detail::checked_numel(out, "reshape") != total)
    throw ShapeError(msg("reshape", "cannot reshape an array of shape " + shape_str(x.shape()) + " (" +
                                        std::to_string(total) + " elements) into shape " + shape_str(out) + " (" +
                                        std::to_string(num_elements(out)) + " elements)"));
  const Mesh& mesh = x.sharding().mesh();
  const int rank = static_cast<int>(out.size());
  const auto groups = reshape_groups(x.shape(), out);
  const NamedSharding natural = natural_sharding(x, out, groups);
  std::optional<NamedSharding> requested;
  if (opt.out_sharding) {
    requested = detail::resolve_spec(mesh, *opt.out_sharding, rank, "reshape");
    if (!x.sharding().spec().unreduced().empty() || !requested->spec().unreduced().empty()) {
      auto a = x.sharding().spec().unreduced(), b = requested->spec().unreduced();
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      if (a != b)
        throw ShardingError(msg("reshape", "out_sharding " + requested->spec().str() +
                                               " must keep the operand's unreduced axes (operand spec " +
                                               x.sharding().spec().str() + ")"));
    }
  }
  const NamedSharding target = requested ? *requested : natural;
  if (out == x.shape() && target == x.sharding()) return x;
  if (reshape_is_local(x, out, target)) {
    detail::record_none(mesh, "reshape");
    return detail::wrap(out, x.dtype(), target, x.impl()->buffers);
  }
  if (!requested && detail::has_explicit_axes(x.sharding()))
    throw ShardingError(msg("reshape", "the layout of " + detail::describe(x) + " cannot be kept when reshaping to " +
                                           shape_str(out) + " (a sharded dim would not stay whole or aligned); pass "
                                           "out_sharding to choose the output layout"));
  // Few boxes per device: straight to the layout. The natural layout always
  // needs few (each group's block is one flat range); other layouts that
  // would need many go through it and then the planner.
  constexpr std::size_t kMaxBoxes = 16;
  if (!requested) {
    const NamedSharding balanced = natural_sharding(x, out, groups, /*balanced=*/true);
    if (!(balanced == natural))
      if (auto direct = reshape_gather(x, out, groups, balanced, kMaxBoxes)) return *direct;
    return *reshape_gather(x, out, groups, natural, SIZE_MAX);
  }
  if (target == natural) return *reshape_gather(x, out, groups, natural, SIZE_MAX);
  if (auto direct = reshape_gather(x, out, groups, target, kMaxBoxes)) return *direct;
  if (reshape_is_local(x, out, natural))
    return detail::reshard_for(detail::wrap(out, x.dtype(), natural, x.impl()->buffers), target, "reshape");
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
    e[dim] = detail::entry_of(axes);
  }
  const NamedSharding mid(mesh, spec_of(std::move(e), natural.spec().unreduced()));
  return detail::reshard_for(*reshape_gather(x, out, groups, mid, SIZE_MAX), target, "reshape");
}

Array transpose(const Array& x, const std::vector<int>& perm) {
  check_valid(x, "transpose");
  return transpose_impl(x, perm, "transpose");
}

Array swapaxes(const Array& x, int axis1, int axis2) {
  check_valid(x, "swapaxes");
  const int r = x.ndim();
  const int a = detail::normalize_axis(axis1, r, "swapaxes");
  const int b = detail::normalize_axis(axis2, r, "swapaxes");
  std::vector<int> perm(r);
  for (int j = 0; j < r; ++j) perm[j] = j;
  std::swap(perm[a], perm[b]);
  return transpose_impl(x, perm, "swapaxes");
}

Array broadcast_to(const Array& x, const Shape& shape) {
  check_valid(x, "broadcast_to");
  const int ri = x.ndim(), ro = static_cast<int>(shape.size());
  auto fail = [&](const std::string& why) {
    throw ShapeError(msg("broadcast_to", "cannot broadcast shape " + shape_str(x.shape()) + " to " +
                                             shape_str(shape) + ": " + why));
  };
  if (ro < ri) fail("the target has fewer dims");
  for (auto s : shape)
    if (s < 0) fail("dims must be >= 0");
  detail::checked_nbytes(shape, x.dtype(), "broadcast_to");
  const int lead = ro - ri;
  std::vector<Entry> e(ro);
  Affine m;
  m.in_rank = ri;
  bool broadcasts = false;
  for (int j = 0; j < ro; ++j) {
    if (j < lead) {
      m.src.push_back(-1);
      m.offset.push_back(0);
      m.step.push_back(0);
      broadcasts = broadcasts || shape[j] != 1;
      continue;
    }
    const int d = j - lead;
    const std::int64_t n = x.shape()[d];
    if (n != shape[j] && n != 1)
      fail("dim " + std::to_string(d) + " has size " + std::to_string(n) + ", expected 1 or " +
           std::to_string(shape[j]));
    m.src.push_back(d);
    m.offset.push_back(0);
    if (n == shape[j]) {
      m.step.push_back(1);
      e[j] = x.sharding().spec()[d];
    } else {
      m.step.push_back(0);
      broadcasts = true;
    }
  }
  if (ro == ri && !broadcasts) return x;
  NamedSharding s(x.sharding().mesh(), spec_of(std::move(e), x.sharding().spec().unreduced()));
  // Only new leading size-1 dims: same row-major blocks.
  if (!broadcasts) return detail::wrap(shape, x.dtype(), s, x.impl()->buffers);
  Part part{x, m, regions(s, shape, whole_box(shape))};
  return assemble("broadcast_to", shape, x.dtype(), s, {part}, std::nullopt);
}

Array expand_dims(const Array& x, int axis) {
  check_valid(x, "expand_dims");
  return expand_impl(x, axis, "expand_dims");
}

Array squeeze(const Array& x, const std::vector<int>& axes) {
  check_valid(x, "squeeze");
  const int r = x.ndim();
  std::vector<bool> drop(static_cast<std::size_t>(r), false);
  if (axes.empty()) {
    for (int d = 0; d < r; ++d) drop[d] = x.shape()[d] == 1;
  } else {
    for (int d : detail::normalize_axes(Axes(axes), r, "squeeze")) {
      if (x.shape()[d] != 1)
        throw ShapeError(msg("squeeze", "cannot squeeze dim " + std::to_string(d) + " of size " +
                                            std::to_string(x.shape()[d]) + " (shape " + shape_str(x.shape()) +
                                            "); only size-1 dims can be removed"));
      drop[d] = true;
    }
  }
  Shape out;
  std::vector<Entry> e;
  Affine m;
  m.in_rank = r;
  bool moves = false;  // a dropped dim split over > 1 parts: only part 0 holds the element
  for (int d = 0; d < r; ++d) {
    if (drop[d]) {
      moves = moves || x.sharding().num_parts(d) > 1;
      continue;
    }
    out.push_back(x.shape()[d]);
    e.push_back(x.sharding().spec()[d]);
    m.src.push_back(d);
    m.offset.push_back(0);
    m.step.push_back(1);
  }
  if (static_cast<int>(out.size()) == r) return x;
  NamedSharding s(x.sharding().mesh(), spec_of(std::move(e), x.sharding().spec().unreduced()));
  if (!moves) return detail::wrap(out, x.dtype(), s, x.impl()->buffers);
  // Devices whose block of the size-1 dim is empty fetch the element.
  Part part{x, m, regions(s, out, whole_box(out))};
  return assemble("squeeze", out, x.dtype(), s, {part}, std::nullopt);
}

Array slice(const Array& x, const std::vector<SliceSpec>& slices) {
  check_valid(x, "slice");
  const int r = x.ndim();
  if (static_cast<int>(slices.size()) > r)
    throw ShapeError(msg("slice", "got " + std::to_string(slices.size()) + " slices for an array of rank " +
                                      std::to_string(r) + " (shape " + shape_str(x.shape()) + ")"));
  Shape out = x.shape();
  Affine m = identity_map(r);
  bool whole = true;
  for (size_t d = 0; d < slices.size(); ++d) {
    const SliceSpec& sp = slices[d];
    const std::int64_t n = x.shape()[d], step = sp.step;
    if (step == 0) throw ShapeError(msg("slice", "slice step cannot be zero (dim " + std::to_string(d) + ")"));
    // Python's slice.indices(n).
    auto adjust = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
      if (!v) return dflt;
      std::int64_t i = *v;
      if (i < 0) {
        i += n;
        if (i < 0) i = step < 0 ? -1 : 0;
      } else if (i >= n) {
        i = step < 0 ? n - 1 : n;
      }
      return i;
    };
    const std::int64_t start = adjust(sp.start, step < 0 ? n - 1 : 0);
    const std::int64_t stop = adjust(sp.stop, step < 0 ? -1 : n);
    std::int64_t len = 0;
    if (step < 0 && stop < start) len = (start - stop - 1) / (-step) + 1;
    if (step > 0 && start < stop) len = (stop - start - 1) / step + 1;
    out[d] = len;
    m.offset[d] = start;
    m.step[d] = step;
    whole = whole && len == n && (step == 1 || n <= 1);
  }
  if (whole) return x;
  const NamedSharding& s = x.sharding();
  Part part{x, m, regions(s, out, whole_box(out))};
  return assemble("slice", out, x.dtype(), s, {part}, std::nullopt);
}

Array concatenate(const std::vector<Array>& xs, int axis) { return concat_impl(xs, axis, "concatenate"); }

Array stack(const std::vector<Array>& xs, int axis) {
  if (xs.empty()) throw ShapeError(msg("stack", "needs at least one array, got none"));
  for (const auto& x : xs) check_valid(x, "stack");
  for (size_t k = 1; k < xs.size(); ++k)
    if (xs[k].shape() != xs[0].shape())
      throw ShapeError(msg("stack", "all arrays must have the same shape: array 0 has " + shape_str(xs[0].shape()) +
                                        ", array " + std::to_string(k) + " has " + shape_str(xs[k].shape())));
  std::vector<Array> ex;
  for (const auto& x : xs) ex.push_back(expand_impl(x, axis, "stack"));
  return concat_impl(ex, axis, "stack");
}

Array pad(const Array& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths, Scalar value) {
  check_valid(x, "pad");
  const int r = x.ndim();
  if (static_cast<int>(widths.size()) != r && !(widths.size() == 1 && r > 0))
    throw ShapeError(msg("pad", "expected " + std::to_string(r) + " (before, after) pairs (one per dim of shape " +
                                    shape_str(x.shape()) + ") or one for every dim, got " +
                                    std::to_string(widths.size())));
  Shape out = x.shape();
  Box limit(r);
  Affine m = identity_map(r);
  bool none_added = true;
  for (int d = 0; d < r; ++d) {
    const auto [lo, hi] = widths.size() == 1 ? widths[0] : widths[d];
    if (lo < 0 || hi < 0)
      throw ShapeError(msg("pad", "widths must be >= 0 (negative padding is not supported), got (" +
                                      std::to_string(lo) + ", " + std::to_string(hi) + ") for dim " +
                                      std::to_string(d)));
    const auto what = [&, lo = lo, hi = hi] {
      return "dim " + std::to_string(d) + " of size " + std::to_string(x.shape()[d]) + " padded by (" +
             std::to_string(lo) + ", " + std::to_string(hi) + ")";
    };
    out[d] = detail::checked_add(detail::checked_add(out[d], lo, "pad", what), hi, "pad", what);
    limit[d] = {lo, lo + x.shape()[d]};
    m.offset[d] = -lo;
    none_added = none_added && lo == 0 && hi == 0;
  }
  detail::checked_nbytes(out, x.dtype(), "pad");
  if (none_added) return x;
  const NamedSharding& s = x.sharding();
  Part part{x, m, regions(s, out, limit)};
  detail::check_scalar_fits(value, x.dtype(), "pad");  // a weak scalar, as in elementwise ops
  return assemble("pad", out, x.dtype(), s, {part}, scalar_bytes(value, x.dtype()));
}

Array roll(const Array& x, std::int64_t shift, int axis) {
  check_valid(x, "roll");
  const int r = x.ndim();
  axis = detail::normalize_axis(axis, r, "roll");
  const std::int64_t n = x.shape()[axis];
  if (n == 0 || x.size() == 0) return x;
  const std::int64_t sh = ((shift % n) + n) % n;
  if (sh == 0) return x;
  const NamedSharding& s = x.sharding();
  // out[i] = in[i - sh] for i >= sh, in[i - sh + n] for i < sh.
  Box wrapped = whole_box(x.shape()), straight = whole_box(x.shape());
  wrapped[axis] = {0, sh};
  straight[axis] = {sh, n};
  Affine mw = identity_map(r), ms = identity_map(r);
  mw.offset[axis] = n - sh;
  ms.offset[axis] = -sh;
  std::vector<Part> parts{Part{x, mw, regions(s, x.shape(), wrapped)}, Part{x, ms, regions(s, x.shape(), straight)}};
  return assemble("roll", x.shape(), x.dtype(), s, parts, std::nullopt);
}

Array flip(const Array& x, int axis) {
  check_valid(x, "flip");
  const int r = x.ndim();
  axis = detail::normalize_axis(axis, r, "flip");
  const std::int64_t n = x.shape()[axis];
  if (n <= 1 || x.size() == 0) return x;
  Affine m = identity_map(r);
  m.offset[axis] = n - 1;
  m.step[axis] = -1;
  const NamedSharding& s = x.sharding();
  Part part{x, m, regions(s, x.shape(), whole_box(x.shape()))};
  return assemble("flip", x.shape(), x.dtype(), s, {part}, std::nullopt);
}

}  // namespace tessera
