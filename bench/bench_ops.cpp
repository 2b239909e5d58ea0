// bench_ops: global-view ops against the machine's limits, measured in the
// same run.
//
//   bench_ops [--json build/bench/ops.json] [--reps 7] [--num-devices N]
//
// Workloads (N = all devices, one per hardware thread by default):
//   diff        diff(x, 1, axis=0, prepend=0) on 4096x4096 f64, sharded over
//               (1 device), (N,1) and (1,N); ratio = (bytes read + written) /
//               time over the STREAM-like bandwidth of as many threads.
//   sin         2*sin(x)+1 on 2^24 f32 over N (three unfused passes); same ratio.
//   mlp         sigmoid(x @ w + b), x 8192x1024 (i, none), w 1024x1024
//               (none, j) on a 2-d mesh; GFLOP/s over single-thread BLAS peak
//               (sgemm 1024^3, one thread, median of 7, same run) x devices.
//   gemm        sgemm and dgemm 4096^3 through the linked BLAS on N threads;
//               GFLOP/s over the cores' FMA limit (bench_util's fma_peak:
//               12 FMA chains per thread on the widest vectors, same run),
//               goal 0.85.
//   dispatch    x + 1 on a 16-element array over N devices: microseconds per op
//               (no machine limit; the goal is under 10 us per op).
//   jit         2*sin(x)+1 under jit (one fused pass: ratio of bytes read +
//               written over the streaming limit measured right before and
//               after it, goal 0.9); a 20-op
//               elementwise chain, jit and eager; trace + compile of that
//               20-op program (goal under 1 ms); a cached call of a tiny
//               program on one device (goal under 5 us).
//   jacobian    jacfwd of 2*tanh(A x)+1, A 10^5 x 512 f64 with rows sharded,
//               whole and chunked 16/64/128: time and peak memory per device
//               above the inputs (the Jacobian alone is 10^5*512*8/N bytes).
#include <cblas.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tessera/tessera.hpp>

#include "bench_util.hpp"

extern "C" void openblas_set_num_threads(int);

namespace ts = tessera;
namespace tb = tessera::bench;
using json = nlohmann::json;

