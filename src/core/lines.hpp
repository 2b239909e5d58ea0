// A block seen as lines along one axis: (outer, len, inner) around it,
// row-major, and runs of its rows held in separate buffers. How the stencil
// and scan kernels of every backend (backend/cpu/stencil.hpp,
// backend/cuda/stencil.hpp) walk a block.
#pragma once

#include <cstdint>

#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::detail {

/// A block's sizes around its axis: (outer, len, inner).
struct Lines {
  std::int64_t outer = 1, len = 0, inner = 1;
};

/// The lines of a block of shape `s` along `axis`.
inline Lines lines_of(const Shape& s, int axis) {
  Lines l;
  for (int d = 0; d < axis; ++d) l.outer *= s[d];
  l.len = s[axis];
  for (std::size_t d = axis + 1; d < s.size(); ++d) l.inner *= s[d];
  return l;
}

/// Rows [start, stop) of a line sequence: row r of outer index o starts at
/// element o * outer_stride + (r - start) * inner of `data`; a `broadcast`
/// run is one row whose every element is the one element at `data` (a
/// rank-0 prepend or append).
struct RowRun {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t start = 0, stop = 0;
  std::int64_t outer_stride = 0;
  bool broadcast = false;
};

}  // namespace tessera::detail
