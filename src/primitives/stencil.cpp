// The stencil and scan primitives (see stencil.hpp).
//
// None of them gathers a sharded operand. Each works on the lines of the
// array along one axis; every device's result block keeps x's layout.
//
//   - diff / convolve: a device's output block [a, b) along the axis needs
//     input rows just outside its own block. It reads its own block in place
//     (local_data) and gathers only the missing rows before and after it (two
//     gather_boxes calls: the halos). The rows form "segments" of one virtual
//     line (prepend | x | append for diff); the kernel streams over the rows
//     that lie in one segment and assembles the few rows that straddle two.
//   - cumsum along a sharded axis: pass 1 computes each block's line totals,
//     which form a small array with one row per part along the axis; each
//     device gathers the totals of the parts before it, adds them in part
//     order (deterministic) and scans its block starting from that offset.
//   - convolve2d: one gather of the block widened by the kernel's halos on
//     both dims (corners included).
//   - interp: elementwise in x; xp and fp are whole on every device (the
//     engine replicates them), so it needs no algorithm of its own.
//
// Every communication is recorded under the op's name; when a sharded op
// moves nothing it records that too (explain shows the op ran locally).
#include "primitives/stencil.hpp"

#include <algorithm>

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/rules.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {

using cpu::Lines;
using cpu::lines_of;
using cpu::Segment;

/// JAX's promote_dtypes_inexact: integer and bool results become f32.
DType inexact(DType t) { return is_float(t) ? t : DType::f32; }

/// The box `block` with its `axis` range replaced by [lo, hi) (empty when hi <= lo).
std::vector<Slice> with_range(std::vector<Slice> block, int axis, std::int64_t lo, std::int64_t hi) {
  block[axis] = Slice{lo, std::max(lo, hi)};
  return block;
}

/// True when no position has a non-empty box.
bool all_empty(const std::vector<std::vector<Slice>>& boxes) {
  return std::all_of(boxes.begin(), boxes.end(), [](const auto& b) { return box_empty(b); });
}

/// An array brought to every device whole (the convolutions' kernels).
Array replicate(const Array& a, const char* op) { return reshard_for(a, NamedSharding(a.sharding().mesh(), P()), op); }

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

/// A primitive whose single result keeps x's (operand 0's) layout and which
/// partitions itself.
class KeepsLayout : public Primitive {
 public:
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    return std::vector<NamedSharding>{in[0].sharding};
  }
  bool lowers_itself() const override { return true; }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg(std::string(name()).c_str(), "internal: runs on whole arrays (eval_global)"));
  }
};

// ===================================================================== diff

