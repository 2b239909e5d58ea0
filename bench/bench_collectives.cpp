// bench_collectives: the manual-mode collectives (psum, all_gather,
// psum_scatter, ppermute, all_to_all) over 1-d meshes of N = 2..8 CPU
// devices, per-device message sizes 4 KiB .. 256 MiB, against a
// single-threaded memcpy of the same size measured in the same run.
//
//   bench_collectives [--json build/bench/collectives.json] [--devices 2-8]
//                     [--min-size 4K] [--max-size 256M] [--max-memory 6G]
//                     [--case-seconds 0.25] [--no-breakdown]
//
// Each case times the whole call of a shard_map whose body runs just that
// collective on f32 data laid out P('x') (each device holds `size` bytes as an
// (N, size/4/N) block, so the tiled scatters and all_to_all split evenly):
//   psum          psum(x, 'x')                          out P()
//   all_gather    all_gather(x, 'x', 0, tiled)          out P()
//   psum_scatter  psum_scatter(x, 'x', 0, tiled)        out P('x')
//   ppermute      ring shift i -> i+1 mod N             out P('x')
//   all_to_all    all_to_all(x, 'x', 0, 0, tiled)       out P('x')
// median of the timed reps after warmup; the rep count adapts to the case
// (at least 3, about --case-seconds per case). An empty shard_map (the body
// returns its input) is timed for every N as the dispatch floor.
//
// Figures, NCCL's conventions: algbw = per-device bytes / time (NCCL's size:
// the output for all_gather, N x the input; the input otherwise); busbw =
// algbw * 2(N-1)/N for psum, (N-1)/N for all_gather, psum_scatter and
// all_to_all, 1 for ppermute. Sizes below 1 MiB report latency, larger ones
// busbw as a ratio to memcpy bandwidth of the same number of bytes.
//
// Every device's memory is this host's, so N devices share its bandwidth and
// cores, and busbw (a per-link figure) falls with N whatever the algorithm.
// The large sizes are therefore also given as a fraction of the machine's
// limit: the least memory traffic the collective needs (each input read
// once, each result written once) at the STREAM-like rate of all hardware
// threads, over the measured time.
//
// Goals: large all-reduce busbw >= 0.5 x memcpy; 4 KiB
// all-reduce latency < 20 us on 2 devices.
//
// A case is skipped when N * size * 3 exceeds --max-memory (input, result and
// slack). The process asks for max(8, hardware threads) CPU devices.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
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

constexpr std::int64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
// Sizes at or above this report bandwidth; below it, latency.
constexpr std::int64_t kLargeFrom = kMiB;

struct Collective {
  std::string name;
  // NCCL's message size in units of the per-device input: N for all_gather
  // (its output), 1 otherwise. algbw = size * this / time.
  std::function<double(int)> nccl_size;
  // busbw = algbw * factor(N).
  std::function<double(int)> bus_factor;
  // The least memory traffic (bytes read + written, all devices together)
  // in units of the per-device input, when every device's memory is shared
  // and results are built in place: each input read once, each result
  // written once. 0: nothing has to move (ppermute hands buffers over).
  std::function<double(int)> min_traffic;
  std::function<ts::Array(const ts::Array&, int)> run;  // (local x, N)
  ts::PartitionSpec out;
};

std::vector<Collective> collectives() {
  auto one = [](int) { return 1.0; };
  auto reduce_like = [](int n) { return 2.0 * (n - 1) / n; };
  auto gather_like = [](int n) { return static_cast<double>(n - 1) / n; };
  auto n_plus_1 = [](int n) { return n + 1.0; };  // N inputs read, one result written
  auto two_n = [](int n) { return 2.0 * n; };      // N inputs read, N results written
  return {
      {"psum", one, reduce_like, n_plus_1, [](const ts::Array& x, int) { return ts::psum(x, "x"); }, ts::P()},
      {"all_gather", [](int n) { return static_cast<double>(n); }, gather_like, two_n,
       [](const ts::Array& x, int) { return ts::all_gather(x, "x", 0, true); }, ts::P()},
      {"psum_scatter", one, gather_like, n_plus_1,
       [](const ts::Array& x, int) { return ts::psum_scatter(x, "x", 0, true); }, ts::P("x")},
      {"ppermute", one, one, [](int) { return 0.0; },
       [](const ts::Array& x, int n) {
         std::vector<std::pair<int, int>> ring;
         for (int i = 0; i < n; ++i) ring.emplace_back(i, (i + 1) % n);
         return ts::ppermute(x, "x", ring);
       },
       ts::P("x")},
      {"all_to_all", one, gather_like, two_n,
       [](const ts::Array& x, int) { return ts::all_to_all(x, "x", 0, 0, true); }, ts::P("x")},
  };
}

