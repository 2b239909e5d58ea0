// Multi-process meshes, run under mpirun by ctest (2 processes, several
// devices each): every process runs these tests in the same order, so their
// collectives meet. Results are checked against plain host references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <tessera/tessera.hpp>

#include "comm/direct.hpp"

namespace ts = tessera;

namespace {

std::vector<double> iota_data(std::int64_t n, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37 * static_cast<double>(i)) * scale + 0.01 * static_cast<double>(i % 7);
  return v;
}

// Meshes over every device of every process: 1-d, and 2-d with the
// processes on the first axis.
std::vector<ts::Mesh> meshes() {
  std::vector<ts::Mesh> out;
  const int n = ts::device_count();
  out.push_back(ts::make_mesh({n}, {"x"}));
  if (ts::local_device_count() > 1) out.push_back(ts::make_mesh({ts::process_count(), ts::local_device_count()}, {"x", "y"}));
  if (ts::process_count() > 1 && ts::local_device_count() > 1)
    out.push_back(ts::Mesh(ts::devices(), {ts::local_device_count(), ts::process_count()}, {"x", "y"}));
  return out;
}

std::vector<ts::PartitionSpec> specs(const ts::Mesh& m) {
  if (m.ndim() == 1) return {ts::P("x"), ts::P(ts::none, "x"), ts::P()};
  return {ts::P("x", "y"), ts::P("y", "x"), ts::P(std::vector<std::string>{"x", "y"}), ts::P(ts::none, "y"), ts::P()};
}

template <class F>
void expect_throw_with(F f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const ts::Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Mpi, DevicesAreGlobalAndOrderedByProcess) {
  const char* env = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (env) {
    EXPECT_EQ(ts::process_count(), std::atoi(env));
  }
  EXPECT_EQ(ts::distributed::backend(), std::string(ts::process_count() > 1 ? "mpi" : "none"));
  const auto all = ts::devices();
  const auto local = ts::local_devices();
  EXPECT_EQ(static_cast<int>(all.size()), ts::device_count());
  EXPECT_EQ(static_cast<int>(local.size()), ts::local_device_count());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].id(), static_cast<int>(i));
    if (i) {
      EXPECT_LE(all[i - 1].process_index(), all[i].process_index());
    }
  }
  for (const auto& d : local) {
    EXPECT_EQ(d.process_index(), ts::process_index());
    EXPECT_TRUE(d.is_local());
  }
  EXPECT_EQ(ts::device_count(), ts::local_device_count() * ts::process_count());
}

TEST(Mpi, DevicePutGatherAndAddressableShards) {
  for (const auto& m : meshes())
    for (const auto& spec : specs(m)) {
      const ts::Shape shape{13, 7};
      const auto host = iota_data(13 * 7);
      ts::NamedSharding s(m, spec);
      ts::Array a = ts::device_put(host, shape, s);
      EXPECT_EQ(ts::process_allgather<double>(a), host) << s.str();
      for (const auto& sh : a.addressable_shards()) {
        EXPECT_TRUE(sh.device.is_local());
        const auto v = sh.data.to_vector<double>();
        size_t k = 0;
        for (auto i = sh.index[0].start; i < sh.index[0].stop; ++i)
          for (auto j = sh.index[1].start; j < sh.index[1].stop; ++j) ASSERT_EQ(v[k++], host[i * 7 + j]);
      }
      // to_vector works when this process holds every block (a replicated
      // array, or blocks repeated over the process axis), else it says to
      // gather.
      std::int64_t held = 0;
      std::vector<std::vector<ts::Slice>> seen;
      for (const auto& sh : a.addressable_shards())
        if (std::find(seen.begin(), seen.end(), sh.index) == seen.end()) {
          seen.push_back(sh.index);
          held += sh.index[0].size() * sh.index[1].size();
        }
      if (held == a.size()) {
        EXPECT_EQ(a.to_vector<double>(), host);
      } else {
        EXPECT_FALSE(ts::is_fully_addressable(a));
        expect_throw_with([&] { (void)a.to_vector<double>(); }, "not fully addressable");
      }
    }
}

