// Shape op front ends: reshape, transpose, swapaxes, broadcast_to,
// expand_dims, squeeze, slice, concatenate, stack, pad, roll, flip. They
// check and normalise their arguments, return the operand itself when the
// op changes nothing, and bind one primitive (primitives/shape.hpp, where
// the result layouts and the data movement are described).
#include <algorithm>

#include "core/promote.hpp"
#include "core/shape_ops.hpp"
#include "primitives/shape.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"

namespace tessera {

using detail::check_operand;
using detail::ints_str;
using detail::msg;
using detail::num_elements;

namespace {

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
  return detail::bind1(detail::make_transpose(op, std::move(perm)), {x});
}

// Checks shared by concatenate and stack on the operands as concatenated
// (stack's with their new dim): shapes, dtypes and layouts. Returns the
// result dtype.
DType check_concat(const std::vector<Array>& xs, const std::vector<Shape>& shapes, const std::vector<DType>& dtypes,
                   const std::vector<NamedSharding>& shardings, int axis, bool stack, const char* op) {
  const int r = static_cast<int>(shapes[0].size());
  DType dtype = dtypes[0];
  Shape out = shapes[0];
  out[axis] = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& s = shapes[k];
    if (static_cast<int>(s.size()) != r)
      throw ShapeError(msg(op, "all arrays must have the same rank: array 0 has shape " + shape_str(shapes[0]) +
                                   ", array " + std::to_string(k) + " has shape " + shape_str(s)));
    for (int d = 0; d < r; ++d)
      if (d != axis && s[d] != shapes[0][d])
        throw ShapeError(msg(op, "shapes must agree except along axis " + std::to_string(axis) + ": array 0 has " +
                                     shape_str(shapes[0]) + ", array " + std::to_string(k) + " has " + shape_str(s)));
    out[axis] = detail::checked_add(out[axis], s[axis], op, [&] {
      return "the concatenation along axis " + std::to_string(axis) + " of " + std::to_string(shapes.size()) +
             " arrays";
    });
    dtype = detail::promote(dtype, dtypes[k]);
  }
  detail::checked_nbytes(out, dtype, op);
  auto describe = [&](size_t k) {
    return stack ? detail::type_str(detail::AbstractArray{shapes[k], dtypes[k], shardings[k]}) : detail::describe(xs[k]);
  };
  for (size_t k = 1; k < shapes.size(); ++k)
    if ((detail::has_explicit_axes(shardings[0]) || detail::has_explicit_axes(shardings[k])) &&
        !(shardings[k].spec() == shardings[0].spec()))
      throw ShardingError(msg(op, "operands have different shardings in Explicit mode: " + describe(0) + " and " +
                                      describe(k) + "; reshard them to one sharding first"));
  return dtype;
}

Array concat_impl(const std::vector<Array>& xs, int axis, const char* op, bool stack) {
  for (const auto& x : xs) check_operand(x, op);
  // stack concatenates its operands with a new size-1 dim at `axis`; the
  // checks and messages see them so.
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<NamedSharding> shardings;
  for (const auto& x : xs) {
    shapes.push_back(x.shape());
    dtypes.push_back(x.dtype());
    shardings.push_back(x.sharding());
    if (stack) {
      shapes.back().insert(shapes.back().begin() + axis, 1);
      shardings.back() = detail::stacked_sharding(x.sharding(), x.ndim(), axis);
    }
  }
  const int r = static_cast<int>(shapes[0].size());
  if (r == 0) throw ShapeError(msg(op, "zero-dimensional arrays cannot be concatenated, got shape ()"));
  if (!stack) axis = detail::normalize_axis(axis, r, op);
  const DType dtype = check_concat(xs, shapes, dtypes, shardings, axis, stack, op);
  return detail::bind1(detail::make_concatenate(op, axis, stack, dtype), xs);
}

}  // namespace

Array reshape(const Array& x, const Shape& shape, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "reshape");
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
  const NamedSharding target = requested ? *requested : detail::reshape_natural(x.shape(), x.sharding(), out);
  if (out == x.shape() && target == x.sharding()) return x;
  if (!requested && detail::has_explicit_axes(x.sharding()) &&
      !detail::reshape_is_local(x.shape(), x.sharding(), out, target))
    throw ShardingError(msg("reshape", "the layout of " + detail::describe(x) + " cannot be kept when reshaping to " +
                                           shape_str(out) + " (a sharded dim would not stay whole or aligned); pass "
                                           "out_sharding to choose the output layout"));
  return detail::bind1(detail::make_reshape(out, requested), {x});
}

Array transpose(const Array& x, const std::vector<int>& perm, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "transpose");
  return transpose_impl(x, perm, "transpose");
}

