// Uses the installed headers and library the way the README shows.
#include <tessera/tessera.hpp>

#include <iostream>

namespace ts = tessera;

int main() {
  ts::Mesh mesh = ts::make_mesh({2, 2}, {"x", "y"});
  std::vector<float> host(10 * 8);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  ts::Array a = ts::device_put(host, {10, 8}, ts::NamedSharding(mesh, ts::P("x", "y")));
  ts::Array b = ts::reshard(a, ts::P(ts::none, "x"));
  if (b.to_vector<float>() != host || ts::typeof(b) != "f32[10,8@x]") return 1;
  std::cout << ts::typeof(a) << " -> " << ts::typeof(b) << "\nconsumer ok\n";
  return 0;
}
