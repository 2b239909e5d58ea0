// bench_mpi: Tessera across processes (launched by mpirun) against MPI
// itself and against Tessera's threads on one process.
//
//   mpirun -np P -x TESSERA_NUM_CPU_DEVICES=D bench_mpi --mode psum|diff|all
//          [--json F] [--min-bytes 4K] [--max-bytes 256M] [--reps 7] [--batch-seconds 0.2]
//   bench_mpi --summary F.json...      (no mpirun: one table of earlier runs)
//
// Every process runs the program; process 0 prints and writes the JSON. The
// program reports whatever it was launched as (P processes x D devices).
//
// psum: per-device f32 messages of 4 KiB .. 256 MiB (capped by --max-bytes).
// Per size:
//   MPI      MPI_Allreduce(MPI_SUM, MPI_FLOAT) of the same bytes on a
//            duplicate of MPI_COMM_WORLD (separate send and receive buffers;
//            --in-place for MPI_IN_PLACE). A batch is an MPI_Barrier, then K
//            calls; its time per call is the slowest process's.
//   Tessera  psum(x, "p") on a 1-d mesh "p" over every device of every
//            process, each holding `size` bytes. ONE shard_map call per batch
//            whose body runs a first psum (it lines the devices up), then K
//            psums, timestamped inside the body: the dispatch of the
//            shard_map is not counted. Time per call = slowest device of the
//            slowest process.
//   memcpy   one std::memcpy of the same bytes per process, all processes at
//            once (the slowest one's median): the machine limit.
// The MPI and Tessera batches alternate (one of each per rep), so both see
// the same neighbours on this shared machine; `median` is the median batch
// (what every figure and ratio uses), `best` the fastest (for reference).
// K is chosen from a probe so a batch lasts about --batch-seconds (every
// process uses the slowest process's probe, so they agree on K).
// Bandwidth: 2 (N-1)/N * bytes / median time (N = devices in the
// reduction), the bytes each member must send and receive in a ring
// allreduce. Ratios, medians on both sides: Tessera/MPI = Tessera time / MPI
// time, as in every other table (below 1: Tessera faster; goal <= 1.1);
// x/memcpy = x's bandwidth / memcpy's (bytes / memcpy time).
// Launched as 1 process x N devices, the Tessera psum runs on the threads
// backend (shared memory) and the MPI figures are a 1-process allreduce
// (a local copy): the baseline to read the multi-process launch against.
// Every result is checked against the exact sum (small integers in f32).
//
// diff: the 4096 x 4096 f64 case, rows sharded over every device of every
// process (P("x")): diff(u, 1, 0, prepend=0) (bench_ops' diff row, output
// 4096 rows) and diff(u, 1, 0) (4095 rows). Each needs one row from the
// neighbouring device: a halo exchange, nothing else; explain() prints what
// moved (process 0's records, then any other process's that differ). Time =
// slowest process, MPI_Barrier before each rep. Limit = bytes read + written
// (u once, the result once) at the streaming rate of all devices together
// (every process runs D copying threads at once, slowest process's time,
// median of 5; the diff's time is the median rep too). Results are checked
// block by block on each process.

// The C API only: Open MPI's deprecated C++ bindings do not compile warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
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

// ------------------------------------------------------------------ MPI