namespace {

// Every time is the median rep, and so is every limit it is divided by
// (bench_util's stream_copy, the BLAS peak below): a ratio never mixes a
// fastest rep with a median. The fastest rep is printed beside the median
// for reference only.
struct Row {
  std::string workload, layout;
  double seconds = 0, value = 0, limit = 0, ratio = 0, goal = 0;  // seconds: median rep
  std::string unit, limit_name;
  double fastest = 0;  // seconds; rows against a limit, for reference only
};

struct Timing {
  double best = 0, median = 0;
};

double median_time(int reps, const std::function<void()>& f) { return tb::median(tb::time_reps(1, reps, f)); }

Timing timing(int reps, const std::function<void()>& f) {
  const auto t = tb::time_reps(1, reps, f);
  return {*std::min_element(t.begin(), t.end()), tb::median(t)};
}

// Single-thread sgemm GFLOP/s on 1024^3, the per-device compute limit: the
// median of 7 runs, the statistic of the times it is compared with.
double blas_peak_gflops() {
  const int n = 1024;
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n, 0.0f);
  openblas_set_num_threads(1);
  const auto t = tb::time_reps(1, 7, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * n * n * n / tb::median(t) / 1e9;
}

// Two axes for an N-device 2-d mesh: (N/2, 2) when even, else (N, 1).
std::vector<int> mesh_2d(int n) { return n % 2 == 0 && n > 1 ? std::vector<int>{n / 2, 2} : std::vector<int>{n, 1}; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera ops benchmark: diff, elementwise, mlp layer, dispatch overhead vs machine limits"};
  std::string json_path = "build/bench/ops.json";
  int reps = 7;
  std::optional<int> num_devices;
  app.add_option("--json", json_path, "where to write the results as JSON")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions (median reported)")->capture_default_str();
  app.add_option("--num-devices", num_devices, "number of CPU devices (default: hardware threads)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (num_devices) ts::config::set_num_cpu_devices(*num_devices);
    const int n = ts::device_count();
    auto devs = ts::devices();
    std::vector<Row> rows;

    const auto stream1 = tb::stream_copy(std::size_t(128) << 20, 1, 10);
    const auto streamN = tb::stream_copy(std::size_t(128) << 20, n, 10);
    std::cout << "Tessera ops benchmark: " << n << " devices\n"
              << "  streaming limit (threads each copy their own buffers; read + write): 1 thread " << stream1.stream_gbps << " GB/s, "
              << n << " threads " << streamN.stream_gbps << " GB/s\n";

    // ---- diff along axis 0 with prepend 0.
    {
      const std::int64_t m = 4096;
      std::vector<double> host(static_cast<size_t>(m * m));
      for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<double>(i % 1000) * 0.5;
      struct L {
        std::string name;
        ts::Mesh mesh;
        ts::PartitionSpec spec, zspec;
      };
      ts::Mesh one(std::vector<ts::Device>{devs[0]}, {1}, {"x"});
      ts::Mesh line = ts::make_mesh({n}, {"x"});
      std::vector<L> layouts = {{"1 device", one, ts::P(), ts::P()},
                                {"(" + std::to_string(n) + ",1)", line, ts::P("x"), ts::P()},
                                {"(1," + std::to_string(n) + ")", line, ts::P(ts::none, "x"), ts::P(ts::none, "x")}};
      for (const auto& l : layouts) {
        auto x = ts::device_put(host, {m, m}, ts::NamedSharding(l.mesh, l.spec));
        auto z = ts::zeros({1, m}, ts::f64, ts::NamedSharding(l.mesh, l.zspec));
        const Timing t = timing(reps, [&] { ts::diff(x, 1, 0, {.prepend = z}).block_until_ready(); });
        const double bytes = 2.0 * m * m * 8;
        const double limit = l.mesh.size() == 1 ? stream1.stream_gbps : streamN.stream_gbps;
        rows.push_back({"diff axis 0 (4096^2 f64)", l.name, t.median, bytes / t.median / 1e9, limit, 0, 0.7, "GB/s",
                        "STREAM GB/s", t.best});
      }
    }
    // ---- 2*sin(x)+1 on 2^24 f32.
    {
      const std::int64_t len = std::int64_t(1) << 24;
      ts::Mesh line = ts::make_mesh({n}, {"x"});
      auto x = ts::random::uniform(ts::random::key(0), {len}, ts::f32, ts::NamedSharding(line, ts::P("x")), -3, 3);
      const Timing t = timing(reps, [&] { (2.0f * ts::sin(x) + 1.0f).block_until_ready(); });
      const double bytes = 3.0 * 2.0 * len * 4;  // three passes, each reads and writes
      rows.push_back({"2*sin(x)+1 (2^24 f32)", "(" + std::to_string(n) + ")", t.median, bytes / t.median / 1e9,
                      streamN.stream_gbps, 0, 0, "GB/s", "STREAM GB/s", t.best});
    }
    // ---- sigmoid(x @ w + b).
    {
      const auto ms = mesh_2d(n);
      ts::Mesh mesh = ts::make_mesh(ms, {"i", "j"});
      const std::int64_t M = 8192, K = 1024, N = 1024;
      auto key = ts::random::key(1);
      auto x = ts::random::normal(key, {M, K}, ts::f32, ts::NamedSharding(mesh, ts::P("i", ts::none)));
      auto w = ts::random::normal(ts::random::fold_in(key, 1), {K, N}, ts::f32,
                                  ts::NamedSharding(mesh, ts::P(ts::none, "j")));
      auto b = ts::zeros({N}, ts::f32, ts::NamedSharding(mesh, ts::P("j")));
      const double peak = blas_peak_gflops();
      const Timing t = timing(reps, [&] { ts::sigmoid(ts::matmul(x, w) + b).block_until_ready(); });
      const double gflops = 2.0 * M * K * N / t.median / 1e9;
      rows.push_back({"sigmoid(x@w+b) 8192x1024x1024 f32",
                      "mesh (" + std::to_string(ms[0]) + "," + std::to_string(ms[1]) + ")", t.median, gflops, peak * n, 0,
                      0.8, "GFLOP/s", "BLAS 1-thread peak x devices", t.best});
    }
    // ---- GEMM 4096^3 on all cores against the cores' FMA limit (bench_util's
    // fma_peak, same run): how close the BLAS Tessera links comes to what
    // the cores can compute.
    {
      const tb::FmaPeak fp = tb::fma_peak(n);
      std::printf("  FMA limit (%s, %d threads): %.1f GFLOP/s f32, %.1f GFLOP/s f64\n", fp.isa.c_str(), n,
                  fp.f32_gflops, fp.f64_gflops);
      const int g = 4096;
      openblas_set_num_threads(n);
      {
        std::vector<float> a(static_cast<size_t>(g) * g, 1.0f), b(a.size(), 0.5f), c(a.size(), 0.0f);
        const Timing t = timing(std::min(reps, 5), [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g, g, g, 1.0f, a.data(), g, b.data(), g, 0.0f,
                      c.data(), g);
        });
        rows.push_back({"sgemm 4096^3 (BLAS, all threads)", "(" + std::to_string(n) + ")", t.median,
                        2.0 * g * g * g / t.median / 1e9, fp.f32_gflops, 0, 0.85, "GFLOP/s", fp.isa + " FMA limit",
                        t.best});
      }
      {
        std::vector<double> a(static_cast<size_t>(g) * g, 1.0), b(a.size(), 0.5), c(a.size(), 0.0);
        const Timing t = timing(std::min(reps, 5), [&] {
          cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g, g, g, 1.0, a.data(), g, b.data(), g, 0.0, c.data(),
                      g);
        });
        rows.push_back({"dgemm 4096^3 (BLAS, all threads)", "(" + std::to_string(n) + ")", t.median,
                        2.0 * g * g * g / t.median / 1e9, fp.f64_gflops, 0, 0.85, "GFLOP/s", fp.isa + " FMA limit",
                        t.best});
      }
      openblas_set_num_threads(1);
    }
    // ---- eager dispatch overhead.
    {
      ts::Mesh line = ts::make_mesh({n}, {"x"});
      auto x = ts::zeros({16}, ts::f32, ts::NamedSharding(line, ts::P("x")));
      const int iters = 20000;
      double t = median_time(5, [&] {
        for (int i = 0; i < iters; ++i) (void)(x + 1.0f);
      }) / iters;
      // No machine limit applies; the goal (under 10 us per op) is reported as a goal.
      rows.push_back({"dispatch: x + 1 (16 f32)", "(" + std::to_string(n) + ")", t, t * 1e6, 0, 0, 10.0, "us/op",
                      "none"});
    }

