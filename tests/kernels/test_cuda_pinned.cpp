// Page-locked staging of host<->GPU transfers (backend/cuda/pinned.hpp,
// memory.cpp), on emulated GPUs: the cache of page-locked blocks behind
// gpu_host_allocate (classes, reuse, its bound, out of memory, 8 threads),
// the chunked double-buffered copy loop (against a device whose DMAs finish
// only when waited for, so a buffer refilled too early shows), gpu_copy's
// staged path at the sizes around its threshold and chunk, and device_put /
// to_vector of large arrays on 4 emulated CUDA devices.
//
// Runs with TESSERA_PLATFORM=cuda TESSERA_CUDA_EMULATE=1
// TESSERA_DEVICES_PER_GPU=4 (set below unless the environment says
// otherwise), so the process's block cache is the emulated one.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/pinned.hpp"
#include "runtime/gpus.hpp"
#include "tessera/tessera.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace td = tessera::detail;
namespace pn = tessera::detail::pinned;
using ts::testing::expect_error;

namespace {

// Before any test (and before the runtime starts): emulated GPUs.
const bool kEnv = [] {
  setenv("TESSERA_PLATFORM", "cuda", 0);
  setenv("TESSERA_CUDA_EMULATE", "1", 0);
  setenv("TESSERA_DEVICES_PER_GPU", "4", 0);
  return true;
}();

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

// A cache over plain memory that counts what it asks of the system and
// can be told to fail.
struct Counted {
  std::atomic<int> allocs{0}, frees{0};
  std::atomic<std::size_t> fail_above{SIZE_MAX};
  pn::HostBlockCache cache;
  explicit Counted(std::size_t limit)
      : cache(
            [this](std::size_t n, std::string* why) -> void* {
              if (n > fail_above.load()) {
                *why = "the test's system is out";
                return nullptr;
              }
              ++allocs;
              return std::malloc(n);
            },
            [this](void* p, std::size_t) {
              ++frees;
              std::free(p);
            },
            limit) {}
};

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  return v;
}

// Restores gpu_copy's sizes at the end of a test that lowers them.
struct Sizes {
  pn::StageSizes saved = pn::stage_sizes();
  explicit Sizes(pn::StageSizes s) { pn::set_stage_sizes(s); }
  ~Sizes() { pn::set_stage_sizes(saved); }
};

}  // namespace

TEST(PinnedCache, SizeClassesArePowersOfTwoFrom64KiB) {
  Counted c(1 * MiB);
  EXPECT_EQ(c.cache.size_class(0), 64 * KiB);
  EXPECT_EQ(c.cache.size_class(1), 64 * KiB);
  EXPECT_EQ(c.cache.size_class(64 * KiB), 64 * KiB);
  EXPECT_EQ(c.cache.size_class(64 * KiB + 1), 128 * KiB);
  EXPECT_EQ(c.cache.size_class(1 * MiB), 1 * MiB);
  // Beyond what the cache may keep: its own size, never rounded up.
  EXPECT_EQ(c.cache.size_class(1 * MiB + 1), 1 * MiB + 1);
  EXPECT_EQ(c.cache.size_class(SIZE_MAX), SIZE_MAX);
}

TEST(PinnedCache, ReusesAFreedBlockOfTheSameClass) {
  Counted c(16 * MiB);
  void* a = c.cache.allocate(100 * KiB, "test");
  std::memset(a, 1, 128 * KiB);  // the whole class is the caller's
  c.cache.free(a, 100 * KiB);
  EXPECT_EQ(c.cache.stats().kept_blocks, 1u);
  EXPECT_EQ(c.cache.stats().kept_bytes, 128 * KiB);
  void* b = c.cache.allocate(128 * KiB, "test");  // same class
  EXPECT_EQ(b, a);
  EXPECT_EQ(c.allocs.load(), 1);
  const auto s = c.cache.stats();
  EXPECT_EQ(s.fresh, 1u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.kept_blocks, 0u);
  EXPECT_EQ(s.in_use_blocks, 1u);
  EXPECT_EQ(s.in_use_bytes, 128 * KiB);
  c.cache.free(b, 128 * KiB);
}