TEST(Mpi, ReshardBetweenEveryPairOfLayouts) {
  for (const auto& m : meshes())
    for (const auto& from : specs(m))
      for (const auto& to : specs(m)) {
        const auto host = iota_data(9 * 11);
        ts::Array a = ts::device_put(host, {9, 11}, ts::NamedSharding(m, from));
        ts::Array b = ts::reshard(a, to);
        EXPECT_EQ(ts::process_allgather<double>(b), host) << from.str() << " -> " << to.str();
      }
}

// A block with a replica in the receiver's own process comes from there:
// nothing crosses processes that need not.
TEST(Mpi, ReshardPrefersAReplicaInTheSameProcess) {
  if (ts::process_count() < 2 || ts::local_device_count() < 2) GTEST_SKIP() << "needs several processes and devices";
  const int np = ts::process_count(), nd = ts::local_device_count();
  ts::Mesh m = ts::make_mesh({np, nd}, {"p", "d"});  // processes along "p"
  const auto host = iota_data(6 * 10);
  ts::Array a = ts::device_put(host, {6, 10}, ts::NamedSharding(m, ts::P("d", ts::none)));
  const ts::NamedSharding target(m, ts::P(ts::none, "d"));
  const ts::ReshardPlan plan = ts::plan_reshard(a, target);
  std::int64_t cross = 0, remote = 0;
  for (const ts::TransferPiece& p : plan.pieces) {
    if (p.src == p.dst) continue;
    remote += p.bytes;
    if (m.devices()[p.src].process_index() != m.devices()[p.dst].process_index()) cross += p.bytes;
  }
  EXPECT_GT(remote, 0);
  EXPECT_EQ(cross, 0) << plan.str();
  EXPECT_EQ(ts::process_allgather<double>(ts::reshard(a, target)), host);
}

TEST(Mpi, GlobalViewOpsMatchTheHost) {
  for (const auto& m : meshes())
    for (const auto& spec : specs(m)) {
      const std::int64_t r = 10, c = 6;
      const auto host = iota_data(r * c);
      ts::Array a = ts::device_put(host, {r, c}, ts::NamedSharding(m, spec));
      // Elementwise: bitwise what one device computes.
      ts::Mesh one(std::vector<ts::Device>{ts::local_devices()[0]}, {1}, {"x"});
      ts::Array a1 = ts::device_put(host, {r, c}, ts::NamedSharding(one, ts::P()));
      EXPECT_EQ(ts::process_allgather<double>(2.0 * ts::sin(a) + 1.0), (2.0 * ts::sin(a1) + 1.0).to_vector<double>());
      // Stencil: halo exchange only, bitwise.
      EXPECT_EQ(ts::process_allgather<double>(ts::diff(a, 1, 0)), ts::diff(a1, 1, 0).to_vector<double>());
      // Reductions over sharded axes.
      for (int axis : {0, 1}) {
        const auto got = ts::process_allgather<double>(ts::sum(a, {axis}));
        const auto want = ts::sum(a1, {axis}).to_vector<double>();
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
      }
      EXPECT_NEAR(ts::sum(a).item<double>(), ts::sum(a1).item<double>(), 1e-12);
      // Matmul with a sharded contraction.
      ts::Array w = ts::device_put(iota_data(c * 3, 0.5), {c, 3}, ts::NamedSharding(m, ts::P()));
      ts::Array w1 = ts::device_put(iota_data(c * 3, 0.5), {c, 3}, ts::NamedSharding(one, ts::P()));
      const auto got = ts::process_allgather<double>(ts::matmul(a, w));
      const auto want = ts::matmul(a1, w1).to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
    }
}