// "4K", "256M", "6G", "4096" -> bytes (binary units).
std::int64_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw CLI::ValidationError("size", "expected a size like 4096, 4K, 256M or 6G, got '" + s + "'");
  }
  std::string unit = s.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && (unit.back() == 'i')) unit.pop_back();
  std::int64_t mul = 1;
  if (unit == "K" || unit == "k")
    mul = kKiB;
  else if (unit == "M" || unit == "m")
    mul = kMiB;
  else if (unit == "G" || unit == "g")
    mul = kGiB;
  else if (!unit.empty())
    throw CLI::ValidationError("size", "expected a size like 4096, 4K, 256M or 6G, got '" + s + "'");
  if (!(v > 0)) throw CLI::ValidationError("size", "expected a positive size, got '" + s + "'");
  return static_cast<std::int64_t>(v * static_cast<double>(mul));
}

// "2-8", "2,4,8", "4" -> device counts.
std::vector<int> parse_devices(const std::string& s) {
  std::vector<int> out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    const std::size_t dash = item.find('-');
    try {
      if (dash == std::string::npos) {
        out.push_back(std::stoi(item));
      } else {
        const int lo = std::stoi(item.substr(0, dash)), hi = std::stoi(item.substr(dash + 1));
        for (int k = lo; k <= hi; ++k) out.push_back(k);
      }
    } catch (const std::exception&) {
      throw CLI::ValidationError("--devices", "expected counts like 2-8 or 2,4,8, got '" + s + "'");
    }
    i = j + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty() || out.front() < 1)
    throw CLI::ValidationError("--devices", "expected counts >= 1 like 2-8 or 2,4,8, got '" + s + "'");
  return out;
}

// "4K", "16M", "256M", "1G".
std::string size_label(std::int64_t b) {
  if (b >= kGiB && b % kGiB == 0) return std::to_string(b / kGiB) + "G";
  if (b >= kMiB && b % kMiB == 0) return std::to_string(b / kMiB) + "M";
  if (b >= kKiB && b % kKiB == 0) return std::to_string(b / kKiB) + "K";
  return std::to_string(b);
}

// Times `call`: `warmup` untimed runs, one probe run that sets the rep count
// (about `budget` seconds in all, between 3 and 300 reps), then the reps.
struct Timing {
  double seconds = 0, min_seconds = 0;
  int reps = 0;
};

Timing time_call(const std::function<void()>& call, int warmup, double budget) {
  for (int i = 0; i < warmup; ++i) call();
  const double t0 = tb::now_seconds();
  call();
  const double probe = tb::now_seconds() - t0;
  const int reps = static_cast<int>(std::clamp(budget / std::max(probe, 1e-7), 3.0, 300.0));
  std::vector<double> t = tb::time_reps(0, reps, call);
  return {tb::median(t), *std::min_element(t.begin(), t.end()), reps};
}

struct Result {
  std::string collective;
  int n = 0;
  std::int64_t size = 0;   // nominal per-device bytes
  std::int64_t bytes = 0;  // actual per-device bytes (N * floor(size/4/N) floats)
  Timing t;
  double algbw = 0, busbw = 0, memcpy_gbps = 0, ratio = 0;
  double bound_seconds = 0;  // min traffic / the machine's streaming rate (0: none)
  double of_bound = 0;       // bound_seconds / seconds
};

// Where the time of one call goes, from timestamps taken inside the body:
// enter = call start -> last device entering its body; body = longest
// collective on a device; exit = last device leaving its body -> call
// returns (output assembly, freeing the previous result, wake-up).
struct Breakdown {
  std::string collective;
  int n = 0;
  std::int64_t size = 0;
  double call = 0, enter_first = 0, enter_last = 0, body = 0, exit = 0;
};

