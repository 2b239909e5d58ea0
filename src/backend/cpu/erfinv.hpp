// erfinv as XLA evaluates it is shared by the CPU's and the GPU's samplers,
// so it lives in kernels/erfinv.hpp; this header names it for the code that
// includes it by its old path (tests/ops/test_random.cpp).
#pragma once

#include "kernels/erfinv.hpp"
