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
// erfinv evaluated as XLA does (kernels/erfinv.hpp).
// Keys and uniform draws are bitwise those of JAX (tests/ops/test_random.cpp
// holds golden values from JAX 0.10.2); normals are within 2 ulp of JAX's,
// tails included (tests/ops/data/jax_normal_golden.inc). Uniforms are scaled to [lo, hi) in double and
// then held below hi, where JAX can round up to hi.
//
// The samplers bind primitives/random's sampler with the key as a parameter
// (kernels in backend/cpu/random and backend/cuda/random, both evaluating
// kernels/random.hpp per element); the host forms of split and fold_in call
// the same key functions (kernels/threefry.hpp) as the key-array forms' kernels.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/promote.hpp"
#include "kernels/threefry.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "ops/random.hpp"
#include "primitives/random.hpp"

namespace tessera {

namespace detail {

void check_sample(const Shape& shape, DType dtype, const NamedSharding& sharding, const char* op) {
  if (!detail::is_float(dtype))
    throw DTypeError(msg(op, "expected a float dtype (f32 or f64), got " + dtype_name(dtype)));
  detail::checked_nbytes(shape, dtype, op);
  sharding.check_rank(static_cast<int>(shape.size()), op);
  if (!sharding.spec().unreduced().empty())
    throw ShardingError(
        msg(op, "expected a sharding without unreduced axes for random values, got " + sharding.spec().str()));
}

std::pair<double, double> uniform_bounds(DType dtype, double lo, double hi, const char* op) {
  return dispatch(dtype, [&](auto t) -> std::pair<double, double> {
    using T = decltype(t);
    if constexpr (std::is_floating_point_v<T>) {
      // Volatile: GCC 12 at -O2 with -fsanitize=thread folds the round trip
      // double(T(lo)) back to lo, which would sample from the unrounded
      // bounds in that build only.
      const volatile T l = static_cast<T>(lo), h = static_cast<T>(hi);
      const T lv = l, hv = h;
      if (!std::isfinite(lv) || !std::isfinite(hv) || !(lv < hv))
        throw Error(msg(op, "expected finite bounds with lo < hi in " + dtype_name(dtype) + ", got lo=" +
                                number_str(lo) + ", hi=" + number_str(hi)));
      return {static_cast<double>(lv), static_cast<double>(hv)};
    } else {
      throw DTypeError(msg(op, "expected a float dtype"));  // unreachable: check_sample comes first
    }
  });
}

}  // namespace detail

namespace {
using detail::check_sample;
using detail::msg;
}  // namespace

namespace random {

Key key(std::uint64_t seed) {
  return Key{static_cast<std::uint32_t>(seed >> 32), static_cast<std::uint32_t>(seed & 0xFFFFFFFFu)};
}

std::vector<Key> split(const Key& key, int num) {
  if (num < 0) throw ShapeError(msg("split", "num must be >= 0, got num=" + std::to_string(num)));
  const std::uint32_t in[2] = {key.k0, key.k1};
  std::vector<std::uint32_t> words(static_cast<std::size_t>(num) * 2);
  detail::split_keys(in, 1, num, words.data());
  std::vector<Key> out(static_cast<std::size_t>(num));
  for (int i = 0; i < num; ++i) out[i] = Key{words[2 * i], words[2 * i + 1]};
  return out;
}

Key fold_in(const Key& key, std::uint32_t data) {
  const std::uint32_t in[2] = {key.k0, key.k1};
  std::uint32_t w[2];
  detail::fold_in_keys(in, 1, &data, 0, w);
  return Key{w[0], w[1]};
}

Array uniform(const Key& key, const Shape& shape, DType dtype, const NamedSharding& sharding, double lo, double hi, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "uniform";
  check_sample(shape, dtype, sharding, op);
  const auto [l, h] = detail::uniform_bounds(dtype, lo, hi, op);
  const detail::KeyWords k{key.k0, key.k1};
  return detail::bind1(detail::make_sampler(detail::Sampler::Uniform, shape, dtype, sharding, k, l, h), {});
}

Array normal(const Key& key, const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  check_sample(shape, dtype, sharding, "normal");
  const detail::KeyWords k{key.k0, key.k1};
  return detail::bind1(detail::make_sampler(detail::Sampler::Normal, shape, dtype, sharding, k), {});
}

}  // namespace random
}  // namespace tessera
