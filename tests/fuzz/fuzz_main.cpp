// tessera_fuzz: differential testing with random sharded programs.
//
// Each seed gives one program on one mesh (see program.hpp). The program is
// built and run on a one-device mesh with the same axis names, then run twice
// on its mesh: the sharded results must match the reference (bitwise where
// the arithmetic does not depend on the layout, within a bound otherwise),
// the two sharded runs must match bitwise, and a step that raises a
// tessera::Error on one device must raise the same type sharded. Anything
// else (another exception type, a crash, a sanitizer report, a hang) is a
// failure too; every failure prints its seed.
//
// Programs run in a child process and a parent watches it: a crash, however
// it ends the child (signal, sanitizer exit, std::terminate), is reported
// with the seed that was running, and the campaign goes on from the next
// seed. Counts live in shared memory so the summary covers every child.
//
//   tessera_fuzz --seeds 1000 [--start S] [--max-seconds T] [--verbose]
//   tessera_fuzz --seed S --verbose      one program, in process, each step traced
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "fuzz/program.hpp"
#include "test_util.hpp"

namespace fz = tessera::fuzz;

namespace {

struct OpCount {
  char name[40];
  long ran, ok, raised;
};

// Written by the child, read by the parent after the child ends (and by
// the child's watchdog thread while it runs, hence the atomics).
struct Shared {
  std::uint64_t next;                  // first seed not yet started
  std::atomic<std::uint64_t> running;  // the seed of the program in progress
  std::atomic<bool> in_program;
  std::atomic<bool> hung;
  long programs, steps;
  int nops;
  OpCount ops[256];
  long nfailed;
  std::uint64_t failed[512];  // the first failing seeds
};

Shared* g = nullptr;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void count_op(const std::string& op, bool ok, bool raised) {
  int i = 0;
  while (i < g->nops && op != g->ops[i].name) ++i;
  if (i == g->nops) {
    if (g->nops == static_cast<int>(std::size(g->ops))) return;
    std::snprintf(g->ops[i].name, sizeof g->ops[i].name, "%s", op.c_str());
    ++g->nops;
  }
  ++g->ops[i].ran;
  g->ops[i].ok += ok;
  g->ops[i].raised += raised;
}

void record_failure(std::uint64_t seed) {
  if (g->nfailed < static_cast<long>(std::size(g->failed))) g->failed[g->nfailed] = seed;
  ++g->nfailed;
}

struct Options {
  std::uint64_t start = 1;
  std::uint64_t seeds = 200;
  double max_seconds = 0;
  bool verbose = false;
  bool one = false;
  bool fork = true;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "tessera_fuzz: %s\n"
               "usage: tessera_fuzz [--seeds N] [--start S] [--seed S] [--max-seconds T] [--verbose]\n"
               "  --seeds N        run N programs (default 200)\n"
               "  --start S        first seed (default 1)\n"
               "  --seed S         run only seed S (with --verbose: trace every step)\n"
               "  --max-seconds T  stop starting new programs after T seconds\n"
               "  --verbose        print every program\n"
               "  --no-fork        run in this process (a crash then ends the run)\n",
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
        o.fork = false;
      } else if (a == "--max-seconds") o.max_seconds = std::stod(value());
      else if (a == "--verbose" || a == "-v") o.verbose = true;
      else if (a == "--no-fork") o.fork = false;
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

// Runs programs from g->next until `end` or `deadline`; counts into *g.
void run_seeds(const Options& opt, std::uint64_t end, double deadline) {
  if (std::getenv("TESSERA_NUM_CPU_DEVICES") == nullptr) tessera::config::set_num_cpu_devices(8);
  // Collectives that never complete raise well before the watchdog fires.
  tessera::config::set_collective_timeout(20);
  // A program that runs far longer than any should is a hang.
  std::thread([] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const std::uint64_t s = g->running;
      const double t0 = now_s();
      while (g->in_program && g->running == s) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (now_s() - t0 > 120) {
          g->hung = true;
          std::_Exit(3);
        }
      }
    }
  }).detach();

  const auto pool = mesh_pool();
  std::vector<tessera::Mesh> refs;
  for (const auto& m : pool) refs.push_back(tessera::testing::one_device_like(m));
  const bool trace = opt.one && opt.verbose;

  for (std::uint64_t seed = g->next; seed < end; ++seed) {
    if (deadline > 0 && now_s() > deadline) break;
    const std::size_t mi = mix(seed) % pool.size();
    g->running = seed;
    g->in_program = true;
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
    g->in_program = false;
    g->next = seed + 1;
    ++g->programs;
    g->steps += static_cast<long>(p.steps.size());
    for (std::size_t i = 0; i < p.steps.size(); ++i)
      count_op(p.steps[i].op, first[i].value.has_value(), first[i].tessera_error);
    if (!why.empty()) {
      record_failure(seed);
      if (g->nfailed <= 20)
        std::printf("FAIL seed=%llu: v%d: %s\n%s\n", static_cast<unsigned long long>(seed), step, why.c_str(),
                    p.listing(&first, step).c_str());
      std::fflush(stdout);
    } else if (opt.verbose) {
      std::printf("%s\n", p.listing(&first).c_str());
    }
  }
  std::fflush(stdout);
}