TEST(Mpi, ShardMapCollectivesAcrossProcesses) {
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  std::vector<float> host(static_cast<size_t>(n) * 4);
  std::iota(host.begin(), host.end(), 1.0f);
  ts::Array a = ts::device_put(host, {n * 4}, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::shard_map([](ts::Array x) { return ts::psum(x, "x"); }, m, {ts::P("x")}, ts::P());
  std::vector<float> want(4, 0.0f);
  for (int d = 0; d < n; ++d)
    for (int i = 0; i < 4; ++i) want[i] += host[d * 4 + i];
  EXPECT_EQ(f(a).to_vector<float>(), want);
  // Large enough for the reduce-scatter path.
  const std::int64_t big = 40000;
  std::vector<float> hb(static_cast<size_t>(n * big));
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = static_cast<float>(i % 1000) * 0.25f;
  ts::Array b = ts::device_put(hb, {n * big}, ts::NamedSharding(m, ts::P("x")));
  const auto got = f(b).to_vector<float>();
  for (std::int64_t i = 0; i < big; i += 997) {
    float w = 0;
    for (int d = 0; d < n; ++d) w += hb[d * big + i];
    EXPECT_NEAR(got[i], w, 1e-3f * std::abs(w) + 1e-3f);
  }
  auto g = ts::shard_map([](ts::Array x) { return ts::all_gather(x, "x", 0, true); }, m, {ts::P("x")}, ts::P());
  EXPECT_EQ(g(a).to_vector<float>(), host);
  std::vector<std::pair<int, int>> ring;
  for (int i = 0; i < n; ++i) ring.emplace_back(i, (i + 1) % n);
  auto p = ts::shard_map([&](ts::Array x) { return ts::ppermute(x, "x", ring); }, m, {ts::P("x")}, ts::P("x"));
  const auto rolled = ts::process_allgather<float>(p(a));
  for (int d = 0; d < n; ++d)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(rolled[((d + 1) % n) * 4 + i], host[d * 4 + i]);
  auto mx = ts::shard_map([](ts::Array x) { return ts::pmax(x, "x"); }, m, {ts::P("x")}, ts::P());
  EXPECT_EQ(mx(a).to_vector<float>(), std::vector<float>(host.end() - 4, host.end()));
  auto rs = ts::shard_map([](ts::Array x) { return ts::psum_scatter(ts::all_gather(x, "x", 0, true), "x", 0, true); },
                          m, {ts::P("x")}, ts::P("x"));
  const auto scattered = ts::process_allgather<float>(rs(a));
  for (size_t i = 0; i < host.size(); ++i) EXPECT_EQ(scattered[i], host[i] * static_cast<float>(n));
}

// The collectives that move only what each member reads (psum_scatter,
// all_to_all, ppermute), over each axis of each mesh: groups within one
// process and across processes, uneven parts.
TEST(Mpi, ScatterAllToAllAndPermuteOverEveryAxis) {
  for (const auto& m : meshes()) {
    for (const std::string& a : m.axis_names()) {
      const int k = m.axis_size(a);
      const std::int64_t len = 2 * k + 1, cols = 3;  // rows per device: not a multiple of k
      const auto host = iota_data(k * len * cols);
      ts::Array x = ts::device_put(host, {k * len, cols}, ts::NamedSharding(m, ts::P(a)));
      auto at = [&](int dev, std::int64_t r, std::int64_t c) { return host[(dev * len + r) * cols + c]; };
      auto sum_at = [&](std::int64_t r, std::int64_t c) {
        double w = 0;
        for (int dev = 0; dev < k; ++dev) w += at(dev, r, c);
        return w;
      };
      // Tiled psum_scatter: the sum of the blocks, each device its rows.
      auto rs = ts::shard_map([&](ts::Array v) { return ts::psum_scatter(v, a, 0, true); }, m, {ts::P(a)}, ts::P(a));
      const auto got = ts::process_allgather<double>(rs(x));
      ASSERT_EQ(static_cast<std::int64_t>(got.size()), len * cols) << m.str() << " " << a;
      for (std::int64_t r = 0; r < len; ++r)
        for (std::int64_t c = 0; c < cols; ++c) EXPECT_NEAR(got[r * cols + c], sum_at(r, c), 1e-12) << m.str() << " " << a;
      // all_to_all from rows to columns: globally the same array.
      ts::Array sq = ts::device_put(iota_data(k * 2 * k * 3), {k * 2, k * 3}, ts::NamedSharding(m, ts::P(a)));
      auto t = ts::shard_map([&](ts::Array v) { return ts::all_to_all(v, a, 1, 0, true); }, m, {ts::P(a)},
                             ts::P(ts::none, a));
      EXPECT_EQ(ts::process_allgather<double>(t(sq)), iota_data(k * 2 * k * 3)) << m.str() << " " << a;
      // A partial ppermute: even indices send to the next one; the others get zeros.
      std::vector<std::pair<int, int>> perm;
      for (int i = 0; i + 1 < k; i += 2) perm.emplace_back(i, i + 1);
      auto pp = ts::shard_map([&](ts::Array v) { return ts::ppermute(v, a, perm); }, m, {ts::P(a)}, ts::P(a));
      const auto moved = ts::process_allgather<double>(pp(x));
      for (int dev = 0; dev < k; ++dev)
        for (std::int64_t r = 0; r < len; ++r)
          for (std::int64_t c = 0; c < cols; ++c)
            EXPECT_EQ(moved[(dev * len + r) * cols + c], dev % 2 == 1 ? at(dev - 1, r, c) : 0.0)
                << m.str() << " " << a << " device " << dev;
    }
  }
}

// Meshes whose devices interleave the processes in any order, with the
// collective's axes named in either order: members of one process are not
// consecutive in the group.
TEST(Mpi, CollectivesOnShuffledDevices) {
  const int n = ts::device_count();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even number of devices";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<ts::Device> d = ts::devices();
    std::shuffle(d.begin(), d.end(), rng);
    ts::Mesh m(d, {n / 2, 2}, {"x", "y"});
    for (const std::vector<std::string>& ax : {std::vector<std::string>{"y", "x"}, std::vector<std::string>{"x", "y"}}) {
      const auto host = iota_data(n * 3);
      ts::Array x = ts::device_put(host, {n * 3}, ts::NamedSharding(m, ts::P(ax)));
      auto f = ts::shard_map([&](ts::Array v) { return ts::psum(v, ax); }, m, {ts::P(ax)}, ts::P());
      const auto got = ts::process_allgather<double>(f(x));
      ASSERT_EQ(got.size(), 3u);
      for (int i = 0; i < 3; ++i) {
        double w = 0;
        for (int k = 0; k < n; ++k) w += host[k * 3 + i];
        EXPECT_NEAR(got[i], w, 1e-12) << m.str();
      }
      auto g = ts::shard_map([&](ts::Array v) { return ts::psum(ts::sum(v), ax); }, m, {ts::P(ax)}, ts::P());
      double w = 0;
      for (double v : host) w += v;
      EXPECT_NEAR(ts::process_allgather<double>(g(x))[0], w, 1e-12) << m.str();
    }
  }
}