// The benchmark's own communicator. Tessera joins the processes first (it
// initialises MPI when it is built with it); when it did not (a build without
// MPI, one process), MPI is initialised here and finalised at the end. A
// duplicate of MPI_COMM_WORLD keeps these messages apart from Tessera's.
class MpiContext {
 public:
  MpiContext() {
    ts::distributed::initialize();
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_);
      own_ = true;
    } else {
      MPI_Query_thread(&thread_level_);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiContext() {
    MPI_Comm_free(&comm_);
    int fin = 0;
    MPI_Finalized(&fin);
    if (own_ && !fin) MPI_Finalize();
  }
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool initialised_here() const { return own_; }
  std::string thread_level() const {
    switch (thread_level_) {
      case MPI_THREAD_SINGLE:
        return "single";
      case MPI_THREAD_FUNNELED:
        return "funneled";
      case MPI_THREAD_SERIALIZED:
        return "serialized";
      case MPI_THREAD_MULTIPLE:
        return "multiple";
      default:
        return "unknown";
    }
  }
  void barrier() const { MPI_Barrier(comm_); }
  double max(double v) const { return reduce(v, MPI_MAX); }
  double min(double v) const { return reduce(v, MPI_MIN); }
  double sum(double v) const { return reduce(v, MPI_SUM); }
  bool all(bool v) const { return min(v ? 1.0 : 0.0) > 0.5; }
  /// Every process's string, in process order, on process 0 (empty elsewhere).
  std::vector<std::string> gather(const std::string& s) const {
    int n = static_cast<int>(s.size());
    std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
    MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_);
    int total = 0;
    for (int i = 0; i < size_; ++i)
      displs[static_cast<std::size_t>(i)] = total, total += counts[static_cast<std::size_t>(i)];
    std::vector<char> all(static_cast<std::size_t>(std::max(total, 1)));
    MPI_Gatherv(s.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0, comm_);
    std::vector<std::string> out;
    if (rank_ == 0)
      for (int i = 0; i < size_; ++i)
        out.emplace_back(all.data() + displs[static_cast<std::size_t>(i)],
                         static_cast<std::size_t>(counts[static_cast<std::size_t>(i)]));
    return out;
  }

 private:
  double reduce(double v, MPI_Op op) const {
    double out = 0;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, op, comm_);
    return out;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, thread_level_ = MPI_THREAD_SINGLE;
  bool own_ = false;
};

// ---------------------------------------------------- parsing and timing

// "4K", "256M", "1G", "4096" -> bytes (binary units).
std::int64_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw CLI::ValidationError("size", "expected a size like 4096, 4K, 256M or 1G, got '" + s + "'");
  }
  std::string unit = s.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  std::int64_t mul = 1;
  if (unit == "K" || unit == "k")
    mul = kKiB;
  else if (unit == "M" || unit == "m")
    mul = kMiB;
  else if (unit == "G" || unit == "g")
    mul = kGiB;
  else if (!unit.empty())
    throw CLI::ValidationError("size", "expected a size like 4096, 4K, 256M or 1G, got '" + s + "'");
  if (!(v > 0)) throw CLI::ValidationError("size", "expected a positive size, got '" + s + "'");
  return static_cast<std::int64_t>(v * static_cast<double>(mul));
}

std::string size_label(std::int64_t b) {
  if (b >= kGiB && b % kGiB == 0) return std::to_string(b / kGiB) + "G";
  if (b >= kMiB && b % kMiB == 0) return std::to_string(b / kMiB) + "M";
  if (b >= kKiB && b % kKiB == 0) return std::to_string(b / kKiB) + "K";
  return std::to_string(b);
}

struct Stat {
  double best = 0, median = 0;
  int k = 0;     // calls per batch
  int reps = 0;  // batches
};

Stat stat_of(const std::vector<double>& t, int k) {
  return {t.empty() ? 0.0 : *std::min_element(t.begin(), t.end()), tb::median(t), k, static_cast<int>(t.size())};
}

json to_json(const Stat& s) {
  return {{"best_s", s.best}, {"median_s", s.median}, {"calls_per_batch", s.k}, {"batches", s.reps}};
}

// Calls per batch for a call of `probe` seconds (already the slowest
// process's, so every process gets the same count).
int calls_for(double probe, double batch_seconds) {
  return static_cast<int>(std::clamp(batch_seconds / std::max(probe, 1e-7), 1.0, 100000.0));
}

// The streaming rate of every device of every process together: each
// process runs one copying thread per local device (bench_util's
// stream_copy), all processes released by a barrier; a rep lasts as long as
// the slowest process's. Median of `reps` (the statistic of the times it is
// compared with). Bytes read + written per second.
struct GlobalStream {
  double seconds = 0, bytes_copied = 0, stream_gbps = 0;
  double seconds_for(double bytes) const { return stream_gbps > 0 ? bytes / (stream_gbps * 1e9) : 0.0; }
};

