// The transformation rules of the shape primitives but reshape
// (primitives/shape.hpp): batching, JVPs and transposes, written with ops.
#include "primitives/shape.hpp"
#include "tessera/ops.hpp"
#include "transforms/rules/reshape.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

// ------------------------------------------------------ factor-rule primitives

std::vector<Array> Transpose::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                    std::vector<int>& ob) const {
  std::vector<int> perm{0};
  for (int d : perm_) perm.push_back(d + 1);
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Transpose>(name_, perm); });
}
std::vector<Array> Transpose::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                  std::vector<Array>& to) const {
  return linear_jvp(*this, p, t, to);
}
std::vector<Array> Transpose::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                        const std::vector<AbstractArray>&, const std::vector<bool>&) const {
  std::vector<int> inv(perm_.size());
  for (size_t j = 0; j < perm_.size(); ++j) inv[perm_[j]] = static_cast<int>(j);
  return {ct[0].valid() ? tessera::transpose(ct[0], inv, {}) : Array()};
}

std::vector<Array> ExpandDims::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                     std::vector<int>& ob) const {
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<ExpandDims>(axis_ + 1); });
}
std::vector<Array> ExpandDims::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                   std::vector<Array>& to) const {
  return linear_jvp(*this, p, t, to);
}
std::vector<Array> ExpandDims::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                         const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  return {reshape_back(ct[0], types[0])};
}

// ------------------------------------------------ primitives that lower themselves

std::vector<Array> AffineOp::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                 std::vector<Array>& to) const {
  return linear_jvp(*this, p, t, to);
}

std::vector<Array> Squeeze::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                  std::vector<int>& ob) const {
  std::vector<bool> drop{false};
  drop.insert(drop.end(), drop_.begin(), drop_.end());
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Squeeze>(drop); });
}
std::vector<Array> Squeeze::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                      const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  return {reshape_back(ct[0], types[0])};
}

std::vector<Array> BroadcastTo::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                      std::vector<int>& ob) const {
  Shape target{size};
  target.insert(target.end(), shape_.begin(), shape_.end());
  ob = {0};
  return {broadcast_to(batch_first_aligned(in[0], bd[0], rank_of(shape_)), target, {})};
}
std::vector<Array> BroadcastTo::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                          const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  return {ct[0].valid() ? unbroadcast(ct[0], types[0]) : Array()};
}

std::vector<Array> SliceOp::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                  std::vector<int>& ob) const {
  std::vector<SliceDim> dims{SliceDim{0, 1, size}};
  dims.insert(dims.end(), dims_.begin(), dims_.end());
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<SliceOp>(dims); });
}
// The cotangent goes back where the slice read it, zeros elsewhere: steps
// are undone one dim at a time by interleaving zeros (a size-1 dim after
// it padded to the step, then merged), reversed steps by a flip.
std::vector<Array> SliceOp::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                      const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
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

std::vector<Array> Pad::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                              std::vector<int>& ob) const {
  std::vector<std::pair<std::int64_t, std::int64_t>> w{{0, 0}};
  w.insert(w.end(), widths_.begin(), widths_.end());
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Pad>(w, fill_, text_); });
}
// The padding value is a constant: tangents are padded with zeros.
std::vector<Array> Pad::jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const {
  Array y = bind1(shared_from_this(), p);
  to = {t[0].valid() && has_tangent(y.dtype()) ? pad(t[0], widths_, 0, {}) : Array()};
  return {y};
}
std::vector<Array> Pad::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                  const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  if (!ct[0].valid()) return {Array()};
  std::vector<SliceSpec> sl;
  for (size_t d = 0; d < widths_.size(); ++d)
    sl.push_back(SliceSpec{widths_[d].first, widths_[d].first + types[0].shape[d], 1});
  return {slice(ct[0], sl, {})};
}

std::vector<Array> Roll::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                               std::vector<int>& ob) const {
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Roll>(shift_, axis_ + 1); });
}
std::vector<Array> Roll::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                   const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  return {ct[0].valid() ? roll(ct[0], types[0].shape[axis_] - shift_, axis_, {}) : Array()};
}

std::vector<Array> Flip::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                               std::vector<int>& ob) const {
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Flip>(axis_ + 1); });
}
std::vector<Array> Flip::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                   const std::vector<AbstractArray>&, const std::vector<bool>&) const {
  return {ct[0].valid() ? flip(ct[0], axis_, {}) : Array()};
}

std::vector<Array> Concatenate::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                      std::vector<int>& ob) const {
  std::vector<Array> xs;
  for (size_t k = 0; k < in.size(); ++k) xs.push_back(batch_first(in[k], bd[k], size));
  ob = {0};
  return {bind1(std::make_shared<Concatenate>(name_, axis_ + 1, stack_, t_), xs)};
}
std::vector<Array> Concatenate::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                          const std::vector<AbstractArray>& types,
                                          const std::vector<bool>& linear) const {
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

}  // namespace tessera::detail