class Diff final : public KeepsLayout {
 public:
  Diff(int n, int axis, bool prepend, bool append) : n_(n), axis_(axis), pre_(prepend), app_(append) {}
  std::string_view name() const override { return "diff"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    Shape s = in[0].shape;
    s[axis_] = std::max<std::int64_t>(rows(in, prepend_index()) + s[axis_] + rows(in, append_index()) - n_, 0);
    return {TypeInfo{s, in[0].dtype}};
  }
  // Output row i is the n-th difference of sequence rows [i, i + n], that is
  // x rows [i - np, i - np + n]: a halo of np rows before each block of x
  // and n - np after it (the output dim is the factor trimmed by n rows).
  // prepend and append are concatenated along the axis: whole wherever
  // their rows are needed.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    const std::vector<int> xd = add_dims(r, in[0].shape);
    const std::int64_t np = rows(in, prepend_index());
    make_halo(r, xd[axis_], np, std::max<std::int64_t>(n_ - np, 0));
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
  std::string params() const override {
    std::string s = "n=";
    s += std::to_string(n_);
    s += " axis=";
    s += std::to_string(axis_);
    if (pre_ || app_) s += pre_ && app_ ? " with=prepend,append" : pre_ ? " with=prepend" : " with=append";
    return s;
  }
  // Every operand goes batch-first; a scalar prepend/append is one row of
  // the example first, so its batch dim does not read as its rows.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    const int rank = in[0].ndim() - (bd[0] >= 0 ? 1 : 0);
    Shape row = in[0].shape();
    if (bd[0] >= 0) row.erase(row.begin() + bd[0]);
    row[axis_] = 1;
    std::vector<Array> xs;
    for (size_t k = 0; k < in.size(); ++k) {
      Array a = in[k];
      const int ex_rank = a.ndim() - (bd[k] >= 0 ? 1 : 0);
      if (k > 0 && ex_rank == 0) {
        Shape target = row;
        if (bd[k] >= 0) {
          target.insert(target.begin(), size);
          a = batch_first_aligned(a, bd[k], rank);
          xs.push_back(broadcast_to(a, target, {}));
          continue;
        }
        a = broadcast_to(a, target, {});
      }
      xs.push_back(batch_first(a, bd[k], size));
    }
    ob = {0};
    return {bind1(std::make_shared<Diff>(n_, axis_ + 1, pre_, app_), xs)};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return linear_jvp(*this, p, t, to);
  }
  // The n-th difference of the sequence z = (prepend, x, append) along the
  // axis, transposed one difference at a time (ct_z[j] = ct[j-1] - ct[j]),
  // then cut back into the operands.
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    std::vector<Array> r(types.size());
    if (!ct[0].valid()) return r;
    Array c = ct[0];
    const int rank = c.ndim();
    for (int k = 0; k < n_; ++k) {
      std::vector<std::pair<std::int64_t, std::int64_t>> w(static_cast<size_t>(rank), {0, 0});
      w[axis_] = {1, 1};
      c = -diff(pad(c, w, 0, {}), 1, axis_, {}, {});
    }
    // The sequence is prepend, x, append; the operands are x, prepend, append.
    std::vector<int> order;
    if (pre_) order.push_back(prepend_index());
    order.push_back(0);
    if (app_) order.push_back(append_index());
    std::int64_t off = 0;
    for (const int k : order) {
      const bool scalar = k > 0 && types[k].shape.empty();
      const std::int64_t n = scalar ? 1 : types[k].shape[axis_];
      if (linear[k]) {
        std::vector<SliceSpec> sl(static_cast<size_t>(rank));
        sl[axis_] = SliceSpec{off, off + n, 1};
        Array part = slice(c, sl, {});
        r[k] = scalar ? sum(part, {}, {}, {}) : part;
        if (r[k].dtype() != types[k].dtype) r[k] = astype(r[k], types[k].dtype, {});
      }
      off += n;
    }
    return r;
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override;

 private:
  // Operand indices of prepend and append (-1 when absent).
  int prepend_index() const { return pre_ ? 1 : -1; }
  int append_index() const { return app_ ? (pre_ ? 2 : 1) : -1; }
  // Rows operand i adds to the sequence (0 when absent, 1 for a scalar).
  std::int64_t rows(std::span<const AbstractArray> in, int i) const {
    if (i < 0) return 0;
    return in[i].shape.empty() ? 1 : in[i].shape[axis_];
  }
  int n_, axis_;
  bool pre_, app_;
};

