// Direct groups (comm/direct.hpp): GPU collectives whose bytes go through a
// transport (TESSERA_GPU_COLLECTIVES=emulated on emulated GPUs; nccl on real
// ones). The collectives' own suites (test_collectives, test_shard_map) run
// again under the same setting; here, what only a direct group does: the
// bytes really travel through the transport, only to the members that read
// them, in the same bits as the threads backend; and the settings that
// cannot work say so. Skipped on CPU devices and without a transport.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/direct.hpp"
#include "runtime/gpus.hpp"
#include "tessera/ops.hpp"
#include "test_util.hpp"
#include "transforms/shard_map.hpp"

namespace ts = tessera;
namespace td = tessera::detail;
using ts::testing::expect_error;

namespace {

std::string setting() {
  const char* env = std::getenv("TESSERA_GPU_COLLECTIVES");
  return env ? env : "";
}

bool on_gpus() { return ts::devices()[0].kind() == "cuda"; }

// Skips unless the devices are GPUs whose groups use a transport.
#define REQUIRE_TRANSPORT()                                                                         \
  do {                                                                                              \
    if (!on_gpus()) GTEST_SKIP() << "CPU devices";                                                  \
    if (setting() != "emulated" && setting() != "nccl") GTEST_SKIP() << "TESSERA_GPU_COLLECTIVES=" \
                                                                     << setting();                  \
  } while (0)

std::vector<float> values(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 13) + 0.1f * static_cast<float>(i % 7);
  return v;
}

TEST(DirectGroups, PsumMovesItsChunksThroughTheTransport) {
  REQUIRE_TRANSPORT();
  const int n = std::min<int>(8, static_cast<int>(ts::devices().size()));
  const ts::Mesh m(ts::testing::first_devices(n), {n}, {"x"});
  const std::vector<float> host = values(static_cast<std::size_t>(n) * 64, 1.5f);
  auto a = ts::device_put(host, {n, 64}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::shard_map([](ts::Array x) { return ts::psum(x, "x"); }, m, {ts::P("x")}, ts::P(),
                         {.check_vma = false});
  const td::DirectStats before = td::direct_stats();
  const std::vector<float> got = f(a).to_vector<float>();
  const td::DirectStats after = td::direct_stats();
  // Two exchanges (reduce-scatter, all-gather of the combined chunks), each
  // a message between every pair: (n - 1) / n of the 64 floats per member.
  EXPECT_EQ(after.transfers - before.transfers, 2 * static_cast<std::int64_t>(n) * (n - 1));
  EXPECT_EQ(after.bytes - before.bytes, 2 * static_cast<std::int64_t>(n - 1) * 64 * 4);
  // The tree's bits: the same call on the threads backend's order (the
  // eager sum over the sharded axis combines in the same tree).
  const std::vector<float> want = ts::sum(a, {0}, ts::ReduceOptions{.keepdims = true}).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// Every reduction and dtype, on values with fewer elements than members
// (empty chunks) and uneven chunks: psum's bits equal the eager sum's.
TEST(DirectGroups, PsumOfEveryReductionDtypeAndSize) {
  REQUIRE_TRANSPORT();
  const int n = std::min<int>(8, static_cast<int>(ts::devices().size()));
  const ts::Mesh m(ts::testing::first_devices(n), {n}, {"x"});
  for (ts::DType dt : {ts::f32, ts::f64, ts::i32, ts::u8})
    for (std::int64_t len : {1, 3, 7, 8, 9, 1001}) {
      std::vector<double> host(static_cast<std::size_t>(n * len));
      for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<double>((i * 37) % 23) * 0.75 - 4;
      if (dt == ts::u8 || dt == ts::i32)
        for (double& v : host) v = std::abs(std::floor(v));
      auto a = ts::astype(ts::device_put(host, {n, len}, ts::NamedSharding(m, ts::P("x"))), dt);
      for (int which = 0; which < 3; ++which) {
        auto f = ts::shard_map(
            [which](ts::Array x) {
              return which == 0 ? ts::psum(x, "x") : which == 1 ? ts::pmax(x, "x") : ts::pmin(x, "x");
            },
            m, {ts::P("x")}, ts::P(), {.check_vma = false});
        const ts::Array want = which == 0 ? ts::sum(a, {0}, ts::ReduceOptions{.keepdims = true})
                               : which == 1 ? ts::max(a, {0}, ts::ReduceOptions{.keepdims = true})
                                            : ts::min(a, {0}, ts::ReduceOptions{.keepdims = true});
        const ts::Array got = f(a);
        EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>())
            << ts::dtype_name(dt) << " length " << len << " reduction " << which;
      }
    }
}

// psum_scatter and all_to_all: each member sends each other member only
// the part it reads (columns here, so packed from strided memory), so
// (n - 1) / n of a member's value leaves it, in one message per reader.
TEST(DirectGroups, ScattersSendEachMemberOnlyItsPart) {
  REQUIRE_TRANSPORT();
  const int n = std::min<int>(8, static_cast<int>(ts::devices().size()));
  const ts::Mesh m(ts::testing::first_devices(n), {n}, {"x"});
  const std::int64_t rows = 3, cols = 10;  // 10 columns in uneven blocks over 4 or 8 members
  std::vector<float> host(static_cast<std::size_t>(n * rows * cols));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i * 7) % 19);  // sums are exact
  auto a = ts::device_put(host, {n * rows, cols}, ts::NamedSharding(m, ts::P("x")));
  const std::int64_t value_bytes = rows * cols * 4;
  const std::int64_t readers = std::min<std::int64_t>(n, cols);  // members whose part is not empty
  for (bool scatter : {true, false}) {
    SCOPED_TRACE(scatter ? "psum_scatter" : "all_to_all");
    auto f = ts::shard_map(
        [scatter](ts::Array x) { return scatter ? ts::psum_scatter(x, "x", 1, true) : ts::all_to_all(x, "x", 1, 0, true); },
        m, {ts::P("x")}, ts::P(ts::none, "x"), {.check_vma = false});
    const td::DirectStats before = td::direct_stats();
    const std::vector<float> got = f(a).to_vector<float>();
    const td::DirectStats after = td::direct_stats();
    EXPECT_EQ(after.transfers - before.transfers, readers * (n - 1));
    EXPECT_EQ(after.bytes - before.bytes, (n - 1) * value_bytes);
    // all_to_all from rows to columns leaves the global array as it was;
    // psum_scatter sums the members' blocks.
    std::vector<float> want = host;
    if (scatter) {
      want.assign(static_cast<std::size_t>(rows * cols), 0.0f);
      for (int s = 0; s < n; ++s)
        for (std::int64_t i = 0; i < rows * cols; ++i) want[i] += host[s * rows * cols + i];
    }
    EXPECT_EQ(got, want);
  }
}