Breakdown breakdown(const Collective& c, const ts::Mesh& mesh, const ts::Array& x, int n, std::int64_t size,
                    int reps) {
  auto stamps = std::make_shared<std::vector<double>>(2 * static_cast<std::size_t>(n), 0.0);
  auto run = c.run;
  auto f = ts::shard_map(
      [stamps, run, n](ts::Array xl) {
        // Mesh over the first N devices: device id == position.
        const int pos = xl.sharding().mesh().devices()[0].id();
        (*stamps)[2 * pos] = tb::now_seconds();
        ts::Array r = run(xl, n);
        (*stamps)[2 * pos + 1] = tb::now_seconds();
        return r;
      },
      mesh, {ts::P("x")}, c.out, {.check_vma = false});
  std::vector<double> call, e0, e1, body, ex;
  for (int i = 0; i < reps + 1; ++i) {
    const double t0 = tb::now_seconds();
    f(x).block_until_ready();
    const double t1 = tb::now_seconds();
    if (i == 0) continue;  // warmup
    double first = 1e300, last = 0, done = 0, longest = 0;
    for (int d = 0; d < n; ++d) {
      const double a = (*stamps)[2 * d], b = (*stamps)[2 * d + 1];
      first = std::min(first, a);
      last = std::max(last, a);
      done = std::max(done, b);
      longest = std::max(longest, b - a);
    }
    call.push_back(t1 - t0);
    e0.push_back(first - t0);
    e1.push_back(last - t0);
    body.push_back(longest);
    ex.push_back(t1 - done);
  }
  return {c.name, n, size, tb::median(call), tb::median(e0), tb::median(e1), tb::median(body), tb::median(ex)};
}

