// The per-device kernel of the dot_general primitive (primitives/linalg.hpp):
// one local block of the result from the operands' local blocks, computed by
// the dot_general kernel (backend/cpu/dot), with its scratch memory taken on
// the device the kernel runs for.
#include "backend/cpu/dot.hpp"
#include "primitives/linalg.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

void DotGeneral::eval_cpu(const LocalArgs& in, LocalOuts& out) const {
  cpu::dot_general(c_, t_, in[0].data, in[0].shape, in[1].data, in[1].shape, out[0].data, out[0].shape,
                   current_device());
}

}  // namespace tessera::detail
