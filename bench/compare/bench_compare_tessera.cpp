// bench_compare_tessera: the Tessera half of `make bench-compare`.
//
//   bench_compare_tessera --workload diff_rows[,diff_cols,...] [--reps 5] [--devices N]
//   bench_compare_tessera --limits [--devices N]
//   bench_compare_tessera --list
//
// Runs the named workloads and prints one JSON line per workload:
//   {"side": "tessera", "workload": ..., "layout": ..., "seconds": <median>,
//    "samples": [...], "inner": <calls per sample>, "bytes"/"flops": ...,
//    "limit": "stream1" | "streamN" | "blas" | "none", ...}
// or {"workload": ..., "error": "..."} when the workload raised. `--limits`
// prints the machine limits of this run as one JSON line (streaming
// bandwidth of 1 and N threads, single-thread sgemm peak, memcpy for
// reference).
//
// stel_n<N>_m<M>_<fwd|rev>[<chunk>] (the jac_stellarator family, any N, M
// and chunk): the Jacobian of 2*tanh(A x) + 1, A (M, 512) f64 rows sharded
// over N devices, by jacfwd or jacrev, whole or `chunk` directions at a time.
// One warm-up, then `reps` single calls; also the process's peak RSS, its
// RSS before the inputs existed and the peak per device above the inputs.
//
// Collectives: "bytes" is the least memory traffic (read + written, all
// devices together) of the result the devices end up with, and the limit is
// the N-thread streaming rate (bench_collectives.cpp explains the counts).
// psum, all_gather and ppermute share one result between devices (one
// process, zero-copy); their `_owned` twins return `collective(x) + 0`, so
// every device writes a private result, as JAX's do.
//
// bench/compare/jax_workloads.py runs the same workloads (same names, shapes,
// dtypes, device counts and shardings) in JAX; compare.py alternates the two.
// Every sample is the time of `inner` calls, each ending in
// block_until_ready() (dispatch: `inner` calls, then one block), divided by
// `inner`; `inner` grows until a sample takes >= 2 ms so that clock
// resolution does not matter. One untimed warm-up call precedes the samples.
//
// seed_<tanh|matmul2d|normalize|allgather_matmul>[_jit] (the "seeds" group):
// the small programs of the distributed-JAX introduction, on 8 devices
// (--devices 8) whatever the machine: eager (the C++ function called
// directly) or under ts::jit. Latency rows: every sample is at least 20 ms
// and 200 calls (fewer where 200 would take over 0.5 s: JAX's eager
// shard_map takes a tenth of a second and more a call), each call ending in
// block_until_ready(); no limit.
#include <cblas.h>
#include <sys/resource.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
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

constexpr double kMinSample = 2e-3;  // seconds per sample, at least
// The seeds rows take microseconds a call: many calls per sample.
constexpr double kSeedMinSample = 20e-3;
constexpr int kSeedMinInner = 200;
constexpr double kMaxSample = 0.5;  // min_inner gives way where its sample would take longer

struct Timing {
  std::vector<double> samples;  // seconds per call
  int inner = 1;
};

// One warm-up call, then `inner` calibrated so that a sample takes >=
// min_sample, and raised to min_inner unless such a sample would take over
// kMaxSample; then `reps` samples. `call` runs one complete call (blocking).
Timing time_calls(int reps, const std::function<void()>& call, double min_sample = kMinSample, int min_inner = 1) {
  call();
  Timing t;
  for (;;) {
    const double t0 = tb::now_seconds();
    for (int i = 0; i < t.inner; ++i) call();
    const double dt = tb::now_seconds() - t0;
    if (dt >= min_sample || t.inner >= (1 << 20)) {
      if (t.inner < min_inner)
        t.inner = std::max(t.inner, std::min(min_inner, static_cast<int>(kMaxSample * t.inner / std::max(dt, 1e-9))));
      break;
    }
    t.inner = dt <= 0 ? t.inner * 16 : std::min(t.inner * 16, static_cast<int>(t.inner * 1.5 * min_sample / dt) + 1);
  }
  for (int r = 0; r < reps; ++r) {
    const double t0 = tb::now_seconds();
    for (int i = 0; i < t.inner; ++i) call();
    t.samples.push_back((tb::now_seconds() - t0) / t.inner);
  }
  return t;
}

// Peak RSS since the process started, in MiB.
double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// Current RSS in MiB (VmRSS; 0 where /proc is not there).
double rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0.0;
}

// The parameters of a stel_n<N>_m<M>_<fwd|rev>[<chunk>] workload name.
struct StelSpec {
  int devices;
  std::int64_t rows;
  bool forward;
  std::int64_t chunk;  // 0: all directions at once
};

std::optional<StelSpec> parse_stel(const std::string& w) {
  static const std::regex re(R"(stel_n(\d+)_m(\d+)_(fwd|rev)(\d*))");
  std::smatch m;
  if (!std::regex_match(w, m, re)) return std::nullopt;
  return StelSpec{std::stoi(m[1]), std::stoll(m[2]), m[3] == "fwd", m[4].length() ? std::stoll(m[4]) : 0};
}