// A mesh over the devices of one process only: the others take part in
// every call all the same and get the same values.
TEST(Mpi, MeshOfOneProcessesDevices) {
  const int n = ts::device_count();
  const std::vector<ts::Device> devs = ts::devices();
  const int two = std::min(2, ts::local_device_count());
  ts::Mesh last({devs.back()}, {1}, {"x"});
  ts::Mesh first_two(std::vector<ts::Device>(devs.begin(), devs.begin() + two), {two}, {"x"});
  const auto host = iota_data(6);
  for (const ts::Mesh& m : {last, first_two}) {
    ts::Array a = ts::device_put(host, {6}, ts::NamedSharding(m, ts::P("x")));
    EXPECT_EQ(ts::process_allgather<double>(a), host) << m.str();
    auto f = ts::shard_map([](ts::Array v) { return ts::psum(v * 2.0, "x"); }, m, {ts::P("x")}, ts::P());
    const ts::Array r = f(a);
    EXPECT_EQ(r.shape(), (ts::Shape{6 / m.size()})) << m.str();
    // To a mesh over every process and back.
    ts::Mesh all = ts::make_mesh({n}, {"x"});
    ts::Array b = ts::device_put(a, ts::NamedSharding(all, ts::P()));
    EXPECT_EQ(ts::process_allgather<double>(b), host) << m.str();
    EXPECT_EQ(ts::process_allgather<double>(ts::device_put(b, ts::NamedSharding(m, ts::P()))), host) << m.str();
  }
}

