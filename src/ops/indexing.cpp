// Indexing ops: take (gather along one axis), scatter_add and segment_sum.
// The front ends check their arguments and bind one primitive each
// (src/primitives/indexing, where the communication is described); the
// index arrays are operands, read only on the devices.
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
//     Every device accumulates its update rows into a partial of the output;
//     the partials are summed over the mesh axes sharding the rows.
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
#include <algorithm>

#include "core/promote.hpp"
#include "primitives/elementwise.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/indexing.hpp"

namespace tessera {

namespace {

using detail::msg;

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

}  // namespace

// ------------------------------------------------------------------- take

Array take(const Array& x, const Array& indices, int axis, std::source_location loc) {
  detail::CallSite site(loc);
  constexpr const char* op = "take";
  detail::check_operand(x, op, "x");
  detail::check_operand(indices, op, "indices");
  check_index_array(indices, op, "indices");
  const int rank = x.ndim();
  axis = detail::normalize_axis(axis, rank, op);
  const Mesh& mesh = x.sharding().mesh();
  Shape out_shape = x.shape();
  out_shape[axis] = indices.shape()[0];
  detail::checked_nbytes(out_shape, x.dtype(), op);

  // Gathering x along `axis`, or dropping index axes, over Explicit axes
  // would be hidden communication.
  auto xdims = detail::spec_axes(x.sharding(), rank);
  for (const auto& a : xdims[axis])
    if (is_explicit_axis(mesh, a))
      throw ShardingError(msg(op, "x " + detail::describe(x) + " is sharded along the gathered axis " +
                                      std::to_string(axis) + " over Explicit mesh axes " + quoted(xdims[axis]) +
                                      "; gathering needs that axis whole on every device: reshard x so that axis " +
                                      std::to_string(axis) + " is unsharded first"));
  xdims[axis].clear();
  for (const auto& a : indices.sharding().spec()[0].axes()) {
    const bool used = std::any_of(xdims.begin(), xdims.end(), [&](const std::vector<std::string>& d) {
      return std::find(d.begin(), d.end(), a) != d.end();
    });
    if (used && is_explicit_axis(mesh, a))
      throw ShardingError(msg(op, "indices " + detail::describe(indices) + " and x " + detail::describe(x) +
                                      " both shard over Explicit mesh axis '" + a + "' (x on another dim than axis " +
                                      std::to_string(axis) + "); reshard one of them so they use different axes"));
  }
  return detail::bind1(detail::make_take(axis), {x, indices});
}

// ------------------------------------------------------------ scatter_add

Array scatter_add(const Array& x, const Array& indices, const Array& updates, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  constexpr const char* op = "scatter_add";
  detail::check_operand(x, op, "x");
  detail::check_operand(indices, op, "indices");
  detail::check_operand(updates, op, "updates");
  check_index_array(indices, op, "indices");
  if (x.ndim() < 1) throw ShapeError(msg(op, "x must have rank >= 1, got shape " + shape_str(x.shape())));
  Shape want = x.shape();
  want[0] = indices.shape()[0];
  if (updates.shape() != want)
    throw ShapeError(msg(op, "updates must have shape (len(indices), *x.shape[1:]) = " + shape_str(want) +
                                 " for indices " + shape_str(indices.shape()) + " and x " + shape_str(x.shape()) +
                                 ", got " + shape_str(updates.shape())));
  if (opt.out_sharding) detail::resolve_spec(x.sharding().mesh(), *opt.out_sharding, x.ndim(), op);
  // As x.at[i].add(u): the updates take x's dtype.
  return detail::bind1(detail::make_scatter_add(opt.out_sharding), {x, indices, detail::cast(updates, x.dtype())});
}

// ------------------------------------------------------------ segment_sum

Array segment_sum(const Array& data, const Array& segment_ids, std::int64_t num_segments, const OutOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  constexpr const char* op = "segment_sum";
  detail::check_operand(data, op, "data");
  detail::check_operand(segment_ids, op, "segment_ids");
  check_index_array(segment_ids, op, "segment_ids");
  if (data.ndim() < 1) throw ShapeError(msg(op, "data must have rank >= 1, got shape " + shape_str(data.shape())));
  if (segment_ids.shape()[0] != data.shape()[0])
    throw ShapeError(msg(op, "segment_ids must have one entry per row of data: data " + shape_str(data.shape()) +
                                 " has " + std::to_string(data.shape()[0]) + " rows, segment_ids has shape " +
                                 shape_str(segment_ids.shape())));
  if (num_segments < 0)
    throw ShapeError(msg(op, "num_segments must be >= 0, got " + std::to_string(num_segments)));
  Shape out_shape = data.shape();
  out_shape[0] = num_segments;
  detail::checked_nbytes(out_shape, data.dtype(), op);
  if (opt.out_sharding) detail::resolve_spec(data.sharding().mesh(), *opt.out_sharding, data.ndim(), op);
  return detail::bind1(detail::make_segment_sum(num_segments, opt.out_sharding), {data, segment_ids});
}

}  // namespace tessera
