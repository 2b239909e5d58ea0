// The CUDA backend's elementwise and creation kernels (backend/cuda/
// kernels.hpp) against the CPU's, bit for bit, on an emulated GPU: device
// memory is host memory and each kernel runs as a loop over its elements on
// this thread, through the same __host__ __device__ functors a GPU runs
// (backend/cuda/launch.cuh). Every op in every dtype, over inputs with the
// edge cases (NaN, signalling NaN, infinities, signed zeros, denormals,
// values beyond the f32 polynomials' ranges, the integer extremes) and the
// operand forms (contiguous, scalar on either side, broadcast, strided,
// rank 0, empty). Output buffers start with the same garbage on both sides,
// so an element one side leaves unwritten shows too.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/creation.hpp"
#include "backend/cpu/elementwise.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/stream.hpp"
#include "core/dispatch.hpp"
#include "tessera/array.hpp"
#include "tessera/error.hpp"
#include "kernels/cuda_test_util.hpp"

#include "sweep.hpp"  // the shared-math sweep's inputs

namespace ts = tessera;
namespace cpu = tessera::cpu;
namespace cu = tessera::cuda;
namespace sw = tessera::sweep;

using ts::DType;
using ts::detail::BinaryOp;
using ts::detail::Operand;
using ts::detail::UnaryOp;
using Shape = std::vector<std::int64_t>;

using namespace tessera::testing::cuda;

namespace {


const UnaryOp kUnary[] = {UnaryOp::Neg,  UnaryOp::Abs,   UnaryOp::Exp,     UnaryOp::Log,   UnaryOp::Log1p,
                          UnaryOp::Expm1, UnaryOp::Sqrt, UnaryOp::Rsqrt,   UnaryOp::Sin,   UnaryOp::Cos,
                          UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Floor, UnaryOp::Ceil,  UnaryOp::Round,
                          UnaryOp::Sign, UnaryOp::IsNan, UnaryOp::IsFinite, UnaryOp::Not};

const BinaryOp kBinary[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::FloorDiv,
                            BinaryOp::Mod, BinaryOp::Pow, BinaryOp::Max, BinaryOp::Min, BinaryOp::Eq,
                            BinaryOp::Ne,  BinaryOp::Lt,  BinaryOp::Le,  BinaryOp::Gt,  BinaryOp::Ge,
                            BinaryOp::And, BinaryOp::Or,  BinaryOp::Xor};

// Edge values, paired with each other first (a[i] = edge[i % E], b[i] =
// edge[i / E]) so every binary op meets every pair.
const std::uint32_t kF32Edges[] = {
    0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x3f000000u, 0x00000001u, 0x80000001u, 0x007fffffu,
    0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
    0x7fa00000u, 0xffa00001u, 0x40490fdbu, 0x3fc90fdbu, 0x46000000u, 0x45ffffffu, 0x46000001u, 0xc6000001u,
    0x42ae0000u, 0xc2ae0000u, 0x42ae0001u, 0xc2ae0001u, 0x42b17218u, 0xc2cff1b5u, 0x3f200000u, 0x41100000u,
    0x4f000000u, 0xcf000000u, 0x5f000000u, 0xdf000000u, 0x4b800000u, 0x40400000u, 0xc0400000u, 0x40200000u,
    0xc0200000u, 0x3effffffu, 0x501502f9u /* 1e10 */, 0x2edbe6ffu /* 1e-10 */};
const std::uint64_t kF64Edges[] = {
    0x0000000000000000ull, 0x8000000000000000ull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
    0x0000000000000001ull, 0x800fffffffffffffull, 0x0010000000000000ull, 0x7fefffffffffffffull,
    0xffefffffffffffffull, 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
    0xfff8000000000000ull, 0x7ff4000000000000ull, 0x400921fb54442d18ull, 0x40f86a0000000000ull,
    0x40f869ffffffffffull, 0x40f86a0000000001ull, 0xc0f86a0000000001ull, 0x40862e42fefa39efull,
    0xc0874385446d71c3ull, 0x43e0000000000000ull, 0xc3e0000000000000ull, 0x4330000000000000ull,
    0x41e0000000000000ull, 0xc1e0000000000000ull, 0x4008000000000000ull, 0xc008000000000000ull,
    0x4004000000000000ull, 0xc004000000000000ull};

template <class T>
T value_at(std::int64_t i, int s) {
  if constexpr (std::is_same_v<T, float>) {
    constexpr std::int64_t E = std::size(kF32Edges);
    if (i < E * E) return std::bit_cast<float>(kF32Edges[s == 0 ? i % E : i / E]);
    return sw::f32_at(i, s);
  } else if constexpr (std::is_same_v<T, double>) {
    constexpr std::int64_t E = std::size(kF64Edges);
    if (i < E * E) return std::bit_cast<double>(kF64Edges[s == 0 ? i % E : i / E]);
    return sw::f64_at(i, s);
  } else if constexpr (std::is_same_v<T, bool>) {
    return ((sw::int_at(i, s) ^ (sw::int_at(i, s) >> 7)) & 1) != 0;
  } else {
    return static_cast<T>(sw::int_at(i, s));
  }
}

/// n elements of dtype t: input stream s (0 or 1; 2 for bool conditions).
Bytes input(DType t, std::int64_t n, int s) {
  Bytes b(static_cast<std::size_t>(n) * isz(t));
  ts::detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = value_at<T>(i, s);
      std::memcpy(b.data() + static_cast<std::size_t>(i) * sizeof(T), &v, sizeof(T));
    }
  });
  return b;
}