std::vector<Array> Diff::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                     const std::vector<NamedSharding>& layouts) const {
  const char* op = "diff";
  const int n = n_, axis = axis_;
  const Array& xc = in[0];
  const Array* pre = pre_ ? &in[prepend_index()] : nullptr;
  const Array* app = app_ ? &in[append_index()] : nullptr;
  const DType dt = out[0].dtype;
  const Shape& xs = xc.shape();
  const Shape& out_shape = out[0].shape;
  // The virtual sequence along axis: prepend rows [0, np), x rows [np, np + L),
  // append rows [np + L, S). Output row i = n-th difference of rows [i, i + n].
  const std::int64_t np = pre ? (pre->ndim() == 0 ? 1 : pre->shape()[axis]) : 0;
  const std::int64_t L = xs[axis];
  const NamedSharding& sh = xc.sharding();
  const Mesh& mesh = sh.mesh();
  const int npos = mesh.size();

  // Per position: the output block [a, b) needs sequence rows [a, b + n).
  std::vector<std::vector<Slice>> pre_boxes(npos), lo_boxes(npos), hi_boxes(npos), app_boxes(npos);
  std::vector<std::vector<Slice>> out_idx(npos), x_idx(npos);
  std::vector<Slice> mid(npos);
  for (int t = 0; t < npos; ++t) {
    out_idx[t] = layouts[0].shard_index(out_shape, t);
    x_idx[t] = sh.shard_index(xs, t);
    const bool none = box_empty(out_idx[t]);
    const std::int64_t a = out_idx[t][axis].start, e = out_idx[t][axis].stop + n;
    const std::int64_t xa = x_idx[t][axis].start, xb = x_idx[t][axis].stop;
    // x rows needed: [ra, rb); the part inside the local block is read in place.
    const std::int64_t ra = std::max(a - np, std::int64_t{0}), rb = std::min(e - np, L);
    const bool need_x = !none && ra < rb;
    lo_boxes[t] = with_range(x_idx[t], axis, ra, need_x ? std::min(rb, xa) : ra);
    hi_boxes[t] = with_range(x_idx[t], axis, std::max(ra, xb), need_x ? rb : ra);
    mid[t] = need_x ? Slice{std::max(ra, xa), std::max(std::max(ra, xa), std::min(rb, xb))} : Slice{xa, xa};
    if (pre && pre->ndim() > 0) pre_boxes[t] = with_range(x_idx[t], axis, a, none ? a : std::min(e, np));
    if (app && app->ndim() > 0)
      app_boxes[t] = with_range(x_idx[t], axis, std::max(a, np + L) - np - L, none ? 0 : e - np - L);
  }
  std::vector<Buffer> pre_buf(npos), lo_buf(npos), hi_buf(npos), app_buf(npos);
  bool gathered = false;
  auto gather = [&](const Array& a, const std::vector<std::vector<Slice>>& boxes, std::vector<Buffer>& buf) {
    if (all_empty(boxes)) return;
    buf = gather_boxes(a, boxes, op);
    gathered = true;
  };
  if (pre && pre->ndim() > 0) gather(*pre, pre_boxes, pre_buf);
  gather(xc, lo_boxes, lo_buf);
  gather(xc, hi_boxes, hi_buf);
  if (app && app->ndim() > 0) gather(*app, app_boxes, app_buf);
  if (!gathered) record_none(mesh, op);

  return {make_array(out_shape, dt, layouts[0], [&](int t, Buffer& res) {
    const Lines ol = lines_of(box_shape(out_idx[t]), axis);
    if (ol.len == 0 || ol.outer * ol.inner == 0) return;
    const std::int64_t a = out_idx[t][axis].start, e = out_idx[t][axis].stop + n;
    const std::int64_t row = ol.inner;
    const auto isz = static_cast<std::int64_t>(itemsize(dt));
    // Segments in sequence rows relative to a: [0, m + n).
    std::vector<Segment> segs;
    auto add_seg = [&](const void* data, std::int64_t s0, std::int64_t s1, std::int64_t stride) {
      if (s1 > s0) segs.push_back(Segment{data, dt, s0 - a, s1 - a, stride});
    };
    // A rank-0 prepend/append broadcast to one row (one buffer each).
    std::vector<unsigned char> pre_row, app_row;
    auto broadcast_row = [&](const Array& s, std::vector<unsigned char>& buf) {
      buf.resize(static_cast<size_t>(ol.outer * row * isz));
      dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T v = *static_cast<const T*>(local_data(s, t));
        std::fill_n(reinterpret_cast<T*>(buf.data()), ol.outer * row, v);
      });
      return static_cast<const void*>(buf.data());
    };
    if (pre) {
      if (pre->ndim() == 0) {
        if (a < 1) add_seg(broadcast_row(*pre, pre_row), 0, 1, row);
      } else {
        const Slice s = pre_boxes[t][axis];
        add_seg(pre_buf[t].data(), s.start, s.stop, s.size() * row);
      }
    }
    const Slice lo = lo_boxes[t][axis], hi = hi_boxes[t][axis];
    const std::int64_t xa = x_idx[t][axis].start, xl = x_idx[t][axis].size();
    add_seg(lo_buf[t].data(), lo.start + np, lo.stop + np, lo.size() * row);
    if (mid[t].size() > 0) {
      const auto* base = static_cast<const unsigned char*>(local_data(xc, t));
      add_seg(base + (mid[t].start - xa) * row * isz, mid[t].start + np, mid[t].stop + np, xl * row);
    }
    add_seg(hi_buf[t].data(), hi.start + np, hi.stop + np, hi.size() * row);
    if (app) {
      if (app->ndim() == 0) {
        if (e > np + L) add_seg(broadcast_row(*app, app_row), np + L, np + L + 1, row);
      } else {
        const Slice s = app_boxes[t][axis];
        add_seg(app_buf[t].data(), s.start + np + L, s.stop + np + L, s.size() * row);
      }
    }
    cpu::diff_block(dt, segs, res.data(), ol, n);
  })};
}