// An index out of range on one process's device raises on every process,
// eagerly and under jit.
TEST(Mpi, TakeOutOfRangeRaisesOnEveryProcess) {
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  ts::Array x = ts::device_put(iota_data(3), {3}, ts::NamedSharding(m, ts::P()));
  std::vector<int> idx(static_cast<size_t>(n), 1);
  idx[0] = 3;  // on device 0, process 0
  ts::Array i = ts::device_put(idx, {n}, ts::NamedSharding(m, ts::P("x")));
  expect_throw_with([&] { (void)ts::take(x, i, 0).block_until_ready(); }, "[take] index 3 is out of range");
  auto f = ts::jit([](ts::Array a, ts::Array b) { return ts::take(a * 2.0, b, 0) + 1.0; });
  expect_throw_with([&] { (void)f(x, i).block_until_ready(); }, "index 3 is out of range");
  // In range, the same program works.
  idx[0] = -1;
  ts::Array j = ts::device_put(idx, {n}, ts::NamedSharding(m, ts::P("x")));
  const auto got = ts::process_allgather<double>(f(x, j));
  const auto h = iota_data(3);
  for (int k = 0; k < n; ++k) EXPECT_EQ(got[k], h[k == 0 ? 2 : 1] * 2.0 + 1.0);
}

// explain() inside and around a program over several processes reports
// every device's traffic, and the same text on every process.
TEST(Mpi, ExplainCountsEveryDevice) {
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  ts::Array a = ts::device_put(std::vector<float>(static_cast<size_t>(n) * 4, 1.0f), {n * 4},
                               ts::NamedSharding(m, ts::P("x")));
  auto f = ts::shard_map([](ts::Array x) { return ts::all_gather(ts::psum(x, "x"), "x", 0, true); }, m, {ts::P("x")},
                         ts::P());
  for (bool jitted : {false, true}) {
    auto g = ts::jit([&](ts::Array x) { return f(x); });
    if (jitted) (void)g(a);  // traced outside the explained call
    const ts::Explanation ex = ts::explain([&] { (void)(jitted ? g(a) : f(a)).block_until_ready(); });
    int seen = 0;
    for (const ts::CommRecord& r : ex.records) {
      if (r.op != "shard_map") continue;
      ++seen;
      ASSERT_EQ(static_cast<int>(r.bytes_received.size()), n) << r.str();
      EXPECT_EQ(r.pieces, n) << r.str();
      const std::int64_t want = r.kind == "psum" ? 2 * (n - 1) * 16 / n : (n - 1) * 16;
      for (int pos = 0; pos < n; ++pos) EXPECT_EQ(r.bytes_received[pos], want) << r.kind << " at " << pos;
    }
    EXPECT_EQ(seen, 2) << ex.str();
    // The same text on every process.
    const std::string text = ex.str();
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
    for (std::uint64_t other : ts::process_allgather(std::span<const std::uint64_t>(&h, 1)))
      EXPECT_EQ(other, h) << text;
  }
}

TEST(Mpi, JitRunsOnEveryProcess) {
  for (const auto& m : meshes()) {
    const auto host = iota_data(8 * 5);
    ts::Array a = ts::device_put(host, {8, 5}, ts::NamedSharding(m, ts::P(m.axis_names()[0])));
    auto f = ts::jit([](ts::Array x) { return ts::sum(ts::exp(x) * 2.0, {0}); });
    const auto got = ts::process_allgather<double>(f(a));
    const auto want = ts::process_allgather<double>(ts::sum(ts::exp(a) * 2.0, {0}));
    EXPECT_EQ(got, want);
  }
}

TEST(Mpi, MakeArrayFromProcessLocalData) {
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  ts::NamedSharding s(m, ts::P("x"));
  const std::int64_t rows_per_device = 3, cols = 4;
  const std::int64_t local_rows = rows_per_device * ts::local_device_count();
  const std::int64_t first = local_rows * ts::process_index();
  std::vector<double> local(static_cast<size_t>(local_rows * cols));
  for (std::int64_t i = 0; i < local_rows * cols; ++i) local[i] = static_cast<double>(first * cols + i);
  ts::Array a = ts::make_array_from_process_local_data(s, local, {local_rows, cols});
  EXPECT_EQ(a.shape(), (ts::Shape{rows_per_device * n, cols}));
  const auto all = ts::process_allgather<double>(a);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<double>(i));
  expect_throw_with([&] { ts::make_array_from_process_local_data(s, local, {local_rows + 1, cols}, ts::Shape{rows_per_device * n, cols}); },
                    "[make_array_from_process_local_data]");
}

