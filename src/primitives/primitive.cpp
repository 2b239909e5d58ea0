// Defaults of the Primitive surface (the rule-side defaults are
// Partitionable's, sharding/rule.cpp).
#include "primitives/primitive.hpp"

#include "core/validate.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

void Primitive::eval_cuda(const LocalArgs&, LocalOuts&) const {
  throw DeviceError("[" + std::string(name()) + "] has no CUDA kernel yet: it runs on CPU devices only so far " +
                    "(see docs/gpu.md for what runs on GPUs)");
}

bool on_cuda_device() {
  const int dev = current_device();
  return dev >= 0 && Runtime::get().platform() == Platform::Cuda;
}

void eval_kernel(const Primitive& prim, const LocalArgs& in, LocalOuts& out) {
  if (!on_cuda_device()) return prim.eval_cpu(in, out);
  prim.eval_cuda(in, out);
  gpu_op_done(*Runtime::get().gpu(current_device()), std::string(prim.name()).c_str());
}

void Primitive::eval_tile(std::span<const void* const>, void*, std::int64_t) const {
  throw Error(msg(std::string(name()).c_str(), "cannot run in a fused loop"));
}

Array bind1(PrimitivePtr prim, std::vector<Array> args) { return bind(std::move(prim), std::move(args)).front(); }

std::vector<Array> Primitive::eval_global(const ExecContext&, const std::vector<Array>&, const std::vector<TypeInfo>&,
                                          const std::vector<NamedSharding>&) const {
  throw Error(msg(std::string(name()).c_str(), "internal: eval_global called on a primitive that does not lower itself"));
}

std::unique_ptr<TileSink> Primitive::sink(const LocalIn&, const LocalOut&) const {
  throw Error(msg(std::string(name()).c_str(), "internal: sink() called on a primitive that is not sinkable"));
}

}  // namespace tessera::detail
