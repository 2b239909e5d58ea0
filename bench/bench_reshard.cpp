// bench_reshard: how fast ts::reshard moves a 4096x4096 f64 array between
// layouts on a 1-d mesh over all N devices, against the streaming limit of N
// threads measured in the same run.
//
//   bench_reshard [--json build/bench/reshard.json] [--reps 15] [--warmup 2]
//                 [--rows 4096] [--cols 4096] [--num-devices N]
//
// Bytes of a reshard = what it wrote in total: the sum over devices of bytes
// received from other devices plus bytes copied locally (from the plan); each
// of them is also read once. The limit is the time to read and write those
// bytes at the streaming rate of N threads, each copying its own buffers
// (bench_util.hpp, median of 5): limit = 2 x written / N-thread read+write
// rate. ratio = limit / reshard time (1: the reshard moves its bytes at the
// machine's streaming limit).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tessera/tessera.hpp>

#include "bench_util.hpp"

namespace ts = tessera;
namespace tb = tessera::bench;
using json = nlohmann::json;

namespace {

struct Workload {
  std::string name;
  ts::PartitionSpec from;
  ts::PartitionSpec to;
  double target_ratio;  // 0: no target
};

struct Result {
  std::string name;
  std::string from, to, kind;
  std::int64_t bytes_moved = 0, bytes_local = 0, bytes_written = 0;
  std::vector<double> times;
  double seconds = 0, min_seconds = 0, limit_seconds = 0;
  double gbps = 0, ratio = 0, target = 0;
  bool verified = false;
  std::string status;
};

std::string spec_short(const ts::PartitionSpec& p) {
  std::string s = p.str();  // "PartitionSpec('x', None)"
  const std::string pre = "PartitionSpec";
  if (s.rfind(pre, 0) == 0) s.replace(0, pre.size(), "P");
  return s;
}

std::string count_source(std::optional<int> cli) {
  if (cli) return "--num-devices";
  if (const char* env = std::getenv("TESSERA_NUM_CPU_DEVICES")) return std::string("TESSERA_NUM_CPU_DEVICES=") + env;
  return "hardware threads";
}

int run(int argc, char** argv) {
  CLI::App app{"Tessera reshard benchmark: ts::reshard vs the N-thread streaming limit on a 1-d mesh over all devices"};
  std::string json_path = "build/bench/reshard.json";
  int reps = 15, warmup = 2;
  std::int64_t rows = 4096, cols = 4096;
  std::optional<int> num_devices;
  bool no_verify = false;
  app.add_option("--json", json_path, "where to write the results as JSON")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions per workload (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--warmup", warmup, "untimed repetitions first")->capture_default_str()->check(CLI::Range(0, 100));
  app.add_option("--rows", rows, "array rows")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--cols", cols, "array columns")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--num-devices", num_devices,
                 "number of CPU devices (default: TESSERA_NUM_CPU_DEVICES, else hardware threads)");
  app.add_flag("--no-verify", no_verify, "skip checking each result against the source data");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (num_devices) ts::config::set_num_cpu_devices(*num_devices);

  const double t_start = tb::now_seconds();
  const int n = ts::device_count();
  const unsigned hw = std::thread::hardware_concurrency();
  ts::Mesh mesh = ts::make_mesh({n}, {"x"});
  const ts::Shape shape{rows, cols};
  const std::int64_t array_bytes = rows * cols * static_cast<std::int64_t>(sizeof(double));

  std::cout << "Tessera reshard benchmark\n"
            << "  devices: " << n << " (from " << count_source(num_devices) << "; hardware threads: " << hw << ")\n"
            << "  mesh:    " << mesh.str() << "\n"
            << "  array:   " << rows << " x " << cols << " f64, " << tb::format_bytes(array_bytes) << "\n"
            << "  timing:  median of " << reps << " reps after " << warmup << " warm-up reps; limit: the bytes "
            << "written, read and written once, at the streaming rate of " << n << " threads (same run)\n\n";

  // Host data: element i = i (exact in f64), so every result can be checked.
  std::vector<double> host(static_cast<std::size_t>(rows * cols));
  std::iota(host.begin(), host.end(), 0.0);

  // The streaming limit of as many threads as devices (and of one, for
  // reference).
  const std::size_t stream_bytes = std::max<std::size_t>(std::size_t(256) << 20, static_cast<std::size_t>(n) << 25);
  tb::StreamResult stream1 = tb::stream_copy(stream_bytes, 1, 5);
  tb::StreamResult streamN = tb::stream_copy(stream_bytes, n, 5);

  const std::vector<Workload> workloads = {
      {"row->column", ts::P("x"), ts::P(ts::none, "x"), 0.5},
      {"replicated->sharded", ts::P(), ts::P("x"), 0.0},
      {"sharded->replicated", ts::P("x"), ts::P(), 0.8},
  };

  std::vector<Result> results;
  bool all_ok = true;
  for (const auto& w : workloads) {
    Result r;
    r.name = w.name;
    r.from = spec_short(w.from);
    r.to = spec_short(w.to);
    r.target = w.target_ratio;
    ts::NamedSharding src_s(mesh, w.from), dst_s(mesh, w.to);
    ts::Array a = ts::device_put(host, shape, src_s);
    ts::ReshardPlan plan = ts::plan_reshard(a, dst_s);
    r.kind = plan.kind;
    r.bytes_moved = plan.bytes_moved();
    r.bytes_local = std::accumulate(plan.bytes_local.begin(), plan.bytes_local.end(), std::int64_t{0});
    r.bytes_written = r.bytes_moved + r.bytes_local;

    if (!no_verify) {
      ts::Array b = ts::reshard(a, dst_s);
      r.verified = b.block_until_ready().to_vector<double>() == host && b.sharding() == dst_s;
      all_ok = all_ok && r.verified;
    }
    r.times = tb::time_reps(warmup, reps, [&] { ts::reshard(a, dst_s).block_until_ready(); });
    r.seconds = tb::median(r.times);
    r.min_seconds = *std::min_element(r.times.begin(), r.times.end());
    r.limit_seconds = streamN.seconds_for(2.0 * static_cast<double>(r.bytes_written));
    r.gbps = tb::gbps(static_cast<double>(r.bytes_written), r.seconds);
    r.ratio = r.bytes_written > 0 && r.seconds > 0 ? r.limit_seconds / r.seconds : 0.0;
    if (r.target <= 0)
      r.status = "-";
    else if (r.bytes_written == 0)
      r.status = "n/a";
    else
      r.status = r.ratio >= r.target ? "PASS" : "BELOW";
    results.push_back(std::move(r));
  }

  // Table.
  std::printf("%-20s %-13s %-14s %-12s %10s %10s %9s %10s %7s %7s %s\n", "workload", "from", "to", "plan", "written",
              "time", "GB/s", "limit", "ratio", "goal", "");
  for (const auto& r : results) {
    char target[16] = "-";
    if (r.target > 0) std::snprintf(target, sizeof target, ">=%.1f", r.target);
    std::printf("%-20s %-13s %-14s %-12s %10s %10s %9.2f %10s %7.2f %7s %s\n", r.name.c_str(), r.from.c_str(),
                r.to.c_str(), r.kind.c_str(), tb::format_bytes(r.bytes_written).c_str(),
                tb::format_seconds(r.seconds).c_str(), r.gbps, tb::format_seconds(r.limit_seconds).c_str(), r.ratio,
                target, r.status.c_str());
  }
  std::printf("\nGB/s: bytes written per second. limit: the written bytes read and written once at the streaming\n"
              "rate of %d threads (each copying its own buffers, median of 5): %.2f GB/s read + write (%.2f GB/s\n"
              "copied; 1 thread: %.2f GB/s read + write). ratio = limit / time.\n",
              streamN.threads, streamN.stream_gbps, streamN.copy_gbps, stream1.stream_gbps);
  if (!no_verify) std::printf("results equal the source data: %s\n", all_ok ? "ok" : "MISMATCH");

  // JSON.
  json j;
  j["benchmark"] = "reshard";
  j["tessera_version"] = ts::kVersion;
  j["devices"] = n;
  j["device_count_source"] = count_source(num_devices);
  j["hardware_threads"] = hw;
  j["mesh"] = mesh.str();
  j["shape"] = shape;
  j["dtype"] = "f64";
  j["array_bytes"] = array_bytes;
  j["reps"] = reps;
  j["warmup"] = warmup;
  j["bytes_definition"] = "sum over devices of bytes received + bytes copied locally (ReshardPlan)";
  j["ratio_definition"] =
      "limit_seconds / seconds; limit_seconds = 2 x bytes_written (each byte read and written once) at the "
      "read + write rate of as many threads as devices, each copying its own buffers (stream_copy.all_threads)";
  auto stream_json = [](const tb::StreamResult& s) {
    return json{{"threads", s.threads},
                {"array_bytes", s.array_bytes},
                {"seconds", s.seconds},
                {"copy_gbps", s.copy_gbps},
                {"stream_gbps", s.stream_gbps}};
  };
  j["stream_copy"] = {{"note", "threads each memcpy their own buffers, median rep; copy_gbps counts bytes copied, "
                               "stream_gbps counts read + write as STREAM does"},
                      {"single_thread", stream_json(stream1)},
                      {"all_threads", stream_json(streamN)}};
  json arr = json::array();
  for (const auto& r : results) {
    json o{{"name", r.name},
           {"from", r.from},
           {"to", r.to},
           {"plan_kind", r.kind},
           {"bytes_moved", r.bytes_moved},
           {"bytes_local", r.bytes_local},
           {"bytes_written", r.bytes_written},
           {"seconds", r.seconds},
           {"min_seconds", r.min_seconds},
           {"times", r.times},
           {"gbps", r.gbps},
           {"limit_seconds", r.limit_seconds},
           {"ratio_to_limit", r.ratio},
           {"status", r.status}};
    if (r.target > 0)
      o["target_ratio"] = r.target;
    else
      o["target_ratio"] = nullptr;
    if (no_verify)
      o["verified"] = nullptr;
    else
      o["verified"] = r.verified;
    arr.push_back(std::move(o));
  }
  j["workloads"] = std::move(arr);
  j["total_seconds"] = tb::now_seconds() - t_start;

  std::filesystem::path out(json_path);
  if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
  std::ofstream f(out);
  if (!f) {
    std::cerr << "error: cannot write " << json_path << "\n";
    return 1;
  }
  f << j.dump(2) << "\n";
  std::cout << "wrote " << json_path << " (" << std::fixed;
  std::cout.precision(1);
  std::cout << tb::now_seconds() - t_start << " s total)\n";
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ts::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