TEST(Mpi, HostDataGather) {
  std::vector<int> mine{ts::process_index(), 10 + ts::process_index()};
  const auto all = ts::process_allgather<int>(std::span<const int>(mine));
  ASSERT_EQ(static_cast<int>(all.size()), 2 * ts::process_count());
  for (int p = 0; p < ts::process_count(); ++p) {
    EXPECT_EQ(all[2 * p], p);
    EXPECT_EQ(all[2 * p + 1], 10 + p);
  }
}

TEST(Mpi, MismatchedCollectivesAcrossProcessesRaiseOnEveryProcess) {
  if (ts::process_count() < 2) GTEST_SKIP() << "needs several processes";
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  ts::Array a = ts::device_put(std::vector<float>(static_cast<size_t>(n), 1.0f), {n}, ts::NamedSharding(m, ts::P("x")));
  const bool first = ts::process_index() == 0;
  auto f = ts::shard_map([&](ts::Array x) { return first ? ts::psum(x, "x") : ts::pmax(x, "x"); }, m, {ts::P("x")},
                         ts::P());
  try {
    (void)f(a);
    ADD_FAILURE() << "expected a mismatch";
  } catch (const ts::CollectiveError& e) {
    // Both calls are named, whichever process reports.
    const std::string what = e.what();
    EXPECT_NE(what.find("mismatched collectives"), std::string::npos) << what;
    EXPECT_NE(what.find("psum(f32"), std::string::npos) << what;
    EXPECT_NE(what.find("pmax(f32"), std::string::npos) << what;
  }
}

// Frame sizes around the transport's thresholds: messages split below the
// eager limit, one message, header and payload apart, reduce-scatter.
TEST(Mpi, PsumOfEverySizeAcrossProcesses) {
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  auto f = ts::shard_map([](ts::Array x) { return ts::psum(x, "x"); }, m, {ts::P("x")}, ts::P());
  for (std::int64_t len : {1, 2, 935, 936, 999, 1000, 1001, 3999, 4000, 4001, 4096, 8191, 8192, 8193, 16384, 16385,
                           40001}) {
    std::vector<float> host(static_cast<size_t>(n * len));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i * 7) % 101);
    ts::Array a = ts::device_put(host, {n * len}, ts::NamedSharding(m, ts::P("x")));
    const auto got = f(a).to_vector<float>();
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), len);
    for (std::int64_t i = 0; i < len; ++i) {
      float w = 0;
      for (int d = 0; d < n; ++d) w += host[d * len + i];
      ASSERT_EQ(got[i], w) << "length " << len << ", element " << i;
    }
  }
}

// With TESSERA_GPU_COLLECTIVES=emulated on GPUs (ctest's
// mpi.cuda-emulated.direct.2x3) the suite's collectives go through direct
// groups: here, that the bytes did travel through the transport.
TEST(Mpi, DirectGroupsCarryTheBytesWhenAsked) {
  const char* env = std::getenv("TESSERA_GPU_COLLECTIVES");
  if (!env || std::string(env) != "emulated" || ts::devices()[0].kind() != "cuda")
    GTEST_SKIP() << "not on GPUs with TESSERA_GPU_COLLECTIVES=emulated";
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  auto f = ts::shard_map([](ts::Array x) { return ts::psum(x, "x"); }, m, {ts::P("x")}, ts::P());
  std::vector<float> host(static_cast<size_t>(n * 16));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i * 5) % 17);
  ts::Array a = ts::device_put(host, {n * 16}, ts::NamedSharding(m, ts::P("x")));
  const auto before = tessera::detail::direct_stats();
  const auto got = f(a).to_vector<float>();
  const auto after = tessera::detail::direct_stats();
  // Two exchanges: each of this process's members sends every other member
  // that member's chunk of its value, then its combined chunk.
  std::int64_t bytes = 0;
  const int first = ts::process_index() * ts::local_device_count();
  for (int r = first; r < first + ts::local_device_count(); ++r) {
    const std::int64_t mine = ts::block_slice(16, n, r).size();
    bytes += (16 - mine) * 4 + (n - 1) * mine * 4;
  }
  EXPECT_EQ(after.transfers - before.transfers, 2 * static_cast<std::int64_t>(ts::local_device_count()) * (n - 1));
  EXPECT_EQ(after.bytes - before.bytes, bytes);
  for (int i = 0; i < 16; ++i) {
    float w = 0;
    for (int d = 0; d < n; ++d) w += host[static_cast<size_t>(d * 16 + i)];
    EXPECT_EQ(got[static_cast<size_t>(i)], w) << i;
  }
  // The global view's reshards and reductions across processes too.
  auto moved = [] { return tessera::detail::direct_stats().transfers; };
  std::int64_t t0 = moved();
  const ts::Array r = ts::reshard(a, ts::NamedSharding(m, ts::P()));
  EXPECT_GT(moved(), t0);
  EXPECT_EQ(r.to_vector<float>(), host);
  t0 = moved();
  ts::Array b = ts::device_put(host, {n, 16}, ts::NamedSharding(m, ts::P("x")));
  const auto col = ts::sum(b, {0}).to_vector<float>();
  EXPECT_GT(moved(), t0);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(col[static_cast<size_t>(i)], got[static_cast<size_t>(i)]) << i;
}