TEST(DirectGroups, PermuteSendsOnlyWhereAValueGoes) {
  REQUIRE_TRANSPORT();
  const ts::Mesh m(ts::testing::first_devices(2), {2}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2, 3, 4, 5, 6}, {6}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::shard_map([](ts::Array x) { return ts::ppermute(x, "x", {{0, 1}}); }, m, {ts::P("x")}, ts::P("x"),
                         {.check_vma = false});
  const td::DirectStats before = td::direct_stats();
  EXPECT_EQ(f(a).to_vector<float>(), (std::vector<float>{0, 0, 0, 1, 2, 3}));
  const td::DirectStats after = td::direct_stats();
  EXPECT_EQ(after.transfers - before.transfers, 1);
  EXPECT_EQ(after.bytes - before.bytes, 12);
}

TEST(DirectGroups, SizeOneGroupsAndEmptyValuesMoveNothing) {
  REQUIRE_TRANSPORT();
  const ts::Mesh m(ts::testing::first_devices(4), {2, 2}, {"x", "y"});
  auto a = ts::device_put(std::vector<float>{}, {0, 4}, ts::NamedSharding(m, ts::P("x", "y")));
  auto f = ts::shard_map([](ts::Array x) { return ts::all_gather(x, "y", 1, true); }, m, {ts::P("x", "y")},
                         ts::P("x"), {.check_vma = false});
  const td::DirectStats before = td::direct_stats();
  EXPECT_EQ(f(a).shape(), (ts::Shape{0, 4}));
  EXPECT_EQ(td::direct_stats().transfers, before.transfers);
}

// Run by ctest with TESSERA_GPU_COLLECTIVES set to what cannot work: an
// unknown value, or NCCL on emulated GPUs.
TEST(DirectGroups, SettingsThatCannotWorkRaise) {
  if (!on_gpus()) GTEST_SKIP() << "CPU devices";
  const std::string s = setting();
  const bool unknown = !s.empty() && s != "host" && s != "nccl" && s != "emulated";
  const bool nccl_emulated = s == "nccl" && td::emulated_gpus() > 0;
  if (!unknown && !nccl_emulated) GTEST_SKIP() << "TESSERA_GPU_COLLECTIVES=" << s << " works here";
  const ts::Mesh m(ts::testing::first_devices(2), {2}, {"x"});
  auto a = ts::device_put(std::vector<float>{1, 2}, {2}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::shard_map([](ts::Array x) { return ts::psum(x, "x"); }, m, {ts::P("x")}, ts::P(),
                         {.check_vma = false});
  if (unknown)
    expect_error<ts::DeviceError>([&] { f(a); }, "[devices] TESSERA_GPU_COLLECTIVES: expected 'host', 'nccl' or "
                                                 "'emulated', got '" + s + "'");
  else
    expect_error<ts::DeviceError>([&] { f(a); }, "[devices] TESSERA_GPU_COLLECTIVES=nccl needs real GPUs, and these "
                                                 "are emulated (TESSERA_CUDA_EMULATE)");
}

}  // namespace
