// Per-device kernels of the creation ops. Each writes one block of the
// result, given the block's global index slices, so a device computes its
// part (replicas their copy) without knowing the mesh.
#pragma once

#include <cstdint>

#include "core/creation_op.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::cpu {

/// out[0..n) = the one element at `value` (already of dtype t).
void fill(DType t, void* out, std::int64_t n, const void* value);

/// out[j] = start + (index.start + j) * step, converted to t as astype does.
void arange(DType t, void* out, Slice index, double start, double step);

// linspace's parameters and values are a description shared with the
// primitive and the front end (core/creation_op.hpp).
using detail::linspace_value;
using detail::LinspaceParams;

/// The elements `index` of linspace in dtype t (integers floored first, as
/// numpy >= 2 and JAX do).
void linspace(DType t, void* out, Slice index, const LinspaceParams& p);

/// The block rows x cols of the matrix with ones where column - row == k.
void eye(DType t, void* out, Slice rows, Slice cols, std::int64_t k);

}  // namespace tessera::cpu
