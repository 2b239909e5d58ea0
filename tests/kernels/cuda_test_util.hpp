// What the CUDA kernel tests share: they run each kernel on an emulated GPU
// (the kernel's own per-element code, as a host loop) and compare its bytes
// with the CPU kernel's, from inputs and output buffers filled alike.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/stream.hpp"
#include "tessera/dtype.hpp"

namespace tessera::testing::cuda {

using Bytes = std::vector<unsigned char>;

inline const DType kDTypes[] = {DType::bool_, DType::u8,  DType::i8,  DType::u32, DType::i32,
                                DType::u64,   DType::i64, DType::f32, DType::f64};

inline std::size_t isz(DType t) { return itemsize(t); }

/// splitmix64's finaliser: well-spread bits from a counter.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// An output buffer of garbage, the same on both sides.
inline Bytes garbage(std::size_t bytes) {
  Bytes b(bytes);
  for (std::size_t k = 0; k < bytes; ++k) b[k] = static_cast<unsigned char>(0xa5 ^ (k * 37));
  return b;
}

inline const void* ptr(const Bytes& b) { return b.empty() ? nullptr : b.data(); }
inline void* ptr(Bytes& b) { return b.empty() ? nullptr : b.data(); }

/// The n bytes at p as one little-endian hex number, for messages.
inline std::string hex(const unsigned char* p, std::size_t n) {
  std::string s = "0x";
  char buf[3];
  for (std::size_t k = n; k-- > 0;) {
    std::snprintf(buf, sizeof buf, "%02x", p[k]);
    s += buf;
  }
  return s;
}

/// A test whose thread drives an emulated GPU.
class EmulatedGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    tessera::cuda::bind_current({.ordinal = 0, .stream = nullptr, .emulated = true, .device_id = 0});
  }
};

}  // namespace tessera::testing::cuda
