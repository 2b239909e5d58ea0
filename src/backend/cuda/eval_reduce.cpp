// The reduction primitives (primitives/reduce.hpp) on a CUDA device: a
// Reduce's block reduced by the reduction kernel (backend/cuda/reduce.cu),
// the per-block steps of argmax/argmin (whose cross-device part is
// spmd/lower_reduce.cpp), and the kernel of the cross-device combine on GPUs
// (comm/tree.hpp's tree_combine_on_gpu). The same shape as
// backend/cpu/eval_reduce.cpp, and the same bits.
#include "backend/cuda/reduce.hpp"
#include "comm/tree.hpp"
#include "core/validate.hpp"
#include "primitives/reduce.hpp"

namespace tessera::detail {

void Reduce::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  const std::vector<bool> red = reduced(in[0].shape.size());
  // Long sums run their row pieces in parallel through scratch memory
  // (freed after the op; the stream orders its reuse).
  Buffer scratch;
  if (const std::size_t n = cuda::reduce_scratch(op_, t_, in[0].shape, red)) scratch = Buffer(current_device(), n);
  cuda::reduce(op_, t_, in[0].data, in[0].shape, red, out[0].data, scratch.device_data());
}

void ArgReduce::eval_cuda(const LocalArgs&, LocalOuts&) const {
  throw Error(msg(name_, "internal: runs on whole arrays (eval_global)"));
}

void ArgReduce::block_best_cuda(const LocalIn& x, void* value, std::int64_t* index) const {
  cuda::arg_best(is_max_, x.dtype, x.data, x.shape, axis_, x.box[axis_].start, value, index);
}

void ArgReduce::block_candidates_cuda(DType t, const void* value, const std::int64_t* index, const void* best,
                                      std::int64_t n, std::int64_t* out) const {
  cuda::arg_candidates(t, value, index, best, n, out);
}

void ArgReduce::block_indices_cuda(const std::int64_t* first, std::int64_t n, std::int32_t* out) const {
  cuda::arg_indices(first, n, out);
}

void tree_combine_on_gpu(ReduceOp op, DType dtype, int n, const void* parts, void* out, std::int64_t count,
                         int device, const char* op_name) {
  cuda::tree_combine(op, dtype, n, parts, out, count, device, op_name);
}

}  // namespace tessera::detail
