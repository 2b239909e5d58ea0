// The CUDA kernels of the elementwise and creation ops: the signatures of
// the CPU's (backend/cpu/elementwise.hpp, backend/cpu/creation.hpp,
// detail::convert), on device buffers, giving the CPU kernels' bits element
// for element. The per-element math is kernels/scalar_math.hpp's, the same
// source the CPU's loops call; f32 exp, log, sin, cos and sigmoid take the
// polynomial and, for an element beyond its range, the slow path of
// kernels/libm.hpp, as the CPU does (the same bits on a GPU and an emulated
// one).
//
// Each function runs on the calling thread's GPU (cuda::current), queues
// its kernel on that GPU's stream and returns without waiting: the caller
// synchronizes once per op (cuda::synchronize). On an emulated GPU the
// kernel runs as a loop on the calling thread before the function returns.
// All pointers are device pointers, except fill's `value`. Shapes have at
// most kMaxRank dims (ShapeError "[op] CUDA kernels take arrays of at most
// 8 dims, got N" beyond); the op in messages is the op's name ("add",
// "exp", ...) for unary and binary, else the function's ("select", "fill").
// An op the CPU kernel leaves undone (a float-valued op on an integer
// dtype, which the front end converts to f32 first) writes nothing here
// either.
//
// Plain C++ (no CUDA headers); a build without CUDA defines these as
// raising DeviceError (no_cuda_kernels.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/creation_op.hpp"
#include "core/elementwise_op.hpp"
#include "tessera/dtype.hpp"
#include "tessera/sharding.hpp"

namespace tessera::cuda {

using detail::BinaryOp;
using detail::LinspaceParams;
using detail::Operand;
using detail::UnaryOp;

/// The most dims a shape of binary() or select() may have.
inline constexpr int kMaxRank = 8;

/// y[i] = op(x[i]) for n elements of dtype t (y is bool for predicates).
void unary(UnaryOp op, DType t, const void* x, void* y, std::int64_t n);

/// out = op(a, b) over `shape` (row-major, contiguous out), operands in
/// dtype t: device data with per-dim strides in elements (0 where
/// broadcast), or scalars (Operand::f / Operand::i).
void binary(BinaryOp op, DType t, const Operand& a, const Operand& b, void* out, const std::vector<std::int64_t>& shape);

/// out = cond ? x : y over `shape`; cond is bool, x/y/out dtype t.
void select(DType t, const Operand& cond, const Operand& x, const Operand& y, void* out,
            const std::vector<std::int64_t>& shape);

/// n elements converted between dtypes with astype's semantics (as
/// detail::convert).
void convert(const void* in, DType from, void* out, DType to, std::int64_t n);

/// out[0..n) = the one element at `value`, a HOST pointer to an element of
/// dtype t.
void fill(DType t, void* out, std::int64_t n, const void* value);

/// out[j] = start + (index.start + j) * step, converted to t as astype does.
void arange(DType t, void* out, Slice index, double start, double step);

/// The elements `index` of linspace in dtype t (integers floored first).
void linspace(DType t, void* out, Slice index, const LinspaceParams& p);

/// The block rows x cols of the matrix with ones where column - row == k.
void eye(DType t, void* out, Slice rows, Slice cols, std::int64_t k);

/// `bytes` bytes from device buffer src to device buffer dst, on the
/// current stream.
void copy(void* dst, const void* src, std::size_t bytes);

}  // namespace tessera::cuda