    // ---- jit.
    {
      const std::int64_t len = std::int64_t(1) << 24;
      ts::Mesh line = ts::make_mesh({n}, {"x"});
      auto x = ts::random::uniform(ts::random::key(0), {len}, ts::f32, ts::NamedSharding(line, ts::P("x")), -3, 3);
      auto layer = ts::jit([](ts::Array v) { return 2.0f * ts::sin(v) + 1.0f; });
      layer(x);
      // This VM's bandwidth drifts within seconds (other programs, the
      // host): the limit of the jit rows is the streaming rate measured
      // right before and right after the fused pass (the mean of the two
      // medians), not the one from the start of the run.
      const auto before = tb::stream_copy(std::size_t(128) << 20, n, 10);
      const Timing t = timing(reps, [&] { layer(x).block_until_ready(); });
      const auto after = tb::stream_copy(std::size_t(128) << 20, n, 10);
      const double limit = 0.5 * (before.stream_gbps + after.stream_gbps);
      std::printf("  streaming limit around the jit rows (%d threads, read + write): %.2f GB/s before, %.2f after\n", n,
                  before.stream_gbps, after.stream_gbps);
      const double bytes = 2.0 * len * 4;  // one pass: read x, write the result
      rows.push_back({"jit 2*sin(x)+1 (2^24 f32)", "(" + std::to_string(n) + ")", t.median, bytes / t.median / 1e9,
                      limit, 0, 0.9, "GB/s", "STREAM GB/s (before/after)", t.best});
      // Twenty elementwise ops, each a pass of its own when eager.
      auto chain = [](ts::Array v) {
        ts::Array a = v;
        for (int i = 0; i < 5; ++i) a = ts::tanh(a * 0.9f + 0.1f) - v * 0.01f;
        return a;
      };
      auto jchain = ts::jit(chain);
      jchain(x);
      const Timing tj = timing(reps, [&] { jchain(x).block_until_ready(); });
      const Timing te = timing(reps, [&] { chain(x).block_until_ready(); });
      rows.push_back({"jit 20-op chain (2^24 f32)", "(" + std::to_string(n) + ")", tj.median, bytes / tj.median / 1e9,
                      limit, 0, 0, "GB/s", "STREAM GB/s (before/after)", tj.best});
      rows.push_back({"eager 20-op chain (2^24 f32)", "(" + std::to_string(n) + ")", te.median,
                      20 * bytes / te.median / 1e9, limit, 0, 0, "GB/s", "STREAM GB/s (before/after)", te.best});
      std::printf("  jit 20-op chain: %s, eager %s: jit / eager = %.3f (medians)\n",
                  tb::format_seconds(tj.median).c_str(), tb::format_seconds(te.median).c_str(), tj.median / te.median);
      // Trace + compile: a fresh jit each time, lower() only.
      auto small = ts::zeros({1024}, ts::f32, ts::NamedSharding(line, ts::P("x")));
      const double tc = median_time(std::max(reps, 21), [&] { (void)ts::jit(chain).lower(small); });
      rows.push_back({"jit trace+compile, 20 ops", "(" + std::to_string(n) + ")", tc, tc * 1e3, 0, 0, 1.0, "ms",
                      "none"});
      // A cached call of a tiny program on one device, against the eager
      // kernel time of the same op on that device.
      ts::Mesh one(std::vector<ts::Device>{devs[0]}, {1}, {"x"});
      auto tiny_x = ts::zeros({16}, ts::f32, ts::NamedSharding(one, ts::P()));
      auto tiny = ts::jit([](ts::Array v) { return v + 1.0f; });
      tiny(tiny_x);
      const int iters = 20000;
      const double tt = median_time(5, [&] {
        for (int i = 0; i < iters; ++i) (void)tiny(tiny_x);
      }) / iters;
      rows.push_back({"jit cached call: x + 1 (16 f32)", "1 device", tt, tt * 1e6, 0, 0, 5.0, "us/call", "none"});
    }