class CudaKernels : public EmulatedGpuNanBits {};

// ----------------------------------------------------------------- unary

TEST_F(CudaKernels, UnaryEveryOpAndDtype) {
  int runs = 0;
  for (DType t : kDTypes) {
    for (std::int64_t n : {std::int64_t(0), std::int64_t(1), std::int64_t(20000)}) {
      const Bytes x = input(t, n, 0);
      for (UnaryOp op : kUnary) {
        const DType rt = ts::detail::returns_bool(op) ? DType::bool_ : t;
        Bytes want = garbage(static_cast<std::size_t>(n) * isz(rt)), got = want;
        cpu::unary(op, t, ptr(x), ptr(want), n);
        cu::unary(op, t, ptr(x), ptr(got), n);
        EXPECT_TRUE(same_bits(want, got, rt, [&](std::int64_t i) {
          return " (op " + std::to_string(static_cast<int>(op)) + ", " + ts::dtype_name(t) + ", x " +
                 hex(x.data() + static_cast<std::size_t>(i) * isz(t), isz(t)) + ")";
        }));
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 9 * 3 * 19);
}

// In place (y == x) each element is still computed from its input. (The
// CPU's f32 exp, log, sin, cos and sigmoid loops are not: their slow pass
// reads x after the polynomial pass wrote y, so the reference here is the
// CPU's out of place.)
TEST_F(CudaKernels, UnaryInPlace) {
  for (DType t : {DType::f32, DType::f64, DType::i32}) {
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Sigmoid}) {
      const Bytes x = input(t, 4000, 0);
      Bytes want = garbage(x.size()), got = x;
      cpu::unary(op, t, x.data(), want.data(), 4000);
      if (want == garbage(x.size())) want = x;  // an op the kernels leave undone (exp of i32)
      cu::unary(op, t, got.data(), got.data(), 4000);
      EXPECT_TRUE(same_bits(want, got, t, [&](std::int64_t) {
        return " (op " + std::to_string(static_cast<int>(op)) + ", " + ts::dtype_name(t) + ")";
      }));
    }
  }
}

// ---------------------------------------------------------------- binary

// One operand: an array stored with `stored` shape (broadcast to the output
// shape by strides), an array with explicit strides, or a scalar.
struct Side {
  enum Kind { Array, Strided, Scalar } kind = Array;
  Shape stored;        // Array: its shape; Strided: the buffer's element count in stored[0]
  Shape strides;       // Strided
  double f = 0;        // Scalar
  std::int64_t i = 0;  // Scalar
};

