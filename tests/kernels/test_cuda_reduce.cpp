// The CUDA backend's reduction kernels (backend/cuda/reduce.hpp) against the
// CPU's, bit for bit, on an emulated GPU (device memory is host memory, each
// kernel a loop over the same __host__ __device__ functor a GPU runs):
// reductions of every kind in every dtype it runs in, over every subset of
// the dims of shapes whose rows end in each lane position of the CPU's
// eight-lane sums (and empty, rank-0 and size-1 dims); argmax/argmin's
// per-block steps; and the cross-device combine in the reduction tree's
// order for 1 to 64 members. Inputs mix magnitudes far apart (so any other
// order of additions gives other bits) and, in a second stream, NaN,
// infinities, signed zeros and denormals. Output buffers start with the same
// garbage on both sides, so an element one side leaves unwritten shows too.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/reduce.hpp"
#include "backend/cuda/reduce.hpp"
#include "backend/cuda/stream.hpp"
#include "comm/tree.hpp"
#include "core/dispatch.hpp"
#include "tessera/error.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace td = tessera::detail;
namespace cpu = tessera::detail::cpu;
namespace cu = tessera::cuda;

using td::ReduceOp;
using ts::DType;
using Shape = std::vector<std::int64_t>;

using namespace tessera::testing::cuda;

namespace {

const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Any, ReduceOp::All};

// Element i of input stream s. Stream 0: finite values of magnitudes 2^-20
// to 2^20 of either sign (integers: the whole range); stream 1: the same
// with one element in eight an edge value (floats) or small values that tie
// often (integers).
template <class T>
T value_at(std::int64_t i, int s) {
  const std::uint64_t h = mix(static_cast<std::uint64_t>(i) * 2 + static_cast<std::uint64_t>(s));
  if constexpr (std::is_floating_point_v<T>) {
    if (s == 1 && (h & 7) == 0) {
      const T edges[] = {std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::quiet_NaN(),
                         std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(), T(0), -T(0),
                         std::numeric_limits<T>::denorm_min(), -std::numeric_limits<T>::min(), T(1), T(-1)};
      return edges[(h >> 8) % std::size(edges)];
    }
    const T mant = static_cast<T>((h >> 11) & 0xffffff) / T(1 << 24) + T(1);
    const int e = static_cast<int>((h >> 40) % 41) - 20;
    const T v = std::ldexp(mant, e);
    return (h >> 63) ? -v : v;
  } else if constexpr (std::is_same_v<T, bool>) {
    return s == 0 ? (h & 1) != 0 : (h & 15) != 0;
  } else {
    return s == 0 ? static_cast<T>(h) : static_cast<T>(h % 5);
  }
}

Bytes input(DType t, std::int64_t n, int s) {
  Bytes b(static_cast<std::size_t>(n) * isz(t));
  td::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = value_at<T>(i, s);
      std::memcpy(b.data() + static_cast<std::size_t>(i) * sizeof(T), &v, sizeof(T));
    }
  });
  return b;
}

class CudaReduce : public EmulatedGpuNanBits {};

// ---------------------------------------------------------------- reduce