    // ---- Peak memory of a chunked map: grows with the chunk, not the batch.
    // Each example makes a 256 KiB intermediate (its 256 x 256 outer
    // product); the batch is sharded over the devices, so each device runs
    // its own rows a chunk at a time.
    {
      ts::Mesh line = ts::make_mesh({n}, {"x"});
      const ts::NamedSharding rows_s(line, ts::P("x"));
      auto f = [](ts::Array a) { return ts::sum(ts::multiply(ts::expand_dims(a, 1), ts::expand_dims(a, 0))); };
      std::printf("\n  chunked map, peak memory per device above its inputs (f: 256 KiB intermediate per example):\n");
      std::printf("  %8s %8s %14s %12s\n", "batch", "chunk", "peak/device", "median");
      for (std::int64_t batch : {1024, 8192}) {
        auto x = ts::random::normal(ts::random::key(3), {batch, 256}, ts::f32, rows_s);
        x.block_until_ready();
        for (std::int64_t chunk : {16, 64, 256}) {
          auto g = ts::vmap(f, {.chunk_size = chunk});
          g(x).block_until_ready();
          std::int64_t base = 0, peak = 0;
          for (const auto& d : line.devices()) {
            ts::reset_peak_memory(d);
            base = std::max(base, ts::memory_stats(d).bytes_in_use);
          }
          const Timing t = timing(std::min(reps, 5), [&] { g(x).block_until_ready(); });
          for (const auto& d : line.devices()) peak = std::max(peak, ts::memory_stats(d).peak_bytes_in_use);
          const double mib = static_cast<double>(peak - base) / (1 << 20);
          std::printf("  %8lld %8lld %10.2f MiB %12s\n", static_cast<long long>(batch), static_cast<long long>(chunk),
                      mib, tb::format_seconds(t.median).c_str());
          rows.push_back({"chunked map peak, batch " + std::to_string(batch), "chunk " + std::to_string(chunk), t.median,
                          mib, 0, 0, 0, "MiB/device", "none"});
        }
      }
    }