GlobalStream global_stream(const MpiContext& mpi, std::size_t total_bytes, int local_threads, int reps) {
  const std::size_t per_process = total_bytes / static_cast<std::size_t>(mpi.size());
  GlobalStream g;
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    mpi.barrier();
    const tb::StreamResult r = tb::stream_copy(per_process, local_threads, 1);
    t.push_back(mpi.max(r.seconds));
    if (i == 0) g.bytes_copied = mpi.sum(static_cast<double>(r.array_bytes));
  }
  g.seconds = tb::median(t);
  g.stream_gbps = 2.0 * g.bytes_copied / g.seconds / 1e9;
  return g;
}

std::string us_or_ms(double s) { return tb::format_seconds(s); }

// `text` with every line but the first indented by `indent`.
std::string indent_lines(std::string text, const std::string& indent) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  for (std::size_t p = text.find('\n'); p != std::string::npos; p = text.find('\n', p + 1 + indent.size()))
    text.insert(p + 1, indent);
  return text.empty() ? "(none)" : text;
}

// ------------------------------------------------------------------ psum

// Element i of device d's message: small integers, so the f32 sum over any
// number of devices in any order is exact.
float psum_value(std::int64_t d, std::int64_t i) { return static_cast<float>((d + 1) + (i % 7)); }
float psum_expected(std::int64_t n, std::int64_t i) { return static_cast<float>(n * (n + 1) / 2 + n * (i % 7)); }

struct PsumRow {
  std::int64_t bytes = 0;
  Stat mpi, tessera;
  double memcpy_s = 0;
  bool mpi_ok = false, tessera_ok = false;
};

// Per-device loop times of one shard_map call, written by the bodies.
struct BodyTimes {
  std::mutex mu;
  std::vector<double> seconds;
  void add(double s) {
    std::lock_guard<std::mutex> lock(mu);
    seconds.push_back(s);
  }
  double take_max() {
    std::lock_guard<std::mutex> lock(mu);
    const double m = seconds.empty() ? 0.0 : *std::max_element(seconds.begin(), seconds.end());
    seconds.clear();
    return m;
  }
};