TEST(Mpi, AFailingBodyOnOneProcessStopsTheOthers) {
  if (ts::process_count() < 2) GTEST_SKIP() << "needs several processes";
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  ts::Array a = ts::device_put(std::vector<float>(static_cast<size_t>(n), 1.0f), {n}, ts::NamedSharding(m, ts::P("x")));
  const bool fails = ts::process_index() == 1;
  auto f = ts::shard_map([&](ts::Array x) {
    if (fails) throw ts::ValueError("[body] bad input on this process");
    return ts::psum(x, "x");
  }, m, {ts::P("x")}, ts::P());
  if (fails)
    expect_throw_with([&] { (void)f(a); }, "bad input on this process");
  else
    expect_throw_with([&] { (void)f(a); }, "(process 1) raised an error");
  // The processes still work together afterwards.
  EXPECT_EQ(ts::process_allgather<float>(a), std::vector<float>(static_cast<size_t>(n), 1.0f));
}

// grad and vmap on meshes over every process, against plain host loops:
// the batch lives on both processes, so the cotangents of a replicated
// weight are summed across them and the batched examples stay where they
// are; through a shard_map, the transposes of psum_scatter and psum run
// their collectives across processes too.
TEST(Mpi, GradAndVmapAcrossProcesses) {
  auto near = [](const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << what << " " << i;
  };
  for (const auto& m : meshes()) {
    const std::string a0 = m.axis_names()[0];
    const std::int64_t B = 2 * m.axis_size(a0) + 1, D = 4, H = 3;  // uneven batch blocks
    const auto hx = iota_data(B * D), hw = iota_data(D * H, 0.5);
    const ts::Array x = ts::device_put(hx, {B, D}, ts::NamedSharding(m, ts::P(a0)));
    const ts::Array w = ts::device_put(hw, {D, H}, ts::NamedSharding(m, ts::P()));
    // L = sum(tanh(x w)^2): with t = tanh(x w) and u = 2 t (1 - t^2),
    // dL/dw = x^T u and dL/dx = u w^T; example b's own dL/dw is x[b]^T u[b].
    std::vector<double> u(static_cast<size_t>(B * H)), gw(static_cast<size_t>(D * H), 0.0), gx(static_cast<size_t>(B * D), 0.0),
        per(static_cast<size_t>(B * D * H));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        double s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += hx[b * D + d] * hw[d * H + h];
        const double t = std::tanh(s);
        u[b * H + h] = 2 * t * (1 - t * t);
      }
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t d = 0; d < D; ++d)
        for (std::int64_t h = 0; h < H; ++h) {
          gw[d * H + h] += hx[b * D + d] * u[b * H + h];
          gx[b * D + d] += u[b * H + h] * hw[d * H + h];
          per[(b * D + d) * H + h] = hx[b * D + d] * u[b * H + h];
        }
    auto loss = [](ts::Array wv, ts::Array xv) {
      ts::Array t = ts::tanh(ts::matmul(xv, wv));
      return ts::sum(t * t);
    };
    const std::string where = " on " + m.str();
    auto [dw, dx] = ts::grad(loss, ts::argnums<0, 1>)(w, x);
    EXPECT_EQ(dx.sharding(), x.sharding()) << where;
    near(ts::process_allgather<double>(dw), gw, "grad w" + where);
    near(ts::process_allgather<double>(dx), gx, "grad x" + where);
    // Per-example gradients, the batch sharded across the processes.
    const ts::Array pe = ts::vmap([&](ts::Array xi) { return ts::grad(loss)(w, ts::reshape(xi, {1, D})); })(x);
    ASSERT_EQ(pe.shape(), (ts::Shape{B, D, H})) << where;
    near(ts::process_allgather<double>(pe), per, "vmap(grad)" + where);
    // A plain batched function, chunked per device.
    const ts::Array ys = ts::vmap([](ts::Array xi) { return ts::sum(ts::sin(xi) * xi); }, {.chunk_size = 2})(x);
    std::vector<double> want_y(static_cast<size_t>(B), 0.0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t d = 0; d < D; ++d) want_y[b] += std::sin(hx[b * D + d]) * hx[b * D + d];
    near(ts::process_allgather<double>(ys), want_y, "vmap" + where);
  }
  // Through a shard_map over every device: y = psum_scatter(sin(x)) (rows
  // of n blocks of R summed, each device its uneven share of R) and
  // z = psum(sum(x^2)); L = sum(y^2) + z. By hand: dL/dx[d*R + r, c] =
  // 2 y[r, c] cos(x[d*R + r, c]) + 2 x[d*R + r, c].
  const int n = ts::device_count();
  ts::Mesh m = ts::make_mesh({n}, {"x"});
  const std::int64_t R = 2 * n + 1, C = 2;
  const auto hx = iota_data(n * R * C);
  const ts::Array x = ts::device_put(hx, {n * R, C}, ts::NamedSharding(m, ts::P("x")));
  auto body = ts::shard_map([](ts::Array v) {
    return std::make_tuple(ts::psum_scatter(ts::sin(v), "x", 0, true), ts::psum(ts::sum(v * v), "x"));
  }, m, {ts::P("x")}, std::vector<ts::PartitionSpec>{ts::P("x"), ts::P()});
  const ts::Array g = ts::grad([&](ts::Array a) {
    auto [y, z] = body(a);
    return ts::sum(y * y) + z;
  })(x);
  std::vector<double> y(static_cast<size_t>(R * C), 0.0), want(hx.size());
  for (int d = 0; d < n; ++d)
    for (std::int64_t i = 0; i < R * C; ++i) y[i] += std::sin(hx[d * R * C + i]);
  for (int d = 0; d < n; ++d)
    for (std::int64_t i = 0; i < R * C; ++i) {
      const double v = hx[d * R * C + i];
      want[d * R * C + i] = 2 * y[i] * std::cos(v) + 2 * v;
    }
  near(ts::process_allgather<double>(g), want, "grad through psum_scatter and psum");
  // vmap of that shard_map: per example, the same sums.
  const ts::Array xs = ts::device_put(iota_data(3 * n * R * C), {3, n * R, C}, ts::NamedSharding(m, ts::P()));
  auto [ys, zs] = ts::vmap([&](ts::Array a) { return body(a); })(xs);
  const auto hxs = iota_data(3 * n * R * C);
  std::vector<double> want_ys(static_cast<size_t>(3 * R * C), 0.0), want_zs(3, 0.0);
  for (int e = 0; e < 3; ++e)
    for (int d = 0; d < n; ++d)
      for (std::int64_t i = 0; i < R * C; ++i) {
        const double v = hxs[(e * n + d) * R * C + i];
        want_ys[e * R * C + i] += std::sin(v);
        want_zs[e] += v * v;
      }
  near(ts::process_allgather<double>(ys), want_ys, "vmap of psum_scatter");
  near(ts::process_allgather<double>(zs), want_zs, "vmap of psum");
}
