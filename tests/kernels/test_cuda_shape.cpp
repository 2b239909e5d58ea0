// The CUDA backend's shape kernels (backend/cuda/shape.hpp) and the shape
// primitives' CUDA paths (eval_cuda of transpose and expand_dims, the affine
// ops' and reshape's write_block_cuda) against the CPU's, byte for byte, on
// an emulated GPU: device memory is host memory and each kernel runs as a
// loop on this thread through the same functors a GPU runs. Random walks
// (transposes, reversed, stepped and broadcast dims, sub-boxes of blocks,
// source buffers holding only the box read or the whole array), every
// element width, empty and rank-0 boxes. Output buffers start with the same
// garbage on both sides, so an element one side leaves unwritten shows too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/shape.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/shape.hpp"
#include "backend/cuda/stream.hpp"
#include "core/array_impl.hpp"
#include "core/shape_ops.hpp"
#include "primitives/reshape.hpp"
#include "primitives/shape.hpp"
#include "tessera/error.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace cpu = tessera::detail::cpu;
namespace cu = tessera::cuda;
namespace dt = tessera::detail;

using ts::DType;
using ts::Slice;
using Shape = std::vector<std::int64_t>;
using Box = std::vector<Slice>;

using namespace tessera::testing::cuda;

namespace {

// Distinct bytes everywhere, so a misplaced element shows.
Bytes input(std::size_t bytes, unsigned seed) {
  Bytes b(bytes);
  for (std::size_t k = 0; k < bytes; ++k) b[k] = static_cast<unsigned char>((k * 131 + seed * 17 + k / 256) & 0xff);
  return b;
}

std::string str(const Shape& s) {
  std::string out = "(";
  for (std::size_t d = 0; d < s.size(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
  return out + ")";
}

std::string str(const Box& b) {
  std::string out = "[";
  for (std::size_t d = 0; d < b.size(); ++d)
    out += (d ? ", " : "") + std::to_string(b[d].start) + ":" + std::to_string(b[d].stop);
  return out + "]";
}

Shape sizes(const Box& b) {
  Shape s;
  for (const Slice& x : b) s.push_back(x.size());
  return s;
}

Box whole(const Shape& s) {
  Box b;
  for (auto n : s) b.push_back({0, n});
  return b;
}

// A random non-empty sub-box of `b` (`b` itself about a third of the time).
Box sub_box(std::mt19937& rng, const Box& b) {
  Box r = b;
  for (Slice& x : r) {
    if (x.size() <= 1 || rng() % 3 == 0) continue;
    const std::int64_t a = x.start + static_cast<std::int64_t>(rng() % static_cast<unsigned>(x.size()));
    const std::int64_t z = a + 1 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(x.stop - a));
    x = {a, z};
  }
  return r;
}

// The box `box` of a row-major block covering `from`, as its own buffer.
Bytes extract(const Bytes& src, const Box& from, const Box& box, std::size_t isz) {
  Bytes out(static_cast<std::size_t>(count(sizes(box))) * isz);
  if (!out.empty()) dt::copy_box(src.data(), from, out.data(), box, box, isz);
  return out;
}

constexpr std::size_t kWidths[] = {1, 2, 4, 8};

class CudaShape : public EmulatedGpu {};

// ----------------------------------------------------------- strided copy

// Transposes (large enough for the CPU's tiled path), reversed and
// broadcast dims, every width: the two copies agree.
TEST_F(CudaShape, StridedCopyMatchesCpu) {
  std::mt19937 rng(7);
  int runs = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int r = static_cast<int>(rng() % 6);
    Shape in(static_cast<std::size_t>(r));
    for (auto& n : in) n = 1 + static_cast<std::int64_t>(rng() % (trial % 3 == 0 && r <= 3 ? 40 : 6));
    std::vector<int> perm(static_cast<std::size_t>(r));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const std::size_t isz = kWidths[rng() % 4];
    const auto st = dt::strides_of(in);
    const Bytes src = input(static_cast<std::size_t>(count(in)) * isz, static_cast<unsigned>(trial));
    // Output dim j walks input dim perm[j], reversed one time in four, or
    // (a size-1 input dim) broadcast to 3.
    Shape len(static_cast<std::size_t>(r));
    std::vector<std::int64_t> ss(static_cast<std::size_t>(r)), ds;
    std::int64_t base = 0;
    for (int j = 0; j < r; ++j) {
      const int d = perm[static_cast<std::size_t>(j)];
      len[j] = in[d];
      ss[j] = st[d] * static_cast<std::int64_t>(isz);
      if (in[d] == 1 && rng() % 2) {
        len[j] = 3;
        ss[j] = 0;
      } else if (rng() % 4 == 0) {
        base += (in[d] - 1) * ss[j];
        ss[j] = -ss[j];
      }
    }
    ds = dt::strides_of(len);
    for (auto& x : ds) x *= static_cast<std::int64_t>(isz);
    Bytes want = garbage(static_cast<std::size_t>(count(len)) * isz), got = want;
    cpu::strided_copy(src.data() + base, ss, want.data(), ds, len, isz);
    cu::strided_copy("test", src.data() + base, ss, got.data(), ds, len, isz);
    ASSERT_EQ(want, got) << "in " << str(in) << " len " << str(len) << " width " << isz;
    ++runs;
  }
  EXPECT_EQ(runs, 300);
}

// ----------------------------------------------------- affine copies

struct AffineCase {
  Shape in, out;
  dt::Affine map;
};

// A random affine map: each input dim read by one output dim (in a random
// order) with a step of +-1, +-2 or 3 from an offset inside it, size-1
// input dims sometimes broadcast (step 0), new dims (src -1) here and
// there.
AffineCase random_affine(std::mt19937& rng) {
  AffineCase c;
  const int r = static_cast<int>(rng() % 5);
  for (int d = 0; d < r; ++d) c.in.push_back(1 + static_cast<std::int64_t>(rng() % 7));
  c.map.in_rank = r;
  std::vector<int> order(static_cast<std::size_t>(r));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  auto add_new = [&] {
    c.map.src.push_back(-1);
    c.map.offset.push_back(0);
    c.map.step.push_back(0);
    c.out.push_back(1 + static_cast<std::int64_t>(rng() % 3));
  };
  for (int d : order) {
    if (rng() % 5 == 0) add_new();
    const std::int64_t n = c.in[static_cast<std::size_t>(d)];
    c.map.src.push_back(d);
    if (n == 1 && rng() % 2) {
      c.map.offset.push_back(0);
      c.map.step.push_back(0);
      c.out.push_back(1 + static_cast<std::int64_t>(rng() % 4));
      continue;
    }
    const std::int64_t steps[] = {1, 1, -1, 2, -2, 3};
    const std::int64_t s = steps[rng() % 6];
    const std::int64_t o = static_cast<std::int64_t>(rng() % static_cast<unsigned>(n));
    // Indices o, o + s, ... inside [0, n).
    const std::int64_t k = s > 0 ? (n - 1 - o) / s + 1 : o / -s + 1;
    c.map.offset.push_back(o);
    c.map.step.push_back(s);
    c.out.push_back(k);
  }
  if (rng() % 5 == 0) add_new();
  return c;
}

// The input box that the output box `r` reads (spmd/lower_shape.cpp's image).
Box image(const dt::Affine& m, const Box& r) {
  Box b(static_cast<std::size_t>(m.in_rank), Slice{0, 1});
  for (std::size_t j = 0; j < r.size(); ++j) {
    if (m.src[j] < 0) continue;
    const std::int64_t a = m.offset[j] + m.step[j] * r[j].start;
    const std::int64_t z = m.offset[j] + m.step[j] * (r[j].stop - 1);
    b[static_cast<std::size_t>(m.src[j])] = {std::min(a, z), std::max(a, z) + 1};
  }
  return b;
}

// cpu::copy_affine against affine_walk + cuda::strided_copy: a region
// inside a block, the source holding the whole array or just the image.
TEST_F(CudaShape, AffineCopyMatchesCpu) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const AffineCase c = random_affine(rng);
    const std::size_t isz = kWidths[rng() % 4];
    const Bytes full = input(static_cast<std::size_t>(count(c.in)) * isz, static_cast<unsigned>(trial));
    const Box blk = sub_box(rng, whole(c.out));
    const Box r = sub_box(rng, blk);
    const bool part = rng() % 2;
    const Box sbox = part ? image(c.map, r) : whole(c.in);
    const Bytes src = part ? extract(full, whole(c.in), sbox, isz) : full;
    Bytes want = garbage(static_cast<std::size_t>(count(sizes(blk))) * isz), got = want;
    cpu::copy_affine(c.map, src.data(), sbox, want.data(), blk, r, isz);
    const dt::AffineWalk w = dt::affine_walk(c.map, sbox, blk, r, isz);
    cu::strided_copy("test", src.data() + w.src_offset, w.src_strides, got.data() + w.dst_offset, w.dst_strides,
                     w.extents, isz);
    ASSERT_EQ(want, got) << "in " << str(c.in) << " out " << str(c.out) << " block " << str(blk) << " region "
                         << str(r) << " source " << str(sbox) << " width " << isz;
  }
}