// A's entries: a low-discrepancy sequence (frac(k * golden ratio) - 0.5) / 100
// over the row-major index k, full rank and the same bits as numpy's on the
// JAX side; small enough that tanh stays off its flat tails.
double stel_entry(std::int64_t i, std::int64_t j, std::int64_t p) {
  const double v = static_cast<double>(i * p + j) * 0.6180339887498949;
  return 0.01 * (v - std::floor(v) - 0.5);
}

// Two axes for an N-device 2-d mesh: (N/2, 2) when even, else (N, 1).
std::vector<int> mesh_2d(int n) { return n % 2 == 0 && n > 1 ? std::vector<int>{n / 2, 2} : std::vector<int>{n, 1}; }

std::string tuple_str(const std::vector<int>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

json result(const std::string& workload, const std::string& layout, const Timing& t) {
  return json{{"side", "tessera"},         {"workload", workload},        {"layout", layout},
              {"seconds", tb::median(t.samples)}, {"samples", t.samples}, {"inner", t.inner}};
}

// Single-thread sgemm GFLOP/s on 1024^3 (the per-device compute limit), as
// bench_ops: the median run, the statistic of the times divided by it.
double blas_peak_gflops() {
  const int n = 1024;
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n, 0.0f);
  openblas_set_num_threads(1);
  auto t = tb::time_reps(1, 5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * n * n * n / tb::median(t) / 1e9;
}

// Per-device elements of a collective input of about `bytes` f32 bytes,
// rounded down to a multiple of n so psum_scatter / all_to_all can split it.
std::int64_t collective_elems(std::int64_t bytes, int n) { return bytes / 4 / n * n; }

class Runner {
 public:
  Runner(int reps) : reps_(reps), n_(ts::device_count()), devs_(ts::devices()) {}

  static const std::vector<std::string>& names() {
    static const std::vector<std::string> v = [] {
      std::vector<std::string> out = {"diff_1dev", "diff_rows",     "diff_cols", "sin", "sin_jit",
                                      "sum",       "mlp_auto",      "mlp_shard_map"};
      for (const char* size : {"4k", "64m"})
        for (const char* c : {"psum", "psum_owned", "all_gather", "all_gather_owned", "psum_scatter", "ppermute",
                              "ppermute_owned", "all_to_all"})
          out.push_back(std::string(c) + "_" + size);
      out.push_back("dispatch");
      out.push_back("uneven_diff");
      for (const char* w : {"chain_jit", "chain_eager", "trace_compile", "mlp_big_jit", "mlp_big_explicit", "jac_vmap",
                            "jac_map", "mlp_grad"})
        out.push_back(w);
      for (const char* n : {"2", "8"})
        for (const char* m : {"4099", "100000"})
          for (const char* form : {"fwd", "fwd16", "fwd64", "fwd128", "rev", "rev16", "rev64", "rev128"})
            out.push_back(std::string("stel_n") + n + "_m" + m + "_" + form);
      for (const char* w : {"tanh", "matmul2d", "normalize", "allgather_matmul"})
        for (const char* form : {"", "_jit"}) out.push_back(std::string("seed_") + w + form);
      return out;
    }();
    return v;
  }

  json run(const std::string& w) {
    if (w.rfind("diff_", 0) == 0) return diff(w);
    if (w == "sin" || w == "sin_jit") return sin(w == "sin_jit");
    if (w == "sum") return sum();
    if (w == "mlp_auto" || w == "mlp_shard_map") return mlp(w);
    if (w == "dispatch") return dispatch();
    if (w == "uneven_diff") return uneven();
    if (w == "chain_jit" || w == "chain_eager") return chain(w);
    if (w == "trace_compile") return trace_compile();
    if (w == "mlp_big_jit" || w == "mlp_big_explicit") return mlp_big(w == "mlp_big_explicit");
    if (w == "jac_vmap" || w == "jac_map") return jacobian(w == "jac_map");
    if (w == "mlp_grad") return mlp_grad();
    if (auto spec = parse_stel(w)) return stellarator(w, *spec);
    if (w.rfind("seed_", 0) == 0) return seed(w);
    for (const char* size : {"_4k", "_64m"}) {
      const std::string suffix(size);
      if (w.size() > suffix.size() && w.compare(w.size() - suffix.size(), suffix.size(), suffix) == 0)
        return collective(w, w.substr(0, w.size() - suffix.size()), suffix == "_4k" ? 4096 : std::int64_t(64) << 20);
    }
    throw std::invalid_argument("unknown workload '" + w + "' (--list shows them)");
  }

 private:
  ts::Mesh line() const { return ts::make_mesh({n_}, {"x"}); }

  std::string nstr() const { return std::to_string(n_); }

  // diff(x, 1, axis=0, prepend=0) on 4096x4096 f64: one device, rows over N
  // (along the sharded axis), columns over N (across it).
  json diff(const std::string& w) {
    const std::int64_t m = 4096;
    std::vector<double> host(static_cast<size_t>(m * m));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<double>(i % 1000) * 0.5;
    ts::Mesh one(std::vector<ts::Device>{devs_[0]}, {1}, {"x"});
    ts::Mesh mesh = w == "diff_1dev" ? one : line();
    ts::PartitionSpec spec = w == "diff_1dev" ? ts::P() : w == "diff_rows" ? ts::P("x") : ts::P(ts::none, "x");
    ts::PartitionSpec zspec = w == "diff_cols" ? ts::P(ts::none, "x") : ts::P();
    std::string layout = w == "diff_1dev" ? "1 device" : w == "diff_rows" ? "(" + nstr() + ",1)" : "(1," + nstr() + ")";
    auto x = ts::device_put(host, {m, m}, ts::NamedSharding(mesh, spec));
    auto z = ts::zeros({1, m}, ts::f64, ts::NamedSharding(mesh, zspec));
    ts::Array y;
    auto ex = ts::explain([&] { y = ts::diff(x, 1, 0, {.prepend = z}).block_until_ready(); });
    auto t = time_calls(reps_, [&] { ts::diff(x, 1, 0, {.prepend = z}).block_until_ready(); });
    json r = result(w, layout, t);
    r["dtype"] = ts::dtype_name(y.dtype());
    r["shape"] = y.shape();
    r["bytes"] = 2.0 * m * m * 8;
    r["limit"] = mesh.size() == 1 ? "stream1" : "streamN";
    r["moved_bytes"] = ex.bytes_moved();
    return r;
  }

  // sin: three eager passes; sin_jit: the same under ts::jit, one fused pass
  // (JAX's twin is jax.jit in both rows).
  json sin(bool jitted) {
    const std::int64_t len = std::int64_t(1) << 24;
    const ts::NamedSharding s(line(), ts::P("x"));
    auto x = ts::random::uniform(ts::random::key(0), {len}, ts::f32, s, -3, 3);
    auto body = [](ts::Array v) { return 2.0f * ts::sin(v) + 1.0f; };
    auto f = ts::jit(body, {.in_shardings = {s}, .out_shardings = {s}}, "sin");
    auto call = [&] { return jitted ? f(x) : body(x); };
    auto t = time_calls(reps_, [&] { call().block_until_ready(); });
    json r = result(jitted ? "sin_jit" : "sin", "(" + nstr() + ",)", t);
    r["dtype"] = ts::dtype_name(call().dtype());
    r["bytes"] = 2.0 * len * 4;  // one read and one write: the fused minimum
    r["limit"] = "streamN";
    return r;
  }

  json sum() {
    const std::int64_t m = 4096;
    auto x = ts::random::uniform(ts::random::key(2), {m, m}, ts::f32, ts::NamedSharding(line(), ts::P("x")));
    auto ex = ts::explain([&] { ts::sum(x, {0}).block_until_ready(); });
    auto t = time_calls(reps_, [&] { ts::sum(x, {0}).block_until_ready(); });
    json r = result("sum", "(" + nstr() + ",1)", t);
    r["dtype"] = ts::dtype_name(ts::sum(x, {0}).dtype());
    r["shape"] = ts::sum(x, {0}).shape();
    r["bytes"] = 1.0 * m * m * 4;
    r["limit"] = "streamN";
    r["moved_bytes"] = ex.bytes_moved();
    return r;
  }

  // sigmoid(x @ w + b), x 8192x1024 rows over 'i', w 1024x1024 columns over
  // 'j'. shard_map form: the contracting dim sharded over 'j' on both sides,
  // local product, psum over 'j' (the tutorial's matmul with psum).
  json mlp(const std::string& w) {
    const auto ms = mesh_2d(n_);
    ts::Mesh mesh = ts::make_mesh(ms, {"i", "j"});
    const std::int64_t M = 8192, K = 1024, N = 1024;
    auto key = ts::random::key(1);
    const bool sm = w == "mlp_shard_map";
    auto x = ts::random::normal(key, {M, K}, ts::f32, ts::NamedSharding(mesh, sm ? ts::P("i", "j") : ts::P("i", ts::none)));
    auto wt = ts::random::normal(ts::random::fold_in(key, 1), {K, N}, ts::f32,
                                 ts::NamedSharding(mesh, sm ? ts::P("j", ts::none) : ts::P(ts::none, "j")));
    auto b = ts::random::uniform(ts::random::fold_in(key, 2), {N}, ts::f32,
                                 ts::NamedSharding(mesh, sm ? ts::P() : ts::P("j")));
    std::function<void()> call;
    if (sm) {
      auto f = ts::shard_map(
          [](ts::Array xl, ts::Array wl, ts::Array bl) { return ts::sigmoid(ts::psum(ts::matmul(xl, wl), "j") + bl); },
          mesh, {ts::P("i", "j"), ts::P("j", ts::none), ts::P()}, ts::P("i", ts::none));
      call = [=] { f(x, wt, b).block_until_ready(); };
    } else {
      call = [&] { ts::sigmoid(ts::matmul(x, wt) + b).block_until_ready(); };
    }
    auto t = time_calls(reps_, call);
    json r = result(w, "mesh " + tuple_str(ms), t);
    r["flops"] = 2.0 * M * K * N;
    r["limit"] = "blas";
    return r;
  }

  // One collective inside shard_map, input P('x') of `bytes` per device (f32).
  // `c` may end in "_owned": the body then returns collective(x) + 0, an
  // elementwise pass that gives every device a private result.
  json collective(const std::string& w, std::string c, std::int64_t bytes) {
    const std::int64_t per = collective_elems(bytes, n_);
    ts::Mesh mesh = line();
    auto x = ts::random::uniform(ts::random::key(3), {per * n_}, ts::f32, ts::NamedSharding(mesh, ts::P("x")));
    const int n = n_;
    const std::string owned_suffix = "_owned";
    const bool owned = c.size() > owned_suffix.size() &&
                       c.compare(c.size() - owned_suffix.size(), owned_suffix.size(), owned_suffix) == 0;
    if (owned) c.resize(c.size() - owned_suffix.size());
    std::function<ts::Array(const ts::Array&)> op;
    ts::PartitionSpec out = ts::P("x");
    // Least bytes read + written per device in units of its input S, for the
    // result as the collective delivers it, and the result's size in S.
    double traffic = 0, result_size = 1;
    if (c == "psum") {
      op = [](const ts::Array& xl) { return ts::psum(xl, "x"); };
      out = ts::P();
      traffic = 1.0 + 1.0 / n;  // its chunk of every input read, that chunk of the shared result written
    } else if (c == "all_gather") {
      op = [](const ts::Array& xl) { return ts::all_gather(xl, "x", 0, true); };
      out = ts::P();
      traffic = 2.0;  // its input read and written into the shared result
      result_size = n;
    } else if (c == "psum_scatter" && !owned) {
      op = [](const ts::Array& xl) { return ts::psum_scatter(xl, "x", 0, true); };
      traffic = 1.0 + 1.0 / n;  // its chunk of every input read, its own result written
      result_size = 1.0 / n;
    } else if (c == "ppermute") {
      std::vector<std::pair<int, int>> perm;
      for (int i = 0; i < n; ++i) perm.emplace_back(i, (i + 1) % n);
      op = [perm](const ts::Array& xl) { return ts::ppermute(xl, "x", perm); };
      traffic = 0;  // the sender's buffer is handed over
    } else if (c == "all_to_all" && !owned) {
      op = [](const ts::Array& xl) { return ts::all_to_all(xl, "x", 0, 0, true); };
      traffic = 2.0;  // every block read once and written into its own result
    } else {
      throw std::invalid_argument("unknown collective '" + c + (owned ? owned_suffix : "") + "'");
    }
    if (owned) traffic += 2.0 * result_size;  // the shared result read, a private one written
    const ts::ShardMapOptions opt{.check_vma = false};
    std::function<ts::Array(const ts::Array&)> f;
    if (owned)
      f = ts::shard_map([op](ts::Array xl) { return op(xl) + 0.0f; }, mesh, {ts::P("x")}, out, opt);
    else
      f = ts::shard_map([op](ts::Array xl) { return op(xl); }, mesh, {ts::P("x")}, out, opt);
    auto t = time_calls(reps_, [&] { f(x).block_until_ready(); });
    json r = result(w, "(" + nstr() + ",) " + tb::format_bytes(per * 4) + "/device" + (owned ? ", owned" : ""), t);
    r["shape"] = f(x).shape();
    r["dtype"] = ts::dtype_name(f(x).dtype());
    r["form"] = owned ? "owned" : (c == "psum_scatter" || c == "all_to_all") ? "private" : "zero-copy";
    const double s = static_cast<double>(per) * 4;
    r["bytes"] = traffic * n * s;
    r["limit"] = traffic > 0 ? "streamN" : "none";
    return r;
  }

  // Eager dispatch: x + 1 on 16 f32 over N devices; `inner` ops, then one block.
  json dispatch() {
    auto x = ts::zeros({16}, ts::f32, ts::NamedSharding(line(), ts::P("x")));
    ts::Array y;
    const int inner = 2000;
    auto t = time_calls(reps_, [&] {
      for (int i = 0; i < inner; ++i) y = x + 1.0f;
      y.block_until_ready();
    });
    for (auto& v : t.samples) v /= inner;
    t.inner *= inner;
    json r = result("dispatch", "(" + nstr() + ",)", t);
    r["limit"] = "none";
    return r;
  }

  // 4097x4096 f64 over N rows (JAX cannot place it): diff along axis 0.
  json uneven() {
    const std::int64_t m = 4097, k = 4096;
    std::vector<double> host(static_cast<size_t>(m * k));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<double>(i % 1000) * 0.5;
    ts::Mesh mesh = line();
    auto x = ts::device_put(host, {m, k}, ts::NamedSharding(mesh, ts::P("x")));
    auto z = ts::zeros({1, k}, ts::f64, ts::NamedSharding(mesh, ts::P()));
    auto t = time_calls(reps_, [&] { ts::diff(x, 1, 0, {.prepend = z}).block_until_ready(); });
    std::string shards;
    for (const auto& sh : x.addressable_shards())
      shards += (shards.empty() ? "" : ", ") + std::to_string(sh.index[0].size());
    json r = result("uneven_diff", "(" + nstr() + ",1) rows " + shards, t);
    r["dtype"] = ts::dtype_name(ts::diff(x, 1, 0, {.prepend = z}).dtype());
    r["bytes"] = 2.0 * m * k * 8;
    r["limit"] = "streamN";
    return r;
  }

  // The 20-op elementwise chain of the jit rows: 4 rounds of
  // a = tanh(a * 0.9 + c) - v * 0.01 (5 ops each). `c` is 0.1 except in
  // trace_compile, which varies it so that JAX builds a new program each rep;
  // the same constant is varied here to keep the two programs alike.
  static ts::Array chain_body(const ts::Array& v, float c) {
    ts::Array a = v;
    for (int i = 0; i < 4; ++i) a = ts::tanh(a * 0.9f + c) - v * 0.01f;
    return a;
  }

  // Communication steps of a compiled program, from its text: the lines that
  // name a collective or a reshard, trimmed.
  static std::vector<std::string> communication(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string line; std::getline(ss, line);) {
      if (line.find("all-reduce") == std::string::npos && line.find("reduce-scatter") == std::string::npos &&
          line.find("reshard") == std::string::npos && line.find("all-gather") == std::string::npos)
        continue;
      out.push_back(line.substr(line.find_first_not_of(' ')));
    }
    return out;
  }

  // chain_jit: the chain under ts::jit (one fused pass per device expected);
  // chain_eager: the same 20 ops dispatched one by one.
  json chain(const std::string& w) {
    const std::int64_t len = std::int64_t(1) << 24;
    const ts::NamedSharding s(line(), ts::P("x"));
    auto v = ts::random::uniform(ts::random::key(4), {len}, ts::f32, s, -3, 3);
    json r;
    if (w == "chain_jit") {
      auto f = ts::jit([](ts::Array x) { return chain_body(x, 0.1f); }, {.in_shardings = {s}, .out_shardings = {s}},
                       "chain");
      auto t = time_calls(reps_, [&] { f(v).block_until_ready(); });
      r = result(w, "(" + nstr() + ",)", t);
      const std::string text = f.lower(v).as_text();
      r["steps"] = text.substr(text.find("compiled:"), text.find('\n', text.find("compiled:")) - text.find("compiled:"));
      r["cache_size"] = f.cache_size();  // 1: every timed call took the cached program
      r["dtype"] = ts::dtype_name(f(v).dtype());
      r["shape"] = f(v).shape();
    } else {
      auto t = time_calls(reps_, [&] { chain_body(v, 0.1f).block_until_ready(); });
      r = result(w, "(" + nstr() + ",)", t);
      r["dtype"] = ts::dtype_name(chain_body(v, 0.1f).dtype());
      r["shape"] = chain_body(v, 0.1f).shape();
    }
    // Both rows against the fused minimum (v read once, the result written
    // once), so the eager row's ratio shows what the 19 extra round trips
    // through memory cost.
    r["bytes"] = 2.0 * len * 4;
    r["limit"] = "streamN";
    return r;
  }

  // Tracing and compiling the chain afresh on a (1024,) input: a new jit
  // object per call has an empty cache, so lower() traces and compiles.
  json trace_compile() {
    const ts::NamedSharding s(line(), ts::P("x"));
    auto v = ts::random::uniform(ts::random::key(5), {1024}, ts::f32, s, -3, 3);
    int k = 0;
    auto t = time_calls(reps_, [&] {
      const float c = 0.1f + 1e-6f * static_cast<float>(++k);
      auto f = ts::jit([c](ts::Array x) { return chain_body(x, c); }, {.in_shardings = {s}, .out_shardings = {s}},
                       "chain");
      f.lower(v);  // traces and compiles eagerly; the text is not built
    });
    json r = result("trace_compile", "(1024,) over (" + nstr() + ",)", t);
    r["compiled"] = k;
    r["limit"] = "none";
    return r;
  }

  // sigmoid(x @ w + b): x (16384,) sharded on the contracting dim, w and b
  // replicated. The cheap plan slices w locally (no copy: it is replicated)
  // and all-reduces the 512 partial sums; the cost is reading w once over
  // all devices. `explicit_axes`: the mesh axis is Explicit (the SPMD
  // tutorial's explicit x @ w, which both sides accept).
  json mlp_big(bool explicit_axes) {
    const std::int64_t K = 16384, N = 512;
    ts::Mesh mesh = explicit_axes ? ts::make_mesh({n_}, {"x"}, {ts::AxisType::Explicit}) : line();
    const ts::NamedSharding sx(mesh, ts::P("x")), rep(mesh, ts::P());
    auto key = ts::random::key(6);
    auto x = ts::random::normal(key, {K}, ts::f32, sx);
    auto wt = ts::random::normal(ts::random::fold_in(key, 1), {K, N}, ts::f32, rep);
    auto b = ts::random::uniform(ts::random::fold_in(key, 2), {N}, ts::f32, rep);
    auto f = ts::jit([](ts::Array xa, ts::Array wa, ts::Array ba) { return ts::sigmoid(ts::matmul(xa, wa) + ba); },
                     {.in_shardings = {sx, rep, rep}, .out_shardings = {rep}}, "mlp_big");
    auto t = time_calls(reps_, [&] { f(x, wt, b).block_until_ready(); });
    json r = result(explicit_axes ? "mlp_big_explicit" : "mlp_big_jit", "x (" + nstr() + ",), w b replicated", t);
    auto y = f(x, wt, b);
    r["dtype"] = ts::dtype_name(y.dtype());
    r["shape"] = y.shape();
    r["communication"] = communication(f.lower(x, wt, b).as_text());
    r["cache_size"] = f.cache_size();
    r["flops"] = 2.0 * K * N;
    r["bytes"] = 4.0 * (K * N + K + 2 * N);  // w, x, b read; the result written
    r["limit"] = "streamN";
    return r;
  }

  // The plasma code's chunked Jacobian (examples/chunked_jacobian, the
  // same residual as JAX's side): rows sharded, vmap of the per-row jacfwd,
  // at once (jac_vmap) or 128 rows at a time on every device (jac_map).
  // Also run on 4099 rows, which JAX refuses.
  json jacobian(bool chunked) {
    const std::int64_t K = 8, N = 24;
    const ts::Mesh mesh = line();
    const ts::NamedSharding rows(mesh, ts::P("x")), rep(mesh, ts::P());
    auto grid = [&](std::int64_t m) {
      return ts::make_array_from_callback({m, K}, ts::f64, rows, [&](const std::vector<ts::Slice>& idx) {
        std::vector<double> v;
        for (auto i = idx[0].start; i < idx[0].stop; ++i)
          for (auto k = idx[1].start; k < idx[1].stop; ++k) v.push_back(std::cos(0.37 * static_cast<double>(i) + 0.91 * k));
        return v;
      });
    };
    std::vector<double> hp(N);
    for (int j = 0; j < N; ++j) hp[j] = 0.2 * std::sin(1.3 * j + 0.5);
    const ts::Array p = ts::device_put(hp, {N}, rep);
    const ts::Array freq = ts::arange(1, N + 1, 1, ts::f64, rep) * 0.5;
    const ts::Array nodes = ts::linspace(0.5, 1.5, 32, ts::f64, rep);
    auto residual = [&](const ts::Array& q, const ts::Array& xr) {
      const ts::Array phase = ts::expand_dims(ts::expand_dims(xr, 1) * ts::expand_dims(nodes, 0), 2) *
                              ts::reshape(freq, {1, 1, N});
      return ts::tanh(ts::matmul(ts::mean(ts::cos(phase), {1}), q)) + 0.1 * xr * ts::sum(q * q);
    };
    auto row_jac = [&](ts::Array q, ts::Array xr) {
      return ts::jacfwd([&](const ts::Array& a) { return residual(a, xr); })(q);
    };
    auto jac = ts::vmap(row_jac, {.in_axes = {ts::not_mapped, 0}, .chunk_size = chunked ? 128 : 0});
    const ts::Array x = grid(4096);
    jac(p, x).block_until_ready();
    for (const auto& d : mesh.devices()) ts::reset_peak_memory(d);
    auto t = time_calls(reps_, [&] { jac(p, x).block_until_ready(); });
    std::int64_t peak = 0;
    for (const auto& d : mesh.devices()) peak = std::max(peak, ts::memory_stats(d).peak_bytes_in_use);
    json r = result(chunked ? "jac_map" : "jac_vmap", "rows (" + nstr() + ",), M=4096", t);
    const ts::Array j = jac(p, x);
    r["dtype"] = ts::dtype_name(j.dtype());
    r["shape"] = j.shape();
    r["peak_device_mb"] = static_cast<double>(peak) / (1 << 20);
    const ts::Array xu = grid(4099);
    auto tu = time_calls(std::max(1, reps_ / 2), [&] { jac(p, xu).block_until_ready(); });
    r["uneven_seconds"] = tb::median(tu.samples);
    r["peak_rss_mb"] = peak_rss_mb();
    r["limit"] = "none";
    return r;
  }

  // grad of a 3-layer MLP's mean squared error under jit, batch sharded
  // (JAX's side: jit(grad(loss))).
  json mlp_grad() {
    const std::int64_t B = 8192, D = 256, H = 256;
    const ts::Mesh mesh = line();
    const ts::NamedSharding rows(mesh, ts::P("x")), rep(mesh, ts::P());
    auto key = ts::random::key(7);
    auto k = [&](int i) { return ts::random::fold_in(key, static_cast<std::uint32_t>(i)); };
    const ts::Array x = ts::random::normal(k(0), {B, D}, ts::f32, rows);
    const ts::Array y = ts::random::normal(k(1), {B, 1}, ts::f32, rows);
    std::vector<ts::Array> params{ts::random::normal(k(2), {D, H}, ts::f32, rep) / std::sqrt(static_cast<float>(D)),
                                  ts::zeros({H}, ts::f32, rep),
                                  ts::random::normal(k(3), {H, H}, ts::f32, rep) / std::sqrt(static_cast<float>(H)),
                                  ts::zeros({H}, ts::f32, rep),
                                  ts::random::normal(k(4), {H, 1}, ts::f32, rep) / std::sqrt(static_cast<float>(H))};
    auto loss = [](const std::vector<ts::Array>& ps, ts::Array xa, ts::Array ya) {
      ts::Array h = ts::tanh(ts::matmul(xa, ps[0]) + ps[1]);
      h = ts::tanh(ts::matmul(h, ps[2]) + ps[3]);
      ts::Array e = ts::matmul(h, ps[4]) - ya;
      return ts::mean(e * e);
    };
    auto g = ts::jit([&](const std::vector<ts::Array>& ps, ts::Array xa, ts::Array ya) {
      return ts::grad(loss)(ps, xa, ya);
    }, {.out_shardings = {rep}}, "mlp_grad");
    auto t = time_calls(reps_, [&] { g(params, x, y)[0].block_until_ready(); });
    json r = result("mlp_grad", "batch (" + nstr() + ",), 8192x256->256->256->1", t);
    const auto out = g(params, x, y);
    r["dtype"] = ts::dtype_name(out[0].dtype());
    r["shape"] = out[0].shape();
    r["flops"] = 6.0 * B * (D * H + H * H + H);
    r["limit"] = "blas";
    r["peak_rss_mb"] = peak_rss_mb();
    return r;
  }

  // The stellarator-shaped Jacobian (DESC's equilibrium residual): r(x) =
  // 2*tanh(A x) + 1 with A (M, 512) f64, rows sharded, x (512) replicated.
  // One process per row: its peak RSS is this Jacobian's and the runtime's.
  json stellarator(const std::string& w, const StelSpec& s) {
    if (s.devices != n_)
      throw std::runtime_error(w + " is for " + std::to_string(s.devices) + " devices, the runner has " + nstr());
    const std::int64_t m = s.rows, p = 512;
    const ts::Mesh mesh = line();
    const ts::NamedSharding rows(mesh, ts::P("x", ts::none)), rep(mesh, ts::P());
    std::vector<double> hx(static_cast<size_t>(p));
    for (std::int64_t j = 0; j < p; ++j) hx[static_cast<size_t>(j)] = std::cos(0.37 * static_cast<double>(j));
    const ts::Array x = ts::device_put(hx, {p}, rep).block_until_ready();
    const double rss_start = rss_mb();  // the runtime started, A not yet made
    const ts::Array a = ts::make_array_from_callback({m, p}, ts::f64, rows, [&](const std::vector<ts::Slice>& idx) {
      std::vector<double> v;
      v.reserve(static_cast<size_t>(idx[0].size() * idx[1].size()));
      for (auto i = idx[0].start; i < idx[0].stop; ++i)
        for (auto j = idx[1].start; j < idx[1].stop; ++j) v.push_back(stel_entry(i, j, p));
      return v;
    });
    auto f = [&a](const ts::Array& v) { return ts::tanh(ts::matmul(a, v)) * 2.0 + 1.0; };
    std::function<ts::Array(const ts::Array&)> jac;
    if (s.forward)
      jac = ts::jacfwd(f, {.chunk_size = s.chunk});
    else
      jac = ts::jacrev(f, {.chunk_size = s.chunk});
    // One warm-up call, whose result gives the checksum and is dropped;
    // then each timed call holds one Jacobian at a time. No calibration
    // call: a call of 1e5 rows takes about a second.
    double checksum = 0;
    ts::Shape jshape;
    std::string jdtype;
    std::int64_t jac_device_bytes = 0;
    {
      const ts::Array j = jac(x).block_until_ready();
      checksum = ts::sum(j).item<double>();
      jshape = j.shape();
      jdtype = ts::dtype_name(j.dtype());
      for (const auto& sh : j.addressable_shards()) {
        std::int64_t elems = 1;
        for (const auto& sl : sh.index) elems *= sl.size();
        jac_device_bytes = std::max(jac_device_bytes, elems * static_cast<std::int64_t>(sizeof(double)));
      }
    }
    std::vector<std::int64_t> base;
    for (const auto& d : mesh.devices()) {
      ts::reset_peak_memory(d);
      base.push_back(ts::memory_stats(d).bytes_in_use);
    }
    Timing t;
    t.samples = tb::time_reps(0, reps_, [&] { jac(x).block_until_ready(); });
    std::int64_t above = 0;
    for (size_t i = 0; i < base.size(); ++i)
      above = std::max(above, ts::memory_stats(mesh.devices()[i]).peak_bytes_in_use - base[i]);
    std::string shards;
    for (const auto& sh : a.addressable_shards())
      shards += (shards.empty() ? "" : ",") + std::to_string(sh.index[0].size());
    json r = result(w, "A rows " + tuple_str({n_}), t);
    const double mib = 1 << 20;
    r["dtype"] = jdtype;
    r["shape"] = jshape;
    r["rows_per_device"] = shards;
    r["checksum"] = checksum;
    r["peak_rss_mb"] = peak_rss_mb();
    r["rss_start_mb"] = rss_start;
    r["peak_device_above_inputs_mb"] = static_cast<double>(above) / mib;
    r["jacobian_device_mb"] = static_cast<double>(jac_device_bytes) / mib;
    r["jacobian_mb"] = static_cast<double>(m * p * 8) / mib;
    r["inputs_mb"] = static_cast<double>((m * p + p) * 8) / mib;
    r["limit"] = "none";
    return r;
  }

  // The seeds: the small programs of the distributed-JAX introduction on 8
  // devices, eager (the function called directly) or under ts::jit (JAX's
  // twin: the jnp / shard_map-wrapped function called directly, or
  // jax.jit of it). tanh: arange(8) i32 over a 1-d mesh "i"; the others on
  // a (4, 2) mesh ("i", "j"): dot(x, w) + b; shard_map normalize over "j";
  // shard_map x @ all_gather(w, "i"). The normalize body computes x - mean
  // twice and squares by a multiply, as JAX's (x - mean)**2 ... (x - mean)
  // does (integer_pow), so both sides run the same seven ops.
  json seed(const std::string& w) {
    const std::string jit_suffix = "_jit";
    const bool jitted =
        w.size() > jit_suffix.size() && w.compare(w.size() - jit_suffix.size(), jit_suffix.size(), jit_suffix) == 0;
    const std::string base = jitted ? w.substr(0, w.size() - jit_suffix.size()) : w;
    if (n_ != 8) throw std::runtime_error(w + " is for 8 devices (--devices 8), the runner has " + nstr());
    const ts::Mesh m1 = ts::make_mesh({8}, {"i"});
    const ts::Mesh m2 = ts::make_mesh({4, 2}, {"i", "j"});
    auto on2 = [&](const ts::PartitionSpec& s) { return ts::NamedSharding(m2, s); };
    auto normal = [](std::uint32_t k, const ts::Shape& shape, const ts::NamedSharding& s) {
      return ts::random::normal(ts::random::key(k), shape, ts::f32, s);
    };
    std::function<ts::Array()> call;
    auto bind = [&](auto f, auto... args) {
      if (jitted) {
        auto jf = ts::jit(f, {}, base);
        call = [jf, args...] { return jf(args...); };
      } else {
        call = [f, args...] { return f(args...); };
      }
    };
    std::string layout;
    if (base == "seed_tanh") {
      bind([](ts::Array v) { return ts::tanh(v); }, ts::arange(0, 8, 1, ts::i32, ts::NamedSharding(m1, ts::P("i"))));
      layout = "(8,) P(i)";
    } else if (base == "seed_matmul2d") {
      bind([](ts::Array x, ts::Array wt, ts::Array b) { return ts::matmul(x, wt) + b; },
           normal(0, {192, 64}, on2(ts::P("i", ts::none))), normal(1, {64, 128}, on2(ts::P(ts::none, "j"))),
           normal(2, {128}, on2(ts::P("j"))));
      layout = "(4,2) x P(i,) w P(,j)";
    } else if (base == "seed_normalize") {
      auto f = ts::shard_map(
          [](ts::Array x) {
            const ts::Array mean = ts::pmean(x, "j");
            const ts::Array d = x - mean;
            const ts::Array sd = ts::sqrt(ts::pmean(d * d, "j"));
            return (x - mean) / sd;
          },
          m2, {ts::P("i", "j")}, ts::P("i", "j"));
      bind(f, normal(3, {192, 64}, on2(ts::P("i", "j"))));
      layout = "(4,2) x P(i,j)";
    } else if (base == "seed_allgather_matmul") {
      auto f = ts::shard_map([](ts::Array x, ts::Array wt) { return ts::matmul(x, ts::all_gather(wt, "i", 0, true)); },
                             m2, {ts::P("i", ts::none), ts::P("i", ts::none)}, ts::P("i", ts::none));
      bind(f, normal(0, {192, 64}, on2(ts::P("i", ts::none))), normal(4, {64, 128}, on2(ts::P("i", ts::none))));
      layout = "(4,2) x w P(i,)";
    } else {
      throw std::invalid_argument("unknown workload '" + w + "' (--list shows them)");
    }
    auto t = time_calls(reps_, [&] { call().block_until_ready(); }, kSeedMinSample, kSeedMinInner);
    json r = result(w, layout, t);
    const ts::Array y = call();
    r["dtype"] = ts::dtype_name(y.dtype());
    r["shape"] = y.shape();
    r["limit"] = "none";
    return r;
  }

  int reps_;
  int n_;
  std::vector<ts::Device> devs_;
};

