// The CUDA backend's stencil and scan kernels (backend/cuda/stencil.hpp)
// against the CPU's (backend/cpu/stencil.hpp), bit for bit, on an emulated
// GPU: device memory is host memory and each kernel runs as a loop over its
// elements on this thread, through the same __host__ __device__ functors a
// GPU runs. Every dtype each kernel takes, blocks read from several
// segments (the halo pieces) with rows missing at the array's ends, large
// and small difference orders, scans with and without carried offsets, and
// inputs with NaN, infinities, signed zeros and the integer extremes.
// Output buffers start with the same garbage on both sides, so an element
// one side leaves unwritten shows too. NaN results only need to be NaN on
// both sides (which NaN an x86 operation returns depends on the
// instruction the compiler picked; a GPU's carry no payload).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/stencil.hpp"
#include "backend/cuda/stencil.hpp"
#include "backend/cuda/stream.hpp"
#include "core/dispatch.hpp"
#include "core/promote.hpp"
#include "tessera/array.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace cpu = tessera::detail::cpu;
namespace cu = tessera::cuda;

using ts::DType;
using ts::Slice;

using namespace tessera::testing::cuda;

namespace {

const DType kFloat[] = {DType::f32, DType::f64};

// Element i of stream `seed` in T: integers over their whole range (the
// extremes among them, so sums wrap), floats mostly of moderate size with
// NaN, infinities, signed zeros and huge values mixed in.
template <class T>
T value_at(std::int64_t i, std::uint64_t seed) {
  const std::uint64_t r = mix(static_cast<std::uint64_t>(i) * 1315423911u + seed);
  if constexpr (std::is_same_v<T, bool>) {
    return (r & 1) != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (r % 23) {
      case 0: return std::numeric_limits<T>::quiet_NaN();
      case 1: return std::numeric_limits<T>::infinity();
      case 2: return -std::numeric_limits<T>::infinity();
      case 3: return T(-0.0);
      case 4: return T(0);
      case 5: return std::numeric_limits<T>::max() / T(3);
      case 6: return std::numeric_limits<T>::denorm_min();
      default: return static_cast<T>(static_cast<double>(static_cast<std::int64_t>(r >> 11) % 20001 - 10000) / 97.0);
    }
  } else {
    if (r % 11 == 0) return std::numeric_limits<T>::max();
    if (r % 13 == 0) return std::numeric_limits<T>::min();
    return static_cast<T>(r >> 7);
  }
}

// Finite values only (interp's tables and the like), sorted when asked.
template <class T>
T finite_at(std::int64_t i, std::uint64_t seed) {
  const std::uint64_t r = mix(static_cast<std::uint64_t>(i) * 2654435761u + seed);
  return static_cast<T>(static_cast<double>(static_cast<std::int64_t>(r >> 11) % 2001 - 1000) / 37.0);
}

Bytes input(DType t, std::int64_t n, std::uint64_t seed) {
  Bytes b(static_cast<std::size_t>(n) * isz(t));
  ts::detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = value_at<T>(i, seed);
      std::memcpy(b.data() + static_cast<std::size_t>(i) * sizeof(T), &v, sizeof(T));
    }
  });
  return b;
}

// same_bits, and the CPU wrote its output (so equal garbage proves nothing).
::testing::AssertionResult written_and_same(const Bytes& want, const Bytes& got, DType t, const std::string& what) {
  if (!want.empty() && want.size() == got.size() && want == garbage(want.size()))
    return ::testing::AssertionFailure() << what << ": the CPU kernel wrote nothing";
  return same_bits(want, got, t, what);
}

std::string name(DType t) { return ts::dtype_name(t); }

// A sequence of `rows` rows (outer, rows, inner) of dtype t cut into
// pieces at `cuts`, each piece its own buffer (outer, piece rows, inner),
// the rows [skip_lo, rows - skip_hi) only: the segments a halo exchange
// hands a kernel, with rows missing at the ends (the array's ends).
struct Pieces {
  std::vector<Bytes> bufs;
  std::vector<cpu::Segment> cpu_segs;
  std::vector<cu::Segment> cuda_segs;
};

Pieces pieces(DType t, const Bytes& whole, std::int64_t outer, std::int64_t rows, std::int64_t inner,
              std::vector<std::int64_t> cuts, std::int64_t shift) {
  Pieces p;
  const std::size_t w = isz(t);
  p.bufs.reserve(cuts.size());
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::int64_t a = cuts[c], b = cuts[c + 1];
    if (a >= b) continue;
    Bytes buf(static_cast<std::size_t>(outer * (b - a) * inner) * w);
    for (std::int64_t o = 0; o < outer; ++o)
      std::memcpy(buf.data() + static_cast<std::size_t>(o * (b - a) * inner) * w,
                  whole.data() + static_cast<std::size_t>((o * rows + a) * inner) * w,
                  static_cast<std::size_t>((b - a) * inner) * w);
    p.bufs.push_back(std::move(buf));
    const void* d = p.bufs.back().data();
    p.cpu_segs.push_back(cpu::Segment{d, t, a + shift, b + shift, (b - a) * inner});
    p.cuda_segs.push_back(cu::Segment{d, t, a + shift, b + shift, (b - a) * inner, false});
  }
  return p;
}

