// The CUDA backend's random kernels (backend/cuda/random.hpp) against the
// CPU's (backend/cpu/random.hpp), bit for bit, on an emulated GPU: device
// memory is host memory and each kernel runs as a loop over its elements on
// this thread, through the same __host__ __device__ functors a GPU runs.
// Blocks of every kind: whole arrays, interior boxes, boxes one element wide
// in some dims, rank 0, empty, and ranks past 8 that merge; keys given as
// words and as a key array the kernel reads; split and fold_in over many
// keys. Output buffers start with the same garbage on both sides, so an
// element one side leaves unwritten shows too.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/random.hpp"
#include "backend/cuda/random.hpp"
#include "backend/cuda/stream.hpp"
#include "tessera/error.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace cpu = tessera::cpu;
namespace cu = tessera::cuda;

using ts::DType;
using ts::Slice;
using Shape = std::vector<std::int64_t>;
using Box = std::vector<Slice>;

using namespace tessera::testing::cuda;

namespace {

class CudaRandom : public EmulatedGpu {};

std::int64_t count(const Box& box) {
  std::int64_t n = 1;
  for (const auto& s : box) n *= s.size() > 0 ? s.size() : 0;
  return n;
}

struct Case {
  Shape shape;
  Box box;
};

// Whole arrays, interior boxes, one-element dims (folded into the base),
// dims spanned whole (merged), rank 0, empty blocks, and rank 10.
std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({{}, {}});
  c.push_back({{1}, {{0, 1}}});
  c.push_back({{1000}, {{0, 1000}}});
  c.push_back({{1000}, {{250, 500}}});
  c.push_back({{0}, {{0, 0}}});
  c.push_back({{7, 0}, {{0, 7}, {0, 0}}});
  c.push_back({{16, 24}, {{0, 16}, {0, 24}}});
  c.push_back({{16, 24}, {{4, 8}, {0, 24}}});
  c.push_back({{16, 24}, {{0, 16}, {6, 12}}});
  c.push_back({{16, 24}, {{3, 4}, {5, 17}}});
  c.push_back({{5, 6, 7}, {{1, 4}, {2, 3}, {0, 7}}});
  c.push_back({{5, 6, 7}, {{1, 4}, {0, 6}, {3, 7}}});
  c.push_back({{4, 3, 5, 2}, {{1, 3}, {0, 3}, {1, 4}, {0, 2}}});
  // Rank 10: strided in at most 5 dims, whole or one wide in the rest.
  Shape s10 = {2, 3, 2, 2, 3, 2, 2, 2, 3, 2};
  c.push_back({s10, {{0, 2}, {0, 3}, {0, 2}, {0, 2}, {0, 3}, {0, 2}, {0, 2}, {0, 2}, {0, 3}, {0, 2}}});
  c.push_back({s10, {{1, 2}, {1, 3}, {0, 2}, {1, 2}, {0, 2}, {0, 2}, {1, 2}, {0, 2}, {1, 3}, {0, 1}}});
  return c;
}

struct KeyCase {
  std::uint32_t k0, k1;
};
const KeyCase kKeys[] = {{0, 0}, {0, 42}, {0xFFFFFFFFu, 0xFFFFFFFFu}, {0x12345678u, 0x9ABCDEF0u}};

// The CPU's block and the GPU's, with the key as words and as a device
// pointer; expected bit for bit equal.
template <class RunCpu, class RunGpu>
void compare(DType t, const Case& c, const KeyCase& k, const std::string& what, RunCpu run_cpu, RunGpu run_gpu) {
  const std::size_t nbytes = static_cast<std::size_t>(count(c.box)) * ts::itemsize(t);
  Bytes want = garbage(nbytes), got = garbage(nbytes), got_ptr = garbage(nbytes);
  run_cpu(want.data());
  run_gpu(got.data(), cu::SampleKey{nullptr, k.k0, k.k1});
  const std::uint32_t words[2] = {k.k0, k.k1};
  run_gpu(got_ptr.data(), cu::SampleKey{words, 0, 0});
  const std::string where = what + " " + ts::dtype_name(t) + " key (" + std::to_string(k.k0) + ", " +
                            std::to_string(k.k1) + ") case rank " + std::to_string(c.shape.size());
  EXPECT_TRUE(want == got) << where;
  EXPECT_TRUE(want == got_ptr) << where << " (key array)";
}

TEST_F(CudaRandom, UniformMatchesCpu) {
  for (DType t : {DType::f32, DType::f64})
    for (const auto& c : cases())
      for (const auto& k : kKeys)
        for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{-3.0, 7.5}, std::pair{1.0, 1.0000001}}) {
          if (t == DType::f32 && hi == 1.0000001) hi = 1.00000012;  // the next f32 after 1
          compare(
              t, c, k, "uniform",
              [&](void* out) { cpu::uniform(t, out, c.shape, c.box, k.k0, k.k1, lo, hi); },
              [&](void* out, const cu::SampleKey& key) { cu::uniform(t, out, c.shape, c.box, key, lo, hi); });
        }
}