Side array(Shape s) { return {Side::Array, std::move(s), {}, 0, 0}; }
Side strided(std::int64_t elements, Shape st) { return {Side::Strided, {elements}, std::move(st), 0, 0}; }
Side scalar(double f, std::int64_t i) { return {Side::Scalar, {}, {}, f, i}; }

struct Built {
  Bytes data;
  Operand op;
};

Built build(const Side& s, DType t, const Shape& out, int stream) {
  Built b;
  if (s.kind == Side::Scalar) {
    b.op.is_scalar = true;
    b.op.f = s.f;
    b.op.i = s.i;
    return b;
  }
  const std::int64_t n = s.kind == Side::Array ? count(s.stored) : s.stored[0];
  b.data = input(t, n, stream);
  b.op.data = ptr(b.data);
  b.op.strides = s.kind == Side::Array ? cpu::broadcast_strides(s.stored, out) : s.strides;
  return b;
}

std::string side_str(const Side& s) {
  if (s.kind == Side::Scalar) return "scalar(" + std::to_string(s.f) + ", " + std::to_string(s.i) + ")";
  if (s.kind == Side::Strided) return "strided" + shape_str(s.strides);
  return shape_str(s.stored);
}

struct BinaryCase {
  Shape shape;
  Side a, b;
};

// The scalars paired with arrays: float values and integer values (each
// dtype takes the one of its kind, converted as the kernels do).
const std::pair<double, std::int64_t> kScalars[] = {
    {0.0, 0},
    {-0.0, 1},
    {1.5, -1},
    {-2.0, 2},
    {3.0, 7},
    {std::numeric_limits<double>::infinity(), std::numeric_limits<std::int64_t>::min()},
    {-std::numeric_limits<double>::infinity(), std::numeric_limits<std::int64_t>::max()},
    {std::numeric_limits<double>::quiet_NaN(), 255},
    {1e30, -128},
    {1e-320, 0x80000000ll},
    {100.0, -3},
};

std::vector<BinaryCase> binary_cases() {
  const std::int64_t n = 3000;
  std::vector<BinaryCase> cases = {
      {{n}, array({n}), array({n})},
      {{3, 4, 5}, array({3, 1, 5}), array({1, 4, 5})},
      {{3, 4, 5}, array({1, 4, 5}), array({3, 1, 5})},
      {{2, 3, 5}, array({5}), array({2, 3, 5})},
      {{2, 3, 5}, array({2, 3, 5}), array({5})},
      {{2, 3, 5}, array({2, 1, 1}), array({1, 3, 1})},
      {{1, 1, 7}, array({7}), array({1, 1, 7})},
      {{4, 3}, strided(12, {1, 4}), array({4, 3})},  // a transposed view
      {{6, 2}, strided(30, {5, 2}), strided(3, {0, 1})},
      {{2, 1, 2, 1, 3, 1, 2, 2}, array({2, 1, 2, 1, 3, 1, 2, 2}), array({1, 1, 1, 1, 3, 1, 1, 2})},
      {{2, 3, 4, 5}, array({2, 3, 1, 1}), array({1, 1, 4, 5})},
      {{2, 3, 4, 5}, strided(120, {60, 20, 1, 4}), array({3, 4, 1})},  // the last two dims transposed
      {{3, 4, 5}, strided(200, {40, 10, 2}), array({3, 4, 5})},      // every other element
      {{}, array({}), array({})},
      {{0}, array({0}), array({0})},
      {{2, 0, 3}, array({2, 0, 3}), array({3})},
      {{}, array({}), scalar(2.5, 3)},
      {{}, scalar(-1.5, -5), array({})},
      {{}, scalar(7.0, 7), scalar(-3.0, -3)},
      {{4}, scalar(7.0, 7), scalar(-3.0, -3)},
      {{0}, array({0}), scalar(1.0, 1)},
  };
  for (const auto& [f, i] : kScalars) {
    cases.push_back({{n}, array({n}), scalar(f, i)});
    cases.push_back({{n}, scalar(f, i), array({n})});
    cases.push_back({{3, 4, 5}, array({3, 1, 5}), scalar(f, i)});
    cases.push_back({{3, 4, 5}, scalar(f, i), array({4, 1})});
  }
  return cases;
}

