// The CUDA backend's dot_general (backend/cuda/gemm.hpp) against the CPU's
// (backend/cpu/dot.hpp) on an emulated GPU, where every GEMM takes the
// exact kernel (cuBLAS needs a real GPU): integer and bool results bit for
// bit (wrap-around products and sums, OR of ANDs), f32/f64 within rounding
// (OpenBLAS sums in blocks, the kernel in order). The contractions cover
// what the layout code decides: plain and transposed operands, operands
// permuted by the gather kernel, summed dims, batches that merge into one
// stride, broadcast over the batch (the shared-rhs merge into rows, and
// batches that only expanding describes), an operand without a batch dim,
// several contracting dims, output permutations, rank 0 and empty blocks.
// The sum and gather kernels are checked on their own too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/dot.hpp"
#include "backend/cpu/gemm.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/stream.hpp"
#include "core/dispatch.hpp"
#include "primitives/linalg.hpp"
#include "tessera/error.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace cu = tessera::cuda;

using ts::DType;
using ts::detail::Contraction;
using ts::detail::DotSide;
using Shape = std::vector<std::int64_t>;

using namespace tessera::testing::cuda;

namespace {


// n elements of dtype t from seed: floats in [-1, 1], integers over their
// whole range (products and sums wrap), bools mostly false (an OR of ANDs
// is then not always true).
Bytes input(DType t, std::int64_t n, unsigned seed) {
  Bytes b(static_cast<std::size_t>(n) * ts::itemsize(t));
  std::mt19937_64 rng(seed);
  ts::detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < n; ++i) {
      T v;
      if constexpr (std::is_same_v<T, bool>) {
        v = rng() % 5 == 0;
      } else if constexpr (std::is_floating_point_v<T>) {
        v = static_cast<T>(std::uniform_real_distribution<double>(-1.0, 1.0)(rng));
      } else {
        const std::uint64_t r = rng();
        v = static_cast<T>(i % 3 == 0 ? r % 7 : r);  // small values too: not every product wraps
      }
      std::memcpy(b.data() + static_cast<std::size_t>(i) * sizeof(T), &v, sizeof(T));
    }
  });
  return b;
}

// Garbage, the same on both sides: an element one side leaves unwritten
// shows.
void* ptr(Bytes& b) { return b.empty() ? nullptr : b.data(); }
const void* ptr(const Bytes& b) { return b.empty() ? nullptr : b.data(); }

// Integers and bool: the same bits. Floats: within k * eps of the sum of
// |a||b| (inputs in [-1, 1], so k itself bounds that sum).
::testing::AssertionResult close(const Bytes& want, const Bytes& got, DType t, std::int64_t k) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "sizes differ";
  if (t != DType::f32 && t != DType::f64) {
    const std::size_t w = ts::itemsize(t);
    for (std::size_t i = 0; i < want.size(); i += w)
      if (std::memcmp(want.data() + i, got.data() + i, w) != 0)
        return ::testing::AssertionFailure() << "element " << i / w << " differs";
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult r = ::testing::AssertionSuccess();
  ts::detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const std::size_t n = want.size() / sizeof(T);
      const double tol = 4.0 * static_cast<double>(std::numeric_limits<T>::epsilon()) *
                         static_cast<double>(k > 0 ? k : 1);
      for (std::size_t i = 0; i < n; ++i) {
        T x, y;
        std::memcpy(&x, want.data() + i * sizeof(T), sizeof(T));
        std::memcpy(&y, got.data() + i * sizeof(T), sizeof(T));
        if (!(std::fabs(static_cast<double>(x) - static_cast<double>(y)) <= tol)) {
          r = ::testing::AssertionFailure() << "element " << i << ": cpu " << x << ", cuda " << y << " (tolerance "
                                            << tol << ")";
          return;
        }
      }
    }
  });
  return r;
}

class CudaGemm : public EmulatedGpu {};

struct Case {
  const char* name;
  Contraction c;
  Shape sa, sb;
};

