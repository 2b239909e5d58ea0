// The transformation rules of the stencil and scan primitives
// (primitives/stencil.hpp): batching, JVPs and transposes, written with ops.
// Every one of them is linear in x (the convolutions in x and the kernel
// separately); interp keeps the default rules.
#include "primitives/stencil.hpp"

#include "tessera/ops.hpp"
#include "transforms/rules/rules.hpp"

namespace tessera::detail {

// ===================================================================== diff

// Every operand goes batch-first; a scalar prepend/append is one row of
// the example first, so its batch dim does not read as its rows.
std::vector<Array> Diff::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                               std::vector<int>& ob) const {
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

std::vector<Array> Diff::jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const {
  return linear_jvp(*this, p, t, to);
}

// The n-th difference of the sequence z = (prepend, x, append) along the
// axis, transposed one difference at a time (ct_z[j] = ct[j-1] - ct[j]),
// then cut back into the operands.
std::vector<Array> Diff::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                   const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const {
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

// =================================================================== cumsum

std::vector<Array> Cumsum::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                 std::vector<int>& ob) const {
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Cumsum>(axis_ + 1); });
}

std::vector<Array> Cumsum::jvp(const std::vector<Array>& p, const std::vector<Array>& t, std::vector<Array>& to) const {
  return linear_jvp(*this, p, t, to);
}

// A cumulative sum read backwards.
std::vector<Array> Cumsum::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                     const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  if (!ct[0].valid()) return {Array()};
  Array r = flip(cumsum(flip(ct[0], axis_, {}), axis_, {}), axis_, {});
  return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {})};
}

// ================================================================= convolve

std::vector<Array> Convolve::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t size,
                                   std::vector<int>& ob) const {
  if (bd[1] >= 0) return Primitive::batch(in, bd, size, ob);  // a kernel per example: one at a time
  ob = {0};
  return {bind1(std::make_shared<Convolve>(axis_ + 1), {move_dim(in[0], bd[0], 0), in[1]})};
}

std::vector<Array> Convolve::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                 std::vector<Array>& to) const {
  return bilinear_jvp(*this, p, t, to);
}

// Linear in x for a fixed kernel: 'same' convolution with the reversed
// kernel (odd lengths, where 'same' is centred both ways).
std::vector<Array> Convolve::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                       const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const {
  if (linear[1] || types[1].shape[0] % 2 == 0)
    throw Error(msg("convolve",
                    "reverse-mode differentiation is supported for the signal with an odd-length "
                    "kernel only (got a kernel of " +
                        std::to_string(types[1].shape[0]) + " taps" + (linear[1] ? ", differentiated itself" : "") +
                        "); use jacfwd/jvp"));
  if (!ct[0].valid()) return {Array(), Array()};
  Array r = convolve(ct[0], flip(in[1], 0, {}), axis_, {});
  return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {}), Array()};
}

// =============================================================== convolve2d

std::vector<Array> Convolve2d::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                   std::vector<Array>& to) const {
  return bilinear_jvp(*this, p, t, to);
}

// As convolve: linear in x for a fixed kernel, transposed by the 'same'
// convolution with the kernel reversed along both dims (odd sizes, where
// 'same' is centred both ways).
std::vector<Array> Convolve2d::transpose(const std::vector<Array>& ct, const std::vector<Array>& in,
                                         const std::vector<AbstractArray>& types,
                                         const std::vector<bool>& linear) const {
  const Shape& k = types[1].shape;
  if (linear[1] || k[0] % 2 == 0 || k[1] % 2 == 0)
    throw Error(msg("convolve2d", "reverse-mode differentiation is supported for x with an odd-sized kernel only "
                                  "(got a kernel of shape " +
                                      shape_str(k) + (linear[1] ? ", differentiated itself" : "") +
                                      "); use jacfwd/jvp"));
  if (!ct[0].valid()) return {Array(), Array()};
  Array r = convolve2d(ct[0], flip(flip(in[1], 0, {}), 1, {}), {});
  return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {}), Array()};
}

// ================================================================= gradient

std::vector<Array> Gradient::batch(const std::vector<Array>& in, const std::vector<int>& bd, std::int64_t,
                                   std::vector<int>& ob) const {
  return batch_unary_first(in[0], bd[0], ob, [&] { return std::make_shared<Gradient>(axis_ + 1, spacing_); });
}

std::vector<Array> Gradient::jvp(const std::vector<Array>& p, const std::vector<Array>& t,
                                 std::vector<Array>& to) const {
  return linear_jvp(*this, p, t, to);
}

// Result row i is (x[hi(i)] - x[lo(i)]) * c_i with hi(i) = min(i + 1, n - 1),
// lo(i) = max(i - 1, 0), c_i = 0.5 / h inside and 1 / h at the ends. So with
// v = ct * c, row j of x gets v[j - 1] (rows 1..n-1) and v[n - 1] (row n - 1)
// and loses v[j + 1] (rows 0..n-2) and v[0] (row 0).
std::vector<Array> Gradient::transpose(const std::vector<Array>& ct, const std::vector<Array>&,
                                       const std::vector<AbstractArray>& types, const std::vector<bool>&) const {
  if (!ct[0].valid()) return {Array()};
  const Array& c = ct[0];
  const int rank = c.ndim();
  const std::int64_t n = c.shape()[axis_];
  auto rows = [&](const Array& a, std::int64_t r0, std::int64_t r1) {
    std::vector<SliceSpec> sl(static_cast<size_t>(rank));
    sl[axis_] = SliceSpec{r0, r1, 1};
    return slice(a, sl, {});
  };
  auto padded = [&](const Array& a, std::int64_t before, std::int64_t after) {
    std::vector<std::pair<std::int64_t, std::int64_t>> w(static_cast<size_t>(rank), {0, 0});
    w[axis_] = {before, after};
    return pad(a, w, 0, {});
  };
  const Array v = concatenate({rows(c, 0, 1), rows(c, 1, n - 1) * 0.5, rows(c, n - 1, n)}, axis_, {}) / spacing_;
  Array r = padded(rows(v, 0, n - 1), 1, 0) - padded(rows(v, 1, n), 0, 1) + padded(rows(v, n - 1, n), n - 1, 0) -
            padded(rows(v, 0, 1), 0, n - 1);
  return {r.dtype() == types[0].dtype ? r : astype(r, types[0].dtype, {})};
}

}  // namespace tessera::detail