TEST_F(CudaKernels, BinaryEveryOpDtypeAndOperandForm) {
  const std::vector<BinaryCase> cases = binary_cases();
  int runs = 0;
  for (DType t : kDTypes) {
    for (const BinaryCase& c : cases) {
      const Built a = build(c.a, t, c.shape, 0), b = build(c.b, t, c.shape, 1);
      for (BinaryOp op : kBinary) {
        const DType rt = ts::detail::returns_bool(op) ? DType::bool_ : t;
        Bytes want = garbage(static_cast<std::size_t>(count(c.shape)) * isz(rt)), got = want;
        cpu::binary(op, t, a.op, b.op, ptr(want), c.shape);
        cu::binary(op, t, a.op, b.op, ptr(got), c.shape);
        EXPECT_TRUE(same_bits(want, got, rt, [&](std::int64_t) {
          return " (op " + std::to_string(static_cast<int>(op)) + ", " + ts::dtype_name(t) + ", shape " +
                 shape_str(c.shape) + ", a " + side_str(c.a) + ", b " + side_str(c.b) + ")";
        }));
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 9 * 18 * static_cast<int>(cases.size()));
}

// ---------------------------------------------------------------- select

struct SelectCase {
  Shape shape;
  Side c, x, y;
};

TEST_F(CudaKernels, SelectEveryDtypeAndOperandForm) {
  const std::int64_t n = 3000;
  const std::vector<SelectCase> cases = {
      {{n}, array({n}), array({n}), array({n})},
      {{n}, array({n}), array({n}), scalar(-2.5, -2)},
      {{n}, array({n}), scalar(1e300, 300), array({n})},
      {{n}, array({n}), scalar(std::numeric_limits<double>::quiet_NaN(), -1), scalar(-0.0, 5)},
      {{n}, scalar(0, 1), array({n}), array({n})},
      {{n}, scalar(0, 0), array({n}), array({n})},
      {{n}, scalar(0, 2), scalar(1.25, 9), array({n})},
      {{n}, scalar(0, 0), array({n}), scalar(1.25, 9)},
      {{3, 4, 5}, array({3, 1, 5}), array({1, 4, 5}), array({5})},
      {{3, 4, 5}, array({4, 1}), scalar(3.0, 3), array({3, 1, 1})},
      {{4, 3}, strided(12, {1, 4}), strided(12, {1, 4}), array({4, 3})},
      {{2, 1, 2, 1, 3, 1, 2, 2}, array({2, 1, 1, 1, 3, 1, 2, 1}), array({2, 2}), array({1, 1, 1, 1, 1, 1, 1, 1})},
      {{}, array({}), array({}), array({})},
      {{}, scalar(0, 1), array({}), scalar(4.0, 4)},
      {{}, array({}), scalar(-4.0, -4), scalar(4.0, 4)},
      {{0}, array({0}), array({0}), array({0})},
      {{3, 0}, array({3, 0}), scalar(1, 1), array({0})},
  };
  int runs = 0;
  for (DType t : kDTypes) {
    for (const SelectCase& sc : cases) {
      const Built c = build(sc.c, DType::bool_, sc.shape, 0), x = build(sc.x, t, sc.shape, 0),
                  y = build(sc.y, t, sc.shape, 1);
      Bytes want = garbage(static_cast<std::size_t>(count(sc.shape)) * isz(t)), got = want;
      cpu::select(t, c.op, x.op, y.op, ptr(want), sc.shape);
      cu::select(t, c.op, x.op, y.op, ptr(got), sc.shape);
      EXPECT_TRUE(same_bits(want, got, t, [&](std::int64_t) {
        return " (" + ts::dtype_name(t) + ", shape " + shape_str(sc.shape) + ", cond " + side_str(sc.c) + ", x " +
               side_str(sc.x) + ", y " + side_str(sc.y) + ")";
      }, /*any_nan=*/false));
      ++runs;
    }
  }
  EXPECT_EQ(runs, 9 * static_cast<int>(cases.size()));
}

// --------------------------------------------------------------- convert

TEST_F(CudaKernels, ConvertEveryPairOfDtypes) {
  int runs = 0;
  for (DType from : kDTypes) {
    for (std::int64_t n : {std::int64_t(0), std::int64_t(5000)}) {
      const Bytes x = input(from, n, 0);
      for (DType to : kDTypes) {
        Bytes want = garbage(static_cast<std::size_t>(n) * isz(to)), got = want;
        ts::detail::convert(ptr(x), from, ptr(want), to, n);
        cu::convert(ptr(x), from, ptr(got), to, n);
        EXPECT_TRUE(same_bits(want, got, to, [&](std::int64_t i) {
          return " (" + ts::dtype_name(from) + " to " + ts::dtype_name(to) + ", x " +
                 hex(x.data() + static_cast<std::size_t>(i) * isz(from), isz(from)) + ")";
        }));
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 9 * 2 * 9);
}

// -------------------------------------------------------------- creation

TEST_F(CudaKernels, FillEveryDtype) {
  int runs = 0;
  for (DType t : kDTypes) {
    for (int v = 0; v < 4; ++v) {
      const Bytes value = input(t, 80, 0);  // element 17 * v of the edge cases
      const unsigned char* p = value.data() + static_cast<std::size_t>(17 * v) * isz(t);
      for (std::int64_t n : {std::int64_t(0), std::int64_t(1), std::int64_t(1001)}) {
        Bytes want = garbage(static_cast<std::size_t>(n) * isz(t)), got = want;
        cpu::fill(t, ptr(want), n, p);
        cu::fill(t, ptr(got), n, p);
        EXPECT_TRUE(same_bits(want, got, t, [&](std::int64_t) {
          return " (" + ts::dtype_name(t) + ", value " + hex(p, isz(t)) + ")";
        }, /*any_nan=*/false));
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 9 * 4 * 3);
}

const ts::Slice kSlices[] = {{0, 0}, {5, 5}, {0, 1}, {0, 100}, {37, 91}, {99, 100}};

TEST_F(CudaKernels, ArangeEveryDtype) {
  const std::pair<double, double> params[] = {
      {0, 1},       {-5, 0.5},          {1e10, -3.25},     {0.1, 0.1},  {-1e19, 1e18}, {250, 1},
      {-130, 1.5},  {4294967290.0, 1},  {1e308, 1e307},    {-0.0, -0.0}, {2.5, -0.75}, {1e-310, 1e-310},
      {std::numeric_limits<double>::quiet_NaN(), 1},
  };
  int runs = 0;
  for (DType t : kDTypes) {
    for (const auto& [start, step] : params) {
      for (const ts::Slice& s : kSlices) {
        Bytes want = garbage(static_cast<std::size_t>(s.size()) * isz(t)), got = want;
        cpu::arange(t, ptr(want), s, start, step);
        cu::arange(t, ptr(got), s, start, step);
        EXPECT_TRUE(same_bits(want, got, t, [&](std::int64_t) {
          return " (" + ts::dtype_name(t) + ", start " + std::to_string(start) + ", step " + std::to_string(step) +
                 ", slice [" + std::to_string(s.start) + ", " + std::to_string(s.stop) + "))";
        }));
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 9 * 13 * 6);
}

TEST_F(CudaKernels, LinspaceEveryDtype) {
  const ts::detail::LinspaceParams params[] = {
      {0, 1, 100, true},   {0, 1, 100, false},      {-3.5, 7.25, 100, true}, {5, 5, 100, true},
      {2, 9, 1, false},    {2, 9, 1, true},         {1e308, -1e308, 100, true}, {0, 1e-320, 100, true},
      {-1e-300, 1e-300, 100, false}, {300, -300, 100, true}, {-1e20, 1e20, 100, false}, {0, 255, 100, true},
  };
  int runs = 0;
  for (DType t : kDTypes) {
    for (const auto& p : params) {
      for (const ts::Slice& s : kSlices) {
        if (s.stop > p.num) continue;
        Bytes want = garbage(static_cast<std::size_t>(s.size()) * isz(t)), got = want;
        cpu::linspace(t, ptr(want), s, p);
        cu::linspace(t, ptr(got), s, p);
        EXPECT_TRUE(same_bits(want, got, t, [&](std::int64_t) {
          return " (" + ts::dtype_name(t) + ", linspace(" + std::to_string(p.start) + ", " + std::to_string(p.stop) +
                 ", " + std::to_string(p.num) + (p.endpoint ? "" : ", no endpoint") + "), slice [" +
                 std::to_string(s.start) + ", " + std::to_string(s.stop) + "))";
        }));
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 9 * (10 * 6 + 2 * 2));
}

TEST_F(CudaKernels, EyeEveryDtype) {
  const ts::Slice rows[] = {{0, 0}, {0, 5}, {2, 5}, {0, 40}}, cols[] = {{0, 0}, {0, 7}, {1, 4}, {3, 40}};
  int runs = 0;
  for (DType t : kDTypes) {
    for (const ts::Slice& r : rows) {
      for (const ts::Slice& c : cols) {
        for (std::int64_t k : {-40, -5, -1, 0, 1, 2, 7, 40}) {
          Bytes want = garbage(static_cast<std::size_t>(r.size() * c.size()) * isz(t)), got = want;
          cpu::eye(t, ptr(want), r, c, k);
          cu::eye(t, ptr(got), r, c, k);
          EXPECT_TRUE(same_bits(want, got, t, [&](std::int64_t) {
            return " (" + ts::dtype_name(t) + ", rows [" + std::to_string(r.start) + ", " + std::to_string(r.stop) +
                   "), cols [" + std::to_string(c.start) + ", " + std::to_string(c.stop) + "), k " + std::to_string(k) +
                   ")";
          }));
          ++runs;
        }
      }
    }
  }
  EXPECT_EQ(runs, 9 * 4 * 4 * 8);
}

TEST_F(CudaKernels, Copy) {
  const Bytes src = input(DType::u8, 777, 0);
  Bytes dst = garbage(777);
  cu::copy(dst.data(), src.data(), 777);
  EXPECT_EQ(dst, src);
  cu::copy(nullptr, nullptr, 0);
}

// ---------------------------------------------------------------- errors

TEST_F(CudaKernels, MoreThanEightDimsIsAShapeError) {
  const Shape nine(9, 1);
  Operand a;
  float x = 1, out = 0;
  a.data = &x;
  a.strides = Shape(9, 0);
  Operand s;
  s.is_scalar = true;
  s.f = 2;
  auto expect = [](auto f, const std::string& prefix) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const ts::ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), prefix + " CUDA kernels take arrays of at most 8 dims, got 9");
    }
  };
  expect([&] { cu::binary(BinaryOp::Add, DType::f32, a, s, &out, nine); }, "[add]");
  expect([&] { cu::binary(BinaryOp::Lt, DType::f32, s, a, &out, nine); }, "[less]");
  Operand c;
  c.is_scalar = true;
  c.i = 1;
  expect([&] { cu::select(DType::f32, c, a, s, &out, nine); }, "[select]");
  EXPECT_EQ(out, 0.0f);
  // Eight dims are fine.
  Operand a8 = a;
  a8.strides = Shape(8, 0);
  cu::binary(BinaryOp::Add, DType::f32, a8, s, &out, Shape(8, 1));
  EXPECT_EQ(out, 3.0f);
}

// A thread that drives no GPU cannot launch; an empty launch needs none.
TEST_F(CudaKernels, NoCurrentGpuIsADeviceError) {
  std::string what;
  std::thread th([&] {
    float x = 1, y = 0;
    cu::unary(UnaryOp::Neg, DType::f32, &x, &y, 0);
    try {
      cu::unary(UnaryOp::Neg, DType::f32, &x, &y, 1);
    } catch (const ts::DeviceError& e) {
      what = e.what();
    }
  });
  th.join();
  EXPECT_EQ(what.rfind("[negative] ", 0), 0u) << what;
}

}  // namespace
