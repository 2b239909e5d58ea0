// The plasma code's case (DESC): a Jacobian of residuals with respect to a
// few dozen parameters, over thousands of grid rows. Its authors split the
// rows over devices and, on each device, chunk a vmap over its rows so the
// forward-mode intermediates fit in memory; with JAX they must also handle
// the rows that do not divide by the devices or by the chunk. Here the rows
// are sharded as they come (4099 of them), vmap's chunk_size makes each
// device walk its own rows a chunk at a time, and the remainders need
// nothing.
//
// Under mpirun the rows are sharded over every process's devices: the
// Jacobian and the residuals are read with ts::process_allgather (on every
// process), memory is reported for this process's devices, and each verdict
// is agreed between the processes.
#include "chunked_jacobian.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <ostream>
#include <vector>
#include <tessera/tessera.hpp>

#include "common/processes.hpp"

namespace ts = tessera;

namespace examples {

namespace {

// One row's residuals: K values from the row's K nodes x and the
// parameters p. The row's basis B[k, j] = mean_l cos(x[k] f[j] s[l]) is a
// quadrature over L points: a (K, L, N) intermediate per row, the kind of
// transform that makes a real code's per-row memory dwarf its Jacobian.
ts::Array residual(const ts::Array& p, const ts::Array& x, const ts::Array& freq, const ts::Array& nodes) {
  const ts::Array phase = ts::expand_dims(ts::expand_dims(x, 1) * ts::expand_dims(nodes, 0), 2) *
                          ts::reshape(freq, {1, 1, freq.size()});  // (K, L, N)
  const ts::Array basis = ts::mean(ts::cos(phase), {1});          // (K, N)
  return ts::tanh(ts::matmul(basis, p)) + 0.1 * x * ts::sum(p * p);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int chunked_jacobian(std::ostream& os, long rows, int params) {
  const int ndev = ts::device_count();
  const ts::Mesh mesh = ts::make_mesh({ndev}, {"x"});
  const ts::NamedSharding by_rows(mesh, ts::P("x")), rep(mesh, ts::P());
  constexpr int K = 8;
  // Grid nodes, made block by block on the devices that hold the rows.
  const ts::Array x = ts::make_array_from_callback({rows, K}, ts::f64, by_rows, [&](const std::vector<ts::Slice>& idx) {
    std::vector<double> v;
    for (auto i = idx[0].start; i < idx[0].stop; ++i)
      for (auto k = idx[1].start; k < idx[1].stop; ++k) v.push_back(std::cos(0.37 * static_cast<double>(i) + 0.91 * k));
    return v;
  });
  std::vector<double> hp(static_cast<size_t>(params));
  for (int j = 0; j < params; ++j) hp[j] = 0.2 * std::sin(1.3 * j + 0.5);
  const ts::Array p = ts::device_put(hp, {params}, rep);
  const ts::Array freq = ts::arange(1, params + 1, 1, ts::f64, rep) * 0.5;
  const ts::Array nodes = ts::linspace(0.5, 1.5, 32, ts::f64, rep);

  // d residual(p, row) / d p for one row: (K, N); the rows mapped over.
  auto row_jacobian = [&](ts::Array p, ts::Array xr) {
    return ts::jacfwd([&](const ts::Array& q) { return residual(q, xr, freq, nodes); })(p);
  };
  auto jacobian = [&](long chunk) {
    return ts::vmap(row_jacobian, {.in_axes = {ts::not_mapped, 0}, .chunk_size = chunk})(p, x);
  };

  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    ok = on_every_process(ok);
    os << "  " << (ok ? "ok   " : "FAIL ") << what << "\n";
    if (!ok) ++failures;
  };
  os << "Jacobian of " << rows << " x " << K << " residuals with respect to " << params << " parameters (f64), rows over "
     << ndev << " devices (" << rows / ndev << "-" << (rows + ndev - 1) / ndev << " rows each)\n";

  const ts::Array whole = jacobian(0);
  check(whole.shape() == ts::Shape({rows, K, params}) && whole.sharding().spec()[0].axes() == std::vector<std::string>{"x"},
        "J is " + ts::typeof(whole) + ", rows sharded like the grid");

  // Central differences of the whole residual, one parameter at a time.
  auto all_residuals = [&](const ts::Array& q) {
    return ts::vmap([&](ts::Array xr) { return residual(q, xr, freq, nodes); })(x);
  };
  const double h = 1e-6;
  const auto j_host = ts::process_allgather<double>(whole);
  double err = 0;
  for (int j = 0; j < params; ++j) {
    auto up = hp, down = hp;
    up[j] += h;
    down[j] -= h;
    const auto ru = ts::process_allgather<double>(all_residuals(ts::device_put(up, {params}, rep)));
    const auto rd = ts::process_allgather<double>(all_residuals(ts::device_put(down, {params}, rep)));
    for (size_t e = 0; e < ru.size(); ++e)
      err = std::max(err, std::abs((ru[e] - rd[e]) / (2 * h) - j_host[e * params + j]));
  }
  std::ostringstream es;
  es << std::scientific << std::setprecision(1) << err;
  check(err < 1e-6, "matches central finite differences (max error " + es.str() + ")");

  // Two chunk sizes: each device walks its rows c at a time (its last chunk
  // shorter). Peak memory per device grows with c. A process sees the memory
  // of its own devices only.
  std::vector<ts::Device> mine;
  for (const auto& d : mesh.devices())
    if (d.is_local()) mine.push_back(d);
  for (long c : {16L, 128L}) {
    for (const auto& d : mine) ts::reset_peak_memory(d);
    std::int64_t base = 0;
    for (const auto& d : mine) base = std::max(base, ts::memory_stats(d).bytes_in_use);
    const auto t0 = std::chrono::steady_clock::now();
    const ts::Array j = jacobian(c);
    j.block_until_ready();
    const double t = seconds_since(t0);
    std::int64_t peak = 0;
    for (const auto& d : mine) peak = std::max(peak, ts::memory_stats(d).peak_bytes_in_use);
    os << "  chunk " << std::setw(3) << c << ": " << std::fixed << std::setprecision(1) << t * 1e3
       << " ms, peak " << std::setprecision(2) << static_cast<double>(peak - base) / (1 << 20)
       << " MiB per device above the inputs (J's block: " << static_cast<double>(j.nbytes()) / ndev / (1 << 20)
       << " MiB)\n";
    check(ts::process_allgather<double>(j) == j_host,
          "chunk " + std::to_string(c) + " equals the unchunked Jacobian bitwise");
  }
  return failures;
}

}  // namespace examples
