// Indexing ops: take (gather along one axis), scatter_add and segment_sum.
//
// Sharding rules
//
//   take(x, indices, axis)
//     The output is x's layout with dim `axis` taking the layout of the
//     indices. Each device needs the whole of x along `axis`, so a sharded
//     `axis` is first replicated: in Auto mode x is all-gathered along that
//     dim only (visible in explain() under "take"); over an Explicit axis
//     that would be a hidden all-gather, so it is a ShardingError naming the
//     fix. Index axes that x's other dims already use cannot shard the output
//     twice: they are dropped from the indices (a gather of a small 1-d
//     integer array; a ShardingError for Explicit axes).
//
//   scatter_add(x, indices, updates) / segment_sum(data, ids, num_segments)
//     The update rows stay where they are, sharded over mesh axes R (the
//     axes of updates' dim 0; the indices, a small 1-d array, are moved to
//     match). Every device accumulates its rows, in order, into a zero
//     partial of the output, and reduce_over combines the partials over R in
//     mesh order: an all-reduce where the output is replicated over R, a
//     reduce-scatter where the output shards a dim over R. For a dim that the
//     output shards over axes outside R, the partial covers only the device's
//     own output block (rows that fall elsewhere are another group's work),
//     and the updates are laid out alike on the trailing dims, so no device
//     computes what it then throws away. scatter_add then adds x, laid out
//     like the output.
//     Output layout: scatter_add keeps x's sharding; segment_sum is
//     replicated along the segment dim and keeps data's sharding on the
//     trailing dims (the rule of reductions). out_sharding overrides both.
//
// Index semantics (as in JAX)
//   take: indices in [-n, n), negative ones counting from the end; any other
//     raises ShapeError on the device that holds it.
//   scatter_add: negative indices count from the end; out-of-range rows are
//     dropped (JAX's default "drop" mode for scatters).
//   segment_sum: ids outside [0, num_segments) are dropped.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/wrapping.hpp"
#include "ops/common.hpp"

namespace tessera {

namespace {

using detail::Buffer;
using detail::msg;

// ---------------------------------------------------------------- kernels
// Plain loops over row-major local blocks; they know nothing about meshes.

template <class T>
inline void accumulate(T& acc, T v) {
  if constexpr (std::is_same_v<T, bool>)
    acc = acc || v;  // bool: logical or
  else
    acc = detail::wrapping_add(acc, v);  // integers wrap like XLA instead of UB
}

/// Calls f(I{}) with I the C++ type of an integer dtype (the index dtypes).
template <class F>
decltype(auto) dispatch_index(DType t, F&& f) {
  switch (t) {
    case DType::u8: return f(std::uint8_t{});
    case DType::i8: return f(std::int8_t{});
    case DType::u32: return f(std::uint32_t{});
    case DType::i32: return f(std::int32_t{});
    case DType::u64: return f(std::uint64_t{});
    default: return f(std::int64_t{});
  }
}

/// An index value as i64; u64 values past the i64 range become the i64
/// maximum, which is out of range for every array (not a negative index).
template <class I>
inline std::int64_t index_value(I v) {
  if constexpr (std::is_same_v<I, std::uint64_t>)
    return v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
  else
    return static_cast<std::int64_t>(v);
}

/// take_kernel with rows of a compile-time size (a constant memcpy compiles
/// to one load and store).
template <std::size_t B>
void take_fixed(const unsigned char* x, std::int64_t outer, std::int64_t n_axis, const std::vector<std::int64_t>& idx,
                unsigned char* out) {
  const auto nidx = static_cast<std::int64_t>(idx.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < nidx; ++j) std::memcpy(out + (o * nidx + j) * B, x + (o * n_axis + idx[j]) * B, B);
}

/// out[o, j, :] = x[o, idx[j], :] with rows of `row_bytes`; idx already
/// checked and made non-negative.
void take_kernel(const unsigned char* x, std::int64_t outer, std::int64_t n_axis, std::int64_t row_bytes,
                 const std::vector<std::int64_t>& idx, unsigned char* out) {
  const auto nidx = static_cast<std::int64_t>(idx.size());
  if (row_bytes == 0 || nidx == 0) return;
  if (row_bytes == 8) return take_fixed<8>(x, outer, n_axis, idx, out);
  if (row_bytes == 4) return take_fixed<4>(x, outer, n_axis, idx, out);
  if (row_bytes == 1) return take_fixed<1>(x, outer, n_axis, idx, out);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < nidx; ++j)
      std::memcpy(out + (o * nidx + j) * row_bytes, x + (o * n_axis + idx[j]) * row_bytes,
                  static_cast<std::size_t>(row_bytes));
}

/// partial[r - rows.start, :] += upd[i, :] for every local row i (in order)
/// whose target r = idx[i] (plus n when negative and `wrap_negative`) lies
/// in `rows`; the others are dropped or belong to another device's block.
template <class T, class I>
void scatter_rows_kernel(T* partial, Slice rows, std::int64_t inner, const I* idx, const T* upd, std::int64_t nrows,
                         std::int64_t n, bool wrap_negative) {
  for (std::int64_t i = 0; i < nrows; ++i) {
    std::int64_t r = index_value(idx[i]);
    if (wrap_negative && r < 0) r += n;
    if (r < rows.start || r >= rows.stop) continue;
    T* dst = partial + (r - rows.start) * inner;
    const T* src = upd + i * inner;
    for (std::int64_t k = 0; k < inner; ++k) accumulate(dst[k], src[k]);
  }
}

/// out = a + b elementwise.
template <class T>
void add_kernel(const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    T v = a[i];
    accumulate(v, b[i]);
    out[i] = v;
  }
}

