// Group membership on a mesh, the same for every backend.
#include "comm/communicator.hpp"

#include <algorithm>
#include <utility>

#include "comm/process.hpp"
#include "comm/staged.hpp"
#include "comm/threads/threads.hpp"

namespace tessera::detail {

std::vector<int> group_of(const Mesh& mesh, const std::vector<std::string>& axes, int pos) {
  const std::vector<int> c = mesh.coords(pos);
  std::vector<bool> reduced(mesh.ndim(), false);
  for (const auto& a : axes) reduced[mesh.axis_index(a)] = true;
  std::vector<int> members;
  for (int q = 0; q < mesh.size(); ++q) {
    const std::vector<int> cq = mesh.coords(q);
    bool same = true;
    for (int i = 0; i < mesh.ndim() && same; ++i) same = reduced[i] || cq[i] == c[i];
    if (same) members.push_back(q);
  }
  return members;
}

std::vector<int> members_of(const Mesh& mesh, const std::vector<std::string>& axes, int pos) {
  // Every position of the mesh-order group, keyed by the mixed-radix index of
  // its coordinates on the named axes in the order they are named.
  std::vector<std::pair<int, int>> ranked;  // (index, position)
  for (int q : group_of(mesh, axes, pos)) {
    const std::vector<int> cq = mesh.coords(q);
    int idx = 0;
    for (const auto& a : axes) {
      const int i = mesh.axis_index(a);
      idx = idx * mesh.shape()[i] + cq[i];
    }
    ranked.emplace_back(idx, q);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<int> members;
  for (const auto& [idx, q] : ranked) members.push_back(q);
  return members;
}

Communicator& communicator_for(const Mesh& mesh) {
  const Runtime& rt = Runtime::get();
  // Decided from the mesh alone, the same on every process (programs are
  // numbered alike everywhere): a mesh of one process's devices is that
  // process's own, even as seen from the others.
  if (rt.process_count() > 1) {
    const int first = rt.process_of(mesh.devices()[0].id());
    for (const Device& d : mesh.devices())
      if (rt.process_of(d.id()) != first)
        return rt.platform() == Platform::Cuda ? staged_on_host(cross_process_communicator())
                                               : cross_process_communicator();
  }
  return threads_communicator();
}

std::string axes_text(const std::vector<std::string>& axes) {
  if (axes.size() == 1) return "'" + axes[0] + "'";
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + axes[i] + "'";
  return s + ")";
}

}  // namespace tessera::detail
