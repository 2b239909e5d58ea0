// The per-device kernels of the reduction primitives (primitives/reduce.hpp):
// a Reduce's block reduced by the reduction kernel (backend/cpu/reduce), or
// fed to it tile by tile as the end of a fused loop (its sink), and the
// per-block steps of argmax/argmin, whose cross-device part is
// spmd/lower_reduce.cpp.
#include <memory>

#include "backend/cpu/reduce.hpp"
#include "core/validate.hpp"
#include "primitives/reduce.hpp"

namespace tessera::detail {

std::unique_ptr<TileSink> Reduce::sink(const LocalIn& in, const LocalOut& out) const {
  struct Sink final : TileSink {
    std::unique_ptr<cpu::Reducer> r;
    void feed(const void* tile, std::int64_t n) override { r->feed(tile, n); }
    void finish() override { r->finish(); }
  };
  auto s = std::make_unique<Sink>();
  s->r = cpu::make_reducer(op_, t_, in.shape, reduced(in.shape.size()), out.data);
  return s;
}

void Reduce::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::reduce(op_, t_, in[0].data, in[0].shape, reduced(in[0].shape.size()), out[0].data);
}

void ArgReduce::eval_cpu(const LocalArgs&, LocalOuts&) const {
  throw Error(msg(name_, "internal: runs on whole arrays (eval_global)"));
}

void ArgReduce::block_best(const LocalIn& x, void* value, std::int64_t* index) const {
  cpu::arg_best(is_max_, x.dtype, x.data, x.shape, axis_, x.box[axis_].start, value, index);
}

void ArgReduce::block_candidates(DType t, const void* value, const std::int64_t* index, const void* best,
                                 std::int64_t n, std::int64_t* out) const {
  cpu::arg_candidates(t, value, index, best, n, out);
}

void ArgReduce::block_indices(const std::int64_t* first, std::int64_t n, std::int32_t* out) const {
  for (std::int64_t k = 0; k < n; ++k) out[k] = static_cast<std::int32_t>(first[k]);
}

}  // namespace tessera::detail