class CudaStencil : public EmulatedGpu {};

// ----------------------------------------------------------------- diff

TEST_F(CudaStencil, DiffEveryDtypeOrderAndSegmentation) {
  const std::int64_t outer = 3, inner = 4, m = 9;
  for (DType t : kDTypes)
    for (int n : {1, 2, 3, 5, 16, 17, 23}) {
      const std::int64_t rows = m + n;
      const Bytes whole = input(t, outer * rows * inner, 7 + static_cast<std::uint64_t>(n));
      for (const std::vector<std::int64_t>& cuts :
           {std::vector<std::int64_t>{0, rows}, {0, 1, rows - 2, rows}, {0, 3, 4, 8, rows - 1, rows}}) {
        Pieces p = pieces(t, whole, outer, rows, inner, cuts, 0);
        const cpu::Lines cl{outer, m, inner};
        const cu::Lines gl{outer, m, inner};
        Bytes want = garbage(static_cast<std::size_t>(outer * m * inner) * isz(t)), got = want;
        cpu::diff_block(t, p.cpu_segs, want.data(), cl, n);
        Bytes scratch(static_cast<std::size_t>(cu::diff_scratch_bytes(t, gl, n)));
        cu::diff(t, p.cuda_segs, got.data(), gl, n, scratch.empty() ? nullptr : scratch.data());
        EXPECT_TRUE(written_and_same(want, got, t, "diff " + name(t) + " n=" + std::to_string(n) + " in " +
                                                std::to_string(p.cuda_segs.size()) + " segments"));
      }
    }
}

// A rank-0 prepend and append: a broadcast segment on the GPU, a row of
// copies on the CPU.
TEST_F(CudaStencil, DiffBroadcastRows) {
  const std::int64_t outer = 2, inner = 3, m = 6;
  for (DType t : kDTypes)
    for (int n : {1, 2, 20}) {
      const std::int64_t rows = m + n;  // row 0 the prepend, row rows-1 the append
      Bytes whole = input(t, outer * rows * inner, 99);
      const std::size_t w = isz(t);
      Bytes pre(w), app(w);
      std::memcpy(pre.data(), whole.data(), w);
      std::memcpy(app.data(), whole.data() + w, w);
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < inner; ++j) {
          std::memcpy(whole.data() + static_cast<std::size_t>((o * rows) * inner + j) * w, pre.data(), w);
          std::memcpy(whole.data() + static_cast<std::size_t>((o * rows + rows - 1) * inner + j) * w, app.data(), w);
        }
      Pieces p = pieces(t, whole, outer, rows, inner, {0, 1, 4, rows - 1, rows}, 0);
      p.cuda_segs.front() = cu::Segment{pre.data(), t, 0, 1, 0, true};
      p.cuda_segs.back() = cu::Segment{app.data(), t, rows - 1, rows, 0, true};
      Bytes want = garbage(static_cast<std::size_t>(outer * m * inner) * w), got = want;
      cpu::diff_block(t, p.cpu_segs, want.data(), cpu::Lines{outer, m, inner}, n);
      const cu::Lines gl{outer, m, inner};
      Bytes scratch(static_cast<std::size_t>(cu::diff_scratch_bytes(t, gl, n)));
      cu::diff(t, p.cuda_segs, got.data(), gl, n, scratch.empty() ? nullptr : scratch.data());
      EXPECT_TRUE(written_and_same(want, got, t, "diff with broadcast rows " + name(t) + " n=" + std::to_string(n)));
    }
}

// --------------------------------------------------------------- cumsum