DotSide side(std::vector<int> batch, std::vector<int> contract, std::vector<int> free, std::vector<int> summed = {}) {
  return DotSide{std::move(batch), std::move(contract), std::move(free), std::move(summed)};
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // (m, k) @ (k, n), and its transposed forms.
  v.push_back({"matmul", {side({}, {1}, {0}), side({}, {0}, {1}), {}}, {7, 13}, {13, 5}});
  v.push_back({"lhs transposed", {side({}, {0}, {1}), side({}, {0}, {1}), {}}, {13, 7}, {13, 5}});
  v.push_back({"rhs transposed", {side({}, {1}, {0}), side({}, {1}, {0}), {}}, {7, 13}, {5, 13}});
  v.push_back({"both transposed", {side({}, {0}, {1}), side({}, {1}, {0}), {}}, {13, 7}, {5, 13}});
  // Matrix-vector, vector-matrix, vector-vector (rank 0), outer product.
  v.push_back({"matvec", {side({}, {1}, {0}), side({}, {0}, {}), {}}, {9, 11}, {11}});
  v.push_back({"vecmat", {side({}, {0}, {}), side({}, {0}, {1}), {}}, {11}, {11, 6}});
  v.push_back({"dot", {side({}, {0}, {}), side({}, {0}, {}), {}}, {17}, {17}});
  v.push_back({"outer", {side({}, {}, {0}), side({}, {}, {0}), {}}, {4}, {6}});
  // Batches: one stride, the rhs shared (merged into rows), the lhs shared,
  // a batch dim only the lhs has.
  v.push_back({"batched", {side({0}, {2}, {1}), side({0}, {1}, {2}), {}}, {3, 4, 6}, {3, 6, 5}});
  v.push_back({"rhs broadcast", {side({0}, {2}, {1}), side({0}, {1}, {2}), {}}, {3, 4, 6}, {1, 6, 5}});
  v.push_back({"lhs broadcast", {side({0}, {2}, {1}), side({0}, {1}, {2}), {}}, {1, 4, 6}, {3, 6, 5}});
  v.push_back({"rhs lacks batch", {side({0}, {2}, {1}), side({-1}, {0}, {1}), {}}, {3, 4, 6}, {6, 5}});
  v.push_back({"batch transposed", {side({0}, {1}, {2}), side({0}, {2}, {1}), {}}, {3, 6, 4}, {3, 5, 6}});
  // Two batch dims, each broadcast on one side: no one stride describes
  // them, so both operands are expanded.
  v.push_back({"crossed broadcast", {side({0, 1}, {3}, {2}), side({0, 1}, {2}, {3}), {}}, {3, 1, 4, 6}, {1, 2, 6, 5}});
  // Two batch dims that merge, and that do not (batch dims apart).
  v.push_back({"two batch dims", {side({0, 1}, {3}, {2}), side({0, 1}, {2}, {3}), {}}, {2, 3, 4, 6}, {2, 3, 6, 5}});
  v.push_back({"batch dims apart", {side({0, 2}, {3}, {1}), side({1, 0}, {2}, {3}), {}}, {2, 4, 3, 6}, {3, 2, 6, 5}});
  // Several contracting dims, in an order that needs the gather.
  v.push_back({"permuted contraction", {side({}, {0, 2}, {1}), side({}, {2, 0}, {1}), {}}, {3, 4, 5}, {5, 6, 3}});
  v.push_back({"free dims split", {side({1}, {3}, {0, 2}), side({0}, {1}, {2}), {}}, {2, 3, 4, 5}, {3, 5, 2}});
  // Summed dims (in one operand only).
  v.push_back({"lhs summed", {side({}, {1}, {0}, {2}), side({}, {0}, {1}), {}}, {4, 6, 3}, {6, 5}});
  v.push_back({"both summed", {side({1}, {0}, {}, {2}), side({0}, {1}, {}, {2}), {}}, {6, 3, 7}, {3, 6, 2}});
  // Output permutations: one that moves data, one that does not (size-1).
  v.push_back({"out transposed", {side({}, {1}, {0}), side({}, {0}, {1}), {1, 0}}, {7, 13}, {13, 5}});
  v.push_back({"out batch last", {side({0}, {2}, {1}), side({0}, {1}, {2}), {1, 2, 0}}, {3, 4, 6}, {3, 6, 5}});
  v.push_back({"out permuted size 1", {side({}, {1}, {0}), side({}, {0}, {1}), {1, 0}}, {1, 13}, {13, 5}});
  // Empty: k == 0 (zeros), m == 0 (nothing).
  v.push_back({"k empty", {side({}, {1}, {0}), side({}, {0}, {1}), {}}, {4, 0}, {0, 3}});
  v.push_back({"m empty", {side({}, {1}, {0}), side({}, {0}, {1}), {}}, {0, 4}, {4, 3}});
  v.push_back({"batch empty", {side({0}, {2}, {1}), side({0}, {1}, {2}), {}}, {0, 4, 6}, {0, 6, 5}});
  // Size-1 dims everywhere (dropped by the walks).
  v.push_back({"ones", {side({0, 2}, {4}, {1, 3}), side({0, 2}, {1}, {3, 4}), {}}, {1, 5, 1, 1, 3}, {1, 3, 1, 1, 2}});
  // A longer contraction (the float tolerance grows with k).
  v.push_back({"long k", {side({}, {1}, {0}), side({}, {0}, {1}), {}}, {5, 3000}, {3000, 4}});
  return v;
}

