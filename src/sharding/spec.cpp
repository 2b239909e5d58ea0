#include "sharding/spec.hpp"

#include "core/check_spec.hpp"

namespace tessera::detail {

bool has_explicit_axes(const NamedSharding& s) {
  const Mesh& m = s.mesh();
  for (const auto& e : s.spec().entries())
    for (const auto& a : e.axes())
      if (m.axis_types()[m.axis_index(a)] == AxisType::Explicit) return true;
  return false;
}

bool mesh_is_explicit(const Mesh& mesh) {
  for (auto t : mesh.axis_types())
    if (t == AxisType::Explicit) return true;
  return false;
}

NamedSharding resolve_spec(const Mesh& mesh, const PartitionSpec& spec, int rank, const char* op) {
  check_spec(mesh, spec, op);
  NamedSharding s(mesh, spec);
  s.check_rank(rank, op);
  return s;
}

std::vector<std::vector<std::string>> spec_axes(const NamedSharding& s, int rank) {
  std::vector<std::vector<std::string>> out(rank);
  for (int d = 0; d < rank; ++d) out[d] = s.spec()[d].axes();
  return out;
}

PartitionSpec::Entry entry_of(const std::vector<std::string>& axes) {
  if (axes.empty()) return PartitionSpec::Entry(none);
  if (axes.size() == 1) return PartitionSpec::Entry(axes[0]);
  return PartitionSpec::Entry(axes);
}

PartitionSpec make_spec(const std::vector<std::vector<std::string>>& dims) {
  std::vector<PartitionSpec::Entry> entries;
  size_t last = 0;
  for (size_t d = 0; d < dims.size(); ++d)
    if (!dims[d].empty()) last = d + 1;
  for (size_t d = 0; d < last; ++d) entries.push_back(entry_of(dims[d]));
  return PartitionSpec(entries);
}

std::vector<std::string> in_mesh_order(const Mesh& mesh, const std::vector<std::string>& axes) {
  std::vector<std::string> out;
  for (const auto& a : mesh.axis_names())
    if (std::find(axes.begin(), axes.end(), a) != axes.end()) out.push_back(a);
  return out;
}

}  // namespace tessera::detail