// Pad's write_block_cuda against its write_block: the fill, then several
// copies over one block, in order (later copies overwrite earlier ones).
TEST_F(CudaShape, PadWriteBlockMatchesCpu) {
  std::mt19937 rng(13);
  for (std::size_t isz : kWidths) {
    Bytes fill(isz);
    for (std::size_t k = 0; k < isz; ++k) fill[k] = static_cast<unsigned char>(0x30 + k);
    const auto prim = dt::make_pad({{1, 2}}, fill, "fill");
    const auto& op = dynamic_cast<const dt::AffineOp&>(*prim);
    for (int trial = 0; trial < 60; ++trial) {
      AffineCase c = random_affine(rng);
      const Bytes src = input(static_cast<std::size_t>(count(c.in)) * isz, static_cast<unsigned>(trial));
      const Box sbox = whole(c.in);
      const Box blk = sub_box(rng, whole(c.out));
      std::vector<Box> regions;
      for (int k = 0; k < 3; ++k)
        if (rng() % 2) regions.push_back(sub_box(rng, blk));
      std::vector<dt::AffineCopy> copies;
      for (const Box& r : regions) copies.push_back({c.map, src.data(), sbox, r});
      Bytes want = garbage(static_cast<std::size_t>(count(sizes(blk))) * isz), got = want;
      op.write_block(want.data(), blk, isz, copies);
      op.write_block_cuda(got.data(), blk, isz, copies);
      ASSERT_EQ(want, got) << "out " << str(c.out) << " block " << str(blk) << " width " << isz;
    }
  }
}