TEST_F(CudaRandom, NormalMatchesCpu) {
  for (DType t : {DType::f32, DType::f64})
    for (const auto& c : cases())
      for (const auto& k : kKeys)
        compare(
            t, c, k, "normal", [&](void* out) { cpu::normal(t, out, c.shape, c.box, k.k0, k.k1); },
            [&](void* out, const cu::SampleKey& key) { cu::normal(t, out, c.shape, c.box, key); });
}

// Many draws of one large block: the tails of erfinv and the clamps of
// scale_to are reached.
TEST_F(CudaRandom, LargeBlocksMatchCpu) {
  const Shape shape = {1 << 18};
  const Box box = {{0, 1 << 18}};
  for (DType t : {DType::f32, DType::f64}) {
    const std::size_t nbytes = static_cast<std::size_t>(1 << 18) * ts::itemsize(t);
    Bytes want(nbytes), got(nbytes);
    cpu::normal(t, want.data(), shape, box, 7, 11);
    cu::normal(t, got.data(), shape, box, cu::SampleKey{nullptr, 7, 11});
    EXPECT_TRUE(want == got) << "normal " << ts::dtype_name(t);
    cpu::uniform(t, want.data(), shape, box, 7, 11, -1e-30, 1e-30);
    cu::uniform(t, got.data(), shape, box, cu::SampleKey{nullptr, 7, 11}, -1e-30, 1e-30);
    EXPECT_TRUE(want == got) << "uniform " << ts::dtype_name(t);
  }
}

std::vector<std::uint32_t> some_keys(std::int64_t n) {
  std::vector<std::uint32_t> k(static_cast<std::size_t>(2 * n));
  for (std::int64_t i = 0; i < 2 * n; ++i) k[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(i * 2654435761u + 17);
  return k;
}

TEST_F(CudaRandom, SplitMatchesCpu) {
  for (std::int64_t n : {0, 1, 5, 64})
    for (int num : {0, 1, 2, 3, 17}) {
      const auto keys = some_keys(n);
      const auto size = static_cast<std::size_t>(2 * n * num);
      std::vector<std::uint32_t> want(size, 0xDEADBEEFu), got(size, 0xDEADBEEFu);
      cpu::split_keys(keys.data(), n, num, want.data());
      cu::split_keys(keys.data(), n, num, got.data());
      EXPECT_EQ(want, got) << "n=" << n << " num=" << num;
    }
}

TEST_F(CudaRandom, FoldInMatchesCpu) {
  for (std::int64_t n : {0, 1, 5, 64}) {
    const auto keys = some_keys(n);
    std::vector<std::uint32_t> data(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) data[static_cast<std::size_t>(j)] = static_cast<std::uint32_t>(j * 7919u);
    const auto size = static_cast<std::size_t>(2 * n);
    // Per-key data, one word for all (an operand of shape ()), and a
    // parameter.
    std::vector<std::uint32_t> want(size, 1), got(size, 2);
    cpu::fold_in_keys(keys.data(), n, data.data(), 1, want.data());
    cu::fold_in_keys(keys.data(), n, data.data(), 1, 0, got.data());
    EXPECT_EQ(want, got) << "n=" << n;
    const std::uint32_t one = 0xC0FFEEu;
    cpu::fold_in_keys(keys.data(), n, &one, 0, want.data());
    cu::fold_in_keys(keys.data(), n, &one, 0, 0, got.data());
    EXPECT_EQ(want, got) << "n=" << n << " (one word)";
    std::fill(got.begin(), got.end(), 3u);
    cu::fold_in_keys(keys.data(), n, nullptr, 0, one, got.data());
    EXPECT_EQ(want, got) << "n=" << n << " (parameter)";
  }
}

// A block strided in more dims than a kernel carries is a ShapeError
// naming the op.
TEST_F(CudaRandom, TooManyStridedDimsIsAShapeError) {
  const Shape shape(9, 3);
  const Box box(9, Slice{1, 3});
  std::vector<float> out(512);
  try {
    cu::uniform(DType::f32, out.data(), shape, box, cu::SampleKey{nullptr, 1, 2}, 0.0, 1.0);
    FAIL() << "expected a ShapeError";
  } catch (const ts::ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[uniform] CUDA kernels take arrays of at most 8 dims", 0), 0u) << e.what();
  }
}

// A thread that drives no GPU cannot launch.
TEST_F(CudaRandom, NoCurrentGpuIsADeviceError) {
  std::string what;
  std::thread th([&] {
    const std::uint32_t key[2] = {1, 2};
    std::uint32_t out[4];
    try {
      cu::split_keys(key, 1, 2, out);
    } catch (const ts::DeviceError& e) {
      what = e.what();
    }
  });
  th.join();
  EXPECT_EQ(what.rfind("[split] ", 0), 0u) << what;
}

}  // namespace
