// The search and selection primitives (see search.hpp).
//
// searchsorted is elementwise in its values and needs its sequence whole on
// every device: a rule the engine expresses (a NeedReplication factor for
// the sequence, pass-through factors for the values), as for interp.
//
// The median primitive (make_median_middle; "median" in the IR) finds the
// two middle elements of every selection without moving the reduced data. When no reduced dim is sharded, each device
// holds whole selections and selects locally (nth_element). Otherwise the
// selection is a radix select over the values' order keys (see
// backend/cpu/search.cpp): each pass every device counts the digits of its
// own elements into a small histogram per output, the histograms are summed
// over the mesh axes of the reduced dims (the one communication, integer
// counts only), and every device advances from the same sums. The passes
// depend on each other's sums, which no single partial_op expresses, so the
// primitive partitions itself (as argmax does): x stays where it lies, the
// results take x's axes on the kept dims.
//
// Both ways find the same keys (the exact elements of the middle ranks), so
// the results are bitwise the same on every mesh and layout.
#include "primitives/search.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "backend/cpu/search.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/reduce.hpp"
#include "primitives/rules.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

namespace {

// ============================================================ searchsorted

class Searchsorted final : public Primitive {
 public:
  Searchsorted(bool right, DType out) : right_(right), out_(out) {}
  std::string_view name() const override { return "searchsorted"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    return {TypeInfo{in[1].shape, out_}};
  }
  // The sequence's one dim must be whole everywhere; the values' dims pass
  // through to the result.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r;
    r.factors.push_back(Factor{in[0].shape[0], FactorKind::NeedReplication});
    std::vector<int> vd;
    for (std::int64_t n : in[1].shape) {
      vd.push_back(static_cast<int>(r.factors.size()));
      r.factors.push_back(Factor{n, FactorKind::PassThrough});
    }
    r.operands = {{0}, vd};
    r.results = {vd};
    return r;
  }
  void eval_cpu(const LocalArgs& in, LocalOuts& out) const override {
    cpu::searchsorted(promote(in[0].dtype, in[1].dtype), in[0].data, in[0].dtype, in[0].shape[0], in[1].data,
                      in[1].dtype, num_elements(out[0].shape), right_, out[0].data, out_);
  }
  // A binary search per value.
  double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const override {
    return static_cast<double>(num_elements(out[0].shape)) *
           std::log2(static_cast<double>(in[0].shape[0]) + 2.0);
  }
  std::string params() const override {
    std::string s = right_ ? "side=right" : "side=left";
    s += " dtype=";
    s += dtype_name(out_);
    return s;
  }
  // Elementwise in the values: a batch of values is searched as it lies. A
  // sequence per example falls back to one search per example.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    if (bd[0] >= 0) return Primitive::batch(in, bd, size, ob);
    ob = {bd[1]};
    return {bind1(shared_from_this(), in)};
  }
  // Integer results: Primitive::jvp gives them no tangent.

 private:
  bool right_;
  DType out_;
};

// =========================================================== median_middle