// ---------------------------------------------------------------- helpers

bool contains(const std::vector<std::string>& v, const std::string& a) {
  for (const auto& s : v)
    if (s == a) return true;
  return false;
}

bool disjoint(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& s : a)
    if (contains(b, s)) return false;
  return true;
}

bool is_explicit_axis(const Mesh& mesh, const std::string& a) {
  return mesh.axis_types()[mesh.axis_index(a)] == AxisType::Explicit;
}

std::string quoted(const std::vector<std::string>& axes) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + axes[i] + "'";
  return s;
}


void check_index_array(const Array& idx, const char* op, const char* name) {
  if (!detail::is_integer(idx.dtype()))
    throw DTypeError(msg(op, std::string(name) + " must be an integer array (u8, i8, u32, i32, u64 or i64), got " +
                                 dtype_name(idx.dtype()) + " (" + detail::describe(idx) + ")"));
  if (idx.ndim() != 1)
    throw ShapeError(msg(op, std::string(name) + " must be 1-d, got shape " + shape_str(idx.shape())));
}

/// Index values of a local block as i64.
std::vector<std::int64_t> load_indices(const void* p, DType t, std::int64_t n) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  dispatch_index(t, [&](auto tag) {
    using I = decltype(tag);
    const I* q = static_cast<const I*>(p);
    for (std::int64_t i = 0; i < n; ++i) out[i] = index_value(q[i]);
  });
  return out;
}

