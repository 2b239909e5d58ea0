// argmax/argmin on a mesh (ArgReduce, primitives/reduce.hpp): each device
// finds the first best element of its block's lines, then two reductions
// over the mesh axes of the reduced dim pick the best value and the lowest
// index holding it (the class comment says why this order gives the first
// best element of the whole line). The per-block steps are the primitive's
// (backend/cpu/eval_reduce.cpp, backend/cuda/eval_reduce.cpp on GPUs); this
// file moves the partial results, only through reduce_over, so host code
// never reads a GPU's buffer.
#include <string>
#include <utility>

#include "primitives/reduce.hpp"
#include "runtime/runtime.hpp"
#include "spmd/exchange.hpp"

namespace tessera::detail {

namespace {

// Runs a per-block step as the device's kernel: on a CUDA device the GPU's
// step, then a wait for its stream (as eval_kernel does), else the CPU's.
template <class Cpu, class Gpu>
void run_step(const char* op, Cpu&& cpu, Gpu&& gpu) {
  if (!on_cuda_device()) return cpu();
  gpu();
  gpu_wait(*Runtime::get().gpu(current_device()), op);
}

}  // namespace

std::vector<Array> ArgReduce::eval_global(const ExecContext& ctx, const std::vector<Array>& in, const std::vector<TypeInfo>& out,
                                          const std::vector<NamedSharding>& layouts) const {
  const Array& x = in[0];
  const AbstractArray ax{x.shape(), x.dtype(), x.sharding()};
  const Mesh& mesh = x.sharding().mesh();
  const int n = mesh.size();
  const DType dt = x.dtype();
  Shape kshape = x.shape();
  kshape[axis_] = 1;
  const NamedSharding kform = natural(ax, true);
  const std::vector<std::string> mesh_axes = x.sharding().spec()[axis_].axes();
  std::vector<std::vector<Slice>> pbox(n);
  std::vector<Buffer> vals(n), idx(n);
  for (int pos = 0; pos < n; ++pos) pbox[pos] = kform.shard_index(kshape, pos);
  for_each_device(ctx, mesh, [&](int pos) {
    const std::int64_t cnt = num_elements(box_shape(pbox[pos]));
    const int dev = mesh.devices()[pos].id();
    vals[pos] = Buffer(dev, static_cast<std::size_t>(cnt) * itemsize(dt));
    idx[pos] = Buffer(dev, static_cast<std::size_t>(cnt) * sizeof(std::int64_t));
    const LocalIn xb{x.impl()->buffers[pos].device_data(), local_shape(x, pos), dt, local_index(x, pos)};
    void* v = vals[pos].device_data();
    auto* i = static_cast<std::int64_t*>(idx[pos].device_data());
    run_step(name_, [&] { block_best(xb, v, i); }, [&] { block_best_cuda(xb, v, i); });
  });
  const auto best = reduce_over(ctx, mesh, mesh_axes, is_max_ ? ReduceOp::Max : ReduceOp::Min, dt, vals, pbox, pbox, name_);
  std::vector<Buffer> cands(n);
  for_each_device(ctx, mesh, [&](int pos) {
    const std::int64_t cnt = num_elements(box_shape(pbox[pos]));
    cands[pos] = Buffer(mesh.devices()[pos].id(), static_cast<std::size_t>(cnt) * sizeof(std::int64_t));
    const void* v = vals[pos].device_data();
    const auto* i = static_cast<const std::int64_t*>(idx[pos].device_data());
    const void* b = best[pos].device_data();
    auto* c = static_cast<std::int64_t*>(cands[pos].device_data());
    run_step(name_, [&] { block_candidates(dt, v, i, b, cnt, c); },
             [&] { block_candidates_cuda(dt, v, i, b, cnt, c); });
  });
  const auto first = reduce_over(ctx, mesh, mesh_axes, ReduceOp::Min, DType::i64, cands, pbox, pbox, name_);
  // The indices as i32, as jnp.argmax returns them.
  std::vector<Buffer> res(n);
  for_each_device(ctx, mesh, [&](int pos) {
    const std::int64_t cnt = num_elements(box_shape(pbox[pos]));
    res[pos] = Buffer(mesh.devices()[pos].id(), static_cast<std::size_t>(cnt) * sizeof(std::int32_t));
    const auto* f = static_cast<const std::int64_t*>(first[pos].device_data());
    auto* o = static_cast<std::int32_t*>(res[pos].device_data());
    run_step(name_, [&] { block_indices(f, cnt, o); }, [&] { block_indices_cuda(f, cnt, o); });
  });
  // Dropping the size-1 dim changes no block's data.
  const Array r = wrap(out[0].shape, DType::i32, natural(ax, false), std::move(res));
  return {reshard_for(ctx, r, layouts[0], name_)};
}

}  // namespace tessera::detail
