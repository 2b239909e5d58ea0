// The CUDA backend's spectra kernels (backend/cuda/spectra.hpp) against the
// CPU's (backend/cpu/spectra.hpp), bit for bit, on an emulated GPU:
// resample_accumulate (shared and per-row wavelengths, weights, wave
// scales, an initial accumulator, segment ids out of range, wavelengths
// past the target grid, a NaN scale, empty cells), its error for a term
// past max_abs (the same row's message), the tangent (the row maxima and
// the exact accumulator) and the tangent's transpose.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/spectra.hpp"
#include "backend/cuda/spectra.hpp"
#include "backend/cuda/stream.hpp"
#include "core/exact_limbs.hpp"
#include "kernels/cuda_test_util.hpp"
#include "tessera/array.hpp"

namespace ts = tessera;
namespace cu = tessera::cuda;
using ts::DType;

namespace {

class CudaSpectra : public tessera::testing::cuda::EmulatedGpu {};

void expect_same(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  if (!a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) != 0) {
    std::size_t i = 0;
    while (std::memcmp(&a[i], &b[i], sizeof(double)) == 0) ++i;
    ADD_FAILURE() << what << ": element " << i << " differs: " << a[i] << " vs " << b[i];
  }
}

// One call's operands, in host vectors (emulated device memory).
struct Rows {
  std::int64_t n, K, T, S;
  bool per_row, weights, scale;
  std::vector<float> flux;
  std::vector<double> wave, target, w, c;
  std::vector<std::int32_t> seg;

  Rows(std::int64_t n_, std::int64_t K_, std::int64_t T_, std::int64_t S_, bool per_row_, bool weights_, bool scale_,
       std::mt19937& rng)
      : n(n_), K(K_), T(T_), S(S_), per_row(per_row_), weights(weights_), scale(scale_) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    flux.resize(static_cast<std::size_t>(n * K));
    for (auto& f : flux) f = static_cast<float>(u(rng) * 10 - 2);
    // Wavelengths: increasing, starting a little below the target grid and
    // ending past it; per row, shifted; one pair equal (an empty cell).
    const std::int64_t rows = per_row ? n : 1;
    wave.resize(static_cast<std::size_t>(rows * K));
    for (std::int64_t r = 0; r < rows; ++r) {
      double x = 0.8 + 0.3 * u(rng);
      for (std::int64_t k = 0; k < K; ++k) wave[r * K + k] = x += 0.05 + 0.2 * u(rng);
      if (K > 4) wave[r * K + 3] = wave[r * K + 2];
    }
    target.resize(static_cast<std::size_t>(T));
    double t0 = 1.0;
    for (auto& t : target) t = t0 += 0.02 + 0.1 * u(rng);
    w.resize(static_cast<std::size_t>(n));
    c.resize(static_cast<std::size_t>(n));
    seg.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      w[i] = 0.5 + u(rng);
      c[i] = 0.9 + 0.2 * u(rng);
      seg[i] = static_cast<std::int32_t>(rng() % (S + 2)) - 1;  // -1 and S are dropped
    }
    if (n > 3) c[3] = std::nan("");
  }
  template <class A>
  void fill(A& a) const {
    a.n = n, a.K = K, a.T = T, a.S = S;
    a.flux = flux.data(), a.flux_dt = DType::f32;
    a.wave = wave.data(), a.wave_dt = DType::f64, a.wave_per_row = per_row;
    a.target = target.data(), a.target_dt = DType::f64;
    a.seg = seg.data(), a.seg_dt = DType::i32;
    if (weights) a.weights = w.data(), a.weights_dt = DType::f64;
    if (scale) a.scale = c.data(), a.scale_dt = DType::f64;
  }
  std::string name() const {
    return "n " + std::to_string(n) + " K " + std::to_string(K) + " T " + std::to_string(T) + " S " +
           std::to_string(S) + (per_row ? " per-row" : " shared") + (weights ? " weights" : "") +
           (scale ? " scale" : "");
  }
};

struct Shape {
  std::int64_t n, K, T, S;
};
const Shape kShapes[] = {{1, 1, 5, 1}, {30, 9, 40, 3}, {50, 17, 7, 5}, {20, 6, 1, 2}, {0, 5, 6, 2}, {40, 12, 33, 1}};

TEST_F(CudaSpectra, AccumulateMatchesTheCpus) {
  std::mt19937 rng(1);
  for (const Shape& s : kShapes)
    for (bool per_row : {false, true})
      for (bool weights : {false, true})
        for (bool scale : {false, true})
          for (bool init : {false, true}) {
            const Rows r(s.n, s.K, s.T, s.S, per_row, weights, scale, rng);
            const std::size_t size = static_cast<std::size_t>(3 * s.S * s.T);
            std::vector<double> iv(size);
            for (std::size_t i = 0; i < size; ++i) iv[i] = std::ldexp(static_cast<double>(i % 7) - 3, -20);
            ts::cpu::ResampleArgs a;
            r.fill(a);
            a.max_abs = 1e4;
            a.init = init ? iv.data() : nullptr;
            std::vector<double> want(size, 1.25), got(size, 1.25);
            a.out = want.data();
            const std::string err_w = ts::cpu::resample_accumulate(a);
            cu::ResampleRows g;
            r.fill(g);
            const ts::detail::ExactLimbs limbs(a.max_abs);
            std::vector<unsigned char> scratch(cu::resample_scratch(g));
            const std::string err_g =
                cu::resample_accumulate(g, a.max_abs, limbs.sigma, a.init, got.data(), scratch.data());
            EXPECT_EQ(err_w, err_g) << r.name();
            EXPECT_TRUE(err_g.empty()) << r.name();
            expect_same(want, got, r.name() + (init ? " init" : ""));
          }
}

