// The indexing primitives' partitioning (eval_global of take, scatter_add
// and segment_sum; primitives/indexing.cpp describes the layouts and the
// communication). The per-block compute runs through the primitives'
// per-block methods (backend/cpu/eval_indexing.cpp, and the *_cuda ones of
// backend/cuda/eval_indexing.cpp on CUDA devices); this file moves data,
// only through the memory-space-aware copies, and reads on the host only
// the index blocks take checks (read_buffer from a GPU).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "primitives/indexing.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"

namespace tessera::detail {

namespace {

/// The local block of `a` at position t in its own memory space (a device
/// pointer on a GPU: for kernels, never for host code).
const void* block(const Array& a, int t) { return a.impl()->buffers[static_cast<size_t>(t)].device_data(); }

}  // namespace

// ===================================================================== take

std::vector<Array> Take::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                     const std::vector<NamedSharding>& layouts) const {
  constexpr const char* op = "take";
  const int axis = axis_;
  const Array& x = in[0];
  const Array& indices = in[1];
  const int rank = x.ndim();
  const Mesh& mesh = x.sharding().mesh();
  const auto xdims = whole_along(x.sharding(), rank, axis);
  const Array xw = reshard_for(ctx, x, NamedSharding(mesh, make_spec(xdims)), op);
  const Array iw = reshard_for(ctx, indices, NamedSharding(mesh, make_spec({free_index_axes(xdims, indices.sharding())})), op);
  const std::int64_t n_axis = x.shape()[axis];

  // Indices out of range: each device checks its own, then every process
  // learns the first one of any device (in mesh order), so all raise the
  // same error, not only the processes whose devices hold it.
  // The indices stay loaded (and wrapped) for the kernels below.
  std::vector<std::vector<std::int64_t>> idx_at(static_cast<size_t>(mesh.size()));
  std::vector<std::optional<std::int64_t>> bad_at(static_cast<size_t>(mesh.size()));
  for_each_device(ctx, mesh, [&](int t) {
    auto& idx = idx_at[static_cast<size_t>(t)];
    const Buffer& ib = iw.impl()->buffers[static_cast<size_t>(t)];
    const std::int64_t count = local_shape(iw, t)[0];
    std::vector<unsigned char> staging;
    const void* host = ib.on_host() ? ib.data() : nullptr;
    if (!host && count > 0) {
      staging.resize(static_cast<size_t>(count) * itemsize(iw.dtype()));
      read_buffer(ib, staging.data(), staging.size(), op);
      host = staging.data();
    }
    idx = load_indices(host, iw.dtype(), count);
    for (auto& r : idx) {
      if (r < -n_axis || r >= n_axis) {
        bad_at[static_cast<size_t>(t)] = r;
        break;
      }
      if (r < 0) r += n_axis;
    }
  });
  if (const auto bad = first_over_processes(ctx, mesh, bad_at, op))
    throw ShapeError(msg(op, "index " + std::to_string(*bad) + " is out of range for axis " + std::to_string(axis) +
                                 " of size " + std::to_string(n_axis) + " (x " + shape_str(x.shape()) + ")"));

  return {make_array(ctx, out[0].shape, x.dtype(), layouts[0], [&](int t, Buffer& b) {
    const LocalIn xin{block(xw, t), local_shape(xw, t), x.dtype(), {}};
    if (on_cuda_device())
      take_block_cuda(xin, idx_at[static_cast<size_t>(t)], b.device_data());
    else
      take_block(xin, idx_at[static_cast<size_t>(t)], b.data());
  })};
}

// ================================================================ scatters