TEST_F(CudaGemm, EveryContractionAndDtype) {
  int runs = 0;
  for (const Case& cs : cases()) {
    const Shape out_shape = ts::detail::dot_shape(cs.c, cs.sa, cs.sb);
    std::int64_t k = 1;
    for (int d : cs.c.lhs.contract) k *= cs.sa[d];
    for (int d : cs.c.lhs.summed) k *= cs.sa[d];
    for (int d : cs.c.rhs.summed) k *= cs.sb[d];
    for (DType t : kDTypes) {
      const Bytes a = input(t, count(cs.sa), 1), b = input(t, count(cs.sb), 2);
      Bytes want = garbage(static_cast<std::size_t>(count(out_shape)) * ts::itemsize(t)), got = want;
      ts::detail::cpu::dot_general(cs.c, t, ptr(a), cs.sa, ptr(b), cs.sb, ptr(want), out_shape, -1);
      cu::dot_general(cs.c, t, ptr(a), cs.sa, ptr(b), cs.sb, ptr(got), out_shape, -1);
      EXPECT_TRUE(close(want, got, t, k)) << cs.name << ", " << ts::dtype_name(t) << ", " << shape_str(cs.sa) << " x "
                                          << shape_str(cs.sb) << " -> " << shape_str(out_shape);
      ++runs;
    }
  }
  EXPECT_EQ(runs, 28 * 9);
}

// The inputs in place: the kernels never write them.
TEST_F(CudaGemm, OperandsUnchanged) {
  const Case cs = cases()[19];  // both summed: sum, then gemm
  const Bytes a = input(DType::f32, count(cs.sa), 3), b = input(DType::f32, count(cs.sb), 4);
  Bytes a2 = a, b2 = b;
  const Shape out_shape = ts::detail::dot_shape(cs.c, cs.sa, cs.sb);
  Bytes got(static_cast<std::size_t>(count(out_shape)) * 4);
  cu::dot_general(cs.c, DType::f32, a2.data(), cs.sa, b2.data(), cs.sb, got.data(), out_shape, -1);
  EXPECT_EQ(a, a2);
  EXPECT_EQ(b, b2);
}

// Integer products that overflow wrap as the CPU's (two's complement):
// int8 127 * 127 * 3 and int64 2^62 * 4.
TEST_F(CudaGemm, IntegersWrap) {
  const Contraction c{side({}, {1}, {0}), side({}, {0}, {1}), {}};
  {
    const std::int8_t a[3] = {127, 127, 127}, b[3] = {127, 127, 127};
    std::int8_t want = 0, got = 0;
    ts::detail::cpu::dot_general(c, DType::i8, a, {1, 3}, b, {3, 1}, &want, {1, 1}, -1);
    cu::dot_general(c, DType::i8, a, {1, 3}, b, {3, 1}, &got, {1, 1}, -1);
    EXPECT_EQ(got, want);
    EXPECT_EQ(got, static_cast<std::int8_t>(127 * 127 * 3));
  }
  {
    const std::int64_t a[2] = {std::int64_t(1) << 62, 1}, b[2] = {4, -1};
    std::int64_t got = 7;
    cu::dot_general(c, DType::i64, a, {1, 2}, b, {2, 1}, &got, {1, 1}, -1);
    EXPECT_EQ(got, -1);  // 2^64 wraps to 0, plus 1 * -1
  }
}

