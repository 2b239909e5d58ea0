// Counter-based random numbers (threefry-2x32, as JAX's default PRNG).
//
// The value at global flat index i is a function of (key, i) alone: its bits
// are threefry2x32(key, (hi32(i), lo32(i))), so every device computes the
// elements of its own block without communicating, and the result is the same
// for every mesh and sharding. Key handling follows JAX with
// jax_threefry_partitionable (its default since 0.5):
//   key(seed)       = (seed >> 32, seed & 0xffffffff)
//   fold_in(k, d)   = threefry2x32(k, (0, d))
//   split(k, n)[i]  = threefry2x32(k, (hi32(i), lo32(i)))
//   32-bit draws    = word0 ^ word1;  64-bit draws = word0 << 32 | word1
// uniform takes the top 23 (f32) or 52 (f64) bits as the mantissa of a number
// in [1, 2) and subtracts 1; normal is sqrt(2) * erfinv(u) with u uniform in
// (-1, 1), JAX's inverse-erf method (one draw per element, no pairing), with
// erfinv evaluated as XLA does (backend/cpu/erfinv.hpp).
// Keys and uniform draws are bitwise those of JAX (tests/ops/test_random.cpp
// holds golden values from JAX 0.10.2); normals are within 2 ulp of JAX's,
// tails included (tests/ops/data/jax_normal_golden.inc). Uniforms are scaled to [lo, hi) in double and
// then held below hi, where JAX can round up to hi.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cpu/erfinv.hpp"
#include "backend/cpu/threefry.hpp"
#include "core/nd_index.hpp"
#include "ops/common.hpp"

