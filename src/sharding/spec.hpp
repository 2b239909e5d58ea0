// Helpers on partition specs: resolving a user's spec, per-dim axis lists.
#pragma once

#include <string>
#include <vector>

#include "tessera/sharding.hpp"

namespace tessera::detail {


/// True when any mesh axis named by the spec is Explicit.
bool has_explicit_axes(const NamedSharding& s);
/// True when any axis of the mesh is Explicit.
bool mesh_is_explicit(const Mesh& mesh);
/// A NamedSharding on `mesh` from an out_sharding spec, validated for `rank`
/// with errors naming `op`.
NamedSharding resolve_spec(const Mesh& mesh, const PartitionSpec& spec, int rank, const char* op);
/// The spec of `s` as per-dim axis lists, padded with empty lists to `rank`.
std::vector<std::vector<std::string>> spec_axes(const NamedSharding& s, int rank);
/// A spec entry for `axes`: none, one axis written plainly, or a group.
PartitionSpec::Entry entry_of(const std::vector<std::string>& axes);
/// A spec from per-dim axis lists (single axes written plainly).
PartitionSpec make_spec(const std::vector<std::vector<std::string>>& dims);


/// `axes` in mesh order: a group over them ranks members in mesh order, the
/// order the whole-mesh reduction combines in (bitwise the same results).
std::vector<std::string> in_mesh_order(const Mesh& mesh, const std::vector<std::string>& axes);

}  // namespace tessera::detail