json run_psum(const MpiContext& mpi, std::int64_t min_bytes, std::int64_t max_bytes, int reps, double batch_seconds,
              bool in_place) {
  const bool root = mpi.rank() == 0;
  const int n = ts::device_count();
  const ts::Mesh mesh = ts::make_mesh({n}, {"p"});
  const ts::NamedSharding sharded(mesh, ts::P("p"));
  std::vector<std::int64_t> sizes;
  for (std::int64_t s : {4 * kKiB, 64 * kKiB, kMiB, 16 * kMiB, 256 * kMiB})
    if (s >= min_bytes && s <= max_bytes) sizes.push_back(s);

  if (root) {
    std::printf("\npsum: f32, bytes per device; %d processes x %d devices = %d devices in the reduction\n", mpi.size(),
                ts::local_device_count(), n);
    std::printf(
        "  time per call: median batch [fastest]; bandwidth 2(N-1)/N * bytes / median; "
        "memcpy: one copy of the bytes per process, all at once (median)\n"
        "  Tessera/MPI = Tessera psum time / MPI_Allreduce time (medians; below 1: Tessera faster)\n");
    std::printf("%6s %30s %30s %11s %12s %8s %8s\n", "size", "MPI_Allreduce", "Tessera psum", "Tessera/MPI", "memcpy",
                "MPI/cpy", "ts/cpy");
    std::fflush(stdout);
  }
  std::vector<PsumRow> rows;
  // Each side's bandwidth counts its own members: N devices for Tessera,
  // the processes for MPI. The two are compared only when they are the same
  // (one device per process, several processes).
  const double alg = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  const double alg_mpi = mpi.size() > 1 ? 2.0 * (mpi.size() - 1) / mpi.size() : 0.0;
  const bool comparable = mpi.size() == n && n > 1;
  for (std::int64_t bytes : sizes) {
    PsumRow row;
    row.bytes = bytes;
    const std::int64_t count = bytes / 4;

    // memcpy limit, every process at once.
    mpi.barrier();
    row.memcpy_s = mpi.max(tb::memcpy_seconds(bytes, 5));

    // MPI buffers.
    tb::HostBuffer send(static_cast<std::size_t>(bytes)), recv(static_cast<std::size_t>(bytes));
    auto* sp = reinterpret_cast<float*>(send.data());
    auto* rp = reinterpret_cast<float*>(recv.data());
    auto fill_send = [&] {
      for (std::int64_t i = 0; i < count; ++i) sp[i] = psum_value(mpi.rank(), i);
    };
    fill_send();
    auto allreduce = [&] {
      if (in_place)
        MPI_Allreduce(MPI_IN_PLACE, sp, static_cast<int>(count), MPI_FLOAT, MPI_SUM, mpi.comm());
      else
        MPI_Allreduce(sp, rp, static_cast<int>(count), MPI_FLOAT, MPI_SUM, mpi.comm());
    };
    {
      allreduce();
      const float* res = in_place ? sp : rp;
      bool ok = true;
      for (std::int64_t i = 0; ok && i < count; ++i) ok = res[i] == psum_expected(mpi.size(), i);
      row.mpi_ok = mpi.all(ok);
      // In place, the sums keep growing with every call (towards inf, which
      // costs the same to add); only the first result is checked.
    }

    // Tessera: device d holds row d of an (N, count) array.
    ts::Array x =
        ts::make_array_from_callback({n, count}, ts::f32, sharded, [count](const std::vector<ts::Slice>& idx) {
          std::vector<float> v;
          v.reserve(static_cast<std::size_t>(idx[0].size() * count));
          for (std::int64_t d = idx[0].start; d < idx[0].stop; ++d)
            for (std::int64_t i = 0; i < count; ++i) v.push_back(psum_value(d, i));
          return v;
        });
    auto times = std::make_shared<BodyTimes>();
    auto k_calls = std::make_shared<int>(1);
    auto f = ts::shard_map(
        [times, k_calls](ts::Array xl) {
          // The first psum waits for every device: the loop starts together.
          ts::Array r = ts::psum(xl, "p");
          const double t0 = tb::now_seconds();
          for (int i = 0; i < *k_calls; ++i) r = ts::psum(xl, "p");
          times->add(tb::now_seconds() - t0);
          return r;
        },
        mesh, {ts::P("p")}, ts::P());
    // One call of the shard_map: seconds per psum, slowest device anywhere.
    auto tessera_batch = [&] {
      mpi.barrier();
      f(x).block_until_ready();
      return mpi.max(times->take_max() / *k_calls);
    };
    {
      const std::vector<float> got = f(x).to_vector<float>();
      (void)times->take_max();
      bool ok = static_cast<std::int64_t>(got.size()) == count;
      for (std::int64_t i = 0; ok && i < count; ++i) ok = got[static_cast<std::size_t>(i)] == psum_expected(n, i);
      row.tessera_ok = mpi.all(ok);
    }

    // Probes set the calls per batch.
    mpi.barrier();
    double t0 = tb::now_seconds();
    allreduce();
    const int k_mpi = calls_for(mpi.max(tb::now_seconds() - t0), batch_seconds);
    *k_calls = 1;
    const int k_ts = calls_for(tessera_batch(), batch_seconds);
    *k_calls = k_ts;

    std::vector<double> t_mpi, t_ts;
    for (int r = 0; r < reps; ++r) {
      mpi.barrier();
      t0 = tb::now_seconds();
      for (int i = 0; i < k_mpi; ++i) allreduce();
      t_mpi.push_back(mpi.max((tb::now_seconds() - t0) / k_mpi));
      t_ts.push_back(tessera_batch());
    }
    row.mpi = stat_of(t_mpi, k_mpi);
    row.tessera = stat_of(t_ts, k_ts);
    rows.push_back(row);

    if (root) {
      auto cell = [&](const Stat& s, double factor) {
        char b[64];
        std::snprintf(b, sizeof b, "%s %.2f GB/s [%s]", us_or_ms(s.median).c_str(),
                      tb::gbps(factor * bytes, s.median), us_or_ms(s.best).c_str());
        return std::string(b);
      };
      const double cpy = tb::gbps(static_cast<double>(bytes), row.memcpy_s);
      char ratio[16] = "-";
      if (comparable) std::snprintf(ratio, sizeof ratio, "%.2f", row.tessera.median / row.mpi.median);
      std::printf("%6s %30s %30s %11s %7.2f GB/s %8.2f %8.2f%s\n", size_label(bytes).c_str(),
                  cell(row.mpi, alg_mpi).c_str(), cell(row.tessera, alg).c_str(), ratio, cpy,
                  tb::gbps(alg_mpi * bytes, row.mpi.median) / cpy, tb::gbps(alg * bytes, row.tessera.median) / cpy,
                  row.mpi_ok && row.tessera_ok ? "" : "  WRONG RESULT");
      std::fflush(stdout);
    }
  }

  json jr = json::array();
  bool all_ok = true;
  for (const auto& r : rows) {
    const double cpy = tb::gbps(static_cast<double>(r.bytes), r.memcpy_s);
    const double mbw = tb::gbps(alg_mpi * r.bytes, r.mpi.median), tbw = tb::gbps(alg * r.bytes, r.tessera.median);
    all_ok = all_ok && r.mpi_ok && r.tessera_ok;
    jr.push_back({{"bytes_per_device", r.bytes},
                  {"mpi_allreduce", to_json(r.mpi)},
                  {"tessera_psum", to_json(r.tessera)},
                  {"mpi_gbps", mbw},
                  {"tessera_gbps", tbw},
                  {"memcpy_s", r.memcpy_s},
                  {"memcpy_gbps", cpy},
                  {"tessera_over_mpi", comparable ? json(r.tessera.median / r.mpi.median) : json(nullptr)},
                  {"mpi_over_memcpy", cpy > 0 ? mbw / cpy : 0.0},
                  {"tessera_over_memcpy", cpy > 0 ? tbw / cpy : 0.0},
                  {"mpi_correct", r.mpi_ok},
                  {"tessera_correct", r.tessera_ok}});
  }
  return {{"results", jr},
          {"all_correct", all_ok},
          {"in_place", in_place},
          {"bandwidth_definition",
           "2 (N-1)/N * bytes per device / median batch's time per call; N = devices "
           "for Tessera, processes for MPI"},
          {"ratio_definition",
           "tessera_over_mpi = Tessera time / MPI time (median batches; below 1: Tessera faster; goal <= 1.1), "
           "only with one device per process; x_over_memcpy = bandwidth / (bytes / median memcpy time)"}};
}

