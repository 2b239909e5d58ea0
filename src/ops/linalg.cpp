// Linear algebra: dot_general is the one engine; matmul, dot and einsum only
// describe their operands' dims to it.
//
// A contraction gives every dim of each operand a role: batch (paired, or
// broadcast from size 1 / absent on one side), contracting (paired), free
// (kept in the output), or summed (einsum labels in one operand only). The
// output is (batch..., lhs free..., rhs free...), optionally permuted.
//
// Sharding rule (DESIGN.md "matmul / dot_general"), decided on specs only:
//   1. batch dims: sharded alike -> kept. Differently: Auto takes the lhs
//      axes (or the rhs ones when the lhs dim is unsharded, so that side
//      only slices locally); Explicit raises ShardingError. A broadcast
//      (size-1) side is replicated on that dim.
//   2. contracting dims sharded alike (same axes) -> kept: local GEMMs give
//      partial sums, combined by reduce_over those axes (all-reduce, or
//      reduce-scatter straight into a requested out_sharding). Sharded
//      differently or on one side only -> both sides replicated on that dim
//      (the sharded operand's contracting dim is all-gathered).
//   3. summed dims keep their axes and join the reduction, like 2.
//   4. free dims keep their axes, lhs first; an axis already used (by a
//      batch, contracting or lhs free dim) is dropped from the later dim,
//      which is gathered along it.
// Each axis is thus used at most once, so the operands' target layouts are
// valid specs, every device's local GEMM yields exactly its block of the
// natural output layout, and partial blocks agree within each reduction
// group. In Explicit mode every implicit choice (batch mismatch, contracting
// mismatch, partial sums, a dropped free axis) needs out_sharding; the error
// names it. With out_sharding the natural result is reduce-scattered or
// resharded to it.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/gemm.hpp"
#include "ops/common.hpp"