TEST_F(CudaStencil, CumsumTotalsOffsetsAndScans) {
  for (DType t : kDTypes)
    for (const cpu::Lines& l : {cpu::Lines{1, 37, 1}, cpu::Lines{3, 11, 5}, cpu::Lines{4, 1, 7}, cpu::Lines{2, 0, 3}}) {
      const cu::Lines gl{l.outer, l.len, l.inner};
      const DType out = ts::detail::sum_dtype(t);
      const std::size_t ow = isz(out);
      const Bytes x = input(t, l.outer * l.len * l.inner, 3);
      const std::string what = name(t) + " (" + std::to_string(l.outer) + ", " + std::to_string(l.len) + ", " +
                               std::to_string(l.inner) + ")";
      Bytes want = garbage(static_cast<std::size_t>(l.outer * l.inner) * ow), got = want;
      cpu::line_totals(t, x.data(), want.data(), l);
      cu::line_totals(t, x.data(), got.data(), gl);
      EXPECT_TRUE(written_and_same(want, got, out, "line_totals " + what));

      const int parts = 4;
      const Bytes before = input(out, l.outer * parts * l.inner, 5);
      Bytes off_want = garbage(static_cast<std::size_t>(l.outer * l.inner) * ow), off_got = off_want;
      cpu::scan_offsets(t, before.data(), parts, l, off_want.data());
      cu::scan_offsets(t, before.data(), parts, gl, off_got.data());
      EXPECT_TRUE(written_and_same(off_want, off_got, out, "scan_offsets " + what));

      for (bool with_offset : {false, true}) {
        Bytes y_want = garbage(static_cast<std::size_t>(l.outer * l.len * l.inner) * ow), y_got = y_want;
        cpu::scan_block(t, x.data(), y_want.data(), l, with_offset ? off_want.data() : nullptr);
        cu::scan_block(t, x.data(), y_got.data(), gl, with_offset ? off_want.data() : nullptr);
        EXPECT_TRUE(written_and_same(y_want, y_got, out, "scan_block " + what + (with_offset ? " from offsets" : "")));
      }
    }
}

// ------------------------------------------------------------- convolve

// The block's rows [first, first + m) of an array of `total` rows: the
// segments hold rows [first - hl, first + m + hr) cut at the array's ends.
TEST_F(CudaStencil, ConvolveEveryInputDtypeAndKernelSize) {
  const std::int64_t outer = 2, inner = 3, total = 20;
  for (DType t : kFloat)
    for (DType in : kDTypes)
      for (std::int64_t K : {1, 2, 3, 4, 7})
        for (std::int64_t first : {0, 6, 15}) {
          const std::int64_t m = std::min<std::int64_t>(5, total - first), hl = K / 2, hr = (K - 1) / 2;
          const Bytes whole = input(in, outer * total * inner, 11 + static_cast<std::uint64_t>(K));
          const std::int64_t r0 = std::max<std::int64_t>(0, first - hl), r1 = std::min(total, first + m + hr);
          // Pieces in global rows: before the block, the block, after it.
          Pieces p = pieces(in, whole, outer, total, inner, {r0, first, first + m, r1}, 0);
          Bytes wv(static_cast<std::size_t>(K) * isz(t));
          if (t == DType::f64) {
            for (std::int64_t k = 0; k < K; ++k) {
              const double v = finite_at<double>(k, 1);
              std::memcpy(wv.data() + k * 8, &v, 8);
            }
          } else {
            for (std::int64_t k = 0; k < K; ++k) {
              const float v = finite_at<float>(k, 1);
              std::memcpy(wv.data() + k * 4, &v, 4);
            }
          }
          cpu::Segment mid;
          for (const cpu::Segment& g : p.cpu_segs)
            if (g.stop - g.start > mid.stop - mid.start) mid = g;
          Bytes want = garbage(static_cast<std::size_t>(outer * m * inner) * isz(t)), got = want;
          cpu::convolve_block(t, p.cpu_segs, mid, want.data(), cpu::Lines{outer, m, inner}, first, wv.data(), t, K, hl);
          cu::convolve(t, p.cuda_segs, got.data(), cu::Lines{outer, m, inner}, first, wv.data(), K, hl);
          EXPECT_TRUE(written_and_same(want, got, t,
                                "convolve " + name(in) + " in " + name(t) + " K=" + std::to_string(K) +
                                    " first=" + std::to_string(first)));
        }
}