// ------------------------------------------------------------------ diff

double diff_value(std::int64_t r, std::int64_t c) { return static_cast<double>((r * 7 + c * 3) % 1000) * 0.5; }

json run_diff(const MpiContext& mpi, std::int64_t m, int reps) {
  const bool root = mpi.rank() == 0;
  const int n = ts::device_count();
  const ts::Mesh mesh = ts::make_mesh({n}, {"x"});
  const ts::NamedSharding rows(mesh, ts::P("x"));
  const GlobalStream stream = global_stream(mpi, std::size_t(128) << 20, ts::local_device_count(), 5);
  if (root) {
    std::printf("\ndiff: %lld x %lld f64, rows sharded over %d devices (%d processes x %d)\n",
                static_cast<long long>(m), static_cast<long long>(m), n, mpi.size(), ts::local_device_count());
    std::printf("  streaming limit of all %d devices at once: %.1f GB/s (read + write)\n", n, stream.stream_gbps);
  }
  // Each process fills only its own blocks.
  const ts::Array u = ts::make_array_from_callback({m, m}, ts::f64, rows, [m](const std::vector<ts::Slice>& idx) {
    std::vector<double> v;
    v.reserve(static_cast<std::size_t>(idx[0].size() * m));
    for (std::int64_t r = idx[0].start; r < idx[0].stop; ++r)
      for (std::int64_t c = 0; c < m; ++c) v.push_back(diff_value(r, c));
    return v;
  });
  const ts::Array zero = ts::zeros({1, m}, ts::f64, ts::NamedSharding(mesh, ts::P()));

  struct Case {
    std::string name;
    bool prepend;
  };
  json out = json::array();
  for (const Case& c : {Case{"diff(u, 1, 0, prepend=0)", true}, Case{"diff(u, 1, 0)", false}}) {
    auto run = [&] { return c.prepend ? ts::diff(u, 1, 0, {.prepend = zero}) : ts::diff(u, 1, 0); };
    ts::Array d;
    mpi.barrier();
    const ts::Explanation ex = ts::explain([&] { d = run().block_until_ready(); });

    // Check this process's blocks against the formula.
    bool ok = true;
    for (const ts::Shard& sh : d.addressable_shards()) {
      const std::vector<double> v = sh.data.to_vector<double>();
      std::size_t k = 0;
      for (std::int64_t r = sh.index[0].start; ok && r < sh.index[0].stop; ++r)
        for (std::int64_t col = sh.index[1].start; ok && col < sh.index[1].stop; ++col, ++k) {
          const double want = c.prepend ? diff_value(r, col) - (r > 0 ? diff_value(r - 1, col) : 0.0)
                                        : diff_value(r + 1, col) - diff_value(r, col);
          ok = v[k] == want;
        }
    }
    ok = mpi.all(ok);

    std::vector<double> t;
    for (int i = 0; i < reps + 1; ++i) {
      mpi.barrier();
      const double t0 = tb::now_seconds();
      run().block_until_ready();
      const double dt = mpi.max(tb::now_seconds() - t0);
      if (i > 0) t.push_back(dt);  // the first is a warm-up
    }
    const Stat s = stat_of(t, 1);
    const double traffic = static_cast<double>(u.nbytes() + d.nbytes());
    const double limit = stream.seconds_for(traffic);
    const std::vector<std::string> explained = mpi.gather(ex.str());
    if (root) {
      std::printf("  %-26s %s [fastest %s], %.2f of the streaming limit (%s read + written)%s\n", c.name.c_str(),
                  us_or_ms(s.median).c_str(), us_or_ms(s.best).c_str(), limit / s.median,
                  tb::format_bytes(static_cast<std::int64_t>(traffic)).c_str(), ok ? "" : "  WRONG RESULT");
      std::printf("    communication (explain, process 0):\n");
      std::printf("      %s\n", indent_lines(explained[0], "      ").c_str());
      for (std::size_t p = 1; p < explained.size(); ++p)
        if (explained[p] != explained[0])
          std::printf("    process %zu:\n      %s\n", p, indent_lines(explained[p], "      ").c_str());
      std::fflush(stdout);
    }
    json per_process = json::array();
    for (const auto& e : explained) per_process.push_back(e);
    out.push_back({{"case", c.name},
                   {"output_shape", d.shape()},
                   {"seconds", to_json(s)},
                   {"traffic_bytes", traffic},
                   {"limit_s", limit},
                   {"fraction_of_limit", limit / s.median},
                   {"bytes_moved_process0", ex.bytes_moved()},
                   {"explain", per_process},
                   {"correct", ok}});
  }
  return {{"rows", m},
          {"cols", m},
          {"dtype", "f64"},
          {"stream_gbps_all_devices", stream.stream_gbps},
          {"limit_definition",
           "(bytes of u + bytes of the result) at the streaming rate of every device of every "
           "process copying at once (slowest process, median of 5), same run; fraction_of_limit = limit / median "
           "time"},
          {"cases", out}};
}