namespace tessera {

namespace {

using detail::Buffer;
using detail::msg;
using AxisList = std::vector<std::string>;

// Roles of one operand's dims.
struct Side {
  std::vector<int> batch;     // per batch pair: the dim, or -1 when absent
  std::vector<int> contract;  // per contracting pair
  std::vector<int> free;      // in output order
  std::vector<int> summed;    // summed away locally, then over their axes
};

struct Contraction {
  Side lhs, rhs;
  std::vector<int> out_perm;  // output dim i is canonical dim out_perm[i]; empty: identity
};

std::string entry_str(const AxisList& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return "'" + axes[0] + "'";
  return PartitionSpec::Entry(axes).str();
}

std::string axes_str(const AxisList& axes) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + axes[i] + "'";
  return s;
}

// "P('x', None)" for messages (trailing unsharded dims left out).
std::string p_str(const std::vector<AxisList>& dims) {
  size_t last = 0;
  for (size_t d = 0; d < dims.size(); ++d)
    if (!dims[d].empty()) last = d + 1;
  std::string s = "P(";
  for (size_t d = 0; d < last; ++d) s += (d ? ", " : "") + entry_str(dims[d]);
  return s + ")";
}

std::int64_t product(const Shape& s, size_t from, size_t to) {
  std::int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// True when the dims of `order` whose size is not 1 are increasing: the
// row-major block of `shape` is then already laid out in that order.
bool already_ordered(const Shape& shape, const std::vector<int>& order) {
  int last = -1;
  for (int d : order) {
    if (shape[d] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

// Row-major strides (elements) of `shape` permuted by `order`, indexed by
// the original dim.
std::vector<std::int64_t> strides_in(const Shape& shape, const std::vector<int>& order) {
  std::vector<std::int64_t> st(shape.size(), 0);
  std::int64_t acc = 1;
  for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
    st[order[i]] = acc;
    acc *= shape[order[i]];
  }
  return st;
}

// One operand's local block prepared for the GEMM: pre-summed, and permuted
// when neither the plain nor the transposed form matches its layout.
struct Prepared {
  const void* data = nullptr;
  bool trans = false;
  std::vector<std::int64_t> batch_stride;
  Buffer keep_sum, keep_perm;
};

// Local dims ordered (batch, summed, m, k) for the lhs and (batch, summed, k,
// n) for the rhs, or the transposed form; `out_batch` are the output's local
// batch sizes (a size-1 operand dim against a larger one is broadcast).
Prepared prepare(const void* data, Shape shape, DType dtype, int device, const Side& side, bool is_lhs,
                 const std::vector<std::int64_t>& out_batch) {
  Prepared p;
  const std::size_t isz = itemsize(dtype);
  p.data = data;
  if (!side.summed.empty()) {
    std::vector<bool> flag(shape.size(), false);
    for (int d : side.summed) flag[d] = true;
    Shape kept = shape;
    for (int d : side.summed) kept[d] = 1;
    p.keep_sum = Buffer(device, static_cast<std::size_t>(detail::num_elements(kept)) * isz);
    detail::cpu::sum_dims(dtype, data, shape, flag, p.keep_sum.data());
    p.data = p.keep_sum.data();
    shape = kept;
  }
  std::vector<int> head;
  for (int d : side.batch)
    if (d >= 0) head.push_back(d);
  head.insert(head.end(), side.summed.begin(), side.summed.end());
  // lhs: (m, k) plain, (k, m) transposed; rhs: (k, n) plain, (n, k) transposed.
  std::vector<int> plain = head, trans = head;
  const auto& first = is_lhs ? side.free : side.contract;
  const auto& second = is_lhs ? side.contract : side.free;
  plain.insert(plain.end(), first.begin(), first.end());
  plain.insert(plain.end(), second.begin(), second.end());
  trans.insert(trans.end(), second.begin(), second.end());
  trans.insert(trans.end(), first.begin(), first.end());
  std::vector<int> order = plain;
  if (!already_ordered(shape, plain)) {
    if (already_ordered(shape, trans)) {
      order = trans;
      p.trans = true;
    } else {
      p.keep_perm = Buffer(device, static_cast<std::size_t>(detail::num_elements(shape)) * isz);
      detail::cpu::permute(p.data, shape, plain, p.keep_perm.data(), isz);
      p.data = p.keep_perm.data();
    }
  }
  const auto st = strides_in(shape, order);
  for (size_t i = 0; i < side.batch.size(); ++i) {
    const int d = side.batch[i];
    p.batch_stride.push_back(d < 0 || (shape[d] == 1 && out_batch[i] != 1) ? 0 : st[d]);
  }
  return p;
}

bool explicit_any(const Mesh& mesh, const AxisList& axes) {
  for (const auto& a : axes) {
    const int i = mesh.axis_index(a);
    if (i >= 0 && i < static_cast<int>(mesh.axis_types().size()) && mesh.axis_types()[i] == AxisType::Explicit)
      return true;
  }
  return false;
}

AxisList join(AxisList a, const AxisList& b) {
  for (const auto& x : b)
    if (std::find(a.begin(), a.end(), x) == a.end()) a.push_back(x);
  return a;
}

// The engine. Callers have validated the roles and sizes.
Array contract(const Array& a, const Array& b, const Contraction& c, const OutOptions& opt, const char* op) {
  const Mesh& mesh = a.sharding().mesh();
  const DType dtype = detail::promote(a.dtype(), b.dtype());
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const Side& L = c.lhs;
  const Side& R = c.rhs;
  const size_t nb = L.batch.size();
  auto size_of = [](const Shape& s, int d) { return d < 0 ? std::int64_t{1} : s[d]; };

  // Output shape: canonical (batch, lhs free, rhs free), then permuted.
  Shape canon;
  // A size-1 batch dim broadcasts against the other side's size, including
  // 0: (0, 16, 7) @ (1, 7, 3) is (0, 16, 3), so max() would be wrong.
  for (size_t i = 0; i < nb; ++i) {
    const std::int64_t na = size_of(sa, L.batch[i]), nbb = size_of(sb, R.batch[i]);
    canon.push_back(na == 1 ? nbb : na);
  }
  for (int d : L.free) canon.push_back(sa[d]);
  for (int d : R.free) canon.push_back(sb[d]);
  const int rank = static_cast<int>(canon.size());
  std::vector<int> perm = c.out_perm;
  if (perm.empty())
    for (int i = 0; i < rank; ++i) perm.push_back(i);
  Shape out_shape(rank);
  for (int i = 0; i < rank; ++i) out_shape[i] = canon[perm[i]];
  // (2^40, k) @ (k, 2^40): both operands fit, the product does not.
  detail::checked_nbytes(out_shape, dtype, op);

  std::optional<NamedSharding> out;
  if (opt.out_sharding) out = detail::resolve_spec(mesh, *opt.out_sharding, rank, op);
  const bool have_out = out.has_value();

  // ---- sharding rule (specs only)
  const auto axa = detail::spec_axes(a.sharding(), a.ndim());
  const auto axb = detail::spec_axes(b.sharding(), b.ndim());
  std::vector<AxisList> ta(a.ndim()), tb(b.ndim()), canon_axes;
  std::set<std::string> used;
  AxisList reduce_axes;
  auto take = [&](const AxisList& axes) {
    AxisList kept;
    for (const auto& x : axes)
      if (used.insert(x).second) kept.push_back(x);
    return kept;
  };

  for (size_t i = 0; i < nb; ++i) {
    const int da = L.batch[i], db = R.batch[i];
    const std::int64_t na = size_of(sa, da), nbb = size_of(sb, db);
    const AxisList la = da >= 0 ? axa[da] : AxisList{};
    const AxisList rb = db >= 0 ? axb[db] : AxisList{};
    AxisList chosen;
    if (na != nbb) {
      chosen = na == canon[i] ? la : rb;  // the broadcast side is replicated
    } else if (la == rb) {
      chosen = la;
    } else {
      if (!have_out && explicit_any(mesh, join(la, rb)))
        throw ShardingError(msg(op, "batch dim " + std::to_string(i) + " is sharded differently: lhs " +
                                        entry_str(la) + " vs rhs " + entry_str(rb) +
                                        "; reshard one operand to match the other, or pass out_sharding"));
      chosen = la.empty() ? rb : la;
    }
    chosen = take(chosen);
    if (da >= 0) ta[da] = na == canon[i] ? chosen : AxisList{};
    if (db >= 0) tb[db] = nbb == canon[i] ? chosen : AxisList{};
    canon_axes.push_back(chosen);
  }

  for (size_t j = 0; j < L.contract.size(); ++j) {
    const AxisList& la = axa[L.contract[j]];
    const AxisList& rb = axb[R.contract[j]];
    AxisList chosen;
    if (la == rb) {
      chosen = take(la);
      reduce_axes = join(reduce_axes, chosen);
    } else if (!have_out && explicit_any(mesh, join(la, rb))) {
      if (la.empty() || rb.empty())
        throw ShardingError(msg(
            op, "contracting dimension is sharded on one side only: lhs " + entry_str(la) + " vs rhs " +
                    entry_str(rb) + "; reshard the other operand's contracting dim to " +
                    entry_str(la.empty() ? rb : la) + " (partial sums) or replicate it, or pass out_sharding"));
      throw ShardingError(msg(op, "contracting dimension is sharded on both sides differently: lhs " + entry_str(la) +
                                      " vs rhs " + entry_str(rb) +
                                      "; reshard one operand to match the other, or pass out_sharding"));
    }
    ta[L.contract[j]] = chosen;
    tb[R.contract[j]] = chosen;
  }
  for (int d : L.summed) reduce_axes = join(reduce_axes, ta[d] = take(axa[d]));
  for (int d : R.summed) reduce_axes = join(reduce_axes, tb[d] = take(axb[d]));

  auto keep_free = [&](const AxisList& axes, const char* side, int dim) {
    AxisList kept = take(axes), dropped;
    for (const auto& x : axes)
      if (std::find(kept.begin(), kept.end(), x) == kept.end()) dropped.push_back(x);
    if (!dropped.empty() && !have_out && explicit_any(mesh, dropped))
      throw ShardingError(msg(op, "mesh axis " + axes_str(dropped) + " would shard two dims of the output (" + side +
                                      " dim " + std::to_string(dim) +
                                      " and an earlier dim); pass out_sharding to choose the output layout"));
    return kept;
  };
  for (int d : L.free) canon_axes.push_back(ta[d] = keep_free(axa[d], "lhs", d));
  for (int d : R.free) canon_axes.push_back(tb[d] = keep_free(axb[d], "rhs", d));

  std::vector<AxisList> out_axes(rank);
  for (int i = 0; i < rank; ++i) out_axes[i] = canon_axes[perm[i]];
  const NamedSharding natural(mesh, detail::make_spec(out_axes));
  const NamedSharding canon_sh(mesh, detail::make_spec(canon_axes));

  bool reduces = false;
  for (const auto& x : reduce_axes) reduces = reduces || mesh.axis_size(x) > 1;
  if (!reduce_axes.empty() && !have_out && explicit_any(mesh, reduce_axes)) {
    std::vector<AxisList> scattered = out_axes;
    for (auto& e : scattered)
      if (e.empty()) {
        e = reduce_axes;
        break;
      }
    std::string fix = "pass out_sharding=" + p_str(out_axes) + " (all-reduce)";
    if (scattered != out_axes) fix += " or out_sharding=" + p_str(scattered) + " (reduce-scatter)";
    throw ShardingError(msg(op, "contracting dims are sharded alike on both sides (over " + axes_str(reduce_axes) +
                                    "): each device holds a partial sum and the output layout is ambiguous; " +
                                    fix));
  }

  // ---- execution: bring the operands to their target layouts, local GEMMs.
  detail::cpu::init_blas();
  const Array la = detail::cast(detail::reshard_for(a, NamedSharding(mesh, detail::make_spec(ta)), op), dtype);
  const Array lb = detail::cast(detail::reshard_for(b, NamedSharding(mesh, detail::make_spec(tb)), op), dtype);
  const std::size_t isz = itemsize(dtype);
  const size_t nlf = L.free.size();
  bool identity = true;
  for (int i = 0; i < rank; ++i) identity = identity && perm[i] == i;

  std::vector<Buffer> partial(mesh.size());
  detail::for_each_device(mesh, [&](int pos) {
    const int dev = mesh.devices()[pos].id();
    const Shape local = canon_sh.shard_shape(canon, pos);
    Buffer cbuf(dev, static_cast<std::size_t>(detail::num_elements(local)) * isz);
    const Shape lsa = detail::local_shape(la, pos), lsb = detail::local_shape(lb, pos);
    std::int64_t k = 1;
    for (int d : L.contract) k *= lsa[d];
    if (cbuf.nbytes() > 0 && k == 0) std::memset(cbuf.data(), 0, cbuf.nbytes());
    if (cbuf.nbytes() > 0 && k > 0) {
      const std::vector<std::int64_t> bl(local.begin(), local.begin() + nb);
      Prepared pa = prepare(detail::local_data(la, pos), lsa, dtype, dev, L, true, bl);
      Prepared pb = prepare(detail::local_data(lb, pos), lsb, dtype, dev, R, false, bl);
      detail::cpu::GemmBatch g;
      g.dtype = dtype;
      g.batch = bl;
      g.a_stride = pa.batch_stride;
      g.b_stride = pb.batch_stride;
      g.m = product(local, nb, nb + nlf);
      g.n = product(local, nb + nlf, local.size());
      g.k = k;
      g.trans_a = pa.trans;
      g.trans_b = pb.trans;
      // rhs shared by the whole batch and lhs contiguous over it: one GEMM.
      bool merge = !pa.trans;
      std::int64_t expect = g.m * g.k;
      for (int i = static_cast<int>(nb) - 1; i >= 0 && merge; --i) {
        if (bl[i] == 1) continue;
        merge = pb.batch_stride[i] == 0 && pa.batch_stride[i] == expect;
        expect *= bl[i];
      }
      if (merge) {
        g.m *= product(local, 0, nb);
        g.batch.clear();
        g.a_stride.clear();
        g.b_stride.clear();
      }
      detail::cpu::batched_gemm(g, pa.data, pb.data, cbuf.data());
    }
    if (!identity && !already_ordered(local, perm)) {
      Buffer pbuf(dev, cbuf.nbytes());
      detail::cpu::permute(cbuf.data(), local, perm, pbuf.data(), isz);
      cbuf = std::move(pbuf);
    }
    partial[pos] = std::move(cbuf);
  });

  Array result;
  if (reduces) {
    std::vector<std::vector<Slice>> pboxes(mesh.size()), oboxes(mesh.size());
    bool scatter = have_out;
    for (int t = 0; t < mesh.size(); ++t) {
      pboxes[t] = natural.shard_index(out_shape, t);
      if (!have_out) continue;
      oboxes[t] = out->shard_index(out_shape, t);
      if (detail::box_empty(oboxes[t])) continue;
      for (int d = 0; d < rank; ++d)
        scatter = scatter && pboxes[t][d].start <= oboxes[t][d].start && oboxes[t][d].stop <= pboxes[t][d].stop;
    }
    if (!scatter) oboxes = pboxes;
    auto bufs = detail::reduce_over(mesh, reduce_axes, detail::ReduceOp::Sum, dtype, partial, pboxes, oboxes, op);
    result = detail::wrap(out_shape, dtype, scatter ? *out : natural, std::move(bufs));
  } else {
    result = detail::wrap(out_shape, dtype, natural, std::move(partial));
  }
  if (have_out && !(result.sharding() == *out)) result = detail::reshard_for(result, *out, op);
  return result;
}

void check_operands(const Array& a, const Array& b, const char* op) {
  detail::check_valid(a, op, "lhs");
  detail::check_valid(b, op, "rhs");
  detail::check_same_mesh({&a, &b}, op);
}

std::string differ(const char* what, const Array& a, const Array& b) {
  return std::string(what) + " dims differ: lhs " + shape_str(a.shape()) + " vs rhs " + shape_str(b.shape());
}

// Dims of [0, rank) not in `taken`, in order.
std::vector<int> rest(int rank, const std::vector<int>& x, const std::vector<int>& y) {
  std::vector<int> out;
  for (int d = 0; d < rank; ++d)
    if (std::find(x.begin(), x.end(), d) == x.end() && std::find(y.begin(), y.end(), d) == y.end()) out.push_back(d);
  return out;
}

}  // namespace

Array dot_general(const Array& a, const Array& b, const DotDims& dims, const OutOptions& opt) {
  const char* op = "dot_general";
  check_operands(a, b, op);
  auto norm = [&](const std::vector<int>& v, int rank, const char* side, const char* what) {
    std::vector<int> out;
    for (int d : v) {
      const int n = detail::normalize_axis(d, rank, op);
      if (std::find(out.begin(), out.end(), n) != out.end())
        throw ShapeError(msg(op, std::string(side) + " " + what + " dim " + std::to_string(n) + " is given twice"));
      out.push_back(n);
    }
    return out;
  };
  Contraction c;
  c.lhs.contract = norm(dims.lhs_contracting, a.ndim(), "lhs", "contracting");
  c.rhs.contract = norm(dims.rhs_contracting, b.ndim(), "rhs", "contracting");
  c.lhs.batch = norm(dims.lhs_batch, a.ndim(), "lhs", "batch");
  c.rhs.batch = norm(dims.rhs_batch, b.ndim(), "rhs", "batch");
  if (c.lhs.contract.size() != c.rhs.contract.size())
    throw ShapeError(msg(op, "lhs has " + std::to_string(c.lhs.contract.size()) + " contracting dims but rhs has " +
                                 std::to_string(c.rhs.contract.size())));
  if (c.lhs.batch.size() != c.rhs.batch.size())
    throw ShapeError(msg(op, "lhs has " + std::to_string(c.lhs.batch.size()) + " batch dims but rhs has " +
                                 std::to_string(c.rhs.batch.size())));
  for (const Side* s : {&c.lhs, &c.rhs})
    for (int d : s->batch)
      if (std::find(s->contract.begin(), s->contract.end(), d) != s->contract.end())
        throw ShapeError(msg(op, std::string(s == &c.lhs ? "lhs" : "rhs") + " dim " + std::to_string(d) +
                                     " is both a batch and a contracting dim"));
  for (size_t j = 0; j < c.lhs.contract.size(); ++j) {
    const int da = c.lhs.contract[j], db = c.rhs.contract[j];
    if (a.shape()[da] != b.shape()[db])
      throw ShapeError(msg(op, differ("contracting", a, b) + " (lhs dim " + std::to_string(da) + " has " +
                                   std::to_string(a.shape()[da]) + ", rhs dim " + std::to_string(db) + " has " +
                                   std::to_string(b.shape()[db]) + ")"));
  }
  for (size_t i = 0; i < c.lhs.batch.size(); ++i) {
    const int da = c.lhs.batch[i], db = c.rhs.batch[i];
    if (a.shape()[da] != b.shape()[db])
      throw ShapeError(msg(op, differ("batch", a, b) + " (lhs dim " + std::to_string(da) + " has " +
                                   std::to_string(a.shape()[da]) + ", rhs dim " + std::to_string(db) + " has " +
                                   std::to_string(b.shape()[db]) + ")"));
  }
  c.lhs.free = rest(a.ndim(), c.lhs.batch, c.lhs.contract);
  c.rhs.free = rest(b.ndim(), c.rhs.batch, c.rhs.contract);
  return contract(a, b, c, opt, op);
}

Array matmul(const Array& a, const Array& b, const OutOptions& opt) {
  const char* op = "matmul";
  check_operands(a, b, op);
  const int ra = a.ndim(), rb = b.ndim();
  if (ra < 1 || rb < 1)
    throw ShapeError(msg(op, "operands must have rank >= 1, got lhs " + shape_str(a.shape()) + " and rhs " +
                                 shape_str(b.shape()) + " (use multiply for scalars)"));
  const int ka = ra - 1, kb = rb >= 2 ? rb - 2 : 0;
  if (a.shape()[ka] != b.shape()[kb]) throw ShapeError(msg(op, differ("contracting", a, b)));
  // Leading dims broadcast as batch dims, aligned from the right.
  const int nba = std::max(ra - 2, 0), nbb = std::max(rb - 2, 0), nb = std::max(nba, nbb);
  Contraction c;
  for (int i = 0; i < nb; ++i) {
    const int da = i - (nb - nba), db = i - (nb - nbb);
    const std::int64_t sa = da >= 0 ? a.shape()[da] : 1, sb = db >= 0 ? b.shape()[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      throw ShapeError(msg(op, "batch dims cannot broadcast: lhs " + shape_str(a.shape()) + " vs rhs " +
                                   shape_str(b.shape())));
    c.lhs.batch.push_back(da);
    c.rhs.batch.push_back(db);
  }
  c.lhs.contract = {ka};
  c.rhs.contract = {kb};
  if (ra >= 2) c.lhs.free = {ra - 2};
  if (rb >= 2) c.rhs.free = {rb - 1};
  return contract(a, b, c, opt, op);
}

Array dot(const Array& a, const Array& b, const OutOptions& opt) {
  const char* op = "dot";
  check_operands(a, b, op);
  const int ra = a.ndim(), rb = b.ndim();
  Contraction c;
  if (ra > 0 && rb > 0) {
    // Last dim of a with the second-to-last of b (its only dim when 1-d).
    const int ka = ra - 1, kb = rb >= 2 ? rb - 2 : 0;
    if (a.shape()[ka] != b.shape()[kb]) throw ShapeError(msg(op, differ("contracting", a, b)));
    c.lhs.contract = {ka};
    c.rhs.contract = {kb};
  }
  c.lhs.free = rest(ra, c.lhs.contract, {});
  c.rhs.free = rest(rb, c.rhs.contract, {});
  return contract(a, b, c, opt, op);
}

Array einsum(const std::string& subscripts, const Array& a, const Array& b, const OutOptions& opt) {
  const char* op = "einsum";
  check_operands(a, b, op);
  const std::string quoted = "'" + subscripts + "'";
  std::string s;
  for (char ch : subscripts)
    if (ch != ' ') s += ch;
  if (s.find("...") != std::string::npos)
    throw ShapeError(msg(op, "ellipsis ('...') is not supported yet, got " + quoted));
  const auto arrow = s.find("->");
  const bool implicit = arrow == std::string::npos;
  const std::string ins = implicit ? s : s.substr(0, arrow);
  std::string outs = implicit ? "" : s.substr(arrow + 2);
  const auto comma = ins.find(',');
  if (comma == std::string::npos || ins.find(',', comma + 1) != std::string::npos)
    throw ShapeError(msg(op, "expected subscripts for exactly two operands like 'ij,jk->ik', got " + quoted));
  const std::string li = ins.substr(0, comma), ri = ins.substr(comma + 1);
  auto check_labels = [&](const std::string& labels, const char* what) {
    for (size_t i = 0; i < labels.size(); ++i) {
      const char ch = labels[i];
      if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
        throw ShapeError(msg(op, "invalid character '" + std::string(1, ch) + "' in " + what + " of " + quoted +
                                     " (labels are letters)"));
      if (labels.find(ch, i + 1) != std::string::npos)
        throw ShapeError(msg(op, "label '" + std::string(1, ch) + "' repeats in " + what + " '" + labels + "' of " +
                                     quoted + "; diagonals and traces are not supported yet"));
    }
  };
  check_labels(li, "the lhs subscripts");
  check_labels(ri, "the rhs subscripts");
  if (static_cast<int>(li.size()) != a.ndim() || static_cast<int>(ri.size()) != b.ndim())
    throw ShapeError(msg(op, "subscripts " + quoted + " name " + std::to_string(li.size()) + " and " +
                                 std::to_string(ri.size()) + " dims, but the operands have shapes lhs " +
                                 shape_str(a.shape()) + " and rhs " + shape_str(b.shape())));
  if (implicit) {
    // NumPy: labels appearing once, sorted.
    for (char ch : li + ri)
      if (std::count(li.begin(), li.end(), ch) + std::count(ri.begin(), ri.end(), ch) == 1) outs += ch;
    std::sort(outs.begin(), outs.end());
  }
  check_labels(outs, "the output subscripts");
  for (char ch : outs)
    if (li.find(ch) == std::string::npos && ri.find(ch) == std::string::npos)
      throw ShapeError(msg(op, "output label '" + std::string(1, ch) + "' of " + quoted +
                                   " appears in no operand"));
  for (size_t i = 0; i < li.size(); ++i) {
    const auto j = ri.find(li[i]);
    if (j != std::string::npos && a.shape()[i] != b.shape()[j])
      throw ShapeError(msg(op, "label '" + std::string(1, li[i]) + "' has size " + std::to_string(a.shape()[i]) +
                                   " in lhs " + shape_str(a.shape()) + " but " + std::to_string(b.shape()[j]) +
                                   " in rhs " + shape_str(b.shape())));
  }
  Contraction c;
  std::string canon;
  for (char ch : outs) {
    const auto i = li.find(ch), j = ri.find(ch);
    if (i != std::string::npos && j != std::string::npos) {
      c.lhs.batch.push_back(static_cast<int>(i));
      c.rhs.batch.push_back(static_cast<int>(j));
      canon += ch;
    }
  }
  for (size_t i = 0; i < li.size(); ++i) {
    const auto j = ri.find(li[i]);
    const bool in_out = outs.find(li[i]) != std::string::npos;
    if (j != std::string::npos && !in_out) {
      c.lhs.contract.push_back(static_cast<int>(i));
      c.rhs.contract.push_back(static_cast<int>(j));
    } else if (j == std::string::npos) {
      (in_out ? c.lhs.free : c.lhs.summed).push_back(static_cast<int>(i));
      if (in_out) canon += li[i];
    }
  }
  for (size_t j = 0; j < ri.size(); ++j) {
    if (li.find(ri[j]) != std::string::npos) continue;
    const bool in_out = outs.find(ri[j]) != std::string::npos;
    (in_out ? c.rhs.free : c.rhs.summed).push_back(static_cast<int>(j));
    if (in_out) canon += ri[j];
  }
  for (char ch : outs) c.out_perm.push_back(static_cast<int>(canon.find(ch)));
  return contract(a, b, c, opt, op);
}

}  // namespace tessera
