// The finite-difference case from a user whose sharded jnp.diff ran 20x
// slower than unsharded: with Tessera, differencing along the sharded axis
// exchanges one boundary row per device and is no slower than across it.
// The same halo exchange is also written by hand with shard_map and ppermute.
//
// Under mpirun the mesh spans every process's devices; the errors are
// reductions (replicated scalars, readable on every process) and each
// verdict is agreed between the processes.
#include "finite_difference.hpp"

#include <chrono>
#include <cmath>
#include <ostream>
#include <utility>
#include <vector>
#include <tessera/tessera.hpp>

#include "common/processes.hpp"

namespace ts = tessera;

namespace examples {

namespace {
double seconds_of(const std::function<void()>& f, int reps = 5) {
  f();  // warm up (allocator caches, first touch)
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

int finite_difference(std::ostream& os, long n) {
  const int ndev = ts::device_count();
  ts::Mesh mesh = ts::make_mesh({ndev}, {"x"});
  const double h = 2.0 * M_PI / static_cast<double>(n);
  // Grid values built block by block on the devices that hold them.
  auto grid = [&](const ts::NamedSharding& s) {
    return ts::make_array_from_callback({n, n}, ts::f64, s, [&](const std::vector<ts::Slice>& idx) {
      std::vector<double> v;
      v.reserve(static_cast<size_t>(idx[0].size() * idx[1].size()));
      for (auto i = idx[0].start; i < idx[0].stop; ++i)
        for (auto j = idx[1].start; j < idx[1].stop; ++j) v.push_back(std::sin(i * h) * std::cos(j * h));
      return v;
    });
  };
  int failures = 0;
  os << "d/dx of sin(x) cos(y) on a " << n << " x " << n << " f64 grid over " << ndev << " devices\n";
  struct Form {
    const char* name;
    ts::PartitionSpec spec;
  };
  for (const Form& f : {Form{"rows sharded (N,1): diff along the sharded axis", ts::P("x")},
                        Form{"columns sharded (1,N): diff across the sharded axis", ts::P(ts::none, "x")}}) {
    ts::NamedSharding s(mesh, f.spec);
    ts::Array u = grid(s);
    ts::Array zero = ts::zeros({1, n}, ts::f64, ts::NamedSharding(mesh, ts::P(ts::none, f.spec[1])));
    ts::Array du;
    auto ex = ts::explain([&] { du = ts::diff(u, 1, 0, {.prepend = zero}) / h; });
    double t = seconds_of([&] { ts::diff(u, 1, 0, {.prepend = zero}).block_until_ready(); });
    // Backward difference at row i approximates the derivative at i - 1/2.
    ts::Array exact = ts::make_array_from_callback({n, n}, ts::f64, s, [&](const std::vector<ts::Slice>& idx) {
      std::vector<double> v;
      for (auto i = idx[0].start; i < idx[0].stop; ++i)
        for (auto j = idx[1].start; j < idx[1].stop; ++j)
          v.push_back(i == 0 ? std::sin(0.0) * std::cos(j * h) / h : std::cos((i - 0.5) * h) * std::cos(j * h));
      return v;
    });
    const double err = ts::max(ts::abs(du - exact)).item<double>();
    const bool ok = on_every_process(err < 1e-3 && du.sharding() == s);
    failures += ok ? 0 : 1;
    os << "  " << f.name << "\n"
       << "    result " << ts::typeof(du) << ", time " << t * 1e3 << " ms, moved " << ts::format_bytes(ex.bytes_moved())
       << " between devices (array " << ts::format_bytes(n * n * 8) << "), max error " << err << " ... "
       << (ok ? "ok" : "FAILED") << "\n";
  }
  {
    // The derivative under jit: the halo exchange, the local differences and
    // the division by h run in one task per device per call, and give
    // bitwise the eager result.
    ts::NamedSharding s(mesh, ts::P("x"));
    ts::Array u = grid(s);
    ts::Array zero = ts::zeros({1, n}, ts::f64, ts::NamedSharding(mesh, ts::P()));
    auto derivative = [h](ts::Array v, ts::Array z) { return ts::diff(v, 1, 0, {.prepend = z}) / h; };
    auto jitted = ts::jit(derivative);
    const ts::Array eager = derivative(u, zero), compiled = jitted(u, zero);
    const double te = seconds_of([&] { derivative(u, zero).block_until_ready(); });
    const double tj = seconds_of([&] { jitted(u, zero).block_until_ready(); });
    const bool same =
        on_every_process(ts::all(ts::equal(eager, compiled)).item<bool>() && eager.sharding() == compiled.sharding());
    failures += same ? 0 : 1;
    os << "  jit: diff(u)/h on rows sharded (N,1), compiled once\n"
       << "    eager " << te * 1e3 << " ms, jit " << tj * 1e3 << " ms, equal to eager bitwise: " << (same ? "yes" : "no")
       << " ... " << (same ? "ok" : "FAILED") << "\n";
  }
  {
    // The same difference in manual mode: each device sends the last row of
    // its block to the next device (ppermute; device 0 receives zeros, which
    // is the prepended zero row), then differences its block locally with
    // that halo row in front.
    ts::NamedSharding s(mesh, ts::P("x"));
    ts::Array u = grid(s);
    std::vector<std::pair<int, int>> to_next;
    for (int k = 0; k + 1 < ndev; ++k) to_next.emplace_back(k, k + 1);
    auto halo_diff = ts::shard_map(
        [to_next](ts::Array ul) {
          ts::Array halo = ts::ppermute(ts::slice(ul, {{.start = -1}}), "x", to_next);
          return ts::diff(ul, 1, 0, {.prepend = halo});
        },
        mesh, {ts::P("x")}, ts::P("x"));
    os << "  shard_map: ppermute of one halo row to the next device, then a local diff\n";
    if (n < ndev) {
      os << "    skipped: every device needs at least one row (" << n << " rows, " << ndev << " devices)\n";
      return failures;
    }
    ts::Array du;
    auto ex = ts::explain([&] { du = halo_diff(u); });
    double t = seconds_of([&] { halo_diff(u).block_until_ready(); });
    ts::Array zero = ts::zeros({1, n}, ts::f64, ts::NamedSharding(mesh, ts::P()));
    ts::Array global = ts::diff(u, 1, 0, {.prepend = zero});
    const double err = ts::max(ts::abs(du - global)).item<double>();
    // ppermute sends one row of n doubles from each device but the last:
    // every device but the first receives one row. Checked per device, for
    // this process's devices (the ones whose receipts it records).
    std::vector<std::int64_t> received(static_cast<std::size_t>(ndev), 0);
    bool halo_only = true;
    for (const ts::CommRecord& r : ex.records) {
      halo_only = halo_only && static_cast<int>(r.bytes_received.size()) == ndev;
      for (std::size_t pos = 0; halo_only && pos < received.size(); ++pos) received[pos] += r.bytes_received[pos];
    }
    for (int pos = 0; pos < ndev; ++pos)
      if (mesh.devices()[pos].is_local()) halo_only = halo_only && received[pos] == (pos == 0 ? 0 : n * 8);
    const bool ok2 = on_every_process(err == 0.0 && du.sharding() == s && halo_only);
    failures += ok2 ? 0 : 1;
    os << "    result " << ts::typeof(du) << ", time " << t * 1e3 << " ms, moved " << ts::format_bytes(ex.bytes_moved())
       << " between devices (one row per neighbour), equal to the global-view ts::diff: " << (err == 0.0 ? "yes" : "no")
       << " ... " << (ok2 ? "ok" : "FAILED") << "\n";
  }
  return failures;
}

}  // namespace examples