/// The shared body of scatter_add and segment_sum: accumulate the rows of
/// `updates` (dtype = output dtype) at rows `ids` of a zero array of
/// `out_shape`, combine over the mesh axes sharding the rows, and add `base`
/// when given (laid out as `out_s` then).
Array scatter_rows(const char* op, const Array* base, const Array& ids, const Array& updates, const Shape& out_shape,
                   const NamedSharding& out_s, bool wrap_negative) {
  const Mesh& mesh = out_s.mesh();
  const int rank = static_cast<int>(out_shape.size());
  const DType dtype = updates.dtype();
  const std::size_t isz = itemsize(dtype);

  // R: the mesh axes the update rows are split over. The ids follow the
  // updates (they are the smaller array): rows replicated in `updates` give
  // R = {} and every device scatters all rows, with no reduction at all.
  const std::vector<std::string> row_axes = updates.sharding().spec()[0].axes();

  // The partial's layout: the output's on dims not sharded over R (each
  // device sums only its own block there), whole on dims sharded over R
  // (those are what the reduce-scatter splits).
  const auto out_axes = detail::spec_axes(out_s, rank);
  std::vector<std::vector<std::string>> pdims(rank);
  for (int d = 0; d < rank; ++d)
    if (disjoint(out_axes[d], row_axes)) pdims[d] = out_axes[d];
  const NamedSharding partial_s(mesh, detail::make_spec(pdims));
  // Updates: rows over R, trailing dims like the partial.
  auto work = pdims;
  work[0] = row_axes;
  const Array upd = detail::reshard_for(updates, NamedSharding(mesh, detail::make_spec(work)), op);
  const Array idx = detail::reshard_for(ids, NamedSharding(mesh, detail::make_spec({row_axes})), op);

  const int n = mesh.size();
  std::vector<std::vector<Slice>> partial_boxes(n), out_boxes(n);
  for (int t = 0; t < n; ++t) {
    partial_boxes[t] = partial_s.shard_index(out_shape, t);
    out_boxes[t] = out_s.shard_index(out_shape, t);
  }

  std::vector<Buffer> partial(n);
  detail::for_each_device(mesh, [&](int t) {
    const Shape pshape = detail::box_shape(partial_boxes[t]);
    Buffer b(mesh.devices()[t].id(), static_cast<std::size_t>(detail::num_elements(pshape)) * isz);
    if (b.nbytes() > 0) {
      std::memset(b.data(), 0, b.nbytes());
      const Shape ushape = detail::local_shape(upd, t);
      const std::int64_t nrows = ushape[0];
      std::int64_t inner = 1;
      for (int d = 1; d < rank; ++d) inner *= pshape[d];
      detail::dispatch(dtype, [&](auto ttag) {
        using T = decltype(ttag);
        dispatch_index(idx.dtype(), [&](auto itag) {
          using I = decltype(itag);
          scatter_rows_kernel(static_cast<T*>(b.data()), partial_boxes[t][0], inner,
                              static_cast<const I*>(detail::local_data(idx, t)),
                              static_cast<const T*>(detail::local_data(upd, t)), nrows, out_shape[0], wrap_negative);
        });
      });
    }
    partial[t] = std::move(b);
  });

  std::vector<Buffer> reduced =
      detail::reduce_over(mesh, row_axes, detail::ReduceOp::Sum, dtype, partial, partial_boxes, out_boxes, op);
  if (!base) return detail::wrap(out_shape, dtype, out_s, std::move(reduced));

  const Array xb = detail::reshard_for(*base, out_s, op);
  std::vector<Buffer> out(n);
  detail::for_each_device(mesh, [&](int t) {
    const std::int64_t count = detail::num_elements(detail::box_shape(out_boxes[t]));
    Buffer b(mesh.devices()[t].id(), static_cast<std::size_t>(count) * isz);
    if (count > 0)
      detail::dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        add_kernel(static_cast<const T*>(detail::local_data(xb, t)), static_cast<const T*>(reduced[t].data()),
                   static_cast<T*>(b.data()), count);
      });
    out[t] = std::move(b);
  });
  return detail::wrap(out_shape, dtype, out_s, std::move(out));
}

}  // namespace

// ------------------------------------------------------------------- take

Array take(const Array& x, const Array& indices, int axis) {
  constexpr const char* op = "take";
  detail::check_valid(x, op, "x");
  detail::check_valid(indices, op, "indices");
  detail::check_same_mesh({&x, &indices}, op);
  check_index_array(indices, op, "indices");
  const int rank = x.ndim();
  axis = detail::normalize_axis(axis, rank, op);
  const Mesh& mesh = x.sharding().mesh();
  Shape out_shape = x.shape();
  out_shape[axis] = indices.shape()[0];
  detail::checked_nbytes(out_shape, x.dtype(), op);

  // x whole along `axis`.
  auto xdims = detail::spec_axes(x.sharding(), rank);
  for (const auto& a : xdims[axis])
    if (is_explicit_axis(mesh, a))
      throw ShardingError(msg(op, "x " + detail::describe(x) + " is sharded along the gathered axis " +
                                      std::to_string(axis) + " over Explicit mesh axes " + quoted(xdims[axis]) +
                                      "; gathering needs that axis whole on every device: reshard x so that axis " +
                                      std::to_string(axis) + " is unsharded first"));
  xdims[axis].clear();
  const Array xw = detail::reshard_for(x, NamedSharding(mesh, detail::make_spec(xdims)), op);

  // The indices' axes that x's other dims leave free shard the output's `axis`.
  std::vector<std::string> used;
  for (const auto& d : xdims) used.insert(used.end(), d.begin(), d.end());
  std::vector<std::string> kept;
  for (const auto& a : indices.sharding().spec()[0].axes()) {
    if (!contains(used, a)) {
      kept.push_back(a);
    } else if (is_explicit_axis(mesh, a)) {
      throw ShardingError(msg(op, "indices " + detail::describe(indices) + " and x " + detail::describe(x) +
                                      " both shard over Explicit mesh axis '" + a + "' (x on another dim than axis " +
                                      std::to_string(axis) + "); reshard one of them so they use different axes"));
    }
  }
  const Array iw = detail::reshard_for(indices, NamedSharding(mesh, detail::make_spec({kept})), op);

  auto odims = xdims;
  odims[axis] = kept;
  const NamedSharding out_s(mesh, detail::make_spec(odims));
  const std::int64_t n_axis = x.shape()[axis];
  const std::size_t isz = itemsize(x.dtype());

  return detail::make_array(out_shape, x.dtype(), out_s, [&](int t, Buffer& b) {
    const Shape ishape = detail::local_shape(iw, t);
    std::vector<std::int64_t> idx = load_indices(detail::local_data(iw, t), iw.dtype(), ishape[0]);
    for (auto& r : idx) {
      if (r < -n_axis || r >= n_axis)
        throw ShapeError(msg(op, "index " + std::to_string(r) + " is out of range for axis " + std::to_string(axis) +
                                     " of size " + std::to_string(n_axis) + " (x " + shape_str(x.shape()) + ")"));
      if (r < 0) r += n_axis;
    }
    const Shape xshape = detail::local_shape(xw, t);
    std::int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= xshape[d];
    for (int d = axis + 1; d < rank; ++d) inner *= xshape[d];
    take_kernel(static_cast<const unsigned char*>(detail::local_data(xw, t)), outer, n_axis,
                inner * static_cast<std::int64_t>(isz), idx, static_cast<unsigned char*>(b.data()));
  });
}