// =================================================================== cumsum

class Cumsum final : public KeepsLayout {
 public:
  explicit Cumsum(int axis) : axis_(axis) {}
  std::string_view name() const override { return "cumsum"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, sum_dtype(in[0].dtype)}};
  }
  // Each result row depends on every row before it along the axis: a halo
  // of the whole array before each block (though only block totals move).
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    const std::vector<int> xd = add_dims(r, in[0].shape);
    make_halo(r, xd[axis_], std::max<std::int64_t>(in[0].shape[axis_] - 1, 0), 0);
    r.operands = {xd};
    r.results = {xd};
    return r;
  }
  std::string params() const override {
    std::string s = "axis=";
    s += std::to_string(axis_);
    return s;
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                           std::vector<int>& ob) const override {
    return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Cumsum>(axis_ + 1); });
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return linear_jvp(*this, p, t, to);
  }
  // A cumulative sum read backwards.
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                               const std::vector<AbstractArray>& types, const std::vector<bool>&) const override {
    if (!ct[0].valid()) return {Array()};
    Array r = flip(cumsum(flip(ct[0], axis_, {}), axis_, {}), axis_, {});
    return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {})};
  }

  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override;

 private:
  int axis_;
};

std::vector<Array> Cumsum::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                       const std::vector<NamedSharding>& layouts) const {
  const char* op = "cumsum";
  const int axis = axis_;
  const Array& x = in[0];
  const DType out_dt = out[0].dtype;
  const NamedSharding& sh = x.sharding();
  const Mesh& mesh = sh.mesh();
  const int npos = mesh.size();
  const int K = sh.num_parts(axis);

  // Sharded axis: the totals of every block form an array with one row per
  // part along axis (same spec: part c holds exactly row c); each device
  // gathers the rows of the parts before it.
  std::vector<Buffer> before(npos);
  if (K > 1) {
    Shape tshape = x.shape();
    tshape[axis] = K;
    const Array totals = make_array(tshape, out_dt, sh, [&](int t, Buffer& b) {
      cpu::line_totals(x.dtype(), local_data(x, t), b.data(), lines_of(local_shape(x, t), axis));
    });
    std::vector<std::vector<Slice>> boxes(npos);
    for (int t = 0; t < npos; ++t) boxes[t] = with_range(local_index(totals, t), axis, 0, sh.part_index(axis, t));
    before = gather_boxes(totals, boxes, op);
  } else {
    record_none(mesh, op);
  }

  return {make_array(x.shape(), out_dt, layouts[0], [&](int t, Buffer& res) {
    const Lines l = lines_of(local_shape(x, t), axis);
    if (l.outer * l.len * l.inner == 0) return;
    const int c = K > 1 ? sh.part_index(axis, t) : 0;
    // Offsets: the totals of parts 0 .. c-1 (8 bytes hold any sum dtype).
    std::vector<std::int64_t> offset;
    if (c > 0) {
      offset.resize(static_cast<size_t>(l.outer * l.inner));
      cpu::scan_offsets(x.dtype(), before[t].data(), c, l, offset.data());
    }
    cpu::scan_block(x.dtype(), local_data(x, t), res.data(), l, offset.empty() ? nullptr : offset.data());
  })};
}

