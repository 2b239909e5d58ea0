// The shared-math sweep on a GPU (sweep_device.cu), callable from host code
// compiled by the host compiler.
#pragma once

#include <string>
#include <vector>

#include "sweep.hpp"

namespace tessera::sweep {

/// The number of CUDA GPUs, or 0 with *why saying why there are none.
int gpu_count(std::string* why);

/// Every probe at every input, computed on GPU `device`, probe-major like
/// run_all_on_host. False, with *why, when a CUDA call fails.
bool run_all_on_gpu(int device, std::vector<Result>& out, std::string* why);

}  // namespace tessera::sweep
