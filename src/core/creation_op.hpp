// What linspace computes: numpy.linspace's parameters and its element i in
// double. The front end (ops/creation) checks the ends against the dtype
// with it, the primitive (primitives/creation) carries the parameters, and
// the kernels (backend/cpu/creation, backend/cuda/creation.cu) write a
// block of them: a description, and the one element's math both backends
// compile (__host__ __device__, kernels/portable.hpp).
#pragma once

#include <cstdint>

#include "kernels/portable.hpp"

namespace tessera::detail {

/// numpy.linspace's parameters.
struct LinspaceParams {
  double start = 0, stop = 0;
  std::int64_t num = 0;
  bool endpoint = true;
};

/// numpy.linspace's element i, in double.
TESSERA_HD inline double linspace_value(const LinspaceParams& p, std::int64_t i) {
  if (p.endpoint && p.num > 1 && i == p.num - 1) return p.stop;
  const std::int64_t div = p.endpoint ? p.num - 1 : p.num;
  const double delta = p.stop - p.start;
  const double x = static_cast<double>(i);
  if (div <= 0) return x * delta + p.start;
  const double step = delta / static_cast<double>(div);
  // A step that underflows to zero loses the spacing; numpy then scales last.
  if (step == 0.0) return x / static_cast<double>(div) * delta + p.start;
  return x * step + p.start;
}

}  // namespace tessera::detail
