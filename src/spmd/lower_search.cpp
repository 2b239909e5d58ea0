// The median's partitioning (MedianMiddle::eval_global, primitives/search.hpp).
//
// The median primitive finds the two middle elements of every selection
// without moving the reduced data. When no reduced dim is sharded, each
// device holds whole selections and selects locally (nth_element). Otherwise
// the selection is a radix select over the values' order keys (see
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
//
// The per-device work runs through the primitive's shares (MedianShare,
// made by backend/cpu/eval_search.cpp, or backend/cuda/eval_search.cpp on a
// CUDA device, whose pointers are then the GPU's); this file only moves
// data, with the memory-space-aware exchanges.
#include <algorithm>
#include <memory>
#include <utility>

#include "primitives/search.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"

namespace tessera::detail {

namespace {

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

}  // namespace

std::vector<Array> MedianMiddle::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
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
  const Array mask = masked_ ? reshard_for(ctx, in[1], sh, op) : Array();
  // Blocks in their own memory space: the shares of a CUDA device run
  // kernels on them (cuda_share), a CPU device's read them.
  auto block = [](const Array& a, int pos) { return a.impl()->buffers[pos].device_data(); };
  auto mask_at = [&](int pos) { return masked_ ? static_cast<const bool*>(block(mask, pos)) : nullptr; };

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
  std::vector<std::unique_ptr<MedianShare>> shares(npos);
  // Each device's share of the selections (with `bits` per radix pass; 0:
  // held whole) and its result buffers.
  auto allocate = [&](int pos, int bits) {
    shares[pos] = on_cuda_device() ? cuda_share(local_shape(x, pos), red, t, bits)
                                   : share(local_shape(x, pos), red, t, bits);
    const int dev = mesh.devices()[pos].id();
    lo[pos] = Buffer(dev, static_cast<std::size_t>(shares[pos]->outputs()) * isz);
    hi[pos] = Buffer(dev, static_cast<std::size_t>(shares[pos]->outputs()) * isz);
  };
  if (group == 1) {
    // Every device holds its selections whole.
    record_none(mesh, op);
    for_each_device(ctx, mesh, [&](int pos) {
      allocate(pos, 0);
      shares[pos]->select(block(x, pos), mask_at(pos), lo[pos].device_data(), hi[pos].device_data());
    });
  } else {
    const int bits = digit_bits(line, outputs);
    for_each_device(ctx, mesh, [&](int pos) { allocate(pos, bits); });
    // The histograms as arrays of shape kshape + digits (kshape: x's shape
    // with the reduced dims 1), laid out over x's kept axes: each device's
    // block is its outputs' rows, equal within a selection's group.
    Shape kshape = x.shape();
    for (int a : axes_) kshape[a] = 1;
    const NamedSharding hs = natural(sh, rank, true);
    const int passes = radix_passes(t, bits);
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
      for_each_device(ctx, mesh, [&](int pos) {
        part[pos] = Buffer(mesh.devices()[pos].id(), static_cast<std::size_t>(num_elements(box_shape(boxes[pos]))) *
                                                         sizeof(std::int64_t));
        shares[pos]->count(p, block(x, pos), mask_at(pos), static_cast<std::int64_t*>(part[pos].device_data()));
      });
      const auto total = reduce_over(ctx, mesh, raxes, ReduceOp::Sum, DType::i64, part, boxes, boxes, op);
      for_each_device(ctx, mesh,
                      [&](int pos) { shares[pos]->advance(p, static_cast<const std::int64_t*>(total[pos].device_data())); });
    }
    for_each_device(ctx, mesh, [&](int pos) { shares[pos]->finish(lo[pos].device_data(), hi[pos].device_data()); });
  }
  // Each device's outputs are its block's kept coordinates, row-major: the
  // block of the natural layout (dropping size-1 dims moves nothing).
  const NamedSharding nat = natural(sh, rank, keepdims_);
  const Array a = wrap(out[0].shape, t, nat, std::move(lo));
  const Array b = wrap(out[1].shape, t, nat, std::move(hi));
  return {reshard_for(ctx, a, layouts[0], op), reshard_for(ctx, b, layouts[1], op)};
}

}  // namespace tessera::detail