// ------------------------------------------------------------- flat copy

// Reshape's write_block_cuda against its write_block: each output block's
// input boxes (reshape_sources), from buffers holding just the box or the
// whole array.
TEST_F(CudaShape, ReshapeWriteBlockMatchesCpu) {
  const std::pair<Shape, Shape> cases[] = {
      {{6, 4}, {24}},          {{24}, {2, 3, 4}},          {{2, 3, 4}, {4, 6}},     {{4, 6, 5}, {2, 2, 30}},
      {{3, 1, 8}, {1, 24, 1}}, {{2, 3, 4, 5}, {6, 20}},    {{1}, {}},               {{}, {1, 1}},
      {{5, 12}, {3, 20}},      {{7, 6}, {2, 21}},          {{2, 2, 2, 2, 2, 2}, {8, 8}}, {{9, 8, 7}, {4, 2, 63}},
      {{10, 10}, {4, 25}},     {{1, 1, 60}, {3, 4, 5, 1}}, {{12, 5, 2}, {6, 2, 10}}};
  std::mt19937 rng(17);
  int copies_run = 0;
  for (const auto& [in, out] : cases) {
    const auto groups = dt::reshape_groups(in, out);
    const auto prim = dt::make_reshape(out, std::nullopt);
    const auto& op = dynamic_cast<const dt::Reshape&>(*prim);
    for (int trial = 0; trial < 40; ++trial) {
      const std::size_t isz = kWidths[rng() % 4];
      const Bytes full = input(static_cast<std::size_t>(count(in)) * isz, static_cast<unsigned>(trial));
      const Box blk = sub_box(rng, whole(out));
      const auto boxes = dt::reshape_sources(in, out, groups, blk, SIZE_MAX);
      ASSERT_TRUE(boxes.has_value());
      std::vector<Bytes> held;
      std::vector<Box> sboxes;
      for (const Box& b : *boxes) {
        const bool part = rng() % 2;
        sboxes.push_back(part ? b : whole(in));
        held.push_back(part ? extract(full, whole(in), b, isz) : full);
      }
      std::vector<dt::ReshapeCopy> copies;
      for (std::size_t k = 0; k < boxes->size(); ++k) copies.push_back({held[k].data(), sboxes[k], (*boxes)[k]});
      Bytes want = garbage(static_cast<std::size_t>(count(sizes(blk))) * isz), got = want;
      op.write_block(want.data(), blk, in, isz, copies);
      op.write_block_cuda(got.data(), blk, in, isz, copies);
      ASSERT_EQ(want, got) << "in " << str(in) << " out " << str(out) << " block " << str(blk) << " width " << isz;
      copies_run += static_cast<int>(copies.size());
    }
  }
  EXPECT_GT(copies_run, 600);
}