    // ---- A chunked Jacobian (the stellarator shape): f(x) = 2*tanh(A x)+1
    // with A 10^5 x 512 f64, rows sharded, x (512) replicated; jacfwd over
    // the 512 directions, whole and in chunks. Peak per device above the
    // inputs, against the Jacobian's own bytes per device: a chunked one
    // should hold the output and one chunk (O(chunk x rows)), whatever P.
    {
      ts::Mesh line = ts::make_mesh({n}, {"x"});
      const std::int64_t m = 100000, p = 512;
      ts::Array a = ts::random::normal(ts::random::key(5), {m, p}, ts::f64, ts::NamedSharding(line, ts::P("x"))) * 0.01;
      ts::Array x = ts::random::normal(ts::random::key(6), {p}, ts::f64, ts::NamedSharding(line, ts::P()));
      a.block_until_ready();
      auto f = [&](ts::Array v) { return ts::tanh(ts::matmul(a, v)) * 2.0 + 1.0; };
      const double out_mib = static_cast<double>(m * p * 8) / n / (1 << 20);
      std::printf("\n  jacfwd of 2*tanh(A x)+1, A %lld x %lld f64 rows over %d devices (Jacobian: %.1f MiB/device):\n",
                  static_cast<long long>(m), static_cast<long long>(p), n, out_mib);
      std::printf("  %8s %14s %12s\n", "chunk", "peak/device", "median");
      for (std::int64_t chunk : {0, 16, 64, 128}) {
        auto j = ts::jacfwd(f, {.chunk_size = chunk});
        std::int64_t base = 0, peak = 0;
        for (const auto& d : line.devices()) {
          ts::reset_peak_memory(d);
          base = std::max(base, ts::memory_stats(d).bytes_in_use);
        }
        const Timing t = timing(std::min(reps, 3), [&] { j(x).block_until_ready(); });
        for (const auto& d : line.devices()) peak = std::max(peak, ts::memory_stats(d).peak_bytes_in_use);
        const double mib = static_cast<double>(peak - base) / (1 << 20);
        std::printf("  %8s %10.2f MiB %12s\n", chunk ? std::to_string(chunk).c_str() : "none", mib,
                    tb::format_seconds(t.median).c_str());
        rows.push_back({"jacfwd peak, 1e5 x 512 f64", chunk ? "chunk " + std::to_string(chunk) : "whole", t.median, mib, 0,
                        0, 0, "MiB/device", "none"});
      }
    }

    json out = json::array();
    std::printf("\n%-36s %-12s %10s %10s %12s %12s %8s\n", "workload", "layout", "median", "fastest", "achieved", "limit",
                "ratio");
    for (auto& r : rows) {
      if (r.limit > 0) {
        r.ratio = r.value / r.limit;
        std::printf("%-36s %-12s %10s %10s %8.2f %-7s %8.2f %6.2f%s\n", r.workload.c_str(), r.layout.c_str(),
                    tb::format_seconds(r.seconds).c_str(), tb::format_seconds(r.fastest).c_str(), r.value, r.unit.c_str(), r.limit, r.ratio,
                    r.goal > 0 ? (r.ratio >= r.goal ? "  (goal met)" : "  (below goal)") : "");
      } else if (r.goal <= 0) {
        // A measurement without a limit or a goal (memory).
        std::printf("%-36s %-12s %10s %10s %8.2f %-7s\n", r.workload.c_str(), r.layout.c_str(),
                    tb::format_seconds(r.seconds).c_str(), "-", r.value, r.unit.c_str());
      } else {
        // A time with a goal and no limit: "goal" is an upper bound on the value.
        std::printf("%-36s %-12s %10s %10s %8.2f %-7s %8s %6s  (goal < %g %s: %s)\n", r.workload.c_str(),
                    r.layout.c_str(), tb::format_seconds(r.seconds).c_str(), "-", r.value, r.unit.c_str(), "-", "-",
                    r.goal, r.unit.c_str(), r.value < r.goal ? "met" : "not met");
      }
      json o{{"workload", r.workload}, {"layout", r.layout}, {"seconds", r.seconds}, {"value", r.value},
             {"unit", r.unit},         {"limit_name", r.limit_name}, {"goal", r.goal}};
      o["limit"] = r.limit > 0 ? json(r.limit) : json(nullptr);
      o["ratio"] = r.limit > 0 ? json(r.ratio) : json(nullptr);
      o["statistic"] = "median";
      if (r.fastest > 0) o["fastest_seconds"] = r.fastest;
      if (r.limit <= 0) o["goal_kind"] = "upper bound on value";
      out.push_back(std::move(o));
    }
    std::printf("ratio: achieved / limit, both measured in this run, both medians (the fastest rep beside them for\n"
                "reference); rows without a limit report the median against their goal\n");
    std::filesystem::create_directories(std::filesystem::path(json_path).parent_path());
    std::ofstream(json_path) << json{{"devices", n}, {"results", out}}.dump(2) << "\n";
    std::cout << "wrote " << json_path << "\n";
  } catch (const ts::Error& e) {
    std::cerr << "bench_ops: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
