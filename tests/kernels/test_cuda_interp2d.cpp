// The CUDA backend's interp2d kernels (backend/cuda/interp2d.hpp) against
// the CPU's (backend/cpu/interp2d.hpp), bit for bit, on an emulated GPU:
// both methods, with and without a fill, the value and both slopes, f32 and
// f64 tables, queries of several dtypes inside, outside, on the knots and
// NaN, grids with repeated knots; and the transpose, whose sums must keep
// the CPU's order (queries landing on the same table rows, in any order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/interp2d.hpp"
#include "backend/cuda/interp2d.hpp"
#include "backend/cuda/stream.hpp"
#include "tessera/array.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace cpu = tessera::detail::cpu;
namespace cu = tessera::cuda;
using ts::DType;
using ts::detail::Interp2dDeriv;
using ts::detail::Interp2dMethod;

using namespace tessera::testing::cuda;

namespace {

class CudaInterp2d : public EmulatedGpuNanBits {};

Bytes as(DType t, const std::vector<double>& v) {
  Bytes out(v.size() * ts::itemsize(t));
  ts::detail::convert(v.data(), DType::f64, out.data(), t, static_cast<std::int64_t>(v.size()));
  return out;
}

// Knots 0, 1, ... with jitter; `repeat` makes two of them equal.
std::vector<double> knots(std::int64_t n, std::mt19937& rng, bool repeat) {
  std::uniform_real_distribution<double> u(0.2, 1.3);
  std::vector<double> k(static_cast<std::size_t>(n));
  double x = -1.5;
  for (auto& v : k) v = x += u(rng);
  if (repeat && n > 3) k[2] = k[1];
  return k;
}

// Queries across and beyond the grid, some on knots, some NaN.
std::vector<double> queries(const std::vector<double>& k, std::int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(k.front() - 1.0, k.back() + 1.0);
  std::uniform_int_distribution<std::size_t> at(0, k.size() - 1);
  std::vector<double> q(static_cast<std::size_t>(n));
  for (auto& v : q) {
    const unsigned r = rng() % 10;
    v = r == 0 ? k[at(rng)] : r == 1 ? std::nan("") : u(rng);
  }
  return q;
}

TEST_F(CudaInterp2d, ForwardAndTransposeMatchTheCpus) {
  std::mt19937 rng(3);
  struct Case {
    std::int64_t nx, ny, rest, n;
    bool repeat;
  };
  const Case cases[] = {{2, 2, 1, 40, false}, {5, 7, 3, 200, false}, {6, 4, 1, 300, true}, {9, 11, 5, 500, false},
                        {3, 3, 2, 0, false}};
  for (const Case& c : cases)
    for (Interp2dMethod method : {Interp2dMethod::Linear, Interp2dMethod::Cubic})
      for (std::optional<double> fill : {std::optional<double>(), std::optional<double>(-2.5)})
        for (Interp2dDeriv deriv : {Interp2dDeriv::Value, Interp2dDeriv::X, Interp2dDeriv::Y})
          for (DType t : {DType::f32, DType::f64})
            for (DType qt : {DType::f64, DType::f32, DType::i32}) {
              const std::vector<double> kx = knots(c.nx, rng, c.repeat), ky = knots(c.ny, rng, false);
              const Bytes x = as(DType::f64, kx), y = as(t, ky);
              const Bytes xq = as(qt, queries(kx, c.n, rng)), yq = as(qt, queries(ky, c.n, rng));
              std::vector<double> fv(static_cast<std::size_t>(c.nx * c.ny * c.rest));
              std::uniform_real_distribution<double> u(-3.0, 3.0);
              for (auto& v : fv) v = u(rng);
              if (!fv.empty()) fv[fv.size() / 2] = std::nan("");
              const Bytes f = as(t, fv);
              const std::string what = std::string(method == Interp2dMethod::Cubic ? "cubic" : "linear") +
                                       (fill ? " fill" : " extrapolate") + " deriv " +
                                       std::to_string(static_cast<int>(deriv)) + " " + ts::dtype_name(t) +
                                       " queries " + ts::dtype_name(qt) + " n " + std::to_string(c.n);
              const cpu::Interp2dGrid cg{x.data(), DType::f64, c.nx, y.data(), t, c.ny};
              const cu::Interp2dGrid gg{x.data(), DType::f64, c.nx, y.data(), t, c.ny};
              const cu::Interp2dParams p{method, fill.has_value(), fill.value_or(0.0), deriv};
              const std::size_t isz = ts::itemsize(t);
              {
                Bytes want(static_cast<std::size_t>(c.n * c.rest) * isz, 0x5a), got = want;
                cpu::interp2d(method, fill, deriv, cg, xq.data(), qt, yq.data(), qt, c.n, f.data(), t, c.rest,
                              want.data());
                Bytes scratch(cu::interp2d_scratch(p, gg, c.n, false));
                cu::interp2d(p, gg, xq.data(), qt, yq.data(), qt, c.n, f.data(), t, c.rest, got.data(),
                             scratch.data());
                expect_same(want, got, what, t);
              }
              {
                // The cotangent rows: random, with a NaN.
                std::vector<double> cv(static_cast<std::size_t>(c.n * c.rest));
                for (auto& v : cv) v = u(rng);
                if (!cv.empty()) cv[0] = std::nan("");
                const Bytes ct = as(t, cv);
                Bytes want(static_cast<std::size_t>(c.nx * c.ny * c.rest) * isz, 0x5a), got = want;
                cpu::interp2d_transpose(method, fill, deriv, cg, xq.data(), qt, yq.data(), qt, c.n, ct.data(), t,
                                        c.rest, want.data());
                Bytes scratch(cu::interp2d_scratch(p, gg, c.n, true));
                cu::interp2d_transpose(p, gg, xq.data(), qt, yq.data(), qt, c.n, ct.data(), t, c.rest, got.data(),
                                       scratch.data());
                expect_same(want, got, what + " transposed", t);
              }
            }
}

// Many queries in one cell: each table row sums hundreds of terms, whose
// order shows in the bits unless it is the CPU's.
TEST_F(CudaInterp2d, TransposeKeepsTheCpusOrder) {
  std::mt19937 rng(5);
  const std::int64_t nx = 4, ny = 5, rest = 2, n = 5000;
  const std::vector<double> kx = knots(nx, rng, false), ky = knots(ny, rng, false);
  std::uniform_real_distribution<double> ux(kx[1], kx[2]), uy(ky[2], ky[3]), u(-1.0, 1.0);
  std::vector<double> xv(n), yv(n), cv(n * rest);
  for (auto& v : xv) v = ux(rng);
  for (auto& v : yv) v = uy(rng);
  for (auto& v : cv) v = u(rng) * std::pow(10.0, static_cast<int>(rng() % 12) - 6);
  for (Interp2dMethod method : {Interp2dMethod::Linear, Interp2dMethod::Cubic})
    for (DType t : {DType::f32, DType::f64}) {
      const Bytes x = as(DType::f64, kx), y = as(DType::f64, ky), xq = as(DType::f64, xv), yq = as(DType::f64, yv),
                  ct = as(t, cv);
      const cpu::Interp2dGrid cg{x.data(), DType::f64, nx, y.data(), DType::f64, ny};
      const cu::Interp2dGrid gg{x.data(), DType::f64, nx, y.data(), DType::f64, ny};
      const cu::Interp2dParams p{method, false, 0.0, Interp2dDeriv::Value};
      Bytes want(static_cast<std::size_t>(nx * ny * rest) * ts::itemsize(t)), got = want;
      cpu::interp2d_transpose(method, std::nullopt, Interp2dDeriv::Value, cg, xq.data(), DType::f64, yq.data(),
                              DType::f64, n, ct.data(), t, rest, want.data());
      Bytes scratch(cu::interp2d_scratch(p, gg, n, true));
      cu::interp2d_transpose(p, gg, xq.data(), DType::f64, yq.data(), DType::f64, n, ct.data(), t, rest, got.data(),
                             scratch.data());
      expect_same(want, got, ts::dtype_name(t), t);
    }
}

}  // namespace