namespace tessera {
namespace {

using detail::msg;

/// Validation shared by the samplers: float dtype, sizes >= 0, a sharding of
/// the right rank without unreduced axes.
void check_sample(const Shape& shape, DType dtype, const NamedSharding& sharding, const char* op) {
  if (!detail::is_float(dtype))
    throw DTypeError(msg(op, "expected a float dtype (f32 or f64), got " + dtype_name(dtype)));
  detail::checked_nbytes(shape, dtype, op);
  sharding.check_rank(static_cast<int>(shape.size()), op);
  if (!sharding.spec().unreduced().empty())
    throw ShardingError(
        msg(op, "expected a sharding without unreduced axes for random values, got " + sharding.spec().str()));
}

// ---------------------------------------------------------------- kernels

/// Calls f(offset, i) for each element of the block `index` of an array of
/// `shape`: offset in the row-major block, i the global row-major flat index.
template <class F>
void for_each_element(const Shape& shape, const std::vector<Slice>& index, F&& f) {
  const int r = static_cast<int>(shape.size());
  for (const auto& s : index)
    if (s.size() <= 0) return;
  if (r == 0) {
    f(std::int64_t{0}, std::uint64_t{0});
    return;
  }
  std::vector<std::int64_t> stride(r, 1);
  for (int d = r - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  std::int64_t first = 0;  // global flat index of the block's first row
  for (int d = 0; d < r - 1; ++d) first += index[d].start * stride[d];
  const Shape size = detail::box_shape(index);
  const Slice inner = index[r - 1];
  std::int64_t offset = 0;
  for (detail::NdIndex it(detail::first_dims(size, r - 1), stride); !it.done(); it.next()) {
    const std::int64_t row = first + it.offset(0);
    for (std::int64_t j = inner.start; j < inner.stop; ++j) f(offset++, static_cast<std::uint64_t>(row + j));
  }
}

/// A uniform draw in [0, 1) of dtype T at flat index i.
template <class T>
T unit_at(const Key& key, std::uint64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return detail::unit_float(detail::random_bits32(key.k0, key.k1, i));
  else
    return detail::unit_double(detail::random_bits64(key.k0, key.k1, i));
}

/// u in [0, 1) scaled to [lo, hi) (computed in double, rounded once to T,
/// then held inside the interval against rounding up to hi).
template <class T>
T scale_to(T u, T lo, T hi) {
  T y = static_cast<T>(static_cast<double>(u) * (static_cast<double>(hi) - static_cast<double>(lo)) +
                       static_cast<double>(lo));
  y = std::max(lo, y);
  if (y >= hi) y = std::nextafter(hi, lo);
  return y;
}

template <class T>
void uniform_kernel(T* out, const Shape& shape, const std::vector<Slice>& index, const Key& key, T lo, T hi) {
  for_each_element(shape, index,
                   [&](std::int64_t o, std::uint64_t i) { out[o] = scale_to(unit_at<T>(key, i), lo, hi); });
}

template <class T>
void normal_kernel(T* out, const Shape& shape, const std::vector<Slice>& index, const Key& key) {
  // As JAX: u = max(lo, unit * (hi - lo) + lo) in T with lo the first value
  // above -1 and hi = 1 (every step is exact: hi - lo rounds to 2), then
  // sqrt(2) * erfinv(u) with XLA's erfinv, all in T.
  const T lo = std::nextafter(T(-1), T(0));
  const T hi = T(1);
  const T scale = hi - lo;
  const T sqrt2 = static_cast<T>(1.41421356237309504880);
  for_each_element(shape, index, [&](std::int64_t o, std::uint64_t i) {
    const T u = std::max(lo, unit_at<T>(key, i) * scale + lo);
    if constexpr (std::is_same_v<T, float>)
      out[o] = sqrt2 * detail::erfinv_f32(u);
    else
      out[o] = sqrt2 * detail::erfinv_f64(u);
  });
}

}  // namespace

namespace random {

Key key(std::uint64_t seed) {
  return Key{static_cast<std::uint32_t>(seed >> 32), static_cast<std::uint32_t>(seed & 0xFFFFFFFFu)};
}

std::vector<Key> split(const Key& key, int num) {
  if (num < 0) throw ShapeError(msg("split", "num must be >= 0, got num=" + std::to_string(num)));
  std::vector<Key> out(static_cast<std::size_t>(num));
  for (int i = 0; i < num; ++i) {
    auto w = detail::threefry_at(key.k0, key.k1, static_cast<std::uint64_t>(i));
    out[i] = Key{w[0], w[1]};
  }
  return out;
}

Key fold_in(const Key& key, std::uint32_t data) {
  auto w = detail::threefry2x32(key.k0, key.k1, 0u, data);
  return Key{w[0], w[1]};
}

Array uniform(const Key& key, const Shape& shape, DType dtype, const NamedSharding& sharding, double lo, double hi) {
  const char* op = "uniform";
  check_sample(shape, dtype, sharding, op);
  return detail::dispatch(dtype, [&](auto t) -> Array {
    using T = decltype(t);
    if constexpr (std::is_floating_point_v<T>) {
      const T l = static_cast<T>(lo), h = static_cast<T>(hi);
      if (!std::isfinite(l) || !std::isfinite(h) || !(l < h))
        throw Error(msg(op, "expected finite bounds with lo < hi in " + dtype_name(dtype) + ", got lo=" + detail::number_str(lo) +
                                ", hi=" + detail::number_str(hi)));
      return detail::make_array(shape, dtype, sharding, [&](int pos, detail::Buffer& b) {
        uniform_kernel(static_cast<T*>(b.data()), shape, sharding.shard_index(shape, pos), key, l, h);
      });
    } else {
      throw DTypeError(msg(op, "expected a float dtype"));  // unreachable: checked above
    }
  });
}

Array normal(const Key& key, const Shape& shape, DType dtype, const NamedSharding& sharding) {
  check_sample(shape, dtype, sharding, "normal");
  return detail::dispatch(dtype, [&](auto t) -> Array {
    using T = decltype(t);
    if constexpr (std::is_floating_point_v<T>) {
      return detail::make_array(shape, dtype, sharding, [&](int pos, detail::Buffer& b) {
        normal_kernel(static_cast<T*>(b.data()), shape, sharding.shard_index(shape, pos), key);
      });
    } else {
      throw DTypeError(msg("normal", "expected a float dtype"));  // unreachable: checked above
    }
  });
}

}  // namespace random
}  // namespace tessera