Array swapaxes(const Array& x, int axis1, int axis2, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "swapaxes");
  const int r = x.ndim();
  const int a = detail::normalize_axis(axis1, r, "swapaxes");
  const int b = detail::normalize_axis(axis2, r, "swapaxes");
  std::vector<int> perm(r);
  for (int j = 0; j < r; ++j) perm[j] = j;
  std::swap(perm[a], perm[b]);
  return transpose_impl(x, perm, "swapaxes");
}

Array broadcast_to(const Array& x, const Shape& shape, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "broadcast_to");
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
  bool broadcasts = false;
  for (int j = 0; j < lead; ++j) broadcasts = broadcasts || shape[j] != 1;
  for (int d = 0; d < ri; ++d) {
    const std::int64_t n = x.shape()[d];
    if (n != shape[d + lead] && n != 1)
      fail("dim " + std::to_string(d) + " has size " + std::to_string(n) + ", expected 1 or " +
           std::to_string(shape[d + lead]));
    broadcasts = broadcasts || n != shape[d + lead];
  }
  if (ro == ri && !broadcasts) return x;
  return detail::bind1(detail::make_broadcast_to(shape), {x});
}

Array expand_dims(const Array& x, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "expand_dims");
  return detail::bind1(detail::make_expand_dims(detail::normalize_axis(axis, x.ndim() + 1, "expand_dims")), {x});
}

Array squeeze(const Array& x, const std::vector<int>& axes, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "squeeze");
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
  if (std::find(drop.begin(), drop.end(), true) == drop.end()) return x;
  return detail::bind1(detail::make_squeeze(std::move(drop)), {x});
}

Array slice(const Array& x, const std::vector<SliceSpec>& slices, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "slice");
  const int r = x.ndim();
  if (static_cast<int>(slices.size()) > r)
    throw ShapeError(msg("slice", "got " + std::to_string(slices.size()) + " slices for an array of rank " +
                                      std::to_string(r) + " (shape " + shape_str(x.shape()) + ")"));
  std::vector<detail::SliceDim> dims(static_cast<std::size_t>(r));
  for (int d = 0; d < r; ++d) dims[d] = {0, 1, x.shape()[d]};
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
    dims[d] = {start, step, len};
    whole = whole && len == n && (step == 1 || n <= 1);
  }
  if (whole) return x;
  return detail::bind1(detail::make_slice(std::move(dims)), {x});
}

Array concatenate(const std::vector<Array>& xs, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  if (xs.empty()) throw ShapeError(msg("concatenate", "needs at least one array, got none"));
  return concat_impl(xs, axis, "concatenate", /*stack=*/false);
}

Array stack(const std::vector<Array>& xs, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  if (xs.empty()) throw ShapeError(msg("stack", "needs at least one array, got none"));
  for (const auto& x : xs) check_operand(x, "stack");
  for (size_t k = 1; k < xs.size(); ++k)
    if (xs[k].shape() != xs[0].shape())
      throw ShapeError(msg("stack", "all arrays must have the same shape: array 0 has " + shape_str(xs[0].shape()) +
                                        ", array " + std::to_string(k) + " has " + shape_str(xs[k].shape())));
  return concat_impl(xs, detail::normalize_axis(axis, xs[0].ndim() + 1, "stack"), "stack", /*stack=*/true);
}

Array pad(const Array& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths, Scalar value, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "pad");
  const int r = x.ndim();
  if (static_cast<int>(widths.size()) != r && !(widths.size() == 1 && r > 0))
    throw ShapeError(msg("pad", "expected " + std::to_string(r) + " (before, after) pairs (one per dim of shape " +
                                    shape_str(x.shape()) + ") or one for every dim, got " +
                                    std::to_string(widths.size())));
  Shape out = x.shape();
  std::vector<std::pair<std::int64_t, std::int64_t>> w(static_cast<std::size_t>(r));
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
    w[d] = {lo, hi};
    none_added = none_added && lo == 0 && hi == 0;
  }
  detail::checked_nbytes(out, x.dtype(), "pad");
  if (none_added) return x;
  detail::check_scalar_fits(value, x.dtype(), "pad");  // a weak scalar, as in elementwise ops
  return detail::bind1(
      detail::make_pad(std::move(w), detail::scalar_bytes(value, x.dtype()), detail::scalar_str(value)), {x});
}

Array roll(const Array& x, std::int64_t shift, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "roll");
  axis = detail::normalize_axis(axis, x.ndim(), "roll");
  const std::int64_t n = x.shape()[axis];
  if (n == 0 || x.size() == 0) return x;
  const std::int64_t sh = ((shift % n) + n) % n;
  if (sh == 0) return x;
  return detail::bind1(detail::make_roll(sh, axis), {x});
}

Array flip(const Array& x, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  check_operand(x, "flip");
  axis = detail::normalize_axis(axis, x.ndim(), "flip");
  const std::int64_t n = x.shape()[axis];
  if (n <= 1 || x.size() == 0) return x;
  return detail::bind1(detail::make_flip(axis), {x});
}

}  // namespace tessera