TEST(PinnedCache, DifferentClassesAreSeparate) {
  Counted c(16 * MiB);
  void* small = c.cache.allocate(64 * KiB, "test");
  c.cache.free(small, 64 * KiB);
  void* large = c.cache.allocate(64 * KiB + 1, "test");  // the next class
  EXPECT_NE(large, small);
  EXPECT_EQ(c.allocs.load(), 2);
  void* again = c.cache.allocate(3, "test");  // the small one's class
  EXPECT_EQ(again, small);
  c.cache.free(large, 64 * KiB + 1);
  c.cache.free(again, 3);
  const auto s = c.cache.stats();
  EXPECT_EQ(s.kept_blocks, 2u);
  EXPECT_EQ(s.kept_bytes, 192 * KiB);
  EXPECT_EQ(s.in_use_blocks, 0u);
  c.cache.trim();
  EXPECT_EQ(c.frees.load(), 2);
  EXPECT_EQ(c.cache.stats().kept_bytes, 0u);
}

TEST(PinnedCache, KeepsNoMoreThanItsBound) {
  Counted c(1 * MiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(c.cache.allocate(300 * KiB, "test"));  // 512 KiB each
  for (void* p : blocks) c.cache.free(p, 300 * KiB);
  auto s = c.cache.stats();
  EXPECT_EQ(s.kept_bytes, 1 * MiB);
  EXPECT_EQ(s.kept_blocks, 2u);
  EXPECT_EQ(s.released, 3u);
  EXPECT_EQ(c.frees.load(), 3);
  // A block larger than the bound is never kept.
  void* big = c.cache.allocate(2 * MiB, "test");
  c.cache.free(big, 2 * MiB);
  s = c.cache.stats();
  EXPECT_EQ(s.kept_bytes, 1 * MiB);
  EXPECT_EQ(c.frees.load(), 4);
  // Two kept blocks of 512 KiB are reused, the third is fresh.
  const int before = c.allocs.load();
  for (int i = 0; i < 3; ++i) blocks[static_cast<std::size_t>(i)] = c.cache.allocate(512 * KiB, "test");
  EXPECT_EQ(c.allocs.load(), before + 1);
  for (int i = 0; i < 3; ++i) c.cache.free(blocks[static_cast<std::size_t>(i)], 512 * KiB);
  EXPECT_LE(c.cache.stats().kept_bytes, 1 * MiB);
}

TEST(PinnedCache, OutOfMemoryRaisesAndLeavesTheCacheUsable) {
  Counted c(16 * MiB);
  c.fail_above = 1 * MiB;
  expect_error<ts::DeviceError>(
      [&] { (void)c.cache.allocate(3 * MiB, "device_put"); },
      "[device_put] cannot allocate 3145728 bytes of page-locked host memory: ", {"the test's system is out"});
  auto s = c.cache.stats();
  EXPECT_EQ(s.in_use_blocks, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  void* p = c.cache.allocate(1 * MiB, "test");
  ASSERT_NE(p, nullptr);
  c.cache.free(p, 1 * MiB);
  EXPECT_EQ(c.cache.stats().kept_blocks, 1u);
  // Short of memory, the cache gives back what it keeps and tries again.
  struct Tight {
    std::size_t held = 0;
  } sys;
  pn::HostBlockCache tight(
      [&](std::size_t n, std::string* why) -> void* {
        if (sys.held + n > 1 * MiB) {
          *why = "full";
          return nullptr;
        }
        sys.held += n;
        return std::malloc(n);
      },
      [&](void* q, std::size_t n) {
        sys.held -= n;
        std::free(q);
      },
      16 * MiB);
  void* a = tight.allocate(512 * KiB, "test");
  tight.free(a, 512 * KiB);                   // kept: the system is half full
  void* b = tight.allocate(1 * MiB, "test");  // fits only once the kept one is gone
  EXPECT_EQ(tight.stats().kept_blocks, 0u);
  EXPECT_EQ(sys.held, 1 * MiB);
  tight.free(b, 1 * MiB);
}

TEST(PinnedCache, EightThreadsAllocateAndFree) {
  Counted c(4 * MiB);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<void*, std::size_t>> held;
      std::uint64_t x = static_cast<std::uint64_t>(t) + 1;
      for (int i = 0; i < 2000; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        if (held.size() < 4 && (x >> 62) != 0) {
          const std::size_t n = (std::size_t(1) << (16 + (x >> 33) % 5)) - (x >> 40) % 7;  // 5 classes
          auto* p = static_cast<unsigned char*>(c.cache.allocate(n, "test"));
          p[0] = static_cast<unsigned char>(t);
          p[n - 1] = static_cast<unsigned char>(t);
          held.emplace_back(p, n);
        } else if (!held.empty()) {
          auto [p, n] = held.back();
          held.pop_back();
          auto* q = static_cast<unsigned char*>(p);
          // Nobody else was handed this block while this thread held it.
          if (q[0] != t || q[n - 1] != t) ++bad;
          c.cache.free(p, n);
        }
      }
      for (auto [p, n] : held) c.cache.free(p, n);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  const auto s = c.cache.stats();
  EXPECT_EQ(s.in_use_blocks, 0u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_LE(s.kept_bytes, 4 * MiB);
  EXPECT_GT(s.reused, 0u);
  EXPECT_EQ(static_cast<std::uint64_t>(c.allocs.load()), s.fresh);
  EXPECT_EQ(static_cast<std::uint64_t>(c.frees.load()), s.released);
  EXPECT_EQ(s.fresh - s.released, s.kept_blocks);
}

TEST(PinnedCache, TheProcessCacheBehindGpuHostAllocate) {
  ASSERT_GT(td::emulated_gpus(), 0);
  pn::HostBlockCache& cache = pn::host_cache();
  void* a = td::gpu_host_allocate(300 * KiB, "test");
  std::memset(a, 7, 300 * KiB);
  td::gpu_host_free(a, 300 * KiB);
  const auto before = cache.stats();
  void* b = td::gpu_host_allocate(500 * KiB, "test");  // 512 KiB, as a
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.stats().reused, before.reused + 1);
  td::gpu_host_free(b, 500 * KiB);
  // 8 threads on the process's cache.
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const std::size_t n = (64 * KiB) << (i % 3);
        auto* p = static_cast<unsigned char*>(td::gpu_host_allocate(n, "test"));
        std::memset(p, t, n);
        for (std::size_t k = 0; k < n; k += 4096)
          if (p[k] != t) ++bad;
        td::gpu_host_free(p, n);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(cache.stats().kept_bytes, pn::kKeepLimit);
  // More than any host has: the message, and the cache goes on.
  expect_error<ts::DeviceError>(
      [] { (void)td::gpu_host_allocate(std::size_t(1) << 62, "host staging"); },
      "[host staging] cannot allocate 4611686018427387904 bytes of page-locked host memory: ", {"out of host memory"});
  void* c = td::gpu_host_allocate(1, "test");
  td::gpu_host_free(c, 1);
}

namespace {

// A device whose DMAs happen only when waited for (a stream that runs late):
// a bounce buffer refilled before its DMA is done, or read before the DMA
// that fills it, gives wrong bytes here.
struct LateDevice {
  std::vector<unsigned char> mem;
  std::vector<unsigned char> bounce[2];
  struct Pending {
    bool on = false;
    std::size_t off = 0, n = 0;
  } pending[2];
  pn::Direction dir;
  std::size_t next = 0;  // the offset the next chunk must start at
  int dmas = 0, overlaps = 0, misplaced = 0;
  pn::Stage stage;

  LateDevice(std::size_t nbytes, std::size_t chunk, pn::Direction d) : mem(nbytes), dir(d) {
    bounce[0] = std::vector<unsigned char>(chunk, 0xee);
    bounce[1] = std::vector<unsigned char>(chunk, 0xee);
    stage.bounce[0] = bounce[0].data();
    stage.bounce[1] = bounce[1].data();
    stage.chunk = chunk;
    stage.dma = [this](int b, std::size_t off, std::size_t n) {
      if (pending[b].on) ++overlaps;
      if (off != next || n == 0 || n > stage.chunk) ++misplaced;
      next = off + n;
      ++dmas;
      pending[b] = {true, off, n};
    };
    stage.wait = [this](int b) { finish(b); };
  }
  void finish(int b) {
    Pending& p = pending[b];
    if (!p.on) return;
    if (dir == pn::Direction::ToDevice)
      std::memcpy(mem.data() + p.off, bounce[b].data(), p.n);
    else
      std::memcpy(bounce[b].data(), mem.data() + p.off, p.n);
    p.on = false;
  }
};

}  // namespace

TEST(StagedCopy, ChunksAlternateAndNeverOverwriteADmaInFlight) {
  for (std::size_t chunk : {std::size_t(1), std::size_t(7), std::size_t(1000)}) {
    for (std::size_t n : {std::size_t(0), std::size_t(1), chunk - 1, chunk, chunk + 1, 2 * chunk, 2 * chunk + 1,
                          7 * chunk + (chunk > 1 ? chunk / 3 : 0)}) {
      if (n == 0 && chunk == 1) continue;  // chunk - 1
      SCOPED_TRACE("chunk " + std::to_string(chunk) + ", " + std::to_string(n) + " bytes");
      const std::size_t chunks = (n + chunk - 1) / chunk;
      {
        std::vector<unsigned char> host = pattern(n, 1);
        LateDevice dev(n, chunk, pn::Direction::ToDevice);
        pn::staged_copy(dev.stage, pn::Direction::ToDevice, host.data(), n);
        // The caller's memory is free on return: scribble over it before
        // the queued DMAs run.
        const std::vector<unsigned char> want = host;
        std::fill(host.begin(), host.end(), 0);
        dev.finish(0);
        dev.finish(1);
        EXPECT_EQ(dev.mem, want);
        EXPECT_EQ(dev.dmas, static_cast<int>(chunks));
        EXPECT_EQ(dev.overlaps, 0);
        EXPECT_EQ(dev.misplaced, 0);
        EXPECT_EQ(dev.next, n);
      }
      {
        LateDevice dev(n, chunk, pn::Direction::ToHost);
        dev.mem = pattern(n, 2);
        std::vector<unsigned char> host(n, 0x5a);
        pn::staged_copy(dev.stage, pn::Direction::ToHost, host.data(), n);
        EXPECT_EQ(host, dev.mem);  // complete on return
        EXPECT_EQ(dev.dmas, static_cast<int>(chunks));
        EXPECT_EQ(dev.overlaps, 0);
        EXPECT_EQ(dev.misplaced, 0);
        EXPECT_EQ(dev.next, n);
      }
    }
  }
}

namespace {

// gpu_copy both ways on an emulated GPU of its own (a device id the
// runtime does not use): `n` bytes from the host, and back.
void round_trip(td::GpuHandle& g, std::size_t n, unsigned seed) {
  SCOPED_TRACE(std::to_string(n) + " bytes");
  const std::vector<unsigned char> host = pattern(n, seed);
  void* dev = td::gpu_allocate(g, std::max<std::size_t>(n, 1));
  td::gpu_copy(g, dev, host.data(), n, td::CopyKind::HostToDevice, "test", false);
  if (n > 0) {
    EXPECT_EQ(std::memcmp(dev, host.data(), n), 0);
  }
  std::vector<unsigned char> back(n, 0x33);
  td::gpu_copy(g, back.data(), dev, n, td::CopyKind::DeviceToHost, "test", false);
  EXPECT_EQ(back, host);
  td::gpu_deallocate(g, dev);
}

td::GpuHandle emulated_gpu(int device_id) {
  td::GpuHandle g;
  g.ordinal = 0;
  g.emulated = true;
  g.device_id = device_id;
  return g;
}

}  // namespace

TEST(StagedCopy, GpuCopyAroundTheThresholdAndChunk) {
  td::GpuHandle g = emulated_gpu(1000);
  const pn::StageSizes s = pn::stage_sizes();
  const auto before = pn::host_cache().stats();
  for (std::size_t n : {std::size_t(0), std::size_t(1), s.threshold - 1, s.threshold, s.threshold + 1, s.chunk - 1,
                        s.chunk, s.chunk + 1, 3 * s.chunk + 12345})
    round_trip(g, n, static_cast<unsigned>(n % 97));
  // The staged copies went through two bounce buffers of the device's.
  const auto after = pn::host_cache().stats();
  EXPECT_EQ(after.in_use_blocks, before.in_use_blocks + 2);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes + 2 * pn::host_cache().size_class(s.chunk));
}

TEST(StagedCopy, GpuCopyThroughManySmallChunks) {
  const Sizes sizes({.threshold = 4096, .chunk = 3 * 4096 + 1});
  td::GpuHandle g = emulated_gpu(1001);
  for (std::size_t n : {std::size_t(1), std::size_t(4095), std::size_t(4096), std::size_t(4097), std::size_t(3 * 4096),
                        std::size_t(3 * 4096 + 1), std::size_t(3 * 4096 + 2), std::size_t(100 * (3 * 4096 + 1) + 17)})
    round_trip(g, n, 5);
  // Other sizes again (the device's buffers follow).
  pn::set_stage_sizes({.threshold = 1, .chunk = 1 << 16});
  round_trip(g, 5 * (1 << 16) + 3, 6);
}

TEST(StagedCopy, DevicePutAndToVectorRoundTripLargeArrays) {
  ASSERT_EQ(ts::device_count(), 4 * td::emulated_gpus());
  const std::vector<ts::Device> devs = ts::devices();
  ASSERT_EQ(devs[0].kind(), "cuda");
  const ts::Mesh mesh(std::vector<ts::Device>(devs.begin(), devs.begin() + 4), {4}, {"x"});
  const ts::Mesh two(std::vector<ts::Device>(devs.begin(), devs.begin() + 2), {2}, {"x"});
  const std::int64_t n = 3 * MiB + 5;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n));
  const auto p = pattern(bytes.size(), 9);
  std::copy(p.begin(), p.end(), bytes.begin());
  std::vector<float> floats(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>(i) * 0.5f - 7.0f;
  auto check_all = [&] {
    // 3 MiB + 5 bytes whole on each device, and in two uneven halves.
    for (const ts::NamedSharding& s :
         {ts::NamedSharding(mesh, ts::P()), ts::NamedSharding(two, ts::P("x")), ts::NamedSharding(mesh, ts::P("x"))}) {
      SCOPED_TRACE("u8, " + s.spec().str());
      const ts::Array a = ts::device_put(bytes, {n}, s);
      EXPECT_TRUE(a.to_vector<std::uint8_t>() == bytes);
      for (const auto& sh : a.addressable_shards()) {
        const auto block = sh.data.to_vector<std::uint8_t>();
        ASSERT_EQ(static_cast<std::int64_t>(block.size()), sh.index[0].stop - sh.index[0].start);
        EXPECT_TRUE(std::equal(block.begin(), block.end(), bytes.begin() + sh.index[0].start));
      }
    }
    // 12 MiB + 20 bytes of f32 in 4 uneven shards, and a 2-D layout whose
    // shards are one run each.
    {
      const ts::Array a = ts::device_put(floats, {n}, ts::NamedSharding(mesh, ts::P("x")));
      EXPECT_TRUE(a.to_vector<float>() == floats);
      const ts::Array b = ts::device_put(floats, {n / 23, 23}, ts::NamedSharding(mesh, ts::P("x")));
      EXPECT_TRUE(b.to_vector<float>() == floats);
      // On the GPU, the bytes are the array's: an op sees them.
      const std::vector<float> twice = (a + a).to_vector<float>();
      for (std::size_t i = 0; i < floats.size(); i += 4099) EXPECT_EQ(twice[i], floats[i] + floats[i]);
    }
  };
  const auto before = pn::host_cache().stats();
  check_all();
  // Each of the 4 devices staged its copies through two bounce buffers.
  EXPECT_EQ(pn::host_cache().stats().in_use_blocks, before.in_use_blocks + 8);
  // Again through many chunks of an odd size (the devices' buffers follow).
  const Sizes sizes({.threshold = 4096, .chunk = 64 * KiB + 3});
  check_all();
  EXPECT_EQ(pn::host_cache().stats().in_use_blocks, before.in_use_blocks + 8);
}
