// tessera_fuzz: differential testing with random sharded programs.
//
// Each seed gives one program on one mesh (see program.hpp). The program is
// built and run on a one-device mesh with the same axis names, then run twice
// on its mesh: the sharded results must match the reference (bitwise where
// the arithmetic does not depend on the layout, within a bound otherwise),
// the two sharded runs must match bitwise, and a step that raises a
// tessera::Error on one device must raise the same type sharded. Anything
// else (another exception type, a crash, a sanitizer report, a hang) is a
// failure too; every failure prints its seed. Then the program runs under
// jit, vmap, chunked vmap, jvp and vjp and is compared with the eager run
// (transforms.cpp; one process only; --transforms selects).
//
// Programs run in a child process and a parent watches it: a crash, however
// it ends the child (signal, sanitizer exit, std::terminate), is reported
// with the seed that was running, and the campaign goes on from the next
// seed. Counts live in shared memory so the summary covers every child.
//
// Under mpirun (several processes) programs run in process instead, since
// MPI does not survive fork(): every process generates the same programs,
// computes the reference on a device of its own, and runs the sharded
// programs together on meshes over every process's devices. The processes
// agree, through small gathers, on each program, on when to stop, and on
// each verdict, so that they make the same collective calls and exit with
// the same status; process 0 prints the summary. A crash or a hang ends the
// run (mpirun then ends the other processes) after printing the seed.
//
//   tessera_fuzz --seeds 1000 [--start S] [--max-seconds T] [--verbose] [--transforms jit,vmap,autodiff]
//   tessera_fuzz --seed S --verbose      one program, in process, each step traced
//   mpirun -np 2 -x TESSERA_NUM_CPU_DEVICES=4 tessera_fuzz --seeds 300
#include <signal.h>
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
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "fuzz/program.hpp"
#include "tessera/distributed.hpp"
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
  fz::TransformStats transforms;
};

Shared* g = nullptr;

// Launched with several processes by mpirun (see the top of the file).
bool g_mpi = false;

// Under mpirun every line a process prints about itself names it.
std::string process_prefix() { return g_mpi ? "process " + std::to_string(tessera::process_index()) + ": " : ""; }

// Prints `text`; under mpirun in one write, so that another process's
// report does not land in the middle of it (mpirun merges their output).
void report(const std::string& text) {
  if (!g_mpi) {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::fflush(stdout);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t w = write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (w <= 0) break;
    done += static_cast<std::size_t>(w);
  }
}

std::string reproduce_text(std::uint64_t seed) {
  std::string t = "mpirun -np " + std::to_string(tessera::process_count()) + " -x TESSERA_NUM_CPU_DEVICES=" +
                  std::to_string(tessera::local_device_count()) + " tessera_fuzz --seed ";
  t += std::to_string(seed);
  t += " --verbose";
  return t;
}

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
  bool transforms = true;
  std::string only;  // --transforms: the selection (empty: all)
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
               "  --no-fork        run in this process (a crash then ends the run)\n"
               "  --no-transforms  skip the runs under jit, vmap, chunked vmap, jvp and vjp\n"
               "  --transforms L   only these, comma-separated: jit, vmap, autodiff (default: all)\n"
               "under mpirun every process runs in process, with meshes over all their devices\n",
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
      else if (a == "--no-transforms")
        o.transforms = false;
      else if (a == "--transforms") {
        o.only = value();
        for (std::size_t b = 0, e; b <= o.only.size(); b = e + 1) {
          e = std::min(o.only.find(',', b), o.only.size());
          const std::string t = o.only.substr(b, e - b);
          if (t != "jit" && t != "vmap" && t != "autodiff") usage(("unknown transformation '" + t + "'").c_str());
        }
      } else if (a == "--help" || a == "-h")
        usage("random sharded programs, compared with one device");
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

// The reference mesh: one device of this process (with several processes,
// each computes the reference itself, on one of its own devices), with every
// axis of size 1. With one process it is testing::one_device_like.
tessera::Mesh reference_like(const tessera::Mesh& m) {
  return tessera::Mesh({tessera::local_devices().front()}, std::vector<int>(m.axis_names().size(), 1), m.axis_names(),
                       m.axis_types());
}

// Before the runtime starts; the first call decides.
void configure_devices(int per_process) {
  static bool done = false;
  if (done) return;
  done = true;
  if (std::getenv("TESSERA_NUM_CPU_DEVICES") == nullptr) tessera::config::set_num_cpu_devices(per_process);
}

// The processes that report `failed`, in order: a collective under mpirun,
// so that every process counts and prints the same verdict.
std::vector<int> failing_processes(bool failed) {
  if (!g_mpi) return failed ? std::vector<int>{0} : std::vector<int>{};
  const std::uint8_t mine = failed ? 1 : 0;
  std::vector<int> out;
  const auto all = tessera::process_allgather(std::span<const std::uint8_t>(&mine, 1));
  for (std::size_t q = 0; q < all.size(); ++q)
    if (all[q] != 0) out.push_back(static_cast<int>(q));
  return out;
}

