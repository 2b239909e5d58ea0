// jit's graph replay on GPUs (transforms/jit.cpp, "graph replay"): cached
// calls replay a recording of each device's runs of kernels and give the
// bits of running them op by op, whatever the caller does with inputs and
// results between calls. On the CPU platform there is nothing to
// replay and the tests skip; they run as cuda-emulated.test_jit_graphs
// (emulated GPUs: the recording is the kernels' host loops) and
// cuda.test_jit_graphs (CUDA graphs).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.hpp"
#include "transforms/jit_graphs.hpp"

namespace ts = tessera;
using ts::testing::expect_same;
using ts::testing::iota_data;

namespace {

bool on_gpus() { return ts::devices()[0].kind() == "cuda"; }

#define SKIP_WITHOUT_GPUS() \
  if (!on_gpus()) GTEST_SKIP() << "graph replay runs on CUDA devices only"

ts::detail::JitGraphStats stats() { return ts::detail::jit_graph_stats(); }

// Several kernels of different families, none of which moves data between
// devices when x is sharded over rows: a fused loop, a row sum, a matmul
// with a replicated matrix, a scan and a difference along the rows.
ts::Array program(ts::Array x, ts::Array w) {
  ts::Array y = 2.0f * ts::sin(x) + 1.0f;
  ts::Array s = ts::sum(y, {1}, {.keepdims = true});
  ts::Array z = ts::matmul(y, w) + s;
  return ts::cumsum(z, 1) * 0.5f;
}

// The same kernels after the scan: the run of kernels makes the result.
ts::Array program_tail(ts::Array x, ts::Array w) {
  ts::Array y = 2.0f * ts::sin(ts::cumsum(x, 1) * 0.5f) + 1.0f;
  ts::Array s = ts::sum(y, {1}, {.keepdims = true});
  return ts::matmul(y, w) + s;
}

std::vector<ts::Mesh> meshes() {
  return {ts::Mesh(ts::testing::first_devices(1), {1}, {"x"}), ts::Mesh(ts::testing::first_devices(3), {3}, {"x"}),
          ts::Mesh(ts::testing::first_devices(8), {8}, {"x"}),
          ts::Mesh(ts::testing::first_devices(8), {2, 4}, {"x", "y"})};
}

ts::NamedSharding rows(const ts::Mesh& m) { return ts::NamedSharding(m, ts::P(m.axis_names()[0])); }

}  // namespace

TEST(JitGraphs, CachedCallsReplayWithTheBitsOfOpByOp) {
  SKIP_WITHOUT_GPUS();
  for (const ts::Mesh& m : meshes()) {
    SCOPED_TRACE(m.str());
    // 37 rows over up to 8 devices: uneven blocks, and on 8 devices some
    // of 4 rows, some of 5.
    auto w = ts::device_put(iota_data<float>(6 * 6, 3), {6, 6}, ts::NamedSharding(m, ts::P()));
    auto x = ts::device_put(iota_data<float>(37 * 6), {37, 6}, rows(m));
    std::vector<ts::Array> want{x};  // eager: op by op
    for (int call = 0; call < 8; ++call) want.push_back(program(want.back(), w));
    auto f = ts::jit(program);
    const auto before = stats();
    // x = f(x): each result is the next input, the one before is dropped
    // and its blocks are reused, with new values.
    for (int call = 0; call < 8; ++call) {
      x = f(x, w);
      expect_same(x, want[call + 1], "call " + std::to_string(call));
    }
    const auto after = stats();
    // One run of kernels (the fused loop, the matmul, the add; the scan
    // partitions itself, and a single kernel after it is not worth a
    // graph). The first call runs it op by op, the second records it on
    // every device, the other six replay.
    EXPECT_EQ(after.recorded - before.recorded, m.size()) << after.last_reason;
    EXPECT_EQ(after.replayed - before.replayed, 6 * m.size()) << after.last_reason;
    EXPECT_EQ(after.refused, before.refused) << after.last_reason;
  }
}