// ------------------------------------------------------------ scatter_add

Array scatter_add(const Array& x, const Array& indices, const Array& updates, const OutOptions& opt) {
  constexpr const char* op = "scatter_add";
  detail::check_valid(x, op, "x");
  detail::check_valid(indices, op, "indices");
  detail::check_valid(updates, op, "updates");
  detail::check_same_mesh({&x, &indices, &updates}, op);
  check_index_array(indices, op, "indices");
  if (x.ndim() < 1) throw ShapeError(msg(op, "x must have rank >= 1, got shape " + shape_str(x.shape())));
  Shape want = x.shape();
  want[0] = indices.shape()[0];
  if (updates.shape() != want)
    throw ShapeError(msg(op, "updates must have shape (len(indices), *x.shape[1:]) = " + shape_str(want) +
                                 " for indices " + shape_str(indices.shape()) + " and x " + shape_str(x.shape()) +
                                 ", got " + shape_str(updates.shape())));
  const Mesh& mesh = x.sharding().mesh();
  const NamedSharding out_s = opt.out_sharding ? detail::resolve_spec(mesh, *opt.out_sharding, x.ndim(), op) : x.sharding();
  // As x.at[i].add(u): the updates take x's dtype.
  return scatter_rows(op, &x, indices, detail::cast(updates, x.dtype()), x.shape(), out_s, /*wrap_negative=*/true);
}

// ------------------------------------------------------------ segment_sum

Array segment_sum(const Array& data, const Array& segment_ids, std::int64_t num_segments, const OutOptions& opt) {
  constexpr const char* op = "segment_sum";
  detail::check_valid(data, op, "data");
  detail::check_valid(segment_ids, op, "segment_ids");
  detail::check_same_mesh({&data, &segment_ids}, op);
  check_index_array(segment_ids, op, "segment_ids");
  if (data.ndim() < 1) throw ShapeError(msg(op, "data must have rank >= 1, got shape " + shape_str(data.shape())));
  if (segment_ids.shape()[0] != data.shape()[0])
    throw ShapeError(msg(op, "segment_ids must have one entry per row of data: data " + shape_str(data.shape()) +
                                 " has " + std::to_string(data.shape()[0]) + " rows, segment_ids has shape " +
                                 shape_str(segment_ids.shape())));
  if (num_segments < 0)
    throw ShapeError(msg(op, "num_segments must be >= 0, got " + std::to_string(num_segments)));
  const Mesh& mesh = data.sharding().mesh();
  Shape out_shape = data.shape();
  out_shape[0] = num_segments;
  detail::checked_nbytes(out_shape, data.dtype(), op);
  const int rank = data.ndim();
  NamedSharding out_s = data.sharding();
  if (opt.out_sharding) {
    out_s = detail::resolve_spec(mesh, *opt.out_sharding, rank, op);
  } else {
    // Replicated along the segments, data's layout on the trailing dims.
    auto dims = detail::spec_axes(data.sharding(), rank);
    dims[0].clear();
    out_s = NamedSharding(mesh, detail::make_spec(dims));
  }
  return scatter_rows(op, nullptr, segment_ids, data, out_shape, out_s, /*wrap_negative=*/false);
}

}  // namespace tessera
