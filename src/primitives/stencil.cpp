// The stencil and scan primitives (see stencil.hpp): their types, sharding
// rules and parameters.
//
// Every rule but interp's puts the array's axis on a Halo factor shared by x
// and the result: result row i reads x rows [i - halo_lo, i + halo_hi], and
// the engine (spmd/engine.cpp) gathers exactly those rows around each
// device's block. cumsum's factor is a scan: only the totals of the blocks
// before each one move. Operands the stencil reads whole along the axis
// (diff's prepend and append, the convolutions' kernels) have their own
// NeedReplication factors there.
#include "primitives/stencil.hpp"

#include <algorithm>
#include <charconv>

namespace tessera::detail {

namespace {

/// One factor per dim of `shape` (pass-through), mapped to the dims in order.
std::vector<int> add_dims(ShardingRule& r, const Shape& shape) {
  std::vector<int> dims;
  for (std::int64_t n : shape) {
    dims.push_back(static_cast<int>(r.factors.size()));
    r.factors.push_back(Factor{n, FactorKind::PassThrough});
  }
  return dims;
}

void make_halo(ShardingRule& r, int f, std::int64_t lo, std::int64_t hi) {
  r.factors[f].kind = FactorKind::Halo;
  r.factors[f].halo_lo = lo;
  r.factors[f].halo_hi = hi;
}

}  // namespace

// ===================================================================== diff

std::vector<TypeInfo> Diff::infer(std::span<const AbstractArray> in) const {
  Shape s = in[0].shape;
  s[axis_] = std::max<std::int64_t>(rows(in, prepend_index()) + s[axis_] + rows(in, append_index()) - n_, 0);
  return {TypeInfo{s, in[0].dtype}};
}

// Output row i is the n-th difference of sequence rows [i, i + n], that is
// x rows [i - np, i - np + n]: a halo of np rows before each block of x
// and n - np after it (the output dim is the factor trimmed by n rows; with
// a prepend longer than n the halo after is negative: the block's last
// rows are not read). prepend and append are concatenated along the axis:
// whole wherever their rows are needed.
ShardingRule Diff::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  const std::int64_t np = rows(in, prepend_index());
  make_halo(r, xd[axis_], np, n_ - np);
  r.operands.push_back(xd);
  for (int i : {prepend_index(), append_index()}) {
    if (i < 0) continue;
    if (in[i].shape.empty()) {
      r.operands.emplace_back();
      continue;
    }
    std::vector<int> d = xd;
    d[axis_] = static_cast<int>(r.factors.size());
    r.factors.push_back(Factor{in[i].shape[axis_], FactorKind::NeedReplication});
    r.operands.push_back(d);
  }
  r.results = {xd};
  return r;
}

std::string Diff::params() const {
  std::string s = "n=";
  s += std::to_string(n_);
  s += " axis=";
  s += std::to_string(axis_);
  if (pre_ || app_) s += pre_ && app_ ? " with=prepend,append" : pre_ ? " with=prepend" : " with=append";
  return s;
}

// The rows of the virtual sequence prepend | x | append along the axis that
// the block's output rows [a, b) read, rows [a, b + n), as runs (sorted,
// disjoint, relative to a): prepend rows [0, np) (whole on every device),
// the x rows the engine brought (its box: x rows [a - np, b + n - np) cut at
// x's ends) at np + their index, and append rows after x. When the box is
// cut before it reaches b + n - np, x ends there (L = the box's stop) and
// the append follows; otherwise no append row is read. A rank-0 prepend or
// append is a broadcast run of one row.
std::vector<RowRun> Diff::read_runs(const LocalArgs& in, const std::vector<LocalArgs>& pieces,
                                    const LocalOut& res) const {
  const int n = n_, axis = axis_;
  const DType dt = res.dtype;
  const std::int64_t a = res.box[axis].start, e = res.box[axis].stop + n;
  const std::int64_t row = lines_of(res.shape, axis).inner;
  const auto isz = static_cast<std::int64_t>(itemsize(dt));
  const LocalIn& x = in[0];
  const LocalIn* pre = pre_ ? &in[prepend_index()] : nullptr;
  const LocalIn* app = app_ ? &in[append_index()] : nullptr;
  const std::int64_t np = !pre ? 0 : pre->shape.empty() ? 1 : pre->box[axis].stop;
  const Slice xs = x.box[axis];
  const bool x_ends = xs.stop < e - np;  // the box was cut by x's end: L = xs.stop
  // The part of [s0, s1) inside [a, e), of a block whose row s0 starts at
  // `data`.
  std::vector<RowRun> runs;
  auto add = [&](const void* data, std::int64_t s0, std::int64_t s1, std::int64_t stride, bool broadcast) {
    const std::int64_t c0 = std::max(s0, a), c1 = std::min(s1, e);
    if (c1 <= c0) return;
    const void* p = broadcast ? data : static_cast<const unsigned char*>(data) + (c0 - s0) * row * isz;
    runs.push_back(RowRun{p, dt, c0 - a, c1 - a, stride, broadcast});
  };
  if (pre) {
    if (pre->shape.empty()) {
      if (a < 1) add(pre->data, 0, 1, 0, true);
    } else {
      add(pre->data, 0, np, np * row, false);
    }
  }
  for (const RowRun& g : row_segments<RowRun>(x, held_of(pieces, 0), axis, row, np))
    add(g.data, g.start, g.stop, g.outer_stride, false);
  if (app && x_ends) {
    const std::int64_t s0 = np + xs.stop;
    if (app->shape.empty()) {
      add(app->data, s0, s0 + 1, 0, true);
    } else {
      const std::int64_t na = app->box[axis].stop;
      add(app->data, s0, s0 + na, na * row, false);
    }
  }
  return runs;
}