TEST_F(CudaStencil, Convolve2dClippedBlocks) {
  const std::int64_t R = 9, C = 8, outer = 2;
  for (DType t : kFloat)
    for (DType in : {DType::i32, DType::u8, DType::f32, DType::f64})
      for (std::int64_t kr : {1, 2, 3})
        for (std::int64_t kc : {1, 3, 4})
          for (const auto& ob : {std::vector<Slice>{{0, 2}, {0, 4}, {0, 3}}, std::vector<Slice>{{0, 2}, {4, 9}, {2, 8}},
                                 std::vector<Slice>{{0, 2}, {3, 6}, {0, 8}}}) {
            std::vector<Slice> ib = ob;
            ib[1] = Slice{std::max<std::int64_t>(0, ob[1].start - kr / 2), std::min(R, ob[1].stop + (kr - 1) / 2)};
            ib[2] = Slice{std::max<std::int64_t>(0, ob[2].start - kc / 2), std::min(C, ob[2].stop + (kc - 1) / 2)};
            const std::int64_t ni = outer * ib[1].size() * ib[2].size();
            const std::int64_t no = outer * ob[1].size() * ob[2].size();
            const Bytes x = input(in, ni, 21);
            Bytes wv(static_cast<std::size_t>(kr * kc) * isz(t));
            for (std::int64_t k = 0; k < kr * kc; ++k) {
              if (t == DType::f64) {
                const double v = finite_at<double>(k, 2);
                std::memcpy(wv.data() + k * 8, &v, 8);
              } else {
                const float v = finite_at<float>(k, 2);
                std::memcpy(wv.data() + k * 4, &v, 4);
              }
            }
            Bytes want = garbage(static_cast<std::size_t>(no) * isz(t)), got = want;
            cpu::convolve2d_block(t, x.data(), in, ib, want.data(), ob, wv.data(), t, kr, kc);
            cu::convolve2d(t, x.data(), in, ib, got.data(), ob, wv.data(), kr, kc);
            EXPECT_TRUE(written_and_same(want, got, t,
                                  "convolve2d " + name(in) + " in " + name(t) + " kernel " + std::to_string(kr) + "x" +
                                      std::to_string(kc) + " rows " + std::to_string(ob[1].start)));
          }
}

// ------------------------------------------------------------- gradient

TEST_F(CudaStencil, GradientEveryInputDtypeAtEndsAndInside) {
  const std::int64_t outer = 2, inner = 3, total = 12;
  for (DType t : kFloat)
    for (DType in : kDTypes)
      for (std::int64_t first : {0, 4, 9}) {
        const std::int64_t m = std::min<std::int64_t>(3, total - first);
        const std::int64_t r0 = std::max<std::int64_t>(0, first - 1), r1 = std::min(total, first + m + 1);
        const Bytes whole = input(in, outer * total * inner, 31);
        Pieces p = pieces(in, whole, outer, total, inner, {r0, first, first + m, r1}, 0);
        for (double h : {1.0, 0.3}) {
          Bytes want = garbage(static_cast<std::size_t>(outer * m * inner) * isz(t)), got = want;
          cpu::gradient_block(t, p.cpu_segs, r0, r1, want.data(), cpu::Lines{outer, m, inner}, first, h);
          cu::gradient(t, p.cuda_segs, r0, r1, got.data(), cu::Lines{outer, m, inner}, first, h);
          EXPECT_TRUE(written_and_same(want, got, t, "gradient " + name(in) + " in " + name(t) + " first=" +
                                                   std::to_string(first) + " h=" + std::to_string(h)));
        }
      }
}

// --------------------------------------------------------------- interp

TEST_F(CudaStencil, InterpEveryComputingType) {
  const std::int64_t n = 400, len = 17;
  for (DType tx : kFloat)
    for (DType tf : kFloat)
      for (DType to : kFloat)
        for (bool sorted : {true, false}) {
          Bytes x = input(tx, n, 41), xp(static_cast<std::size_t>(len) * isz(tx)),
                fp(static_cast<std::size_t>(len) * isz(tf));
          ts::detail::dispatch(tx, [&](auto tag) {
            using T = decltype(tag);
            if constexpr (std::is_floating_point_v<T>) {
              std::vector<T> v(static_cast<std::size_t>(len));
              for (std::int64_t k = 0; k < len; ++k) v[k] = finite_at<T>(k, 43);
              if (sorted) std::sort(v.begin(), v.end());
              v[5] = v[6];  // a flat step (dx == 0)
              std::memcpy(xp.data(), v.data(), xp.size());
              // Some x exactly on the table's points.
              for (std::int64_t k = 0; k < len; ++k) std::memcpy(x.data() + k * 3 * sizeof(T), &v[k], sizeof(T));
            }
          });
          ts::detail::dispatch(tf, [&](auto tag) {
            using T = decltype(tag);
            if constexpr (std::is_floating_point_v<T>)
              for (std::int64_t k = 0; k < len; ++k) {
                const T v = finite_at<T>(k, 47);
                std::memcpy(fp.data() + k * sizeof(T), &v, sizeof(T));
              }
          });
          Bytes want = garbage(static_cast<std::size_t>(n) * isz(to)), got = want;
          cpu::interp(tx, tf, to, x.data(), tx, want.data(), n, xp.data(), tx, fp.data(), tf, len);
          cu::interp(tx, tf, to, x.data(), got.data(), n, xp.data(), fp.data(), len);
          EXPECT_TRUE(written_and_same(want, got, to,
                                "interp x " + name(tx) + " fp " + name(tf) + " out " + name(to) +
                                    (sorted ? "" : " (unsorted table)")));
        }
}

}  // namespace