std::string us(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 1e-3 ? "%.1f" : "%.0f", s * 1e6);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera collectives benchmark: psum, all_gather, psum_scatter, ppermute, all_to_all inside shard_map"};
  std::string json_path = "build/bench/collectives.json";
  std::string devices_arg = "2-8", min_size_arg = "4K", max_size_arg = "256M", max_memory_arg = "6G";
  double case_seconds = 0.25;
  bool no_breakdown = false;
  app.add_option("--json", json_path, "where to write the results as JSON")->capture_default_str();
  app.add_option("--devices", devices_arg, "device counts N of the 1-d meshes: 2-8, 2,4,8 or 4")->capture_default_str();
  app.add_option("--min-size", min_size_arg, "smallest per-device message (4K, 1M, ...)")->capture_default_str();
  app.add_option("--max-size", max_size_arg, "largest per-device message (powers of 4 from --min-size)")
      ->capture_default_str();
  app.add_option("--max-memory", max_memory_arg, "skip cases whose N * size * 3 exceeds this")->capture_default_str();
  app.add_option("--case-seconds", case_seconds, "about how long to time each case (at least 3 reps)")
      ->capture_default_str();
  app.add_flag("--no-breakdown", no_breakdown, "skip the per-phase timing breakdown of selected cases");
  CLI11_PARSE(app, argc, argv);
  const double start = tb::now_seconds();
  try {
    const std::vector<int> counts = parse_devices(devices_arg);
    const std::int64_t min_size = parse_size(min_size_arg), max_size = parse_size(max_size_arg);
    const std::int64_t max_memory = parse_size(max_memory_arg);
    std::vector<std::int64_t> sizes;
    for (std::int64_t s = min_size; s <= max_size; s *= 4) sizes.push_back(s);

    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ts::config::set_num_cpu_devices(std::max({8, hw, counts.back()}));
    const std::vector<ts::Device> devs = ts::devices();
    const auto colls = collectives();

    std::printf("Tessera collectives benchmark: shard_map over 1-d meshes of N CPU devices (threads backend), f32\n");
    std::printf("  %d devices in the process, %d hardware threads; N = %d..%d; sizes %s..%s per device\n",
                static_cast<int>(devs.size()), hw, counts.front(), counts.back(), size_label(sizes.front()).c_str(),
                size_label(sizes.back()).c_str());

    // memcpy baseline for every size.
    std::map<std::int64_t, double> memcpy_s;
    std::printf("\nmemcpy baseline (single thread, same run), GB/s:\n ");
    for (auto s : sizes) {
      memcpy_s[s] = tb::memcpy_seconds(s, s >= 64 * kMiB ? 3 : 7);
      std::printf(" %s %.1f", size_label(s).c_str(), tb::gbps(static_cast<double>(s), memcpy_s[s]));
      std::fflush(stdout);
    }
    std::printf("\n");
    // The machine's streaming limit: every device's memory is this host's,
    // so N devices share its bandwidth (and its cores).
    const auto stream = tb::stream_copy(std::size_t(256) << 20, hw, 5);
    const double traffic_rate = stream.stream_gbps * 1e9;  // bytes read + written per second
    std::printf("streaming limit (STREAM copy, %d threads): %.1f GB/s read + write\n", hw, stream.stream_gbps);

    std::vector<Result> results;
    std::vector<std::pair<int, Timing>> floors;
    json skipped = json::array();
    std::vector<std::string> failures;
    for (int n : counts) {
      if (n > static_cast<int>(devs.size())) {
        skipped.push_back({{"devices", n}, {"reason", "more than the process's devices"}});
        continue;
      }
      ts::Mesh mesh(std::vector<ts::Device>(devs.begin(), devs.begin() + n), {n}, {"x"});
      const ts::NamedSharding sharded(mesh, ts::P("x"));
      // Dispatch floor: the empty body.
      {
        auto x = ts::ones({n * n, std::max<std::int64_t>(1, sizes.front() / 4 / n)}, ts::f32, sharded);
        auto f = ts::shard_map([](ts::Array xl) { return xl; }, mesh, {ts::P("x")}, ts::P("x"));
        floors.emplace_back(n, time_call([&] { f(x).block_until_ready(); }, 20, case_seconds));
      }
      for (auto size : sizes) {
        if (static_cast<double>(n) * static_cast<double>(size) * 3 > static_cast<double>(max_memory)) {
          skipped.push_back({{"devices", n}, {"bytes_per_device", size}, {"reason", "N * size * 3 > --max-memory"}});
          continue;
        }
        const std::int64_t cols = size / 4 / n;
        if (cols < 1) continue;
        // Each device holds an (N, cols) block of ones.
        auto x = ts::ones({n * n, cols}, ts::f32, sharded);
        for (const auto& c : colls) {
          auto run = c.run;
          auto f = ts::shard_map([run, n](ts::Array xl) { return run(xl, n); }, mesh, {ts::P("x")}, c.out);
          if (size == sizes.front()) {
            // Check the numbers once per collective and N (inputs are ones).
            const float want = c.name == "psum" || c.name == "psum_scatter" ? static_cast<float>(n) : 1.0f;
            auto v = f(x).to_vector<float>();
            if (v.empty() || v.front() != want || v.back() != want)
              failures.push_back(c.name + " on " + std::to_string(n) + " devices gave " +
                                 (v.empty() ? std::string("nothing") : std::to_string(v.front())) + ", expected " +
                                 std::to_string(want));
          }
          Result r{c.name, n, size, n * cols * 4, {}, 0, 0, 0, 0, 0, 0};
          r.t = time_call([&] { f(x).block_until_ready(); }, size >= 16 * kMiB ? 1 : 5, case_seconds);
          r.algbw = tb::gbps(static_cast<double>(r.bytes) * c.nccl_size(n), r.t.seconds);
          r.bound_seconds = c.min_traffic(n) * static_cast<double>(r.bytes) / traffic_rate;
          r.of_bound = r.bound_seconds / r.t.seconds;
          r.busbw = r.algbw * c.bus_factor(n);
          r.memcpy_gbps = tb::gbps(static_cast<double>(size), memcpy_s[size]);
          r.ratio = r.memcpy_gbps > 0 ? r.busbw / r.memcpy_gbps : 0;
          results.push_back(r);
        }
      }
      std::fprintf(stderr, "  N=%d done (%.0f s)\n", n, tb::now_seconds() - start);
    }

    // ---- tables
    auto find = [&](const std::string& c, int n, std::int64_t s) -> const Result* {
      for (const auto& r : results)
        if (r.collective == c && r.n == n && r.size == s) return &r;
      return nullptr;
    };
    std::vector<std::int64_t> small, large;
    for (auto s : sizes) (s < kLargeFrom ? small : large).push_back(s);

    std::printf("\ndispatch floor (empty shard_map, body returns its input), median us:\n ");
    for (const auto& [n, t] : floors) std::printf(" N=%d %s", n, us(t.seconds).c_str());
    std::printf("\n");

    if (!small.empty()) {
      std::printf("\nlatency, median us per call (whole shard_map call)\n%-13s %2s", "collective", "N");
      for (auto s : small) std::printf(" %8s", size_label(s).c_str());
      std::printf("\n");
      for (const auto& c : colls)
        for (int n : counts) {
          std::printf("%-13s %2d", c.name.c_str(), n);
          for (auto s : small) {
            const Result* r = find(c.name, n, s);
            std::printf(" %8s", r ? us(r->t.seconds).c_str() : "-");
          }
          std::printf("\n");
        }
    }
    if (!large.empty()) {
      std::printf("\nbus bandwidth GB/s (ratio to memcpy of the same size)\n%-13s %2s", "collective", "N");
      for (auto s : large) std::printf(" %14s", size_label(s).c_str());
      std::printf("\n%-16s", "memcpy GB/s");
      for (auto s : large) std::printf(" %14.1f", tb::gbps(static_cast<double>(s), memcpy_s[s]));
      std::printf("\n");
      for (const auto& c : colls)
        for (int n : counts) {
          std::printf("%-13s %2d", c.name.c_str(), n);
          for (auto s : large) {
            const Result* r = find(c.name, n, s);
            char cell[32] = "-";
            if (r)
              std::snprintf(cell, sizeof cell, "%.2f (%.2f)%s", r->busbw, r->ratio,
                            r->t.seconds > 1.5 * r->t.min_seconds ? "*" : "");
            std::printf(" %14s", cell);
          }
          std::printf("\n");
        }
      std::printf("NCCL's conventions: algbw = bytes per device / time (all_gather: its output, N x the input);\n"
                  "  busbw = algbw x 2(N-1)/N (psum), (N-1)/N (all_gather, psum_scatter, all_to_all), 1 (ppermute).\n"
                  "  ppermute hands the sender's buffer over (zero-copy), so its bandwidth only measures overhead.\n"
                  "  *: the median call took over 1.5x the fastest (min_seconds in the JSON), e.g. when the\n"
                  "  result had to be freshly allocated and first touched.\n");
      std::printf("\nfraction of the machine's limit: (least traffic / streaming limit) / time; least traffic,\n"
                  "  in per-device inputs S: psum, psum_scatter (N+1) S; all_gather, all_to_all 2N S\n"
                  "  (above 1: the data fits in the caches)\n%-13s %2s",
                  "collective", "N");
      for (auto s : large) std::printf(" %6s", size_label(s).c_str());
      std::printf("\n");
      for (const auto& c : colls) {
        if (c.min_traffic(2) == 0) continue;
        for (int n : counts) {
          std::printf("%-13s %2d", c.name.c_str(), n);
          for (auto s : large) {
            const Result* r = find(c.name, n, s);
            char cell[16] = "-";
            if (r) std::snprintf(cell, sizeof cell, "%.2f", r->of_bound);
            std::printf(" %6s", cell);
          }
          std::printf("\n");
        }
      }
    }

    // ---- breakdown of the cases the goals are about
    std::vector<Breakdown> bds;
    if (!no_breakdown) {
      std::vector<std::tuple<std::string, int, std::int64_t>> picks;
      for (const char* c : {"psum", "all_gather", "ppermute"}) picks.emplace_back(c, counts.front(), sizes.front());
      for (int n : {counts.front(), counts.back()})
        for (const char* c : {"psum", "all_gather", "psum_scatter", "all_to_all"}) {
          std::int64_t s = 0;
          for (const auto& r : results)
            if (r.collective == c && r.n == n) s = std::max(s, std::min(r.size, 64 * kMiB));
          if (s >= kLargeFrom) picks.emplace_back(c, n, s);
        }
      std::sort(picks.begin(), picks.end());
      picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
      std::printf("\ntiming breakdown, median us: call = whole call; enter = call start -> first / last body start;"
                  "\n  body = longest collective on one device; exit = last body end -> call returns\n");
      std::printf("%-13s %2s %6s %10s %10s %10s %10s %10s\n", "collective", "N", "size", "call", "enter 1st",
                  "enter last", "body", "exit");
      for (const auto& [name, n, s] : picks) {
        const Collective* c = nullptr;
        for (const auto& cc : colls)
          if (cc.name == name) c = &cc;
        ts::Mesh mesh(std::vector<ts::Device>(devs.begin(), devs.begin() + n), {n}, {"x"});
        auto x = ts::ones({n * n, s / 4 / n}, ts::f32, ts::NamedSharding(mesh, ts::P("x")));
        const int reps = s < kLargeFrom ? 200 : s <= 4 * kMiB ? 20 : 5;
        Breakdown b = breakdown(*c, mesh, x, n, s, reps);
        bds.push_back(b);
        std::printf("%-13s %2d %6s %10s %10s %10s %10s %10s\n", name.c_str(), n, size_label(s).c_str(),
                    us(b.call).c_str(), us(b.enter_first).c_str(), us(b.enter_last).c_str(), us(b.body).c_str(),
                    us(b.exit).c_str());
      }
    }

    // ---- goals
    json goals = json::array();
    std::printf("\ngoals:\n");
    {
      const Result* r = find("psum", 2, 4 * kKiB);
      if (r) {
        const bool met = r->t.seconds < 20e-6;
        std::printf("  4 KiB psum latency on 2 devices < 20 us: %s us -> %s\n", us(r->t.seconds).c_str(),
                    met ? "met" : "below goal");
        goals.push_back({{"goal", "4 KiB psum latency on 2 devices < 20 us"}, {"value_us", r->t.seconds * 1e6},
                         {"met", met}});
      } else {
        std::printf("  4 KiB psum latency on 2 devices < 20 us: not measured (needs --devices with 2 and 4K)\n");
      }
      std::int64_t big = 0;
      for (const auto& rr : results)
        if (rr.collective == "psum" && rr.size >= kLargeFrom) big = std::max(big, rr.size);
      if (big > 0) {
        std::printf("  large psum busbw >= 0.5 x memcpy, at %s per device (in brackets: the most this machine\n"
                    "  allows, psum at its streaming limit):\n   ",
                    size_label(big).c_str());
        for (int n : counts) {
          const Result* rr = find("psum", n, big);
          if (!rr) continue;
          const bool met = rr->ratio >= 0.5;
          const double attainable = rr->of_bound > 0 ? rr->ratio / rr->of_bound : 0;
          std::printf(" N=%d %.2f [%.2f] %s;", n, rr->ratio, attainable, met ? "met" : "below");
          goals.push_back({{"goal", "large psum busbw >= 0.5 x memcpy"}, {"devices", n}, {"bytes_per_device", big},
                           {"ratio", rr->ratio}, {"attainable_ratio", attainable}, {"met", met}});
        }
        std::printf("\n");
      } else {
        std::printf("  large psum busbw >= 0.5 x memcpy: not measured (needs --max-size >= 1M)\n");
      }
    }
    for (const auto& f : failures) std::printf("WRONG RESULT: %s\n", f.c_str());

    // ---- JSON
    json jmem = json::array(), jfloor = json::array(), jres = json::array(), jbd = json::array();
    for (auto s : sizes)
      jmem.push_back({{"bytes", s}, {"seconds", memcpy_s[s]}, {"gbps", tb::gbps(static_cast<double>(s), memcpy_s[s])}});
    for (const auto& [n, t] : floors) jfloor.push_back({{"devices", n}, {"seconds", t.seconds}, {"reps", t.reps}});
    for (const auto& r : results)
      jres.push_back({{"collective", r.collective},
                      {"devices", r.n},
                      {"bytes_per_device", r.size},
                      {"bytes_used", r.bytes},
                      {"seconds", r.t.seconds},
                      {"min_seconds", r.t.min_seconds},
                      {"reps", r.t.reps},
                      {"latency_us", r.t.seconds * 1e6},
                      {"algbw_gbps", r.algbw},
                      {"busbw_gbps", r.busbw},
                      {"memcpy_gbps", r.memcpy_gbps},
                      {"busbw_over_memcpy", r.ratio},
                      {"bound_seconds", r.bound_seconds},
                      {"fraction_of_bound", r.of_bound},
                      {"reported_as", r.size < kLargeFrom ? "latency" : "bandwidth"}});
    for (const auto& b : bds)
      jbd.push_back({{"collective", b.collective},
                     {"devices", b.n},
                     {"bytes_per_device", b.size},
                     {"call_s", b.call},
                     {"enter_first_s", b.enter_first},
                     {"enter_last_s", b.enter_last},
                     {"body_s", b.body},
                     {"exit_s", b.exit}});
    const double total = tb::now_seconds() - start;
    const auto parent = std::filesystem::path(json_path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    std::ofstream(json_path) << json{{"benchmark", "collectives"},
                                     {"process_devices", devs.size()},
                                     {"hardware_threads", hw},
                                     {"dtype", "f32"},
                                     {"memcpy", jmem},
                                     {"stream_gbps", stream.stream_gbps},
                                     {"stream_threads", stream.threads},
                                     {"dispatch_floor", jfloor},
                                     {"results", jres},
                                     {"breakdown", jbd},
                                     {"goals", goals},
                                     {"skipped", skipped},
                                     {"wrong_results", failures},
                                     {"total_seconds", total}}
                                        .dump(2)
                             << "\n";
    std::printf("\nwrote %s (%.0f s)\n", json_path.c_str(), total);
    return failures.empty() ? 0 : 1;
  } catch (const ts::Error& e) {
    std::cerr << "bench_collectives: " << e.what() << "\n";
    return 1;
  }
}