void check_reduce(const Shape& shape, int& runs) {
  const int rank = static_cast<int>(shape.size());
  const std::int64_t n = count(shape);
  for (DType t : kDTypes)
    for (int s = 0; s < 2; ++s) {
      const Bytes x = input(t, n, s);
      for (unsigned mask = 0; mask < (1u << rank) || (rank == 0 && mask == 0); ++mask) {
        std::vector<bool> reduced(shape.size());
        std::int64_t nout = 1;
        for (int d = 0; d < rank; ++d) {
          reduced[static_cast<std::size_t>(d)] = (mask >> d) & 1;
          if (!reduced[static_cast<std::size_t>(d)]) nout *= shape[static_cast<std::size_t>(d)];
        }
        for (ReduceOp op : kOps) {
          Bytes want = garbage(static_cast<std::size_t>(nout) * isz(t)), got = want;
          cpu::reduce(op, t, ptr(x), shape, reduced, ptr(want));
          cu::reduce(op, t, ptr(x), shape, reduced, ptr(got));
          const std::string what = std::string(td::name(op)) + " " + ts::dtype_name(t) + shape_str(shape) +
                                   " mask " + std::to_string(mask) + " stream " + std::to_string(s);
          EXPECT_TRUE(same_bits(want, got, t, what));
          // Long sums again with their pieces summed in parallel first.
          if (const std::size_t ns = cu::reduce_scratch(op, t, shape, reduced)) {
            Bytes scratch = garbage(ns), got2 = garbage(want.size());
            cu::reduce(op, t, ptr(x), shape, reduced, ptr(got2), ptr(scratch));
            EXPECT_TRUE(same_bits(want, got2, t, what + " (pieces in parallel)"));
            ++runs;
          }
          ++runs;
        }
        if (rank == 0) break;
      }
    }
}

TEST_F(CudaReduce, EveryKindDtypeAndSubsetOfDims) {
  int runs = 0;
  // Rows of every length to 17 (every lane position of the eight-lane sums,
  // with and without a tail), then mixed shapes.
  for (std::int64_t len = 0; len <= 17; ++len) check_reduce({len}, runs);
  for (const Shape& shape : std::vector<Shape>{{}, {3, 0}, {0, 5}, {4, 19}, {5, 8}, {3, 4, 13}, {2, 3, 4, 5},
                                               {2, 1, 3, 1, 9}, {1, 1}, {6, 1, 25}})
    check_reduce(shape, runs);
  std::printf("  %d reductions\n", runs);
}

TEST_F(CudaReduce, LongRowsAndManyRows) {
  int runs = 0;
  for (const Shape& shape : std::vector<Shape>{{100003}, {3, 1001}, {1001, 3}, {64, 67, 2}}) check_reduce(shape, runs);
  // Rows around and over the sums' piece length, alone and many.
  for (const Shape& shape : std::vector<Shape>{{8191}, {8192}, {8193}, {2, 16397}, {3, 2, 8200}, {700, 9}, {5000, 2}})
    check_reduce(shape, runs);
  // More pieces than the GPU's ordered walk loads at once (16), and not a
  // multiple of them.
  for (const Shape& shape : std::vector<Shape>{{17 * 8192 + 5}, {17 * 1024 + 3, 2}}) check_reduce(shape, runs);
  // Columns around and over the leading dims' piece of rows.
  for (const Shape& shape : std::vector<Shape>{{1023, 2}, {1024, 3}, {1025, 1}, {3000, 3}, {2, 1100, 2}, {5, 450, 1, 2}})
    check_reduce(shape, runs);
  std::printf("  %d reductions\n", runs);
}

