// A neural-network layer from the SPMD tutorial: sigmoid(x @ w + b) with the
// batch sharded over one mesh axis and the output features over the other,
// written four ways: automatic (global view), compiled (jit), explicit
// (sharding in the types) and manual (shard_map: per-device code on local
// blocks).
//
// Under mpirun the meshes span every process's devices: results are read
// with ts::process_allgather (on every process), the one-device reference
// runs on a device of each process, and each verdict is agreed.
#include "mlp_layer.hpp"

#include <ostream>
#include <string>
#include <tessera/tessera.hpp>

#include "common/processes.hpp"

namespace ts = tessera;

namespace examples {

namespace {
// Two axes for an n-device mesh: (n/2, 2) when even, else (n, 1).
std::vector<int> grid_of(int n) { return n % 2 == 0 && n > 1 ? std::vector<int>{n / 2, 2} : std::vector<int>{n, 1}; }
}  // namespace

int mlp_layer(std::ostream& os, long batch, long features) {
  const int ndev = ts::device_count();
  const auto g = grid_of(ndev);
  int failures = 0;
  ts::Key key = ts::random::key(42);
  // Reference on one device (of this process: it reads the result).
  ts::Mesh one(std::vector<ts::Device>{first_local_device()}, {1, 1}, {"i", "j"});
  auto make = [&](const ts::Mesh& m, ts::PartitionSpec xs, ts::PartitionSpec ws, ts::PartitionSpec bs) {
    ts::Array x = ts::random::normal(key, {batch, features}, ts::f32, ts::NamedSharding(m, xs));
    ts::Array w = ts::random::normal(ts::random::fold_in(key, 1), {features, features}, ts::f32,
                                     ts::NamedSharding(m, ws)) * 0.05f;
    ts::Array b = ts::random::uniform(ts::random::fold_in(key, 2), {features}, ts::f32, ts::NamedSharding(m, bs));
    return std::tuple{x, w, b};
  };
  auto [x1, w1, b1] = make(one, ts::P(), ts::P(), ts::P());
  const std::vector<float> want = ts::sigmoid(ts::matmul(x1, w1) + b1).to_vector<float>();
  // y spans every process's devices: every process gathers it.
  auto close = [&](const ts::Array& y) {
    auto got = ts::process_allgather<float>(y);
    for (size_t i = 0; i < got.size(); ++i)
      if (std::abs(got[i] - want[i]) > 1e-5f) return false;
    return got.size() == want.size();
  };
  os << "sigmoid(x @ w + b): x " << batch << "x" << features << " (rows over 'i'), w " << features << "x"
     << features << " (columns over 'j') on a " << g[0] << " x " << g[1] << " mesh\n";
  {
    ts::Mesh mesh = ts::make_mesh(g, {"i", "j"});
    auto [x, w, b] = make(mesh, ts::P("i", ts::none), ts::P(ts::none, "j"), ts::P("j"));
    ts::Array y;
    auto ex = ts::explain([&] { y = ts::sigmoid(ts::matmul(x, w) + b); });
    const bool ok = on_every_process(close(y));
    failures += ok ? 0 : 1;
    os << "  automatic: " << ts::typeof(x) << " @ " << ts::typeof(w) << " -> " << ts::typeof(y) << ", moved "
       << ts::format_bytes(ex.bytes_moved()) << " ... " << (ok ? "ok" : "FAILED") << "\n";
  }
  {
    // Under jit: traced once, compiled to one matmul kernel and one fused
    // loop for the bias and the sigmoid; each call is one task per device.
    ts::Mesh mesh = ts::make_mesh(g, {"i", "j"});
    auto [x, w, b] = make(mesh, ts::P("i", ts::none), ts::P(ts::none, "j"), ts::P("j"));
    auto layer = ts::jit([](ts::Array xx, ts::Array ww, ts::Array bb) { return ts::sigmoid(ts::matmul(xx, ww) + bb); },
                         {}, "layer");
    ts::Array y = layer(x, w, b);
    const std::string text = layer.lower(x, w, b).as_text();
    const bool fused = text.find("fused loop [add, sigmoid]") != std::string::npos;
    const bool ok = on_every_process(close(y) && y.sharding() == ts::NamedSharding(mesh, ts::P("i", "j")) && fused &&
                                     layer.cache_size() == 1);
    failures += ok ? 0 : 1;
    os << "  jit:       " << text.substr(text.find("compiled:"), text.find('\n', text.find("compiled:")) -
                                                                       text.find("compiled:"))
       << " (matmul kernel, fused add+sigmoid), " << ts::typeof(y) << " ... " << (ok ? "ok" : "FAILED") << "\n";
  }
  {
    ts::Mesh mesh = ts::make_mesh(g, {"i", "j"}, {ts::AxisType::Explicit, ts::AxisType::Explicit});
    auto [x, w, b] = make(mesh, ts::P("i", ts::none), ts::P(ts::none, "j"), ts::P("j"));
    ts::Array h = ts::matmul(x, w);  // the output type is known at once
    os << "  explicit:  typeof(x @ w) = " << ts::typeof(h);
    ts::Array y = ts::sigmoid(h + b);
    const bool ok = on_every_process(close(y) && ts::typeof(y) == ts::typeof(h));
    failures += ok ? 0 : 1;
    os << ", typeof(sigmoid(x @ w + b)) = " << ts::typeof(y) << " ... " << (ok ? "ok" : "FAILED") << "\n";
  }
  {
    // Manual mode: the body sees one device's blocks, x_local (rows of x)
    // and w_local, b_local (columns of w and b), and its result is that
    // device's block of y. No collective is needed.
    ts::Mesh mesh = ts::make_mesh(g, {"i", "j"});
    auto [x, w, b] = make(mesh, ts::P("i", ts::none), ts::P(ts::none, "j"), ts::P("j"));
    std::string local_types;  // from the device at mesh coordinates (0, 0)
    auto layer = ts::shard_map(
        [&local_types](ts::Array xl, ts::Array wl, ts::Array bl) {
          ts::Array yl = ts::sigmoid(ts::matmul(xl, wl) + bl);
          if (ts::axis_index("i").item<int>() == 0 && ts::axis_index("j").item<int>() == 0)
            local_types = ts::typeof(xl) + " @ " + ts::typeof(wl) + " + " + ts::typeof(bl) + " -> " + ts::typeof(yl);
          return yl;
        },
        mesh, {ts::P("i", ts::none), ts::P(ts::none, "j"), ts::P("j")}, ts::P("i", "j"));
    ts::Array y = layer(x, w, b);
    const bool ok = on_every_process(close(y) && y.sharding() == ts::NamedSharding(mesh, ts::P("i", "j")));
    failures += ok ? 0 : 1;
    os << "  shard_map: on device (0, 0) " << local_types << ", assembled " << ts::typeof(y) << " ... "
       << (ok ? "ok" : "FAILED") << "\n";
  }
  return failures;
}

}  // namespace examples