Array IndexingScatter::scatter_rows(const ExecContext& ctx, const char* op, const Array* base, const Array& ids, const Array& updates,
                                    const Shape& out_shape, const NamedSharding& out_s, bool wrap_negative) const {
  const Mesh& mesh = out_s.mesh();
  const int rank = static_cast<int>(out_shape.size());
  const DType dtype = updates.dtype();
  const std::size_t isz = itemsize(dtype);

  // R: the mesh axes the update rows are split over. The ids follow the
  // updates (they are the smaller array): rows replicated in `updates` give
  // R = {} and every device scatters all rows, with no reduction at all.
  const AxisList row_axes = updates.sharding().spec()[0].axes();

  // The partial's layout: the output's on dims not sharded over R (each
  // device sums only its own block there), whole on dims sharded over R
  // (those are what the reduce-scatter splits).
  const auto out_axes = spec_axes(out_s, rank);
  std::vector<AxisList> pdims(rank);
  for (int d = 0; d < rank; ++d)
    if (disjoint(out_axes[d], row_axes)) pdims[d] = out_axes[d];
  const NamedSharding partial_s(mesh, make_spec(pdims));
  // Updates: rows over R, trailing dims like the partial.
  auto work = pdims;
  work[0] = row_axes;
  const Array upd = reshard_for(ctx, updates, NamedSharding(mesh, make_spec(work)), op);
  const Array idx = reshard_for(ctx, ids, NamedSharding(mesh, make_spec({row_axes})), op);

  const int n = mesh.size();
  std::vector<std::vector<Slice>> partial_boxes(n), out_boxes(n);
  for (int t = 0; t < n; ++t) {
    partial_boxes[t] = partial_s.shard_index(out_shape, t);
    out_boxes[t] = out_s.shard_index(out_shape, t);
  }

  std::vector<Buffer> partial(n);
  for_each_device(ctx, mesh, [&](int t) {
    const Shape pshape = box_shape(partial_boxes[t]);
    Buffer b(mesh.devices()[t].id(), static_cast<std::size_t>(num_elements(pshape)) * isz);
    if (b.nbytes() > 0) {
      const LocalIn uin{block(upd, t), local_shape(upd, t), dtype, {}};
      const LocalIn iin{block(idx, t), local_shape(idx, t), idx.dtype(), {}};
      const LocalOut pout{b.device_data(), pshape, dtype, partial_boxes[t]};
      if (on_cuda_device())
        scatter_block_cuda(uin, iin, pout, out_shape[0], wrap_negative);
      else
        scatter_block(uin, iin, pout, out_shape[0], wrap_negative);
    }
    partial[t] = std::move(b);
  });

  std::vector<Buffer> reduced = reduce_over(ctx, mesh, row_axes, ReduceOp::Sum, dtype, partial, partial_boxes, out_boxes, op);
  if (!base) return wrap(out_shape, dtype, out_s, std::move(reduced));

  const Array xb = reshard_for(ctx, *base, out_s, op);
  std::vector<Buffer> out(n);
  for_each_device(ctx, mesh, [&](int t) {
    const std::int64_t count = num_elements(box_shape(out_boxes[t]));
    Buffer b(mesh.devices()[t].id(), static_cast<std::size_t>(count) * isz);
    if (count > 0) {
      if (on_cuda_device())
        add_block_cuda(dtype, block(xb, t), reduced[t].device_data(), b.device_data(), count);
      else
        add_block(dtype, block(xb, t), reduced[t].data(), b.data(), count);
    }
    out[t] = std::move(b);
  });
  return wrap(out_shape, dtype, out_s, std::move(out));
}

std::vector<Array> ScatterAdd::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>&,
                                           const std::vector<NamedSharding>& layouts) const {
  return {scatter_rows(ctx, "scatter_add", &in[0], in[1], in[2], in[0].shape(), layouts[0], /*wrap_negative=*/true)};
}

std::vector<Array> SegmentSum::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                           const std::vector<NamedSharding>& layouts) const {
  return {scatter_rows(ctx, "segment_sum", nullptr, in[1], in[0], out[0].shape, layouts[0], /*wrap_negative=*/false)};
}

}  // namespace tessera::detail