std::string end_text(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "crashed with signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  if (g->hung) return "hung (one program ran for over 120 s)";
  return "the process ended with status " + std::to_string(WEXITSTATUS(status)) +
         " in the middle of the program (a sanitizer or an uncaught exception; report above)";
}

}  // namespace

// Under ThreadSanitizer a data race stops the child, so the parent can name
// the seed (by default TSan reports and carries on). Unused in other builds.
extern "C" const char* __tsan_default_options() { return "halt_on_error=1"; }

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("tessera_fuzz: mmap");
    return 2;
  }
  g = new (mem) Shared{};
  g->next = opt.start;
  const std::uint64_t end = opt.start + opt.seeds;
  const double t0 = now_s();
  const double deadline = opt.max_seconds > 0 ? t0 + opt.max_seconds : 0;

  if (!opt.fork) {
    run_seeds(opt, end, deadline);
  } else {
    // No tessera call happens in this process, so the child forks with one
    // thread and starts its own runtime.
    while (g->next < end && (deadline == 0 || now_s() < deadline)) {
      std::fflush(stdout);
      const pid_t pid = fork();
      if (pid < 0) {
        std::perror("tessera_fuzz: fork");
        return 2;
      }
      if (pid == 0) {
        run_seeds(opt, end, deadline);
        std::_Exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !g->in_program) break;
      const std::uint64_t seed = g->running;
      std::printf("FAIL seed=%llu: %s; reproduce with: tessera_fuzz --seed %llu --verbose\n",
                  static_cast<unsigned long long>(seed), end_text(status).c_str(), static_cast<unsigned long long>(seed));
      record_failure(seed);
      ++g->programs;
      g->in_program = false;
      g->hung = false;
      g->next = seed + 1;
    }
  }

  const double secs = now_s() - t0;
  std::printf("tessera_fuzz: %ld programs (seeds %llu..%llu), %ld steps, %.1f s, %.0f programs/s, %ld failed\n",
              g->programs, static_cast<unsigned long long>(opt.start),
              static_cast<unsigned long long>(g->next > opt.start ? g->next - 1 : opt.start), g->steps, secs,
              secs > 0 ? static_cast<double>(g->programs) / secs : 0.0, g->nfailed);
  if (!opt.one) {
    std::vector<OpCount> ops(g->ops, g->ops + g->nops);
    std::sort(ops.begin(), ops.end(), [](const OpCount& a, const OpCount& b) { return std::strcmp(a.name, b.name) < 0; });
    std::printf("op coverage (steps run / gave a value / raised a tessera::Error):\n");
    for (const auto& c : ops) std::printf("  %-26s %7ld %7ld %7ld\n", c.name, c.ran, c.ok, c.raised);
  }
  if (g->nfailed > 0) {
    std::printf("failing seeds:");
    for (long i = 0; i < std::min<long>(g->nfailed, static_cast<long>(std::size(g->failed))); ++i)
      std::printf(" %llu", static_cast<unsigned long long>(g->failed[i]));
    std::printf("\n");
    return 1;
  }
  return 0;
}
