// The C++ side of bench/python/overhead.py: the time of one small call from
// C++, to set the Python front end's overhead against. Prints one JSON
// object: seconds per call of
//   eager_1dev      x + 1 on 16 f32 on one device
//   eager_ndev      x + 1 on 16 f32 sharded over every device
//   jit_cached_1dev a cached jit call of x + 1 on 16 f32 on one device
#include <cstdio>
#include <vector>

#include <tessera/tessera.hpp>

#include "bench_util.hpp"

namespace ts = tessera;
namespace tb = tessera::bench;

namespace {
// Median over 7 rounds of the mean time of `iters` calls.
template <class F>
double per_call(int iters, F&& f) {
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) {
    const double t0 = tb::now_seconds();
    for (int i = 0; i < iters; ++i) f();
    rounds.push_back((tb::now_seconds() - t0) / iters);
  }
  return tb::median(rounds);
}
}  // namespace

int main() {
  const auto devs = ts::devices();
  const ts::Mesh one(std::vector<ts::Device>{devs[0]}, {1}, {"x"});
  const ts::Mesh all = ts::make_mesh({static_cast<int>(devs.size())}, {"x"});
  const ts::Array x1 = ts::zeros({16}, ts::f32, ts::NamedSharding(one, ts::P()));
  const ts::Array xn = ts::zeros({16}, ts::f32, ts::NamedSharding(all, ts::P("x")));
  auto tiny = ts::jit([](ts::Array v) { return v + 1.0f; });
  tiny(x1).block_until_ready();
  const int iters = 20000;
  const double e1 = per_call(iters, [&] { (void)(x1 + 1.0f); });
  const double en = per_call(iters, [&] { (void)(xn + 1.0f); });
  const double j1 = per_call(iters, [&] { (void)tiny(x1); });
  std::printf("{\"devices\": %zu, \"eager_1dev\": %.9g, \"eager_ndev\": %.9g, \"jit_cached_1dev\": %.9g}\n",
              devs.size(), e1, en, j1);
  return 0;
}
