// bench_collectives: the manual-mode collectives (psum, all_gather,
// psum_scatter, ppermute, all_to_all) over 1-d meshes of N = 2..8 CPU
// devices, per-device message sizes 4 KiB .. 256 MiB, against the streaming
// limit of N threads measured in the same run.
//
//   bench_collectives [--json build/bench/collectives.json] [--devices 2-8]
//                     [--min-size 4K] [--max-size 256M] [--max-memory 12G]
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
// Two forms of each collective whose result the devices share:
//   zero-copy  as written. All devices live in one process, so psum and
//              all_gather build one result buffer that every device fills a
//              part of and then shares, and ppermute hands the sender's
//              buffer to the receiver. A real advantage of shared memory,
//              reported as such.
//   owned      the body returns `collective(x) + 0`: one elementwise pass
//              that reads the shared result and writes a private one on
//              every device, the same bytes as a copy. This is what a user
//              who needs a private copy per device gets, and what an
//              implementation without shared memory must deliver.
// psum_scatter and all_to_all always give every device its own result.
//
// The limit of a case is the least memory traffic (bytes read + written)
// the result it delivers needs, over the streaming bandwidth of N threads
// measured in the same run (bench_util.hpp: N threads each copying their own
// buffers, median of several reps). Per device, with S its input bytes:
//   psum          zero-copy: reads its 1/N chunk of every input (S), writes
//                 that chunk of the result (S/N): S (1 + 1/N)
//   all_gather    zero-copy: reads its input, writes it into the result: 2 S
//   psum_scatter  reads its chunk of every input, writes it: S (1 + 1/N)
//   ppermute      zero-copy: nothing (no ratio; its time is overhead)
//   all_to_all    reads S, writes S: 2 S
//   owned form    the zero-copy traffic + reading and writing the result
//                 (+ 2 S for psum and ppermute, + 2 N S for all_gather).
// ratio = limit time / measured time: 1 means the collective runs at the
// machine's streaming limit for the bytes it must move. Sizes below 1 MiB
// report latency, larger ones the ratio (in the caches it can exceed 1).
//
// Every result is checked: the inputs hold distinct values on every device
// (small integers, exact in f32 sums), and every element of the gathered
// output is compared with the host reference, at the smallest size and at
// the first size of 1 MiB or more.
//
// Goals: large psum (zero-copy) >= 0.5 of its limit; 4 KiB psum latency
// < 20 us on 2 devices.
//
// A size is skipped when N * size * 3 exceeds --max-memory (input, result and
// slack), and one collective's case when that plus its results does (an owned
// all_gather holds N^2 * size). The process asks for max(8, hardware threads) CPU devices.
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
  std::function<ts::Array(const ts::Array&, int)> run;  // (local x, N)
  ts::PartitionSpec out;
  // The result's bytes on each device, in units of the per-device input S.
  std::function<double(int)> result_size;
  // The least bytes read + written per device for the zero-copy form, in
  // units of S (see the top of the file).
  std::function<double(int)> traffic;
  // Whether the devices share the result (then an owned form is timed too).
  bool shared = false;
  // The gathered output for a global input `x` of (N*N, cols), row-major.
  std::function<std::vector<float>(const std::vector<float>&, int, std::int64_t)> reference;
};