TEST_F(CudaReduce, EightDimsAndBeyond) {
  int runs = 0;
  check_reduce({2, 1, 2, 3, 1, 2, 2, 3}, runs);
  const Shape nine(9, 1);
  Bytes x(4), y(4);
  try {
    cu::reduce(ReduceOp::Sum, DType::f32, x.data(), nine, std::vector<bool>(9, true), y.data());
    ADD_FAILURE() << "no error for 9 dims";
  } catch (const ts::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 8 dims, got 9"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- argmax

TEST_F(CudaReduce, ArgStepsMatchTheCpu) {
  int runs = 0;
  for (const Shape& shape : std::vector<Shape>{{1}, {17}, {0}, {4, 0}, {5, 7}, {3, 4, 6}, {2, 9, 1, 3}})
    for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis)
      for (DType t : kDTypes)
        for (int s = 0; s < 2; ++s)
          for (bool is_max : {true, false}) {
            const Bytes x = input(t, count(shape), s);
            Shape kshape = shape;
            kshape[static_cast<std::size_t>(axis)] = 1;
            const std::int64_t m = count(kshape);
            const std::int64_t base = 5 * s;
            Bytes vw = garbage(static_cast<std::size_t>(m) * isz(t)), vg = vw;
            Bytes iw = garbage(static_cast<std::size_t>(m) * 8), ig = iw;
            cpu::arg_best(is_max, t, ptr(x), shape, axis, base, ptr(vw), reinterpret_cast<std::int64_t*>(ptr(iw)));
            cu::arg_best(is_max, t, ptr(x), shape, axis, base, ptr(vg), reinterpret_cast<std::int64_t*>(ptr(ig)));
            const std::string what = std::string(is_max ? "argmax " : "argmin ") + ts::dtype_name(t) +
                                     shape_str(shape) + " axis " + std::to_string(axis);
            EXPECT_TRUE(same_bits(vw, vg, t, what + " values"));
            EXPECT_TRUE(same_bits(iw, ig, DType::i64, what + " indices"));
            // Candidates against a "best" that is another stream's value
            // where the element is odd, the element's own value otherwise,
            // with some indices -1.
            const Bytes other = input(t, m, 1 - s);
            Bytes best = vw;
            std::vector<std::int64_t> idx(static_cast<std::size_t>(m));
            for (std::int64_t k = 0; k < m; ++k) {
              std::memcpy(&idx[static_cast<std::size_t>(k)], iw.data() + k * 8, 8);
              if (k % 3 == 2) idx[static_cast<std::size_t>(k)] = -1;
              if (k % 2) std::memcpy(best.data() + k * isz(t), other.data() + k * isz(t), isz(t));
            }
            Bytes cw = garbage(static_cast<std::size_t>(m) * 8), cg = cw;
            cpu::arg_candidates(t, ptr(vw), idx.data(), ptr(best), m, reinterpret_cast<std::int64_t*>(ptr(cw)));
            cu::arg_candidates(t, ptr(vw), idx.data(), ptr(best), m, reinterpret_cast<std::int64_t*>(ptr(cg)));
            EXPECT_TRUE(same_bits(cw, cg, DType::i64, what + " candidates"));
            ++runs;
          }
  // The winning indices as i32.
  const std::vector<std::int64_t> first{0, 1, 7, 1 << 20, 2147483647};
  std::vector<std::int32_t> got(first.size(), -5);
  cu::arg_indices(first.data(), static_cast<std::int64_t>(first.size()), got.data());
  EXPECT_EQ(got, (std::vector<std::int32_t>{0, 1, 7, 1 << 20, 2147483647}));
  std::printf("  %d argmax/argmin blocks\n", runs);
}

// --------------------------------------------------------------- combine

TEST_F(CudaReduce, TreeCombineInTheTreeOrder) {
  int runs = 0;
  const std::int64_t cnt = 37;
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 16, 17, 20, 31, 32, 33, 64})
    for (DType t : kDTypes)
      for (int s = 0; s < 2; ++s) {
        const Bytes parts = input(t, n * cnt, s);
        for (ReduceOp op : kOps) {
          Bytes want = garbage(static_cast<std::size_t>(cnt) * isz(t)), got = want;
          td::tree_combine(op, t, 0, n, [&](int lo, int hi) -> const unsigned char* {
            return hi - lo == 1 ? parts.data() + static_cast<std::size_t>(lo * cnt) * isz(t) : nullptr;
          }, want.data(), cnt);
          cu::tree_combine(op, t, n, parts.data(), got.data(), cnt, 0, "psum");
          EXPECT_TRUE(same_bits(want, got, t,
                                std::string(td::name(op)) + " " + ts::dtype_name(t) + " over " + std::to_string(n)));
          ++runs;
        }
      }
  std::printf("  %d combines\n", runs);
}

TEST_F(CudaReduce, TreeCombineChecksItsDevice) {
  Bytes parts(8), out(4);
  try {
    cu::tree_combine(ReduceOp::Sum, DType::f32, 2, parts.data(), out.data(), 1, 3, "psum");
    ADD_FAILURE() << "no error for a combine on another device's worker";
  } catch (const ts::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("[psum] internal: a combine for device 3 called on the worker of device 0"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