// Under mpirun a crash ends the run without a parent to name the seed, so
// the process names it itself (async-signal-safe), then dies as it would have.
struct sigaction g_previous[NSIG];
char g_reproduce[160];  // reproduce_text without the seed and what follows it
const int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

void append(char* buf, std::size_t& n, std::size_t cap, const char* t) {
  while (*t && n + 1 < cap) buf[n++] = *t++;
}
void append(char* buf, std::size_t& n, std::size_t cap, std::uint64_t v) {
  char d[24];
  int k = 0;
  do {
    d[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (k && n + 1 < cap) buf[n++] = d[--k];
}

void on_crash(int sig) {
  char buf[512];
  std::size_t n = 0;
  append(buf, n, sizeof buf, "FAIL seed=");
  append(buf, n, sizeof buf, g->running.load());
  append(buf, n, sizeof buf, ": process ");
  append(buf, n, sizeof buf, static_cast<std::uint64_t>(tessera::process_index()));
  append(buf, n, sizeof buf, ": crashed with signal ");
  append(buf, n, sizeof buf, static_cast<std::uint64_t>(sig));
  append(buf, n, sizeof buf, "\n  reproduce with: ");
  append(buf, n, sizeof buf, g_reproduce);
  append(buf, n, sizeof buf, g->running.load());
  append(buf, n, sizeof buf, " --verbose\n");
  [[maybe_unused]] const ssize_t w = write(STDOUT_FILENO, buf, n);
  sigaction(sig, &g_previous[sig], nullptr);
  raise(sig);
}

void report_crashes() {
  const std::string r = reproduce_text(0);
  std::snprintf(g_reproduce, sizeof g_reproduce, "%s", r.substr(0, r.find("--seed ") + 7).c_str());
  struct sigaction sa {};
  sa.sa_handler = on_crash;
  sigemptyset(&sa.sa_mask);
  for (int sig : kCrashSignals) sigaction(sig, &sa, &g_previous[sig]);
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Runs programs from g->next until `end` or `deadline`; counts into *g.
// One seed: generate, run, compare. Returns the processes that saw a
// failure (empty: passed); `why`, `step` and `first` describe this
// process's. Under mpirun every collective here is made by every process in
// the same order: each branch taken depends only on values all processes
// agreed on.
std::vector<int> run_one(const fz::Program& p, bool trace, const Options& opt, std::vector<fz::Outcome>& first,
                         std::string& why, int& step) {
  step = -1;
  fz::Values first_values;
  why = fz::agree_program(p);
  if (why.empty()) {
    first = fz::run_program(p, p.mesh, trace);
    why = fz::agree_outcomes(first, step);
    if (why.empty()) {
      first_values = fz::gather_values(first);
      why = fz::compare_with_reference(p, first, first_values, step);
    }
  }
  std::vector<int> failing = failing_processes(!why.empty());
  if (!failing.empty()) return failing;
  // The second run records its communication: recording must not change
  // results, and the text must be printable.
  std::vector<fz::Outcome> second;
  const tessera::Explanation ex = tessera::explain([&] { second = fz::run_program(p, p.mesh); });
  why = fz::agree_outcomes(second, step);
  if (why.empty()) why = fz::compare_runs(p, first, first_values, second, fz::gather_values(second), step);
  if (why.empty() && ex.str().empty() && !ex.records.empty()) why = "explain() gave no text for its records";
  // The same program under jit, vmap, chunked vmap, jvp and vjp (one
  // process: these compare against the eager run's global values).
  if (why.empty() && opt.transforms && !g_mpi) {
    std::string which;
    why = fz::check_transforms(p, first, first_values, step, which, g->transforms, opt.only);
    if (!why.empty()) why = "[" + which + "] " + why;
  }
  return failing_processes(!why.empty());
}

void run_seeds(const Options& opt, std::uint64_t end, double deadline) {
  configure_devices(8);
  // Collectives that never complete raise well before the watchdog fires.
  tessera::config::set_collective_timeout(20);
  // A program that runs far longer than any should is a hang.
  const bool report_hang = !opt.fork;  // else the parent reports it
  std::thread([report_hang] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const std::uint64_t s = g->running;
      const double t0 = now_s();
      while (g->in_program && g->running == s) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (now_s() - t0 > 120) {
          g->hung = true;
          if (report_hang) {
            std::string text = "FAIL seed=" + std::to_string(s) + ": " + process_prefix() +
                               "hung (one program ran for over 120 s)\n";
            if (g_mpi) text += "  reproduce with: " + reproduce_text(s) + "\n";
            report(text);
            std::fflush(stdout);
          }
          std::_Exit(3);
        }
      }
    }
  }).detach();
  if (g_mpi) report_crashes();

  const auto pool = mesh_pool();
  std::vector<tessera::Mesh> refs;
  for (const auto& m : pool) refs.push_back(reference_like(m));
  const bool trace = opt.one && opt.verbose;
  const bool printer = tessera::process_index() == 0;

  for (std::uint64_t seed = g->next; seed < end; ++seed) {
    // Under mpirun the processes stop together: one that stopped alone
    // would leave the others waiting in the next program's collectives.
    const bool past = deadline > 0 && now_s() > deadline;
    if (g_mpi ? !failing_processes(past).empty() : past) break;
    const std::size_t mi = mix(seed) % pool.size();
    g->running = seed;
    g->in_program = true;
    std::vector<fz::Outcome> first;
    std::string why;
    int step = -1;
    std::vector<int> failing;
    fz::Program p(pool[mi], refs[mi]);
    try {
      p = fz::generate(seed, pool[mi], refs[mi], trace);
      failing = run_one(p, trace, opt, first, why, step);
    } catch (const std::exception& e) {
      // Under mpirun, the checks' own gathers may raise here (run_step
      // catches what the program raises): the processes are out of step
      // then, and cannot go on together.
      if (!g_mpi) throw;
      report("FAIL seed=" + std::to_string(seed) + ": " + process_prefix() + e.what() +
             "\n  reproduce with: " + reproduce_text(seed) + "\n");
      std::_Exit(1);
    }
    g->in_program = false;
    g->next = seed + 1;
    ++g->programs;
    g->steps += static_cast<long>(p.steps.size());
    for (std::size_t i = 0; i < first.size(); ++i)
      count_op(p.steps[i].op, first[i].value.has_value(), first[i].tessera_error);
    if (!failing.empty()) {
      record_failure(seed);
      if (g->nfailed <= 20) {
        std::string text;
        if (!why.empty()) {
          text = "FAIL seed=" + std::to_string(seed) + ": " + process_prefix() + "v" + std::to_string(step) + ": " + why +
                 "\n" + p.listing(first.empty() ? nullptr : &first, step) + "\n";
        } else if (printer) {
          std::string who;
          for (int q : failing) who += (who.empty() ? "" : ", ") + std::to_string(q);
          text = "FAIL seed=" + std::to_string(seed) + ": failed on process " + who + " (reported there)\n";
        }
        if (g_mpi && printer) text += "  reproduce with: " + reproduce_text(seed) + "\n";
        report(text);
      }
      std::fflush(stdout);
    } else if (opt.verbose && printer) {
      report(p.listing(&first) + "\n");
    }
  }
  std::fflush(stdout);
  // The others' reports before process 0's summary, as far as mpirun keeps
  // the order.
  if (g_mpi) failing_processes(false);
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
  Options opt = parse(argc, argv);
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

  // Launched by mpirun (the variables Tessera's MPI start reads): MPI does
  // not survive fork(), so the programs run here, and the runtime starts now
  // to learn how many processes there are.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK")) {
    opt.fork = false;
    // Eight devices in all, as the mesh pool is made for (four each for two
    // processes), and at least two each (see below).
    const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE") ? std::getenv("OMPI_COMM_WORLD_SIZE")
                                                               : std::getenv("PMI_SIZE");
    const int processes = launched ? std::max(1, std::atoi(launched)) : 2;
    configure_devices(std::max(2, 8 / processes));
    tessera::distributed::initialize();
    g_mpi = tessera::process_count() > 1;
    if (g_mpi) {
      // The reference moves values to "other devices" (the next one), which
      // must be the reference process's own.
      const int mine = tessera::local_device_count();
      int fewest = mine;
      for (int v : tessera::process_allgather(std::span<const int>(&mine, 1))) fewest = std::min(fewest, v);
      if (fewest < 2) {
        if (tessera::process_index() == 0)
          std::fprintf(stderr, "tessera_fuzz: under mpirun every process needs 2 or more devices "
                               "(TESSERA_NUM_CPU_DEVICES)\n");
        return 2;
      }
    }
  }

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
  // Every process counted the same (the verdicts were agreed); one prints.
  if (g_mpi && tessera::process_index() != 0) return g->nfailed > 0 ? 1 : 0;
  std::printf("tessera_fuzz: %ld programs (seeds %llu..%llu), %ld steps, %.1f s, %.0f programs/s, %ld failed\n",
              g->programs, static_cast<unsigned long long>(opt.start),
              static_cast<unsigned long long>(g->next > opt.start ? g->next - 1 : opt.start), g->steps, secs,
              secs > 0 ? static_cast<double>(g->programs) / secs : 0.0, g->nfailed);
  if (opt.transforms && !g_mpi) {
    const fz::TransformStats& t = g->transforms;
    std::printf(
        "transformations: jit %ld, vmap %ld (%ld skipped: a permuted example raised; %ld with pmax/pmin, not "
        "batched yet), chunked vmap %ld, "
        "jvp %ld (%ld programs with an op documented as not differentiable), vjp dot-product %ld (%ld skipped: "
        "not finite); central differences on %ld elements "
        "(%ld skipped: at kinks or jumps, flat within rounding, or not finite; %ld programs out of "
        "domain)\n",
        t.jit, t.vmap, t.vmap_skipped, t.vmap_unsupported, t.chunked, t.jvp, t.ad_unsupported, t.vjp, t.vjp_skipped,
        t.fd_checked, t.fd_skipped, t.fd_skipped_programs);
  }
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