TEST(JitGraphs, EarlierResultsKeptByTheCallerDoNotChange) {
  SKIP_WITHOUT_GPUS();
  // The results are the graph's results, copied out: a replay must not
  // write over the ones the caller holds.
  ts::Mesh m(ts::testing::first_devices(8), {2, 4}, {"x", "y"});
  auto w = ts::device_put(iota_data<float>(6 * 6, 2), {6, 6}, ts::NamedSharding(m, ts::P()));
  auto x = ts::device_put(iota_data<float>(11 * 6), {11, 6}, ts::NamedSharding(m, ts::P("y")));
  auto f = ts::jit(program_tail);
  std::vector<ts::Array> kept, want;
  for (int call = 0; call < 9; ++call) {
    ts::Array e = program_tail(x, w);
    x = f(x, w);
    expect_same(x, e, "call " + std::to_string(call));
    if (call % 3 == 1) {
      kept.push_back(x);
      want.push_back(e);
    }
  }
  for (size_t i = 0; i < kept.size(); ++i) expect_same(kept[i], want[i], "kept result " + std::to_string(i));
}

TEST(JitGraphs, NewInputsAtTheAddressesOfOldOnesAreRead) {
  SKIP_WITHOUT_GPUS();
  ts::Mesh m(ts::testing::first_devices(4), {4}, {"x"});
  auto w = ts::device_put(iota_data<float>(6 * 6, 5), {6, 6}, ts::NamedSharding(m, ts::P()));
  auto f = ts::jit(program);
  for (int salt = 0; salt < 6; ++salt) {
    // Each input is dropped before the next is made: the allocator hands
    // its blocks out again, with other values in them.
    auto x = ts::device_put(iota_data<float>(21 * 6, salt), {21, 6}, rows(m));
    expect_same(f(x, w), program(x, w), "salt " + std::to_string(salt));
  }
}

TEST(JitGraphs, AProgramThatNeedsTheHostRunsOpByOp) {
  SKIP_WITHOUT_GPUS();
  ts::Mesh m(ts::testing::first_devices(2), {2}, {"x"});
  // key_data copies the key's words from the host: a graph cannot hold
  // that copy (the host memory is gone by the replay).
  auto g = [m](ts::Array x) {
    ts::Array k = ts::random::split(ts::random::key_data(ts::random::key(7), ts::NamedSharding(m, ts::P())), 2);
    return x + ts::astype(ts::sum(k), ts::f32);
  };
  auto f = ts::jit(g);
  auto x = ts::device_put(iota_data<float>(10 * 3), {10, 3}, ts::NamedSharding(m, ts::P("x")));
  const auto before = stats();
  const std::int64_t in_use = ts::memory_stats(m.devices()[0]).bytes_in_use;
  for (int call = 0; call < 3; ++call) expect_same(f(x), g(x), "call " + std::to_string(call));
  const auto after = stats();
  EXPECT_EQ(after.recorded, before.recorded);
  EXPECT_EQ(after.refused, before.refused + 2);  // once per device
  // Nothing of the refused recording, nor of the calls that ran op by op,
  // stays held once their results are dropped.
  EXPECT_EQ(ts::memory_stats(m.devices()[0]).bytes_in_use, in_use);
  EXPECT_NE(after.last_reason.find("[key_data] cannot be recorded into a CUDA graph"), std::string::npos)
      << after.last_reason;
}

TEST(JitGraphs, ARunWithLargeTemporariesRunsOpByOp) {
  SKIP_WITHOUT_GPUS();
  ts::Mesh m(ts::testing::first_devices(1), {1}, {"x"});
  // Small inputs and result, a 67 MB temporary (an outer product summed
  // over a row): a graph would hold that memory for as long as f lives.
  auto g = [](ts::Array a, ts::Array b) { return ts::sum(ts::expand_dims(a, 1) * ts::expand_dims(b, 0), {1}); };
  auto f = ts::jit(g);
  const ts::NamedSharding s(m, ts::P());
  auto a = ts::device_put(iota_data<float>(4200), {4200}, s);
  auto b = ts::device_put(iota_data<float>(4200, 1), {4200}, s);
  const auto before = stats();
  for (int call = 0; call < 3; ++call) expect_same(f(a, b), g(a, b), "call " + std::to_string(call));
  const auto after = stats();
  EXPECT_EQ(after.recorded, before.recorded);
  EXPECT_EQ(after.refused, before.refused + 1);
  EXPECT_NE(after.last_reason.find("its graph would keep"), std::string::npos) << after.last_reason;
}
