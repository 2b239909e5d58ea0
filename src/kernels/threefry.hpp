// Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11), the counter-based generator behind JAX's default
// PRNG: the hash, the bits, uniforms in [0, 1) of a (key, global index), and
// key splitting and folding. Shared by the front ends (the Key forms of
// split and fold_in, ops/random.cpp) and the per-device kernels
// (backend/cpu/random), which see a block of global indices, never a mesh;
// __host__ __device__ (kernels/portable.hpp), so a GPU kernel draws the same
// bits. Only integer operations and exact float arithmetic: no compiler or
// instruction set can change a result.
#pragma once

#include "kernels/portable.hpp"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include <cuda/std/array>
#else
#include <array>
#endif

namespace tessera::detail {

namespace threefry_detail {
TESSERA_HD inline TESSERA_STD::uint32_t rotl(TESSERA_STD::uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }
}  // namespace threefry_detail

/// Threefry-2x32-20 of the 64-bit counter (c0, c1) under key (k0, k1).
TESSERA_HD inline TESSERA_STD::array<TESSERA_STD::uint32_t, 2> threefry2x32(TESSERA_STD::uint32_t k0,
                                                                            TESSERA_STD::uint32_t k1,
                                                                            TESSERA_STD::uint32_t c0,
                                                                            TESSERA_STD::uint32_t c1) {
  // Rotation distances of the 2-word variant, applied in a cycle of eight.
  constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  // The key schedule's parity word; it makes the three-word schedule never all zero.
  const TESSERA_STD::uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  TESSERA_STD::uint32_t x0 = c0 + ks[0];
  TESSERA_STD::uint32_t x1 = c1 + ks[1];
  for (int r = 0; r < 20; ++r) {
    x0 += x1;
    x1 = threefry_detail::rotl(x1, kRot[r % 8]);
    x1 ^= x0;
    if (r % 4 == 3) {  // key injection after every four rounds
      const TESSERA_STD::uint32_t s = static_cast<TESSERA_STD::uint32_t>(r / 4 + 1);
      x0 += ks[s % 3];
      x1 += ks[(s + 1) % 3] + s;
    }
  }
  return {x0, x1};
}

/// The two hash words of global flat index i: the counter is i as a 64-bit
/// number, high word first (JAX's partitionable threefry counters).
TESSERA_HD inline TESSERA_STD::array<TESSERA_STD::uint32_t, 2> threefry_at(TESSERA_STD::uint32_t k0,
                                                                           TESSERA_STD::uint32_t k1,
                                                                           TESSERA_STD::uint64_t i) {
  return threefry2x32(k0, k1, static_cast<TESSERA_STD::uint32_t>(i >> 32), static_cast<TESSERA_STD::uint32_t>(i));
}

/// 32 random bits of index i (the two words xor-ed, as JAX does).
TESSERA_HD inline TESSERA_STD::uint32_t random_bits32(TESSERA_STD::uint32_t k0, TESSERA_STD::uint32_t k1,
                                                      TESSERA_STD::uint64_t i) {
  auto w = threefry_at(k0, k1, i);
  return w[0] ^ w[1];
}

/// 64 random bits of index i (the two words concatenated, as JAX does).
TESSERA_HD inline TESSERA_STD::uint64_t random_bits64(TESSERA_STD::uint32_t k0, TESSERA_STD::uint32_t k1,
                                                      TESSERA_STD::uint64_t i) {
  auto w = threefry_at(k0, k1, i);
  return (static_cast<TESSERA_STD::uint64_t>(w[0]) << 32) | w[1];
}

/// A float in [0, 1) from the top 23 bits: they become the mantissa of a
/// number in [1, 2), from which 1 is subtracted (exact).
TESSERA_HD inline float unit_float(TESSERA_STD::uint32_t bits) {
  const TESSERA_STD::uint32_t u = (bits >> 9) | 0x3F800000u;
  return __builtin_bit_cast(float, u) - 1.0f;
}

/// A double in [0, 1) from the top 52 bits, the same way.
TESSERA_HD inline double unit_double(TESSERA_STD::uint64_t bits) {
  const TESSERA_STD::uint64_t u = (bits >> 12) | 0x3FF0000000000000ull;
  return __builtin_bit_cast(double, u) - 1.0;
}

/// A key's two words: tessera::Key (tessera/ops.hpp) as the layers below the
/// front ends carry it.
struct KeyWords {
  TESSERA_STD::uint32_t k0 = 0, k1 = 0;
};

/// n keys (word pairs) -> n * num keys: key j's i-th is at out[2 (j num + i)].
TESSERA_HD inline void split_keys(const TESSERA_STD::uint32_t* keys, TESSERA_STD::int64_t n, int num,
                                  TESSERA_STD::uint32_t* out) {
  for (TESSERA_STD::int64_t j = 0; j < n; ++j)
    for (int i = 0; i < num; ++i) {
      const auto w = threefry_at(keys[2 * j], keys[2 * j + 1], static_cast<TESSERA_STD::uint64_t>(i));
      out[(j * num + i) * 2] = w[0];
      out[(j * num + i) * 2 + 1] = w[1];
    }
}

/// n keys each folded with data[j * data_stride] (stride 0: one word for all).
TESSERA_HD inline void fold_in_keys(const TESSERA_STD::uint32_t* keys, TESSERA_STD::int64_t n,
                                    const TESSERA_STD::uint32_t* data, TESSERA_STD::int64_t data_stride,
                                    TESSERA_STD::uint32_t* out) {
  for (TESSERA_STD::int64_t j = 0; j < n; ++j) {
    const auto w = threefry2x32(keys[2 * j], keys[2 * j + 1], 0u, data[j * data_stride]);
    out[2 * j] = w[0];
    out[2 * j + 1] = w[1];
  }
}

}  // namespace tessera::detail
