// An introduction to manual mode: ts::shard_map runs a function once per
// device on that device's block of each input, and collectives (psum,
// all_gather, ppermute, ...) combine values across the devices of a mesh
// axis. Each step runs on the devices there are (1 to 8 or more), prints
// what each device saw, and checks the result against plain host loops.
//
// Under mpirun the meshes span every process's devices: every process runs
// every step, results that span processes are read with
// ts::process_allgather (replicated ones with to_vector/item, which need
// only this process's copy), layouts are printed from the sharding (which
// knows every device's block, not only this process's), and a step passes
// when it passed on every process.
#include "collectives_tour.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <tessera/tessera.hpp>
#include <vector>

#include "common/processes.hpp"

namespace ts = tessera;

namespace examples {

namespace {

// Two axes for an n-device mesh: (n/2, 2) when even, else (n, 1).
std::vector<int> grid_of(int n) { return n % 2 == 0 && n > 1 ? std::vector<int>{n / 2, 2} : std::vector<int>{n, 1}; }

// Counts the checks and prints each step's verdict.
struct Tour {
  std::ostream& os;
  int checks = 0;
  int failures = 0;

  // Runs one step: `body` prints what happened and returns whether the
  // result matched the host reference. An exception counts as a failure.
  template <class F>
  void step(const std::string& title, F&& body) {
    os << "\n  " << title << "\n";
    bool ok = false;
    try {
      ok = body();
    } catch (const std::exception& e) {
      os << "    unexpected error: " << e.what() << "\n";
    }
    ok = on_every_process(ok);
    ++checks;
    if (!ok) ++failures;
    os << "    ... " << (ok ? "ok" : "FAILED") << "\n";
  }
};

template <class T>
std::string vec_str(const std::vector<T>& v, std::size_t from = 0, std::size_t count = std::size_t(-1),
                    int digits = 6) {
  std::ostringstream s;
  s << std::setprecision(digits) << "[";
  for (std::size_t i = from; i < v.size() && i - from < count; ++i) s << (i > from ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

bool close(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - want[i]) > tol * (1.0f + std::abs(want[i]))) return false;
  return true;
}

std::string cpu(const ts::Mesh& m, int pos) {
  const ts::Device& d = m.devices()[pos];
  return (d.kind() == "cuda" ? "GPU " : "CPU ") + std::to_string(d.id());
}

// Block sizes along dim 0 of an array, in mesh order: "2, 2, 1". From the
// sharding, which knows the blocks of every process's devices.
std::string rows_per_device(const ts::Array& a) {
  std::string s;
  for (int pos = 0; pos < a.sharding().mesh().size(); ++pos)
    s += (s.empty() ? "" : ", ") + std::to_string(a.sharding().shard_index(a.shape(), pos)[0].size());
  return s;
}

// ------------------------------------------------------------ 1-d mesh

void one_d(Tour& t, const ts::Mesh& mesh) {
  std::ostream& os = t.os;
  const int n = mesh.size();
  const ts::NamedSharding rows(mesh, ts::P("i"));

  t.step("axis_index: which device am I?", [&] {
    os << "    f = shard_map([] { return reshape(axis_index(\"i\"), {1}); }, mesh, {}, P(\"i\"))\n";
    auto f = ts::shard_map([] { return ts::reshape(ts::axis_index("i"), {1}); }, mesh, {}, ts::P("i"));
    const std::vector<int> idx = ts::process_allgather<int>(f());
    bool ok = static_cast<int>(idx.size()) == n;
    for (int p = 0; p < n && ok; ++p) {
      os << "    " << cpu(mesh, p) << " has axis_index(\"i\") = " << idx[p] << "\n";
      ok = idx[p] == p;
    }
    return ok;
  });

  t.step("psum: add up the local sums", [&] {
    const long len = 10;  // uneven blocks on most meshes: that is allowed
    std::vector<float> host(len);
    for (long i = 0; i < len; ++i) host[i] = static_cast<float>(i + 1);
    ts::Array x = ts::device_put(host, {len}, rows);
    os << "    x = 1..10 over 'i' (elements per device: " << rows_per_device(x) << ")\n"
       << "    body: s = sum(x_local); return (s, psum(s, \"i\"))   out_specs {P(\"i\"), P()}\n";
    std::string types;  // typeof inside the body, from the device at index 0
    auto f = ts::shard_map(
        [&types](ts::Array xl) {
          ts::Array s = ts::sum(xl);
          ts::Array total = ts::psum(s, "i");
          if (ts::axis_index("i").item<int>() == 0)
            types = "typeof(sum(x_local)) = " + ts::typeof(s) + ", typeof(psum(...)) = " + ts::typeof(total);
          return std::tuple{ts::reshape(s, {1}), total};
        },
        mesh, {ts::P("i")}, {ts::P("i"), ts::P()});
    auto [local, total] = f(x);
    const std::vector<float> l = ts::process_allgather<float>(local);
    os << "    local sums per device: " << vec_str(l) << "; psum = " << total.item<float>() << "\n"
       << "    inside the body: " << types << "  ({V:i}: varies over 'i')\n";
    // Host reference: each device's block sum, and the total.
    std::vector<float> want;
    float sum = 0;
    for (int pos = 0; pos < n; ++pos) {
      const ts::Slice block = rows.shard_index(x.shape(), pos)[0];
      float b = 0;
      for (auto i = block.start; i < block.stop; ++i) b += host[static_cast<std::size_t>(i)];
      want.push_back(b);
      sum += b;
    }
    return l == want && total.item<float>() == sum;
  });

  t.step("pmean: normalise by the global mean", [&] {
    // Equal blocks (4 elements per device): the mean of the local means is
    // then the global mean.
    const long len = 4L * n;
    std::vector<float> host(static_cast<std::size_t>(len));
    for (long i = 0; i < len; ++i) host[i] = static_cast<float>((i * 7) % 11);
    ts::Array x = ts::device_put(host, {len}, rows);
    os << "    x: " << len << " values, 4 per device\n"
       << "    body: return x_local - pmean(mean(x_local), \"i\")   out_specs P(\"i\")\n";
    auto f =
        ts::shard_map([](ts::Array xl) { return xl - ts::pmean(ts::mean(xl), "i"); }, mesh, {ts::P("i")}, ts::P("i"));
    ts::Array y = f(x);
    double mu = 0;
    for (float v : host) mu += v;
    mu /= static_cast<double>(len);
    std::vector<float> want;
    for (float v : host) want.push_back(static_cast<float>(v - mu));
    os << "    global mean " << mu << "; after normalising, mean = " << ts::mean(y).item<float>() << "\n";
    return close(ts::process_allgather<float>(y), want);
  });

  t.step("all_gather: every device assembles the full weights", [&] {
    // FSDP style: the weights are stored sharded by rows and gathered just
    // before use. tiled=true concatenates the pieces, which may differ in size.
    const long batch = 2L * n, features = 10, hidden = 3;
    std::vector<float> xh(static_cast<std::size_t>(batch * features)), wh(static_cast<std::size_t>(features * hidden));
    for (std::size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>(i % 5) - 2.0f;
    for (std::size_t i = 0; i < wh.size(); ++i) wh[i] = static_cast<float>(i % 7) * 0.5f;
    ts::Array x = ts::device_put(xh, {batch, features}, rows);
    ts::Array w = ts::device_put(wh, {features, hidden}, rows);
    os << "    w: " << features << " x " << hidden << ", rows per device: " << rows_per_device(w) << "\n"
       << "    body: w_full = all_gather(w_local, \"i\", 0, /*tiled=*/true); return (x_local @ w_full, w_full)\n"
       << "    out_specs {P(\"i\"), P()}: w_full no longer varies over 'i', so P() (replicated) is accepted\n";
    auto f = ts::shard_map(
        [](ts::Array xl, ts::Array wl) {
          ts::Array wf = ts::all_gather(wl, "i", 0, true);
          return std::tuple{ts::matmul(xl, wf), wf};
        },
        mesh, {ts::P("i"), ts::P("i")}, {ts::P("i"), ts::P()});
    auto [y, wf] = f(x, w);
    std::vector<float> want(static_cast<std::size_t>(batch * hidden), 0.0f);
    for (long b = 0; b < batch; ++b)
      for (long h = 0; h < hidden; ++h)
        for (long k = 0; k < features; ++k) want[b * hidden + h] += xh[b * features + k] * wh[k * hidden + h];
    os << "    gathered: " << ts::typeof(wf) << "; y = x @ w: " << ts::typeof(y) << "\n";
    // y is split over the processes: gathered (on every process, so before
    // any test that could skip it). wf is replicated, so every process holds
    // all of it: to_vector reads the local copy.
    const bool y_ok = close(ts::process_allgather<float>(y), want);
    return wf.to_vector<float>() == wh && y_ok;
  });

  t.step("psum_scatter: sum, and keep only my part", [&] {
    // JAX's example: on 4 devices x = [3,1,4,1, 5,9,2,6, 5,3,5,8, 9,7,1,2];
    // the blocks sum to [22, 20, 12, 17] and device k keeps element k. Here
    // every device holds n values (the same digits, repeated), and device k
    // keeps the sum of everyone's k-th value.
    const int digits[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2};
    std::vector<float> host(static_cast<std::size_t>(n) * n);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(digits[i % 16]);
    ts::Array x = ts::device_put(host, {static_cast<long>(host.size())}, rows);
    os << "    body: return psum_scatter(x_local, \"i\", 0, /*tiled=*/true)   out_specs P(\"i\")\n"
       << "    (on 4 devices this is the example in JAX's shard_map guide, giving [22, 20, 12, 17])\n";
    auto f =
        ts::shard_map([](ts::Array xl) { return ts::psum_scatter(xl, "i", 0, true); }, mesh, {ts::P("i")}, ts::P("i"));
    const std::vector<float> got = ts::process_allgather<float>(f(x));
    std::vector<float> want(n, 0.0f);
    for (int p = 0; p < n; ++p)
      for (int k = 0; k < n; ++k) want[k] += host[static_cast<std::size_t>(p) * n + k];
    for (int p = 0; p < n; ++p)
      os << "    " << cpu(mesh, p) << ": before " << vec_str(host, static_cast<std::size_t>(p) * n, n) << ", after ["
         << got[p] << "]\n";
    return got == want;
  });

  t.step("ppermute: pass blocks around a ring", [&] {
    // Device k sends to k+1, the last to the first; a device that receives
    // nothing would get zeros (see finite_difference's halo exchange).
    std::vector<float> host(2 * static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(10 * (i / 2) + i % 2);
    ts::Array x = ts::device_put(host, {2L * n}, rows);
    std::vector<std::pair<int, int>> ring;
    for (int k = 0; k < n; ++k) ring.emplace_back(k, (k + 1) % n);
    auto pair_str = [n](int k) { return "{" + std::to_string(k) + "," + std::to_string((k + 1) % n) + "}"; };
    std::string pairs = pair_str(0);
    if (n > 4)
      pairs += ", " + pair_str(1) + ", ..., " + pair_str(n - 1);
    else
      for (int k = 1; k < n; ++k) pairs += ", " + pair_str(k);
    os << "    body: return ppermute(x_local, \"i\", {" << pairs << "})   out_specs P(\"i\")\n";
    auto f =
        ts::shard_map([ring](ts::Array xl) { return ts::ppermute(xl, "i", ring); }, mesh, {ts::P("i")}, ts::P("i"));
    const std::vector<float> got = ts::process_allgather<float>(f(x));
    std::vector<float> want(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) want[(i + 2) % host.size()] = host[i];
    os << "    before " << vec_str(host) << "\n    after  " << vec_str(got) << "\n";
    return got == want;
  });

  t.step("all_to_all: from row blocks to column blocks", [&] {
    // Each device splits its rows into n column pieces and sends piece j to
    // device j, which stacks what it receives: the array ends up sharded by
    // columns, the same move as ts::reshard(x, P(None, "i")).
    const long r = 2L * n, c = 3L * n;
    std::vector<float> host(static_cast<std::size_t>(r * c));
    for (long i = 0; i < r; ++i)
      for (long j = 0; j < c; ++j) host[i * c + j] = static_cast<float>(100 * i + j);
    ts::Array x = ts::device_put(host, {r, c}, rows);
    os << "    body: return all_to_all(x_local, \"i\", /*split_axis=*/1, /*concat_axis=*/0, /*tiled=*/true)"
       << "   out_specs P(None, \"i\")\n";
    auto f = ts::shard_map([](ts::Array xl) { return ts::all_to_all(xl, "i", 1, 0, true); }, mesh, {ts::P("i")},
                           ts::P(ts::none, "i"));
    ts::Array y = f(x);
    os << "    " << ts::typeof(x) << " -> " << ts::typeof(y) << "\n";
    return ts::process_allgather<float>(y) == host && y.sharding() == ts::NamedSharding(mesh, ts::P(ts::none, "i"));
  });

  t.step("random keys per device: fold_in(key, axis_index)", [&] {
    // Inside a body, arrays are created on this device: a one-device mesh.
    // fold_in takes a uint32, so the index is read with item<int>().
    const ts::Key key = ts::random::key(0);
    os << "    body: k = fold_in(key, axis_index(\"i\").item<int>()); return uniform(k, {3}, f32, <this device>)\n";
    auto f = ts::shard_map(
        [key, mesh] {
          const int me = ts::axis_index("i").item<int>();
          const ts::Mesh here(std::vector<ts::Device>{mesh.devices()[me]}, {1}, {"d"});
          const ts::Key k = ts::random::fold_in(key, static_cast<std::uint32_t>(me));
          return ts::random::uniform(k, {3}, ts::f32, ts::NamedSharding(here, ts::P()));
        },
        mesh, {}, ts::P("i"));
    const std::vector<float> a = ts::process_allgather<float>(f()), b = ts::process_allgather<float>(f());
    // The reference draws on a device of this process, which reads them.
    const ts::Mesh dev0(std::vector<ts::Device>{first_local_device()}, {1}, {"d"});
    bool ok = a == b;  // deterministic: the same numbers on every run
    std::ostringstream s;
    for (int p = 0; p < n; ++p) {
      const std::vector<float> mine(a.begin() + 3 * p, a.begin() + 3 * p + 3);
      s << "    " << cpu(mesh, p) << " (index " << p << "): " << vec_str(mine, 0, 3, 4) << "\n";
      // Reference: the same draw made outside shard_map.
      ts::Array ref = ts::random::uniform(ts::random::fold_in(key, static_cast<std::uint32_t>(p)), {3}, ts::f32,
                                          ts::NamedSharding(dev0, ts::P()));
      ok = ok && ref.to_vector<float>() == mine;
      for (int q = 0; q < p; ++q) ok = ok && a[3 * q] != a[3 * p];  // devices draw different numbers
    }
    os << s.str() << "    a second call draws the same numbers: " << (a == b ? "yes" : "no") << "\n";
    return ok;
  });
}

// ------------------------------------------------------------ 2-d mesh

void two_d(Tour& t, const ts::Mesh& mesh) {
  std::ostream& os = t.os;
  const int ni = mesh.shape()[0], nj = mesh.shape()[1];

  t.step("axis_index on two axes", [&] {
    auto f = ts::shard_map(
        [] {
          return std::tuple{ts::reshape(ts::axis_index("i"), {1, 1}), ts::reshape(ts::axis_index("j"), {1, 1})};
        },
        mesh, {}, {ts::P("i", "j"), ts::P("i", "j")});
    auto [ii, jj] = f();
    const std::vector<int> vi = ts::process_allgather<int>(ii), vj = ts::process_allgather<int>(jj);
    bool ok = true;
    for (int p = 0; p < mesh.size(); ++p) {
      os << (p % nj == 0 ? "    " : "   ") << cpu(mesh, p) << ": (i=" << vi[p] << ", j=" << vj[p] << ")"
         << (p % nj == nj - 1 ? "\n" : "");
      ok = ok && vi[p] == p / nj && vj[p] == p % nj;
    }
    return ok;
  });

  t.step("sharded matmul: x rows over 'i', w columns over 'j'", [&] {
    // Every device holds whole rows of x and whole columns of w, so its block
    // of x @ w is a local product: no communication at all.
    const long m = 2L * ni + 1, k = 4, cols = 2L * nj + 1;
    std::vector<float> xh(static_cast<std::size_t>(m * k)), wh(static_cast<std::size_t>(k * cols));
    for (std::size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>(i % 4) + 1.0f;
    for (std::size_t i = 0; i < wh.size(); ++i) wh[i] = static_cast<float>(i % 3) - 1.0f;
    ts::Array x = ts::device_put(xh, {m, k}, ts::NamedSharding(mesh, ts::P("i", ts::none)));
    ts::Array w = ts::device_put(wh, {k, cols}, ts::NamedSharding(mesh, ts::P(ts::none, "j")));
    os << "    f = shard_map([](Array x, Array w) { return matmul(x, w); }, mesh,\n"
       << "                  {P(\"i\", None), P(None, \"j\")}, P(\"i\", \"j\"))\n";
    auto f = ts::shard_map([](ts::Array xl, ts::Array wl) { return ts::matmul(xl, wl); }, mesh,
                           {ts::P("i", ts::none), ts::P(ts::none, "j")}, ts::P("i", "j"));
    ts::Array y = f(x, w);
    os << "    " << ts::typeof(x) << " @ " << ts::typeof(w) << " -> " << ts::typeof(y) << "; blocks:";
    for (int pos = 0; pos < mesh.size(); ++pos) {
      const std::vector<ts::Slice> block = y.sharding().shard_index(y.shape(), pos);
      os << " " << block[0].size() << "x" << block[1].size();
    }
    os << "\n";
    std::vector<float> want(static_cast<std::size_t>(m * cols), 0.0f);
    for (long a = 0; a < m; ++a)
      for (long b = 0; b < cols; ++b)
        for (long c = 0; c < k; ++c) want[a * cols + b] += xh[a * k + c] * wh[c * cols + b];
    return ts::process_allgather<float>(y) == want;
  });

  t.step("psum over one axis, or over both", [&] {
    // Uneven blocks, none empty (max has no identity to give an empty one).
    const long m = 2L * ni + 1, cols = 3L * nj + 1;
    std::vector<float> host(static_cast<std::size_t>(m * cols));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 9);
    ts::Array x = ts::device_put(host, {m, cols}, ts::NamedSharding(mesh, ts::P("i", "j")));
    os << "    x: " << ts::typeof(x) << "\n"
       << "    body: return (psum(sum(x_local, 1), \"j\"), psum(sum(x_local), {\"i\", \"j\"}),"
          " pmax(max(x_local), {\"i\", \"j\"}))\n"
       << "    out_specs {P(\"i\"), P(), P()}: row sums stay split over 'i'\n";
    auto f = ts::shard_map(
        [](ts::Array xl) {
          return std::tuple{ts::psum(ts::sum(xl, 1), "j"), ts::psum(ts::sum(xl), {"i", "j"}),
                            ts::pmax(ts::max(xl), {"i", "j"})};
        },
        mesh, {ts::P("i", "j")}, {ts::P("i"), ts::P(), ts::P()});
    auto [row_sums, total, biggest] = f(x);
    std::vector<float> want(static_cast<std::size_t>(m), 0.0f);
    float all = 0, top = host[0];
    for (long a = 0; a < m; ++a)
      for (long b = 0; b < cols; ++b) {
        want[a] += host[a * cols + b];
        all += host[a * cols + b];
        top = std::max(top, host[a * cols + b]);
      }
    const std::vector<float> sums = ts::process_allgather<float>(row_sums);  // split over 'i'
    os << "    row sums " << vec_str(sums) << ", total " << total.item<float>() << ", max " << biggest.item<float>()
       << "\n";
    return sums == want && total.item<float>() == all && biggest.item<float>() == top;
  });
}

// ------------------------------------------------- errors instead of hangs

// Runs `f`, which must throw; returns its message ("" if it did not throw)
// and the seconds it took.
template <class F>
std::pair<std::string, double> error_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    f();
  } catch (const std::exception& e) {
    what = e.what();
  }
  return {what, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void errors(Tour& t, const ts::Mesh& mesh) {
  std::ostream& os = t.os;
  const int n = mesh.size();
  const ts::Array x = ts::device_put(std::vector<float>(2 * static_cast<std::size_t>(n), 1.0f), {2L * n},
                                     ts::NamedSharding(mesh, ts::P("i")));

  t.step("out_specs must not claim replication over a varying axis", [&] {
    auto f = ts::shard_map([](ts::Array xl) { return ts::sum(xl); }, mesh, {ts::P("i")}, ts::P());
    auto [what, s] = error_of([&] { f(x); });
    os << "    shard_map(sum(x_local), ..., out_specs P()) raised:\n      " << what << "\n";
    return contains(what, "varies over 'i'");
  });
  if (n < 2) {
    os << "\n  (the steps where devices disagree need at least 2 devices)\n";
    return;
  }

  t.step("an exception on one device unblocks the others at once", [&] {
    auto f = ts::shard_map(
        [](ts::Array xl) {
          if (ts::axis_index("i").item<int>() == ts::axis_size("i") - 1) throw ts::Error("[my_body] bad block");
          return ts::psum(xl, "i");  // the others wait here until the failure reaches them
        },
        mesh, {ts::P("i")}, ts::P());
    auto [what, s] = error_of([&] { f(x); });
    os << "    the last device throws while the others wait in psum; " << std::lround(s * 1e6)
       << " us later the caller gets:\n      " << what << "\n";
    // With several processes, those that do not hold the last device hear of
    // its failure: their error names it and quotes its message.
    if (ts::process_count() > 1 && !mesh.devices()[n - 1].is_local())
      return contains(what, "[my_body] bad block") && s < 5.0;
    return what == "[my_body] bad block" && s < 5.0;
  });

  t.step("mismatched collectives are reported, not combined", [&] {
    auto f = ts::shard_map(
        [](ts::Array xl) {
          if (ts::axis_index("i").item<int>() == 0) return ts::psum(xl, "i");
          return ts::all_gather(xl, "i", 0, true);
        },
        mesh, {ts::P("i")}, ts::P(), {.check_vma = false});
    auto [what, s] = error_of([&] { f(x); });
    os << "    device 0 calls psum, the others all_gather:\n      " << what << "\n";
    return contains(what, "mismatched collectives");
  });

  t.step("a collective that not every device reaches times out", [&] {
    const double saved = ts::config::collective_timeout();
    ts::config::set_collective_timeout(0.2);
    auto f = ts::shard_map(
        [](ts::Array xl) {
          if (ts::axis_index("i").item<int>() == 0) return xl;  // device 0 skips the psum
          return ts::psum(xl, "i");
        },
        mesh, {ts::P("i")}, ts::P("i"));
    auto [what, s] = error_of([&] { f(x); });
    ts::config::set_collective_timeout(saved);
    os << "    with ts::config::set_collective_timeout(0.2), device 0 skips a psum:\n      " << what << "\n";
    // A process that does not hold device 0 waits for that device's process.
    const ts::Device skipper = mesh.devices()[0];
    return contains(what, "timed out") &&
           (contains(what, std::string("missing ") + (skipper.kind() == "cuda" ? "CUDA device " : "CPU ") +
                               std::to_string(skipper.id())) ||
            (!skipper.is_local() && contains(what, "missing process " + std::to_string(skipper.process_index()))));
  });

  t.step("the runtime keeps working after those errors", [&] {
    auto f = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(xl), "i"); }, mesh, {ts::P("i")}, ts::P());
    const float total = f(x).item<float>();
    os << "    psum(sum(x_local)) = " << total << "\n";
    return total == 2.0f * static_cast<float>(n);
  });
}

}  // namespace

int collectives_tour(std::ostream& os, int* checks) {
  Tour t{os};
  const int n = ts::device_count();
  const std::vector<int> g = grid_of(n);
  os << "Manual mode: ts::shard_map(f, mesh, in_specs, out_specs) runs f once per device, on that device's\n"
        "block of each input; collectives (psum, all_gather, ppermute, ...) combine values across the\n"
        "devices of a mesh axis; out_specs say how the per-device results form the global output.\n";

  const ts::Mesh line = ts::make_mesh({n}, {"i"});
  os << "\nOn a 1-d mesh: " << line.str() << "\n";
  one_d(t, line);

  const ts::Mesh grid = ts::make_mesh(g, {"i", "j"});
  os << "\nOn a 2-d mesh: " << grid.str() << "\n";
  two_d(t, grid);

  os << "\nErrors instead of hangs\n";
  errors(t, line);

  os << "\n" << t.checks - t.failures << " of " << t.checks << " checks ok\n";
  if (checks) *checks = t.checks;
  return t.failures;
}

}  // namespace examples
