// tessera_fuzz: differential testing with random sharded programs.
//
// Each seed gives one program on one mesh (see program.hpp). The program is
// built and run on a one-device mesh with the same axis names, then run twice
// on its mesh: the sharded results must match the reference (bitwise where
// the arithmetic does not depend on the layout, within a bound otherwise),
// the two sharded runs must match bitwise, and a step that raises a
// tessera::Error on one device must raise the same type sharded. Anything
// else (another exception type, a crash, a hang) is a failure too; every
// failure prints its seed and the program.
//
//   tessera_fuzz --seeds 1000 [--start S] [--max-seconds T] [--verbose]
//   tessera_fuzz --seed S --verbose      one program, each step traced
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fuzz/program.hpp"
#include "test_util.hpp"

namespace fz = tessera::fuzz;

namespace {

// What a crash or hang report needs, readable from a signal handler.
std::atomic<std::uint64_t> g_seed{0};
std::atomic<bool> g_in_program{false};
std::atomic<std::int64_t> g_program_start_ms{0};

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Async-signal-safe: formats with no allocation and writes with write(2).
void report_abnormal_end(const char* what) {
  char num[24];
  int n = 0;
  std::uint64_t s = g_seed.load();
  do {
    num[n++] = static_cast<char>('0' + s % 10);
    s /= 10;
  } while (s != 0);
  char seed[24];
  for (int i = 0; i < n; ++i) seed[i] = num[n - 1 - i];
  seed[n] = '\0';
  const char* parts[] = {"\nFAIL seed=", seed, ": ", what, "; reproduce with: tessera_fuzz --seed ", seed,
                         " --verbose\n"};
  for (const char* p : parts) {
    if (write(STDERR_FILENO, p, std::strlen(p)) < 0) return;
  }
}

void on_signal(int sig) {
  if (g_in_program.load()) report_abnormal_end(sig == SIGSEGV ? "crashed (SIGSEGV)"
                                               : sig == SIGABRT ? "crashed (SIGABRT)"
                                               : sig == SIGFPE  ? "crashed (SIGFPE)"
                                                                : "crashed (SIGBUS)");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void on_sanitizer_death() {
  if (g_in_program.load()) report_abnormal_end("a sanitizer stopped the run (report above)");
}

}  // namespace

// Present when a sanitizer runtime is linked in; it then owns the crash
// signals, and this callback runs before it exits.
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace {

void install_crash_reporting() {
  if (__sanitizer_set_death_callback != nullptr) {
    __sanitizer_set_death_callback(on_sanitizer_death);
    return;
  }
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS}) std::signal(sig, on_signal);
}

// A program that runs far longer than any should is a hang: report and stop.
void start_watchdog(double limit_s) {
  std::thread([limit_s] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (g_in_program.load() && now_ms() - g_program_start_ms.load() > limit_s * 1000) {
        report_abnormal_end("hung (one program ran longer than the watchdog limit)");
        std::_Exit(3);
      }
    }
  }).detach();
}

struct Options {
  std::uint64_t start = 1;
  std::uint64_t seeds = 200;
  double max_seconds = 0;
  bool verbose = false;
  bool one = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "tessera_fuzz: %s\n"
               "usage: tessera_fuzz [--seeds N] [--start S] [--seed S] [--max-seconds T] [--verbose]\n"
               "  --seeds N        run N programs (default 200)\n"
               "  --start S        first seed (default 1)\n"
               "  --seed S         run only seed S (with --verbose: trace every step)\n"
               "  --max-seconds T  stop starting new programs after T seconds\n"
               "  --verbose        print every program\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    try {
      if (a == "--seeds") o.seeds = std::stoull(value());
      else if (a == "--start") o.start = std::stoull(value());
      else if (a == "--seed") {
        o.start = std::stoull(value());
        o.seeds = 1;
        o.one = true;
      } else if (a == "--max-seconds") o.max_seconds = std::stod(value());
      else if (a == "--verbose" || a == "-v") o.verbose = true;
      else if (a == "--help" || a == "-h") usage("random sharded programs, compared with one device");
      else usage(("unknown option " + a).c_str());
    } catch (const std::logic_error&) {
      usage(("bad value for " + a).c_str());
    }
  }
  return o;
}