// sum_dims against the CPU's, bit for bit in every dtype (the same order of
// additions), over summed dims first, last, between and all.
TEST_F(CudaGemm, SumDimsBitwise) {
  const Shape shape = {3, 4, 5, 2};
  const std::vector<std::vector<bool>> flags = {{true, false, false, false},
                                                {false, false, false, true},
                                                {false, true, true, false},
                                                {true, false, true, false},
                                                {true, true, true, true},
                                                {false, false, false, false}};
  for (DType t : kDTypes) {
    const Bytes x = input(t, count(shape), 5);
    for (const auto& f : flags) {
      Shape kept = shape;
      for (std::size_t d = 0; d < shape.size(); ++d)
        if (f[d]) kept[d] = 1;
      Bytes want = garbage(static_cast<std::size_t>(count(kept)) * ts::itemsize(t)), got = want;
      ts::detail::cpu::sum_dims(t, x.data(), shape, f, want.data());
      cu::sum_dims(t, x.data(), shape, f, got.data());
      EXPECT_EQ(want, got) << ts::dtype_name(t);
    }
  }
}

// gather as a permutation against the CPU's permute, and as a broadcast.
TEST_F(CudaGemm, GatherPermutesAndBroadcasts) {
  const Shape shape = {2, 3, 4, 5};
  const Bytes x = input(DType::i32, count(shape), 6);
  for (const std::vector<int>& perm :
       std::vector<std::vector<int>>{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 0, 3, 2}, {0, 2, 1, 3}, {2, 3, 0, 1}}) {
    const std::int64_t st[4] = {60, 20, 5, 1};
    Shape dshape(4);
    std::vector<std::int64_t> dst_strides(4);
    for (int i = 0; i < 4; ++i) {
      dshape[i] = shape[perm[i]];
      dst_strides[i] = st[perm[i]];
    }
    Bytes want = garbage(x.size()), got = want;
    ts::detail::cpu::permute(x.data(), shape, perm, want.data(), 4);
    cu::gather(x.data(), dshape, dst_strides, got.data(), 4);
    EXPECT_EQ(want, got);
  }
  // A (3,) row repeated 2 times, each element twice: strides (0, 1, 0).
  const std::uint8_t row[3] = {1, 2, 3};
  std::uint8_t out[12] = {};
  cu::gather(row, {2, 3, 2}, {0, 1, 0}, out, 1);
  const std::uint8_t expect[12] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3};
  EXPECT_EQ(0, std::memcmp(out, expect, 12));
}

// More than 8 dims that do not merge: a ShapeError naming the op.
TEST_F(CudaGemm, TooManyDims) {
  const Shape shape(9, 2);
  std::vector<std::int64_t> st(9);
  for (int d = 0; d < 9; ++d) st[d] = std::int64_t(1) << (2 * d);  // never one run
  std::vector<std::uint8_t> src(std::size_t(1) << 17), dst(512);
  try {
    cu::gather(src.data(), shape, st, dst.data(), 1);
    FAIL() << "expected a ShapeError";
  } catch (const ts::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[dot_general] CUDA kernels take arrays of at most 8 dims"), std::string::npos)
        << e.what();
  }
}

// Off a GPU's thread the kernels say so.
TEST(CudaGemmNoGpu, OffAGpuThread) {
  cu::bind_current({});
  const float a = 1, b = 2;
  float c = 0;
  const Contraction ct{side({}, {0}, {}), side({}, {0}, {}), {}};
  EXPECT_THROW(cu::dot_general(ct, DType::f32, &a, {1}, &b, {1}, &c, {}, -1), ts::DeviceError);
}

}  // namespace