// --------------------------------------------------------------- summary

std::string layout_of(const json& j) {
  return std::to_string(j.value("processes", 0)) + "x" + std::to_string(j.value("local_devices", 0));
}

// One table of earlier runs (several launches, each possibly run twice).
int summary(const std::vector<std::string>& files) {
  // psum: layout -> bytes -> every run's row.
  std::map<std::string, std::map<std::int64_t, std::vector<json>>> psum;
  std::vector<std::pair<std::string, json>> diffs;
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) {
      std::cerr << "bench_mpi: cannot read " << f << "\n";
      return 1;
    }
    json j;
    try {
      in >> j;
    } catch (const std::exception& e) {
      std::cerr << "bench_mpi: " << f << " is not JSON: " << e.what() << "\n";
      return 1;
    }
    if (j.contains("psum"))
      for (const auto& r : j["psum"]["results"])
        psum[layout_of(j)][r["bytes_per_device"].get<std::int64_t>()].push_back(r);
    if (j.contains("diff")) diffs.emplace_back(layout_of(j), j["diff"]);
  }
  // A side's time over several runs: the median of the runs' medians.
  auto median_of = [](const std::vector<json>& rs, const char* which) {
    std::vector<double> m;
    for (const auto& r : rs) m.push_back(r[which]["median_s"].get<double>());
    return tb::median(m);
  };
  if (!psum.empty()) {
    // One row per size; per multi-process layout: MPI, Tessera and their
    // ratio; per one-process layout: Tessera on threads.
    std::vector<std::int64_t> sizes;
    for (const auto& [layout, by_size] : psum)
      for (const auto& [bytes, rs] : by_size) sizes.push_back(bytes);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    auto one_process = [](const std::string& layout) { return layout.rfind("1x", 0) == 0; };
    std::printf(
        "psum, f32 bytes per device; time per call = median over the runs of each run's median batch;\n"
        "  PxD = processes x devices each. Tessera/MPI = Tessera psum time / MPI_Allreduce time within one\n"
        "  launch (medians), as every other table's Tessera/x: median (lowest..highest) of the runs; below 1:\n"
        "  Tessera faster (goal <= 1.1); threads = Tessera on one process (shared memory); memcpy = one copy per\n"
        "  process, all processes at once, median over the runs of each run's median\n");
    std::printf("%-6s", "size");
    for (const auto& [layout, by_size] : psum) {
      if (one_process(layout))
        std::printf(" %14s", ("threads " + layout).c_str());
      else
        std::printf(" %12s %12s %22s", ("MPI " + layout).c_str(), ("Tessera " + layout).c_str(), "Tessera/MPI");
    }
    std::printf(" %12s\n", "memcpy GB/s");
    for (std::int64_t bytes : sizes) {
      std::printf("%-6s", size_label(bytes).c_str());
      // memcpy as measured beside the multi-process launches (every process
      // copying at once), else beside the one-process ones.
      std::vector<double> cpys, cpys_one;
      for (const auto& [layout, by_size] : psum) {
        const auto it = by_size.find(bytes);
        if (it == by_size.end()) {
          std::printf(one_process(layout) ? " %14s" : " %12s %12s %22s", "-", "-", "-");
          continue;
        }
        const auto& rs = it->second;
        std::vector<double> q;
        for (const auto& r : rs) {
          if (r["tessera_over_mpi"].is_number()) q.push_back(r["tessera_over_mpi"].get<double>());
          (one_process(layout) ? cpys_one : cpys).push_back(r["memcpy_gbps"].get<double>());
        }
        if (one_process(layout)) {
          std::printf(" %14s", us_or_ms(median_of(rs, "tessera_psum")).c_str());
        } else {
          char ratio[48] = "-";
          if (!q.empty())
            std::snprintf(ratio, sizeof ratio, "%.2f (%.2f..%.2f)", tb::median(q),
                          *std::min_element(q.begin(), q.end()), *std::max_element(q.begin(), q.end()));
          std::printf(" %12s %12s %22s", us_or_ms(median_of(rs, "mpi_allreduce")).c_str(),
                      us_or_ms(median_of(rs, "tessera_psum")).c_str(), ratio);
        }
      }
      std::printf(" %12.2f\n", tb::median(cpys.empty() ? cpys_one : cpys));
    }
  }
  if (!diffs.empty()) {
    // (case, layout) -> every run's "time (fraction)".
    std::map<std::pair<std::string, std::string>, std::vector<std::string>> cells;
    bool wrong = false;
    for (const auto& [layout, d] : diffs)
      for (const auto& c : d["cases"]) {
        char cell[64];
        std::snprintf(cell, sizeof cell, "%s [%s] %.2f", us_or_ms(c["seconds"]["median_s"].get<double>()).c_str(),
                      us_or_ms(c["seconds"]["best_s"].get<double>()).c_str(), c["fraction_of_limit"].get<double>());
        cells[{c["case"].get<std::string>(), layout}].push_back(cell);
        wrong = wrong || !c["correct"].get<bool>();
      }
    std::printf(
        "\ndiff, rows sharded over all devices: per run, median rep [fastest] and the fraction of the\n"
        "  streaming limit of all devices (bytes read + written; median time over median limit)\n");
    for (const auto& [key, runs] : cells) {
      std::printf("  %-26s %-4s", key.first.c_str(), key.second.c_str());
      for (const auto& r : runs) std::printf("   %s", r.c_str());
      std::printf("\n");
    }
    if (wrong) std::printf("  WRONG RESULTS: see the JSON files\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera across processes (mpirun): psum against MPI_Allreduce, the sharded diff's halo exchange"};
  std::string mode = "all", json_path, min_bytes_arg = "4K", max_bytes_arg = "256M";
  int reps = 7, diff_reps = 30;
  std::int64_t diff_size = 4096;
  double batch_seconds = 0.2;
  bool in_place = false;
  std::vector<std::string> summary_files;
  app.add_option("--mode", mode, "psum, diff or all")
      ->check(CLI::IsMember({"psum", "diff", "all"}))
      ->capture_default_str();
  app.add_option("--json", json_path, "where process 0 writes the results as JSON");
  app.add_option("--min-bytes", min_bytes_arg, "smallest psum message per device")->capture_default_str();
  app.add_option("--max-bytes", max_bytes_arg, "largest psum message per device (sizes 4K 64K 1M 16M 256M)")
      ->capture_default_str();
  app.add_option("--reps", reps, "psum: timed batches per size (MPI and Tessera alternate)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--batch-seconds", batch_seconds, "psum: about how long one batch of calls lasts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--in-place", in_place, "psum: MPI_Allreduce with MPI_IN_PLACE instead of separate buffers");
  app.add_option("--diff-size", diff_size, "diff: rows and columns of the f64 array")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t(2), std::int64_t(1) << 16));
  app.add_option("--diff-reps", diff_reps, "diff: timed reps per case")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--summary", summary_files, "print one table of earlier runs' JSON files (no mpirun needed) and exit");
  CLI11_PARSE(app, argc, argv);
  if (!summary_files.empty()) return summary(summary_files);

  const double start = tb::now_seconds();
  // Outside the try: on an error, the other processes may wait in a
  // collective of this benchmark (plain MPI, no timeout), so they are aborted.
  std::unique_ptr<MpiContext> context;
  try {
    const std::int64_t min_bytes = parse_size(min_bytes_arg), max_bytes = parse_size(max_bytes_arg);
    context = std::make_unique<MpiContext>();
    const MpiContext& mpi = *context;
    if (mpi.size() != ts::process_count())
      throw ts::Error("[bench_mpi] MPI has " + std::to_string(mpi.size()) + " processes but Tessera has " +
                      std::to_string(ts::process_count()) + " (is Tessera built with MPI?)");
    const bool root = mpi.rank() == 0;
    if (root) {
      std::printf("Tessera across processes: %d processes x %d CPU devices (backend %s), MPI thread level %s%s\n",
                  mpi.size(), ts::local_device_count(), ts::distributed::backend(), mpi.thread_level().c_str(),
                  mpi.initialised_here() ? " (MPI initialised by the benchmark)" : "");
      std::fflush(stdout);
    }
    json j{{"benchmark", "mpi"},
           {"processes", mpi.size()},
           {"local_devices", ts::local_device_count()},
           {"devices", ts::device_count()},
           {"backend", ts::distributed::backend()},
           {"mpi_thread_level", mpi.thread_level()}};
    bool ok = true;
    if (mode == "psum" || mode == "all") {
      j["psum"] = run_psum(mpi, min_bytes, max_bytes, reps, batch_seconds, in_place);
      ok = ok && j["psum"]["all_correct"].get<bool>();
    }
    if (mode == "diff" || mode == "all") {
      j["diff"] = run_diff(mpi, diff_size, diff_reps);
      for (const auto& c : j["diff"]["cases"]) ok = ok && c["correct"].get<bool>();
    }
    j["total_seconds"] = tb::now_seconds() - start;
    if (root && !json_path.empty()) {
      const auto parent = std::filesystem::path(json_path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      std::ofstream(json_path) << j.dump(2) << "\n";
      std::printf("\nwrote %s (%.0f s)\n", json_path.c_str(), tb::now_seconds() - start);
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_mpi: " << e.what() << "\n";
    if (context && context->size() > 1) MPI_Abort(context->comm(), 1);
    return 1;
  }
}
