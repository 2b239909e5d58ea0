// The per-device kernel of the dot_general primitive (primitives/linalg.hpp)
// on a CUDA device: one local block of the result from the operands' local
// blocks in GPU memory, computed by the GPU's dot_general (backend/cuda/
// gemm), with its scratch memory taken on the device the kernel runs for,
// as eval_cpu does on the CPU (backend/cpu/eval_linalg.cpp). Float results
// agree with the CPU's within rounding (cuBLAS sums in another order than
// OpenBLAS); integer and bool results are the CPU's exactly.
#include "backend/cuda/gemm.hpp"
#include "primitives/linalg.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

void DotGeneral::eval_cuda(const LocalArgs& in, LocalOuts& out) const {
  cuda::dot_general(c_, t_, in[0].data, in[0].shape, in[1].data, in[1].shape, out[0].data, out[0].shape,
                    current_device());
}

}  // namespace tessera::detail
