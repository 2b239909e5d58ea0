// What the CUDA kernel tests share: they run each kernel on an emulated GPU
// (the kernel's own per-element code, as a host loop) and compare its bytes
// with the CPU kernel's, from inputs and output buffers filled alike.
#pragma once

#include <gtest/gtest.h>

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

/// Elements in a block of shape s.
inline std::int64_t count(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

/// "(2, 3, 4)", for messages.
inline std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t d = 0; d < s.size(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
  return out + ")";
}

/// The element at p (dtype t) is a NaN, whatever its bits.
inline bool is_nan(DType t, const unsigned char* p) {
  if (t == DType::f32) {
    float v;
    std::memcpy(&v, p, 4);
    return v != v;
  }
  if (t == DType::f64) {
    double v;
    std::memcpy(&v, p, 8);
    return v != v;
  }
  return false;
}

/// The same bytes, else a failure naming the first that differs.
inline void expect_same(const Bytes& a, const Bytes& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << ": first differing byte " << i;
      return;
    }
}

/// NaN results that differ only in their bits (sign, payload, quiet or
/// signalling): counted per test by a comparison that allows them, not
/// failures. Which NaN an x86 operation returns depends on the instruction
/// and operand order the compiler picked (the CPU's loops are vectorised,
/// one clone per instruction set, and commute operands), so the CPU's own
/// NaN bits are not one fixed function of the inputs; a GPU's NaN results
/// carry no payload at all.
inline int g_nan_bits = 0;

/// Compares two outputs of dtype t element by element: the same bits, or
/// (with any_nan) a NaN on both sides whatever its bits (counted in
/// g_nan_bits; kernels that only move elements must keep every NaN's
/// bits). A failure names the first element that differs, followed by
/// describe(its index).
template <std::invocable<std::int64_t> Describe>
::testing::AssertionResult same_bits(const Bytes& want, const Bytes& got, DType t, Describe describe,
                                     bool any_nan = true) {
  if (want.size() != got.size())
    return ::testing::AssertionFailure() << "sizes differ: " << want.size() << " and " << got.size() << " bytes";
  const std::size_t w = itemsize(t);
  for (std::size_t k = 0; k + w <= want.size(); k += w) {
    if (std::memcmp(want.data() + k, got.data() + k, w) == 0) continue;
    if (any_nan && is_nan(t, want.data() + k) && is_nan(t, got.data() + k)) {
      ++g_nan_bits;
      continue;
    }
    return ::testing::AssertionFailure() << "element " << k / w << ": cpu " << hex(want.data() + k, w) << ", cuda "
                                         << hex(got.data() + k, w) << describe(static_cast<std::int64_t>(k / w));
  }
  return ::testing::AssertionSuccess();
}

/// The same, a failure followed by " (what)".
inline ::testing::AssertionResult same_bits(const Bytes& want, const Bytes& got, DType t, const std::string& what) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  return same_bits(want, got, t, [&](std::int64_t) { return " (" + what + ")"; });
}

/// expect_same for computed elements of dtype t (same_bits).
inline void expect_same(const Bytes& a, const Bytes& b, const std::string& what, DType t) {
  EXPECT_TRUE(same_bits(a, b, t, what));
}

/// A test whose thread drives an emulated GPU.
class EmulatedGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    tessera::cuda::bind_current({.ordinal = 0, .stream = nullptr, .emulated = true, .device_id = 0});
  }
};

/// EmulatedGpu, reporting the test's NaN results of other bits.
class EmulatedGpuNanBits : public EmulatedGpu {
 protected:
  void SetUp() override {
    EmulatedGpu::SetUp();
    g_nan_bits = 0;
  }
  void TearDown() override {
    if (g_nan_bits > 0) std::printf("  (%d NaN results with other NaN bits than the CPU's)\n", g_nan_bits);
  }
};

}  // namespace tessera::testing::cuda