// =================================================================== cumsum

std::vector<TypeInfo> Cumsum::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, sum_dtype(in[0].dtype)}};
}

// Each result row depends on every row before it along the axis: a halo
// of the whole array before each block, scanned (only block totals move).
ShardingRule Cumsum::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  make_halo(r, xd[axis_], std::max<std::int64_t>(in[0].shape[axis_] - 1, 0), 0);
  r.factors[xd[axis_]].scan = true;
  r.operands = {xd};
  r.results = {xd};
  return r;
}

std::string Cumsum::params() const {
  std::string s = "axis=";
  s += std::to_string(axis_);
  return s;
}

// ================================================================= convolve

std::vector<TypeInfo> Convolve::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, inexact(promote(in[0].dtype, in[1].dtype))}};
}

// 'same': out[i] = sum_k w[k] x[i + (K-1)/2 - k], so rows [i - K/2, i + (K-1)/2];
// the kernel's taps are whole on every device.
ShardingRule Convolve::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  const std::int64_t K = in[1].shape[0];
  make_halo(r, xd[axis_], K / 2, (K - 1) / 2);
  const std::vector<int> kd = add_dims(r, in[1].shape);
  r.factors[kd[0]].kind = FactorKind::NeedReplication;
  r.operands = {xd, kd};
  r.results = {xd};
  return r;
}

std::string Convolve::params() const {
  std::string s = "axis=";
  s += std::to_string(axis_);
  return s;
}

// =============================================================== convolve2d

std::vector<TypeInfo> Convolve2d::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, inexact(promote(in[0].dtype, in[1].dtype))}};
}

// The last two dims have halos of kr/2 and (kr-1)/2 rows, kc/2 and
// (kc-1)/2 columns (the engine's boxes take the corners too); the kernel is
// whole on every device.
ShardingRule Convolve2d::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  const int nd = static_cast<int>(xd.size());
  const std::int64_t kr = in[1].shape[0], kc = in[1].shape[1];
  make_halo(r, xd[nd - 2], kr / 2, (kr - 1) / 2);
  make_halo(r, xd[nd - 1], kc / 2, (kc - 1) / 2);
  const std::vector<int> kd = add_dims(r, in[1].shape);
  for (int f : kd) r.factors[f].kind = FactorKind::NeedReplication;
  r.operands = {xd, kd};
  r.results = {xd};
  return r;
}

// ================================================================= gradient

std::vector<TypeInfo> Gradient::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, inexact(in[0].dtype)}};
}

// Result row i reads x rows [i - 1, i + 1]: a halo of one row on each side.
// At the array's ends the engine's box stops there and the kernel takes
// the one-sided difference.
ShardingRule Gradient::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  make_halo(r, xd[axis_], 1, 1);
  r.operands = {xd};
  r.results = {xd};
  return r;
}

// The spacing as the shortest text that reads back as the same double (the
// jit cache key tells spacings apart).
std::string Gradient::params() const {
  std::string s = "axis=";
  s += std::to_string(axis_);
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, spacing_).ptr;
  s += " spacing=";
  s.append(buf, end);
  return s;
}

// =================================================================== interp

std::vector<TypeInfo> Interp::infer(std::span<const AbstractArray> in) const {
  return {TypeInfo{in[0].shape, promote(x_type(in[0].dtype, in[1].dtype), inexact(in[2].dtype))}};
}

ShardingRule Interp::rule(std::span<const AbstractArray> in) const {
  ShardingRule r;
  const std::vector<int> xd = add_dims(r, in[0].shape);
  const std::vector<int> td = add_dims(r, in[1].shape);
  r.factors[td[0]].kind = FactorKind::NeedReplication;
  r.operands = {xd, td, td};
  r.results = {xd};
  return r;
}

DType Interp::x_type(DType x, DType xp) { return inexact(promote(x, xp)); }

// ================================================================ factories

PrimitivePtr make_diff(int n, int axis, bool prepend, bool append) {
  return std::make_shared<Diff>(n, axis, prepend, append);
}
PrimitivePtr make_cumsum(int axis) { return std::make_shared<Cumsum>(axis); }
PrimitivePtr make_convolve(int axis) { return std::make_shared<Convolve>(axis); }
PrimitivePtr make_convolve2d() { return std::make_shared<Convolve2d>(); }
PrimitivePtr make_gradient(int axis, double spacing) { return std::make_shared<Gradient>(axis, spacing); }
PrimitivePtr make_interp() { return std::make_shared<Interp>(); }

}  // namespace tessera::detail