// ================================================================= convolve

class Convolve final : public KeepsLayout {
 public:
  explicit Convolve(int axis) : axis_(axis) {}
  std::string_view name() const override { return "convolve"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, inexact(promote(in[0].dtype, in[1].dtype))}};
  }
  // 'same': out[i] = sum_k w[k] x[i + (K-1)/2 - k], so rows [i - K/2, i + (K-1)/2];
  // the kernel's taps are whole on every device.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
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
  std::string params() const override {
    std::string s = "axis=";
    s += std::to_string(axis_);
    return s;
  }
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);  // a kernel per example: one at a time
    ob = {0};
    return {bind1(std::make_shared<Convolve>(axis_ + 1), {move_dim(in[0], bd[0], 0), in[1]})};
  }
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const override {
    return bilinear_jvp(*this, p, t, to);
  }
  // Linear in x for a fixed kernel: 'same' convolution with the reversed
  // kernel (odd lengths, where 'same' is centred both ways).
  std::vector<Array> transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const override {
    if (linear[1] || types[1].shape[0] % 2 == 0)
      throw Error(msg("convolve", "reverse-mode differentiation is supported for the signal with an odd-length "
                                  "kernel only (got a kernel of " + std::to_string(types[1].shape[0]) + " taps" +
                                  (linear[1] ? ", differentiated itself" : "") + "); use jacfwd/jvp"));
    if (!ct[0].valid()) return {Array(), Array()};
    Array r = convolve(ct[0], flip(in[1], 0, {}), axis_, {});
    return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {}), Array()};
  }

  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override;

 private:
  int axis_;
};

std::vector<Array> Convolve::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                         const std::vector<NamedSharding>& layouts) const {
  const char* op = "convolve";
  const int axis = axis_;
  const Array& x = in[0];
  const DType dt = out[0].dtype;
  const std::int64_t K = in[1].size(), L = x.shape()[axis];
  const std::int64_t hl = K / 2, hr = (K - 1) / 2;
  const NamedSharding& sh = x.sharding();
  const int npos = sh.mesh().size();
  const Array w = replicate(in[1], op);

  std::vector<std::vector<Slice>> lo_boxes(npos), hi_boxes(npos), x_idx(npos);
  for (int t = 0; t < npos; ++t) {
    x_idx[t] = local_index(x, t);
    const Slice s = x_idx[t][axis];
    const bool none = box_empty(x_idx[t]);
    lo_boxes[t] = with_range(x_idx[t], axis, std::max<std::int64_t>(0, s.start - hl), none ? 0 : s.start);
    hi_boxes[t] = with_range(x_idx[t], axis, s.stop, none ? 0 : std::min(L, s.stop + hr));
  }
  std::vector<Buffer> lo_buf(npos), hi_buf(npos);
  if (!all_empty(lo_boxes)) lo_buf = gather_boxes(x, lo_boxes, op);
  if (!all_empty(hi_boxes)) hi_buf = gather_boxes(x, hi_boxes, op);
  if (all_empty(lo_boxes) && all_empty(hi_boxes)) record_none(sh.mesh(), op);

  return {make_array(x.shape(), dt, layouts[0], [&](int t, Buffer& res) {
    const Lines l = lines_of(local_shape(x, t), axis);
    if (l.outer * l.len * l.inner == 0) return;
    const std::int64_t row = l.inner;
    const Slice s = x_idx[t][axis], lo = lo_boxes[t][axis], hi = hi_boxes[t][axis];
    const Segment mid{local_data(x, t), x.dtype(), s.start, s.stop, s.size() * row};
    std::vector<Segment> segs;
    if (lo.size() > 0) segs.push_back(Segment{lo_buf[t].data(), x.dtype(), lo.start, lo.stop, lo.size() * row});
    segs.push_back(mid);
    if (hi.size() > 0) segs.push_back(Segment{hi_buf[t].data(), x.dtype(), hi.start, hi.stop, hi.size() * row});
    cpu::convolve_block(dt, segs, mid, res.data(), l, s.start, local_data(w, t), w.dtype(), K, hl);
  })};
}