// Meshes are built once and shared by all programs: the edge cases first,
// then random 1-d to 3-d meshes (some with Explicit axes).
std::vector<tessera::Mesh> mesh_pool() {
  using tessera::Mesh;
  const int n = tessera::device_count();
  std::vector<Mesh> pool{Mesh(tessera::testing::first_devices(1), {1}, {"x"})};
  if (n >= 8) {
    const auto d8 = tessera::testing::first_devices(8);
    const auto ex = tessera::AxisType::Explicit;
    pool.emplace_back(d8, std::vector<int>{8}, std::vector<std::string>{"x"});
    pool.emplace_back(d8, std::vector<int>{2, 4}, std::vector<std::string>{"x", "y"});
    pool.emplace_back(d8, std::vector<int>{2, 2, 2}, std::vector<std::string>{"x", "y", "z"});
    pool.emplace_back(d8, std::vector<int>{8}, std::vector<std::string>{"x"}, std::vector<tessera::AxisType>{ex});
    pool.emplace_back(d8, std::vector<int>{4, 2}, std::vector<std::string>{"x", "y"},
                      std::vector<tessera::AxisType>{ex, ex});
  }
  std::mt19937 rng(20240611);
  while (pool.size() < 48) pool.push_back(tessera::testing::random_mesh(rng, 8, 0.25));
  return pool;
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Coverage {
  long ran = 0, ok = 0, raised = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  if (std::getenv("TESSERA_NUM_CPU_DEVICES") == nullptr) tessera::config::set_num_cpu_devices(8);
  // Collectives that never complete raise well before the watchdog fires.
  tessera::config::set_collective_timeout(20);
  install_crash_reporting();
  start_watchdog(120);

  const auto pool = mesh_pool();
  std::vector<tessera::Mesh> refs;
  for (const auto& m : pool) refs.push_back(tessera::testing::one_device_like(m));

  std::map<std::string, Coverage> coverage;
  std::vector<std::uint64_t> failed;
  long programs = 0, steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const bool trace = opt.one && opt.verbose;

  for (std::uint64_t seed = opt.start; seed < opt.start + opt.seeds; ++seed) {
    if (opt.max_seconds > 0 && elapsed() > opt.max_seconds) break;
    const std::size_t mi = mix(seed) % pool.size();
    g_seed = seed;
    g_program_start_ms = now_ms();
    g_in_program = true;
    fz::Program p = fz::generate(seed, pool[mi], refs[mi], trace);
    auto first = fz::run_program(p, p.mesh, trace);
    int step = -1;
    std::string why = fz::compare_with_reference(p, first, step);
    if (why.empty()) {
      // The second run records its communication: recording must not change
      // results, and the text must be printable.
      std::vector<fz::Outcome> second;
      const tessera::Explanation ex = tessera::explain([&] { second = fz::run_program(p, p.mesh); });
      why = fz::compare_runs(p, first, second, step);
      if (why.empty() && ex.str().empty() && !ex.records.empty()) why = "explain() gave no text for its records";
    }
    g_in_program = false;
    ++programs;
    steps += static_cast<long>(p.steps.size());
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      Coverage& c = coverage[p.steps[i].op];
      ++c.ran;
      if (first[i].value) ++c.ok;
      else if (first[i].tessera_error) ++c.raised;
    }
    if (!why.empty()) {
      failed.push_back(seed);
      if (failed.size() <= 20)
        std::printf("FAIL seed=%llu: v%d: %s\n%s\n", static_cast<unsigned long long>(seed), step, why.c_str(),
                    p.listing(&first, step).c_str());
      std::fflush(stdout);
    } else if (opt.verbose) {
      std::printf("%s\n", p.listing(&first).c_str());
    }
  }

  const double secs = elapsed();
  std::printf("tessera_fuzz: %ld programs (seeds %llu..%llu), %ld steps, %.1f s, %.0f programs/s, %zu failed\n",
              programs, static_cast<unsigned long long>(opt.start),
              static_cast<unsigned long long>(opt.start + (programs > 0 ? programs - 1 : 0)), steps, secs,
              secs > 0 ? programs / secs : 0.0, failed.size());
  if (!opt.one) {
    std::printf("op coverage (steps run / gave a value / raised a tessera::Error):\n");
    for (const auto& [op, c] : coverage) std::printf("  %-26s %7ld %7ld %7ld\n", op.c_str(), c.ran, c.ok, c.raised);
  }
  if (!failed.empty()) {
    std::printf("failing seeds:");
    for (auto s : failed) std::printf(" %llu", static_cast<unsigned long long>(s));
    std::printf("\n");
    return 1;
  }
  return 0;
}
