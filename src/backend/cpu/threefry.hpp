// Threefry-2x32 is host math shared by the front ends and the kernels, so
// it lives in kernels/threefry.hpp; this header names it for the code that
// includes it by its old path (tests/ops/test_random.cpp).
#pragma once

#include "kernels/threefry.hpp"