TEST_F(CudaSpectra, AccumulateNamesTheCpusRowPastTheBound) {
  std::mt19937 rng(2);
  const Rows r(60, 8, 20, 4, false, true, false, rng);
  for (double max_abs : {1.0, 3.0, 6.0}) {
    ts::cpu::ResampleArgs a;
    r.fill(a);
    a.max_abs = max_abs;
    std::vector<double> out(static_cast<std::size_t>(3 * r.S * r.T));
    a.out = out.data();
    const std::string want = ts::cpu::resample_accumulate(a);
    cu::ResampleRows g;
    r.fill(g);
    const ts::detail::ExactLimbs limbs(max_abs);
    std::vector<unsigned char> scratch(cu::resample_scratch(g));
    EXPECT_EQ(want, cu::resample_accumulate(g, max_abs, limbs.sigma, nullptr, out.data(), scratch.data()));
    EXPECT_FALSE(want.empty());
  }
}

TEST_F(CudaSpectra, TangentAndTransposeMatchTheCpus) {
  std::mt19937 rng(4);
  for (const Shape& s : kShapes)
    for (bool per_row : {false, true})
      for (bool weights : {false, true})
        for (bool scale : {false, true}) {
          const Rows r(s.n, s.K, s.T, s.S, per_row, weights, scale, rng);
          std::uniform_real_distribution<double> u(-1.0, 1.0);
          std::vector<double> tflux(static_cast<std::size_t>(s.n * s.K)), tw(static_cast<std::size_t>(s.n)),
              tc(static_cast<std::size_t>(s.n));
          for (auto& v : tflux) v = u(rng);
          for (auto& v : tw) v = u(rng);
          for (auto& v : tc) v = 0.01 * u(rng);
          ts::cpu::ResampleTangentArgs t;
          r.fill(t.a);
          t.tflux = tflux.data();
          if (weights) t.tweights = tw.data();
          if (scale) t.tscale = tc.data();
          cu::ResampleRows g;
          r.fill(g);
          cu::ResampleTangents gt{tflux.data(), DType::f64, weights ? tw.data() : nullptr, DType::f64,
                                  scale ? tc.data() : nullptr, DType::f64};
          std::vector<unsigned char> scratch(std::max<std::size_t>(cu::resample_scratch(g), 8));
          const bool empty = s.n == 0 || s.T == 0 || s.S == 0 || s.K == 0;
          // The row maxima.
          std::vector<double> want(static_cast<std::size_t>(s.n), 0.0), got(want);
          t.rowmax = want.data();
          ASSERT_TRUE(ts::cpu::resample_tangent(t).empty());
          if (!empty) cu::resample_tangent(g, gt, ts::detail::ExactLimbs(1.0).sigma, got.data(), nullptr, scratch.data());
          expect_same(want, got, r.name() + " rowmax");
          // The accumulator for the bound the maxima give.
          double bound = 0;
          for (double v : want) bound = std::max(bound, v);
          t.rowmax = nullptr;
          t.bound = bound * 1.5 + 1e-300;
          const std::size_t size = static_cast<std::size_t>(3 * s.S * s.T);
          std::vector<double> acc_w(size, 0.0), acc_g(size, 0.0);
          t.out = acc_w.data();
          ASSERT_TRUE(ts::cpu::resample_tangent(t).empty());
          const ts::detail::ExactLimbs limbs(std::max(t.bound, 0x1p-900));
          if (!empty) cu::resample_tangent(g, gt, limbs.sigma, nullptr, acc_g.data(), scratch.data());
          expect_same(acc_w, acc_g, r.name() + " tangent");
          // The transpose, from a cotangent with every limb the same.
          std::vector<double> ct(size);
          for (std::size_t i = 0; i < size / 3; ++i) ct[i] = ct[i + size / 3] = ct[i + 2 * size / 3] = u(rng);
          ts::cpu::ResampleTransposeArgs x;
          r.fill(x.a);
          x.ct = ct.data();
          std::vector<double> gf_w(static_cast<std::size_t>(s.n * s.K), 9.0), gw_w(static_cast<std::size_t>(s.n), 9.0),
              gs_w(gw_w), gf_g(gf_w), gw_g(gw_w), gs_g(gw_w);
          x.gflux = gf_w.data();
          x.gweights = weights ? gw_w.data() : nullptr;
          x.gscale = scale ? gs_w.data() : nullptr;
          ts::cpu::resample_transpose(x);
          cu::resample_transpose(g, ct.data(), gf_g.data(), weights ? gw_g.data() : nullptr,
                                 scale ? gs_g.data() : nullptr, scratch.data());
          expect_same(gf_w, gf_g, r.name() + " gflux");
          expect_same(gw_w, gw_g, r.name() + " gweights");
          expect_same(gs_w, gs_g, r.name() + " gscale");
        }
}

}  // namespace
