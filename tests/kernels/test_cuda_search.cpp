// The CUDA backend's searchsorted and median kernels (backend/cuda/
// search.hpp) against the CPU's (backend/cpu/search.hpp), bit for bit, on
// an emulated GPU (device memory is host memory; each kernel runs as a loop
// through the same __host__ __device__ functors a GPU runs). Inputs with
// NaNs, signed zeros, infinities and duplicates, every dtype pairing the
// front end can give, masks, and blocks seen as reductions over different
// dims; the median both ways: selections held whole, and the radix passes
// the lowering drives across devices (the histograms compared too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/search.hpp"
#include "backend/cuda/search.hpp"
#include "backend/cuda/stream.hpp"
#include "core/dispatch.hpp"
#include "core/promote.hpp"
#include "tessera/array.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace cpu = tessera::detail::cpu;
namespace cu = tessera::cuda;
using ts::DType;

using namespace tessera::testing::cuda;

namespace {

class CudaSearch : public EmulatedGpu {};

// n values of dtype t drawn from a small pool (duplicates), with NaN,
// signed zeros and infinities for floats.
Bytes values(DType t, std::int64_t n, std::mt19937& rng, bool sorted) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::uniform_int_distribution<int> pick(-20, 20);
  for (auto& x : v) {
    const int k = pick(rng);
    x = k == 20 ? std::numeric_limits<double>::infinity() : k == -20 ? -std::numeric_limits<double>::infinity()
        : k == 19 ? std::nan("")
        : k == 0  ? -0.0
                  : k * 0.75;
  }
  if (sorted) {
    // NaN last, as the front end's sorted sequences have them.
    std::sort(v.begin(), v.end(), [](double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); });
  }
  Bytes out(static_cast<std::size_t>(n) * ts::itemsize(t));
  ts::detail::convert(v.data(), DType::f64, out.data(), t, n);
  return out;
}

TEST_F(CudaSearch, SearchsortedEveryDtypePairing) {
  std::mt19937 rng(7);
  const DType kinds[] = {DType::bool_, DType::u8, DType::i8, DType::u32, DType::i32,
                         DType::u64,   DType::i64, DType::f32, DType::f64};
  for (DType sdt : kinds)
    for (DType vdt : {DType::i32, DType::f32, DType::f64, sdt}) {
      const DType t = ts::detail::promote(sdt, vdt);
      for (std::int64_t len : {0, 1, 2, 7, 64, 257})
        for (bool sorted : {true, false})
          for (bool right : {false, true})
            for (DType odt : {DType::i32, DType::i64}) {
              const std::int64_t n = 300;
              const Bytes seq = values(sdt, len, rng, sorted), vals = values(vdt, n, rng, false);
              Bytes want(static_cast<std::size_t>(n) * ts::itemsize(odt), 0xab), got = want;
              cpu::searchsorted(t, seq.data(), sdt, len, vals.data(), vdt, n, right, want.data(), odt);
              Bytes scratch(cu::searchsorted_scratch(t, len));
              cu::searchsorted(t, seq.data(), sdt, len, vals.data(), vdt, n, right, got.data(), odt, scratch.data());
              expect_same(want, got,
                          "searchsorted " + ts::dtype_name(sdt) + " in " + ts::dtype_name(vdt) + " len " +
                              std::to_string(len) + (sorted ? " sorted" : " unsorted") + (right ? " right" : " left"));
            }
    }
}

// A block's reduce map as the GPU's walk.
cu::MedianWalk walk_of(const cpu::ReduceMap& m) {
  cu::MedianWalk w;
  w.nd = static_cast<int>(m.extent.size());
  for (int d = 0; d < w.nd; ++d) w.extent[d] = m.extent[d], w.out_stride[d] = m.out_stride[d];
  w.size = m.size;
  w.outputs = m.outputs;
  return w;
}

struct Block {
  ts::Shape shape;
  std::vector<bool> reduced;
};

const Block kBlocks[] = {
    {{37}, {true}},
    {{1}, {true}},
    {{5, 9}, {false, true}},
    {{5, 9}, {true, false}},
    {{4, 3, 6}, {true, false, true}},
    {{2, 1, 7, 3}, {false, true, true, false}},
    {{300}, {true}},
    {{64, 2}, {true, false}},
    {{3, 0, 4}, {false, true, false}},
};

TEST_F(CudaSearch, MedianRadixPassesMatchTheCpus) {
  std::mt19937 rng(11);
  for (DType t : {DType::f32, DType::f64})
    for (const Block& b : kBlocks)
      for (bool masked : {false, true})
        for (int bits : {1, 2, 4, 8}) {
          const cpu::ReduceMap m = cpu::reduce_map(b.shape, b.reduced);
          const cu::MedianWalk w = walk_of(m);
          const Bytes x = values(t, m.size, rng, false);
          std::vector<unsigned char> maskv(static_cast<std::size_t>(m.size));
          for (auto& v : maskv) v = rng() % 3 != 0;
          const bool* mask = masked ? reinterpret_cast<const bool*>(maskv.data()) : nullptr;
          const std::string what = ts::dtype_name(t) + " block " + std::to_string(m.size) + " bits " +
                                   std::to_string(bits) + (masked ? " masked" : "");
          cpu::RadixSelect sel(t, m.outputs, bits);
          const std::size_t o = static_cast<std::size_t>(std::max<std::int64_t>(m.outputs, 1));
          std::vector<std::uint64_t> prefix(2 * o);
          std::vector<std::int64_t> rank(2 * o);
          std::vector<unsigned char> valid(o);
          int error = 0;
          const cu::MedianState st{prefix.data(), rank.data(), valid.data(), &error};
          cu::median_reset(st, m.outputs);
          for (int p = 0; p < sel.passes(); ++p) {
            const std::size_t h = static_cast<std::size_t>(m.outputs * sel.hist_per_output(p));
            std::vector<std::int64_t> want(h, 77), got(h, 77);
            sel.count(p, x.data(), mask, m, want.data());
            cu::median_count(t, bits, p, w, x.data(), mask, st, got.data());
            ASSERT_EQ(want, got) << what << " pass " << p;
            sel.advance(p, want.data());
            cu::median_advance(t, bits, p, m.outputs, got.data(), st);
          }
          const std::size_t bytes = static_cast<std::size_t>(m.outputs) * ts::itemsize(t);
          Bytes lo_w(bytes, 0xcd), hi_w(bytes, 0xcd), lo_g(bytes, 0xcd), hi_g(bytes, 0xcd), lo_s(bytes), hi_s(bytes);
          sel.finish(lo_w.data(), hi_w.data());
          cu::median_finish(t, m.outputs, st, lo_g.data(), hi_g.data());
          EXPECT_EQ(error, 0) << what;
          expect_same(lo_w, lo_g, what + " lo");
          expect_same(hi_w, hi_g, what + " hi");
          // Selections held whole: nth_element finds the same elements.
          cpu::select_middle(t, x.data(), mask, m, lo_s.data(), hi_s.data());
          expect_same(lo_s, lo_g, what + " lo vs select_middle");
          expect_same(hi_s, hi_g, what + " hi vs select_middle");
        }
}

}  // namespace