std::string axes_str(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

/// Key bits per radix pass for `outputs` selections of `line` elements: the
/// widest digit (fewest passes) whose histograms, 2 x 2^bits counts per
/// output, hold no more counts than the elements they count (or 4096 in
/// all). Long lines or few outputs get 8-bit digits (4 passes for f32, 8 for
/// f64); short lines with many outputs narrower ones (at most 32 and 64).
int digit_bits(std::int64_t line, std::int64_t outputs) {
  const double limit = std::max(static_cast<double>(line) * static_cast<double>(outputs), 4096.0);
  for (int b : {8, 4, 2})
    if (static_cast<double>(outputs) * static_cast<double>(2 << b) <= limit) return b;
  return 1;
}

class MedianMiddle final : public Primitive {
 public:
  MedianMiddle(std::vector<int> axes, bool keepdims, bool masked)
      : axes_(std::move(axes)), keepdims_(keepdims), masked_(masked) {}
  std::string_view name() const override { return "median"; }
  std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override {
    const TypeInfo t{out_shape(in[0].shape, keepdims_), in[0].dtype};
    return {t, t};
  }
  // For the text forms: a reduction over the axes, the mask alike.
  ShardingRule rule(std::span<const AbstractArray> in) const override {
    ShardingRule r = reduce_rule(in[0].shape, axes_, keepdims_);
    if (masked_) r.operands.push_back(r.operands[0]);
    r.results.push_back(r.results[0]);
    return r;
  }
  std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                    const std::vector<TypeInfo>&) const override {
    const NamedSharding s = natural(in[0].sharding, static_cast<int>(in[0].shape.size()), keepdims_);
    return std::vector<NamedSharding>{s, s};
  }
  bool lowers_itself() const override { return true; }
  void eval_cpu(const LocalArgs&, LocalOuts&) const override {
    throw Error(msg("median", "internal: runs on whole arrays (eval_global)"));
  }
  std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                 const std::vector<NamedSharding>& layouts) const override;
  std::string params() const override {
    std::string s = "axes=";
    s += axes_str(axes_);
    if (keepdims_) s += " keepdims=true";
    if (masked_) s += " where=true";
    return s;
  }
  // Each example's selections are the batch-first operand's selections
  // with the batch dim kept.
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                           std::vector<int>& ob) const override {
    std::vector<Array> args{batch_first(in[0], bd[0], size)};
    if (masked_) args.push_back(batch_first(in[1], bd[1], size));
    std::vector<int> axes;
    for (int a : axes_) axes.push_back(a + 1);
    ob = {0, 0};
    return detail::bind(std::make_shared<MedianMiddle>(axes, keepdims_, masked_), args);
  }
  // Each middle element moves with the elements equal to it (ties share
  // the derivative equally, as for max and min).
  std::vector<Array> jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                         std::vector<Array>& to) const override {
    auto out = detail::bind(shared_from_this(), p);
    to.assign(2, Array());
    if (!t[0].valid()) return out;
    const std::source_location here{};
    const Array& x = p[0];
    const Array tx = t[0].dtype() == x.dtype() ? t[0] : astype(t[0], x.dtype(), here);
    for (int r = 0; r < 2; ++r) {
      Array sel = equal(x, keepdims_ ? out[r] : expanded(out[r]), {}, here);
      if (masked_) sel = logical_and(sel, p[1], {}, here);
      const Array num = sum(where(sel, tx, 0.0, here), axes_, {keepdims_}, here);
      const Array den = sum(astype(sel, x.dtype(), here), axes_, {keepdims_}, here);
      to[r] = divide(num, den, {}, here);
    }
    return out;
  }

 private:
  Shape out_shape(const Shape& s, bool keep) const {
    Shape o;
    for (int d = 0; d < static_cast<int>(s.size()); ++d) {
      if (!reduced(d))
        o.push_back(s[d]);
      else if (keep)
        o.push_back(1);
    }
    return o;
  }
  bool reduced(int d) const { return std::find(axes_.begin(), axes_.end(), d) != axes_.end(); }
  // x's axes on the kept dims; the reduced dims whole (size 1) in keepdims
  // form (`keep`) or dropped.
  NamedSharding natural(const NamedSharding& xs, int rank, bool keep) const {
    const auto axes = spec_axes(xs, rank);
    std::vector<std::vector<std::string>> dims;
    for (int d = 0; d < rank; ++d) {
      if (!reduced(d))
        dims.push_back(axes[d]);
      else if (keep)
        dims.emplace_back();
    }
    return NamedSharding(xs.mesh(), make_spec(dims));
  }
  // A result with the reduced dims back as size-1 dims.
  Array expanded(const Array& y) const {
    Shape s = y.shape();
    for (int a : axes_) s.insert(s.begin() + a, 1);
    return reshape(y, s, {}, {});
  }

  std::vector<int> axes_;
  bool keepdims_, masked_;
};