// --------------------------------------------------------- primitives

// transpose's eval_cuda against its eval_cpu, every permutation of ranks up
// to 4 (and the tiled sizes), and expand_dims's block copy.
TEST_F(CudaShape, TransposeAndExpandDimsMatchCpu) {
  const Shape shapes[] = {{3, 5}, {40, 33}, {2, 3, 4}, {9, 1, 17}, {2, 3, 4, 5}, {1, 64, 2, 9}, {0, 3}};
  int runs = 0;
  for (const Shape& s : shapes) {
    std::vector<int> perm(s.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      Shape os;
      for (int p : perm) os.push_back(s[static_cast<std::size_t>(p)]);
      for (std::size_t isz : {std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
        const DType t = isz == 1 ? DType::i8 : isz == 4 ? DType::i32 : DType::i64;
        const Bytes x = input(static_cast<std::size_t>(count(s)) * isz, static_cast<unsigned>(runs));
        Bytes want = garbage(x.size()), got = want;
        const auto prim = dt::make_transpose("transpose", perm);
        dt::LocalArgs a{{x.empty() ? nullptr : x.data(), s, t, whole(s)}};
        dt::LocalOuts w{{want.empty() ? nullptr : want.data(), os, t, whole(os)}};
        dt::LocalOuts g{{got.empty() ? nullptr : got.data(), os, t, whole(os)}};
        prim->eval_cpu(a, w);
        prim->eval_cuda(a, g);
        ASSERT_EQ(want, got) << "transpose of " << str(s) << " to " << str(os);
        ++runs;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  EXPECT_EQ(runs, 3 * (2 + 2 + 6 + 6 + 24 + 24 + 2));
  const Shape s{4, 7};
  const Bytes x = input(28 * 8, 3);
  Bytes want = garbage(x.size()), got = want;
  const auto prim = dt::make_expand_dims(1);
  dt::LocalArgs a{{x.data(), s, DType::f64, whole(s)}};
  dt::LocalOuts w{{want.data(), {4, 1, 7}, DType::f64, whole({4, 1, 7})}};
  dt::LocalOuts g{{got.data(), {4, 1, 7}, DType::f64, whole({4, 1, 7})}};
  prim->eval_cpu(a, w);
  prim->eval_cuda(a, g);
  EXPECT_EQ(want, got);
}

TEST_F(CudaShape, FillBytesEveryWidth) {
  for (std::size_t isz : kWidths)
    for (std::int64_t n : {0, 1, 2, 37, 1000}) {
      Bytes value(isz);
      for (std::size_t k = 0; k < isz; ++k) value[k] = static_cast<unsigned char>(0xc0 + k);
      Bytes want = garbage(static_cast<std::size_t>(n + 1) * isz), got = want;
      cpu::fill_bytes(want.data(), n, value);
      cu::fill_bytes("pad", got.data(), n, value);
      EXPECT_EQ(want, got) << n << " elements of " << isz << " bytes";
    }
}

// ---------------------------------------------------------------- errors

// Nine dims that no two merge: a ShapeError naming the op.
TEST_F(CudaShape, MoreThanEightDimsIsAShapeError) {
  const Shape len(9, 2);
  std::vector<std::int64_t> ss(9), ds(9);
  for (int j = 0; j < 9; ++j) {
    ss[j] = std::int64_t{1} << j;        // reversed order: no dim steps over the next as one run
    ds[j] = std::int64_t{1} << (8 - j);
  }
  Bytes src(512), dst(512);
  try {
    cu::strided_copy("transpose", src.data(), ss, dst.data(), ds, len, 1);
    ADD_FAILURE() << "no error";
  } catch (const ts::ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "[transpose] CUDA kernels take arrays of at most 8 dims, got 9");
  }
  // Nine dims that merge into one are a device copy.
  std::vector<std::int64_t> c(9);
  for (int j = 0; j < 9; ++j) c[j] = std::int64_t{1} << (8 - j);
  const Bytes x = input(512, 1);
  cu::strided_copy("transpose", x.data(), c, dst.data(), c, len, 1);
  EXPECT_EQ(dst, x);
}

}  // namespace