// =============================================================== convolve2d

class Convolve2d final : public KeepsLayout {
 public:
  std::string_view name() const override { return "convolve2d"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, inexact(promote(in[0].dtype, in[1].dtype))}};
  }
  // The last two dims have halos of kr/2 and (kr-1)/2 rows, kc/2 and
  // (kc-1)/2 columns; the kernel is whole on every device.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
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
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override;
};

std::vector<Array> Convolve2d::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                           const std::vector<NamedSharding>& layouts) const {
  const char* op = "convolve2d";
  const Array& x = in[0];
  const DType dt = out[0].dtype;
  const int nd = x.ndim();
  const std::int64_t kr = in[1].shape()[0], kc = in[1].shape()[1];
  const std::int64_t R = x.shape()[nd - 2], C = x.shape()[nd - 1];
  const NamedSharding& sh = x.sharding();
  const int npos = sh.mesh().size();
  const Array w = replicate(in[1], op);

  // Each block widened by the halos (rows and columns, corners included),
  // clipped to the array; an empty block needs nothing.
  std::vector<std::vector<Slice>> boxes(npos), x_idx(npos);
  for (int t = 0; t < npos; ++t) {
    x_idx[t] = local_index(x, t);
    boxes[t] = x_idx[t];
    if (box_empty(x_idx[t])) {
      for (auto& s : boxes[t]) s = Slice{0, 0};
      continue;
    }
    auto& r = boxes[t][nd - 2];
    auto& c = boxes[t][nd - 1];
    r = Slice{std::max<std::int64_t>(0, r.start - kr / 2), std::min(R, r.stop + (kr - 1) / 2)};
    c = Slice{std::max<std::int64_t>(0, c.start - kc / 2), std::min(C, c.stop + (kc - 1) / 2)};
  }
  std::vector<Buffer> blocks(npos);
  if (!all_empty(boxes))
    blocks = gather_boxes(x, boxes, op);
  else
    record_none(sh.mesh(), op);

  return {make_array(x.shape(), dt, layouts[0], [&](int t, Buffer& res) {
    if (box_empty(x_idx[t])) return;
    cpu::convolve2d_block(dt, blocks[t].data(), x.dtype(), boxes[t], res.data(), x_idx[t], local_data(w, t),
                          w.dtype(), kr, kc);
  })};
}

// =================================================================== interp

// Elementwise in x; xp and fp share one factor that must be whole on every
// device, so the engine replicates them and keeps x's layout.
class Interp final : public Primitive {
 public:
  std::string_view name() const override { return "interp"; }
  // As jnp.interp: x and xp promoted together to inexact, fp on its own.
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[0].shape, promote(x_type(in[0].dtype, in[1].dtype), inexact(in[2].dtype))}};
  }
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    const std::vector<int> xd = add_dims(r, in[0].shape);
    const std::vector<int> td = add_dims(r, in[1].shape);
    r.factors[td[0]].kind = FactorKind::NeedReplication;
    r.operands = {xd, td, td};
    r.results = {xd};
    return r;
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    const std::int64_t n = num_elements(out[0].shape);
    if (n == 0) return;
    cpu::interp(x_type(in[0].dtype, in[1].dtype), inexact(in[2].dtype), out[0].dtype, in[0].data, in[0].dtype,
                out[0].data, n, in[1].data, in[1].dtype, in[2].data, in[2].dtype, in[1].shape[0]);
  }

 private:
  static DType x_type(DType x, DType xp) { return inexact(promote(x, xp)); }
};

}  // namespace

PrimitivePtr make_diff(int n, int axis, bool prepend, bool append) {
  return std::make_shared<Diff>(n, axis, prepend, append);
}
PrimitivePtr make_cumsum(int axis) { return std::make_shared<Cumsum>(axis); }
PrimitivePtr make_convolve(int axis) { return std::make_shared<Convolve>(axis); }
PrimitivePtr make_convolve2d() { return std::make_shared<Convolve2d>(); }
PrimitivePtr make_interp() { return std::make_shared<Interp>(); }

}  // namespace tessera::detail