std::vector<Array> MedianMiddle::eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                             const std::vector<NamedSharding>& layouts) const {
  const char* op = "median";
  const Array& x = in[0];
  const NamedSharding& sh = x.sharding();
  const Mesh& mesh = sh.mesh();
  const int npos = mesh.size();
  const int rank = x.ndim();
  const DType t = x.dtype();
  const std::size_t isz = itemsize(t);
  // The mask where x lies (a local slice when it is replicated).
  const Array mask = masked_ ? reshard_for(in[1], sh, op) : Array();
  auto mask_at = [&](int pos) { return masked_ ? static_cast<const bool*>(local_data(mask, pos)) : nullptr; };

  std::vector<bool> red(static_cast<std::size_t>(rank), false);
  std::int64_t line = 1;
  for (int a : axes_) {
    red[a] = true;
    line *= x.shape()[a];
  }
  const std::int64_t outputs = num_elements(out[0].shape);
  // The mesh axes sharding the reduced dims: the devices that share a
  // selection.
  std::vector<std::string> raxes;
  int group = 1;
  const auto xaxes = spec_axes(sh, rank);
  for (int a : axes_)
    for (const auto& name : xaxes[a]) {
      raxes.push_back(name);
      group *= mesh.axis_size(name);
    }

  std::vector<Buffer> lo(npos), hi(npos);
  std::vector<cpu::ReduceMap> maps(npos);
  auto allocate = [&](int pos) {
    maps[pos] = cpu::reduce_map(local_shape(x, pos), red);
    const int dev = mesh.devices()[pos].id();
    lo[pos] = Buffer(dev, static_cast<std::size_t>(maps[pos].outputs) * isz);
    hi[pos] = Buffer(dev, static_cast<std::size_t>(maps[pos].outputs) * isz);
  };
  if (group == 1) {
    // Every device holds its selections whole.
    record_none(mesh, op);
    for_each_device(mesh, [&](int pos) {
      allocate(pos);
      cpu::select_middle(t, local_data(x, pos), mask_at(pos), maps[pos], lo[pos].data(), hi[pos].data());
    });
  } else {
    const int bits = digit_bits(line, outputs);
    std::vector<std::unique_ptr<cpu::RadixSelect>> sel(npos);
    for_each_device(mesh, [&](int pos) {
      allocate(pos);
      sel[pos] = std::make_unique<cpu::RadixSelect>(t, maps[pos].outputs, bits);
    });
    // The histograms as arrays of shape kshape + digits (kshape: x's shape
    // with the reduced dims 1), laid out over x's kept axes: each device's
    // block is its outputs' rows, equal within a selection's group.
    Shape kshape = x.shape();
    for (int a : axes_) kshape[a] = 1;
    const NamedSharding hs = natural(sh, rank, true);
    const int passes = cpu::key_bits(t) / bits;
    for (int p = 0; p < passes; ++p) {
      Shape hshape = kshape;
      if (p == 0) {
        hshape.push_back((std::int64_t{1} << bits) + 1);
      } else {
        hshape.push_back(2);
        hshape.push_back(std::int64_t{1} << bits);
      }
      std::vector<std::vector<Slice>> boxes(npos);
      for (int pos = 0; pos < npos; ++pos) boxes[pos] = hs.shard_index(hshape, pos);
      std::vector<Buffer> part(npos);
      for_each_device(mesh, [&](int pos) {
        part[pos] = Buffer(mesh.devices()[pos].id(), static_cast<std::size_t>(num_elements(box_shape(boxes[pos]))) *
                                                         sizeof(std::int64_t));
        sel[pos]->count(p, local_data(x, pos), mask_at(pos), maps[pos], static_cast<std::int64_t*>(part[pos].data()));
      });
      const auto total = reduce_over(mesh, raxes, ReduceOp::Sum, DType::i64, part, boxes, boxes, op);
      for_each_device(mesh, [&](int pos) { sel[pos]->advance(p, static_cast<const std::int64_t*>(total[pos].data())); });
    }
    for_each_device(mesh, [&](int pos) { sel[pos]->finish(lo[pos].data(), hi[pos].data()); });
  }
  // Each device's outputs are its block's kept coordinates, row-major: the
  // block of the natural layout (dropping size-1 dims moves nothing).
  const NamedSharding nat = natural(sh, rank, keepdims_);
  const Array a = wrap(out[0].shape, t, nat, std::move(lo));
  const Array b = wrap(out[1].shape, t, nat, std::move(hi));
  return {reshard_for(a, layouts[0], op), reshard_for(b, layouts[1], op)};
}

}  // namespace

PrimitivePtr make_searchsorted(bool right, DType out) { return std::make_shared<Searchsorted>(right, out); }

PrimitivePtr make_median_middle(std::vector<int> axes, bool keepdims, bool masked) {
  return std::make_shared<MedianMiddle>(std::move(axes), keepdims, masked);
}

}  // namespace tessera::detail