json limits(int n) {
  const auto s1 = tb::stream_copy(std::size_t(128) << 20, 1, 10);
  const auto sn = tb::stream_copy(std::size_t(128) << 20, n, 10);
  const double peak = blas_peak_gflops();
  const std::int64_t mc = std::int64_t(64) << 20;
  const double mcs = tb::memcpy_seconds(mc, 5);
  return json{{"side", "tessera"},
              {"limits", true},
              {"devices", n},
              {"stream1_gbps", s1.stream_gbps},
              {"streamN_gbps", sn.stream_gbps},
              {"sgemm_1thread_gflops", peak},
              {"blas_gflops", peak * n},
              {"memcpy_64MiB_gbps", tb::gbps(static_cast<double>(mc), mcs)},  // for reference only
              {"hardware_threads", std::thread::hardware_concurrency()}};
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera half of `make bench-compare`: runs named workloads, prints JSON lines"};
  std::string workloads;
  int reps = 5;
  std::optional<int> devices;
  bool want_limits = false, list = false;
  app.add_option("--workload", workloads, "workload name(s), comma-separated (--list shows them)");
  app.add_option("--reps", reps, "timed samples per workload (median reported)")->capture_default_str();
  app.add_option("--devices", devices, "number of CPU devices (default: hardware threads)");
  app.add_flag("--limits", want_limits, "print the machine limits of this run");
  app.add_flag("--list", list, "list the workloads");
  CLI11_PARSE(app, argc, argv);
  if (list) {
    for (const auto& w : Runner::names()) std::cout << w << "\n";
    return 0;
  }
  try {
    if (devices) ts::config::set_num_cpu_devices(*devices);
    const int n = ts::device_count();
    if (want_limits) std::cout << limits(n).dump() << std::endl;
    Runner runner(reps);
    int failed = 0;
    for (const auto& w : split_commas(workloads)) {
      json r;
      try {
        r = runner.run(w);
      } catch (const std::invalid_argument& e) {
        std::cerr << "bench_compare_tessera: " << e.what() << "\n";
        return 2;
      } catch (const std::exception& e) {
        r = json{{"side", "tessera"}, {"workload", w}, {"error", e.what()}};
        ++failed;
      }
      r["devices"] = n;
      std::cout << r.dump() << std::endl;
    }
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_compare_tessera: " << e.what() << "\n";
    return 1;
  }
}