// Rows [r0, r0 + nrows) of each device's (N, cols) block, summed over devices.
std::vector<float> sum_blocks(const std::vector<float>& x, int n, std::int64_t cols, int r0, int nrows) {
  std::vector<float> out(static_cast<std::size_t>(nrows * cols), 0.0f);
  for (int d = 0; d < n; ++d)
    for (int r = 0; r < nrows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        out[static_cast<std::size_t>(r * cols + c)] += x[static_cast<std::size_t>((d * n + r0 + r) * cols + c)];
  return out;
}

std::vector<Collective> collectives() {
  auto one = [](int) { return 1.0; };
  auto reduce_traffic = [](int n) { return 1.0 + 1.0 / n; };  // S read, S/N written
  auto two = [](int) { return 2.0; };                          // S read, S written
  auto rows = [](const std::vector<float>& x, int n, std::int64_t cols, auto row_of) {
    std::vector<float> out(x.size());
    for (int r = 0; r < n * n; ++r)
      std::copy_n(x.begin() + row_of(r) * cols, cols, out.begin() + static_cast<std::int64_t>(r) * cols);
    return out;
  };
  return {
      {"psum", [](const ts::Array& x, int) { return ts::psum(x, "x"); }, ts::P(), one, reduce_traffic, true,
       [](const std::vector<float>& x, int n, std::int64_t cols) { return sum_blocks(x, n, cols, 0, n); }},
      {"all_gather", [](const ts::Array& x, int) { return ts::all_gather(x, "x", 0, true); }, ts::P(),
       [](int n) { return static_cast<double>(n); }, two, true,
       [](const std::vector<float>& x, int, std::int64_t) { return x; }},
      {"psum_scatter", [](const ts::Array& x, int) { return ts::psum_scatter(x, "x", 0, true); }, ts::P("x"),
       [](int n) { return 1.0 / n; }, reduce_traffic, false,
       // Device d keeps row d of the sum: the gathered result is the whole sum.
       [](const std::vector<float>& x, int n, std::int64_t cols) { return sum_blocks(x, n, cols, 0, n); }},
      {"ppermute",
       [](const ts::Array& x, int n) {
         std::vector<std::pair<int, int>> ring;
         for (int i = 0; i < n; ++i) ring.emplace_back(i, (i + 1) % n);
         return ts::ppermute(x, "x", ring);
       },
       ts::P("x"), one, [](int) { return 0.0; }, true,
       // Device d + 1 receives device d's block.
       [rows](const std::vector<float>& x, int n, std::int64_t cols) {
         return rows(x, n, cols, [n](int r) { return static_cast<std::int64_t>(((r / n + n - 1) % n) * n + r % n); });
       }},
      {"all_to_all", [](const ts::Array& x, int) { return ts::all_to_all(x, "x", 0, 0, true); }, ts::P("x"), one,
       two, false,
       // Device d's row r is row d of device r's block.
       [rows](const std::vector<float>& x, int n, std::int64_t cols) {
         return rows(x, n, cols, [n](int r) { return static_cast<std::int64_t>((r % n) * n + r / n); });
       }},
  };
}

// The body of a case: the collective, or (owned) the collective followed by
// an elementwise pass into a private buffer on every device.
std::function<ts::Array(ts::Array)> body(const Collective& c, int n, bool owned) {
  auto run = c.run;
  if (owned) return [run, n](ts::Array xl) { return run(xl, n) + 0.0f; };
  return [run, n](ts::Array xl) { return run(xl, n); };
}

// Distinct small integers on every device: element (r, c) of the global
// (N*N, cols) input is (131 r + 7 c) mod 1021; sums over 8 devices stay exact.
float input_value(std::int64_t r, std::int64_t c) { return static_cast<float>((r * 131 + c * 7) % 1021); }

ts::Array make_input(const ts::NamedSharding& s, int n, std::int64_t cols) {
  return ts::make_array_from_callback({static_cast<std::int64_t>(n) * n, cols}, ts::f32, s,
                                      [cols](const std::vector<ts::Slice>& index) {
                                        std::vector<float> v;
                                        v.reserve(static_cast<std::size_t>(index[0].size() * index[1].size()));
                                        for (std::int64_t r = index[0].start; r < index[0].stop; ++r)
                                          for (std::int64_t c = index[1].start; c < index[1].stop; ++c)
                                            v.push_back(input_value(r, c));
                                        return v;
                                      });
}

std::vector<float> host_input(int n, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(static_cast<std::int64_t>(n) * n * cols));
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(n) * n; ++r)
    for (std::int64_t c = 0; c < cols; ++c) v[static_cast<std::size_t>(r * cols + c)] = input_value(r, c);
  return v;
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
  std::string form;        // "zero-copy" or "owned"
  int n = 0;
  std::int64_t size = 0;   // nominal per-device bytes
  std::int64_t bytes = 0;  // actual per-device bytes (N * floor(size/4/N) floats)
  Timing t;
  double traffic = 0;        // least bytes read + written, all devices together
  double limit_seconds = 0;  // traffic at the N-thread streaming limit (0: nothing must move)
  double ratio = 0;          // limit_seconds / seconds
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
  std::string devices_arg = "2-8", min_size_arg = "4K", max_size_arg = "256M", max_memory_arg = "12G";
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
    // Results are checked at the smallest size and the first large one.
    std::int64_t checked_large = 0;
    for (auto s : sizes)
      if (s >= kLargeFrom && checked_large == 0) checked_large = s;

    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ts::config::set_num_cpu_devices(std::max({8, hw, counts.back()}));
    const std::vector<ts::Device> devs = ts::devices();
    const auto colls = collectives();

    std::printf("Tessera collectives benchmark: shard_map over 1-d meshes of N CPU devices (threads backend), f32\n");
    std::printf("  %d devices in the process, %d hardware threads; N = %d..%d; sizes %s..%s per device\n",
                static_cast<int>(devs.size()), hw, counts.front(), counts.back(), size_label(sizes.front()).c_str(),
                size_label(sizes.back()).c_str());

    // The streaming limit of N threads, for every N: every device's memory
    // is this host's, so N devices share its bandwidth (and its cores).
    std::map<int, tb::StreamResult> stream;
    std::printf("\nstreaming limit of N threads (each copies its own buffers; read + write, median of 5), GB/s:\n ");
    for (int n : counts) {
      const std::size_t total = std::max<std::size_t>(std::size_t(256) << 20, static_cast<std::size_t>(n) << 25);
      stream[n] = tb::stream_copy(total, n, 5);
      std::printf(" N=%d %.1f", n, stream[n].stream_gbps);
      std::fflush(stdout);
    }
    std::printf("\n");

    std::vector<Result> results;
    std::vector<std::pair<int, Timing>> floors;
    json skipped = json::array();
    std::vector<std::string> failures;
    int checks = 0;
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
        // Each device holds an (N, cols) block of distinct values.
        auto x = make_input(sharded, n, cols);
        const bool check = size == sizes.front() || size == checked_large;
        const std::vector<float> host = check ? host_input(n, cols) : std::vector<float>{};
        for (const auto& c : colls) {
          for (bool owned : {false, true}) {
            if (owned && !c.shared) continue;
            const std::string form = owned || !c.shared ? "owned" : "zero-copy";
            // An all_gather result is N times the input; owned, every device
            // holds its own copy of it: N^2 * size in all.
            const double result = c.name == "all_gather" ? static_cast<double>(n) * static_cast<double>(size) * (owned ? n : 1)
                                                         : static_cast<double>(size) * (owned ? n : 1);
            if (static_cast<double>(n) * static_cast<double>(size) * 3 + result > static_cast<double>(max_memory)) {
              skipped.push_back({{"devices", n}, {"bytes_per_device", size}, {"collective", c.name + " (" + form + ")"},
                                 {"reason", "inputs and results exceed --max-memory"}});
              continue;
            }
            auto f = ts::shard_map(body(c, n, owned), mesh, {ts::P("x")}, c.out);
            if (check) {
              const auto want = c.reference(host, n, cols);
              const auto got = f(x).to_vector<float>();
              std::size_t bad = got.size() == want.size() ? 0 : std::max(got.size(), want.size());
              for (std::size_t i = 0; bad == 0 && i < got.size(); ++i)
                if (got[i] != want[i]) bad = i + 1;
              ++checks;
              if (bad)
                failures.push_back(c.name + " (" + form + ") on " + std::to_string(n) + " devices, " +
                                   size_label(size) + ": " +
                                   (got.size() != want.size()
                                        ? std::to_string(got.size()) + " elements, expected " +
                                              std::to_string(want.size())
                                        : "element " + std::to_string(bad - 1) + " is " +
                                              std::to_string(got[bad - 1]) + ", expected " +
                                              std::to_string(want[bad - 1])));
            }
            Result r{c.name, form, n, size, n * cols * 4, {}, 0, 0, 0};
            r.t = time_call([&] { f(x).block_until_ready(); }, size >= 16 * kMiB ? 1 : 5, case_seconds);
            const double per_device = c.traffic(n) + (owned ? 2.0 * c.result_size(n) : 0.0);
            r.traffic = per_device * n * static_cast<double>(r.bytes);
            r.limit_seconds = stream[n].seconds_for(r.traffic);
            r.ratio = r.limit_seconds / r.t.seconds;
            results.push_back(r);
          }
        }
      }
      std::fprintf(stderr, "  N=%d done (%.0f s)\n", n, tb::now_seconds() - start);
    }

    // ---- tables
    auto find = [&](const std::string& c, const std::string& form, int n, std::int64_t s) -> const Result* {
      for (const auto& r : results)
        if (r.collective == c && r.form == form && r.n == n && r.size == s) return &r;
      return nullptr;
    };
    struct Row {
      std::string collective, form, label;
    };
    std::vector<Row> rows;
    for (const auto& c : colls) {
      if (c.shared) rows.push_back({c.name, "zero-copy", c.name + " zero-copy"});
      rows.push_back({c.name, "owned", c.name + (c.shared ? " owned" : "")});
    }
    std::vector<std::int64_t> small, large;
    for (auto s : sizes) (s < kLargeFrom ? small : large).push_back(s);

    std::printf("\ndispatch floor (empty shard_map, body returns its input), median us:\n ");
    for (const auto& [n, t] : floors) std::printf(" N=%d %s", n, us(t.seconds).c_str());
    std::printf("\n");

    if (!small.empty()) {
      std::printf("\nlatency, median us per call (whole shard_map call)\n%-24s %2s", "collective", "N");
      for (auto s : small) std::printf(" %8s", size_label(s).c_str());
      std::printf("\n");
      for (const auto& row : rows)
        for (int n : counts) {
          std::printf("%-24s %2d", row.label.c_str(), n);
          for (auto s : small) {
            const Result* r = find(row.collective, row.form, n, s);
            std::printf(" %8s", r ? us(r->t.seconds).c_str() : "-");
          }
          std::printf("\n");
        }
    }
    if (!large.empty()) {
      std::printf("\nfraction of the streaming limit: (least bytes read + written / N-thread streaming rate) / time,"
                  "\n  median time in brackets\n%-24s %2s",
                  "collective", "N");
      for (auto s : large) std::printf(" %18s", size_label(s).c_str());
      std::printf("\n");
      for (const auto& row : rows)
        for (int n : counts) {
          std::printf("%-24s %2d", row.label.c_str(), n);
          for (auto s : large) {
            const Result* r = find(row.collective, row.form, n, s);
            char cell[48] = "-";
            if (r && r->limit_seconds > 0)
              std::snprintf(cell, sizeof cell, "%.2f (%s)%s", r->ratio, tb::format_seconds(r->t.seconds).c_str(),
                            r->t.seconds > 1.5 * r->t.min_seconds ? "*" : "");
            else if (r)
              std::snprintf(cell, sizeof cell, "- (%s)", tb::format_seconds(r->t.seconds).c_str());
            std::printf(" %18s", cell);
          }
          std::printf("\n");
        }
      std::printf(
          "least traffic per device, S = its input bytes: psum, psum_scatter S(1 + 1/N); all_gather, all_to_all\n"
          "  2S; ppermute zero-copy 0 (no ratio: nothing has to move). owned = the body returns collective(x) + 0,\n"
          "  a private result per device: + 2S for psum and ppermute, + 2NS for all_gather.\n"
          "  Above 1: the data fits in the caches. *: the median call took over 1.5x the fastest\n"
          "  (min_seconds in the JSON), e.g. when the result had to be freshly allocated and first touched.\n");
    }

    // ---- breakdown of the cases the goals are about (zero-copy forms)
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
        auto x = make_input(ts::NamedSharding(mesh, ts::P("x")), n, s / 4 / n);
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
      const Result* r = find("psum", "zero-copy", 2, 4 * kKiB);
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
        std::printf("  large psum (zero-copy) >= 0.5 of its streaming limit, at %s per device\n"
                    "  (owned form in brackets, for information):\n   ",
                    size_label(big).c_str());
        for (int n : counts) {
          const Result* rr = find("psum", "zero-copy", n, big);
          const Result* ro = find("psum", "owned", n, big);
          if (!rr) continue;
          const bool met = rr->ratio >= 0.5;
          std::printf(" N=%d %.2f [%.2f] %s;", n, rr->ratio, ro ? ro->ratio : 0.0, met ? "met" : "below");
          goals.push_back({{"goal", "large psum (zero-copy) >= 0.5 of its streaming limit"},
                           {"devices", n},
                           {"bytes_per_device", big},
                           {"ratio", rr->ratio},
                           {"owned_ratio", ro ? ro->ratio : 0.0},
                           {"met", met}});
        }
        std::printf("\n");
      } else {
        std::printf("  large psum >= 0.5 of its streaming limit: not measured (needs --max-size >= 1M)\n");
      }
    }
    std::printf("results checked element by element: %d cases, %s\n", checks,
                failures.empty() ? "all equal to the host reference" : "MISMATCHES below");
    for (const auto& f : failures) std::printf("WRONG RESULT: %s\n", f.c_str());

    // ---- JSON
    json jstream = json::array(), jfloor = json::array(), jres = json::array(), jbd = json::array();
    for (const auto& [n, st] : stream)
      jstream.push_back({{"threads", n},
                         {"bytes_copied", st.array_bytes},
                         {"seconds", st.seconds},
                         {"stream_gbps", st.stream_gbps},
                         {"copy_gbps", st.copy_gbps}});
    for (const auto& [n, t] : floors) jfloor.push_back({{"devices", n}, {"seconds", t.seconds}, {"reps", t.reps}});
    for (const auto& r : results)
      jres.push_back({{"collective", r.collective},
                      {"form", r.form},
                      {"devices", r.n},
                      {"bytes_per_device", r.size},
                      {"bytes_used", r.bytes},
                      {"seconds", r.t.seconds},
                      {"min_seconds", r.t.min_seconds},
                      {"reps", r.t.reps},
                      {"latency_us", r.t.seconds * 1e6},
                      {"least_traffic_bytes", r.traffic},
                      {"limit_seconds", r.limit_seconds},
                      {"fraction_of_limit", r.ratio},
                      {"reported_as", r.size < kLargeFrom ? "latency" : "fraction of limit"}});
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
                                     {"limit_definition",
                                      "least bytes read + written for the result each device holds (zero-copy: "
                                      "shared; owned: a private copy per device), at the streaming rate of N threads "
                                      "each copying their own buffers (median of 5), measured in the same run"},
                                     {"stream", jstream},
                                     {"dispatch_floor", jfloor},
                                     {"results", jres},
                                     {"breakdown", jbd},
                                     {"goals", goals},
                                     {"skipped", skipped},
                                     {"checked_cases", checks},
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
