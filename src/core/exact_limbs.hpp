// The limbs of an exact accumulator (tessera/spectra.hpp): host math shared
// by the front end exact_limbs (src/ops/spectra.cpp) and the kernel of
// resample_accumulate (backend/cpu/spectra.cpp, where the exactness argument
// is written out).
#pragma once

#include <cmath>

namespace tessera::detail {

/// The three quanta of an exact accumulator for the bound max_abs, and the
/// constants that round a double to a multiple of each (tessera/spectra.hpp).
struct ExactLimbs {
  double sigma[3];  // 1.5 * quantum * 2^52
  explicit ExactLimbs(double max_abs) {
    int p = 0;
    std::frexp(max_abs, &p);  // max_abs = f * 2^p, f in [0.5, 1): 2^p >= max_abs
    sigma[0] = std::ldexp(1.5, p - 22 + 52);
    sigma[1] = std::ldexp(1.5, p - 46 + 52);
    sigma[2] = std::ldexp(1.5, p - 70 + 52);
  }
};

}  // namespace tessera::detail
