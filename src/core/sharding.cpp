// Partition specs, named shardings and the layout rule.
#include "tessera/sharding.hpp"

#include <algorithm>
#include <set>

#include "core/check_spec.hpp"
#include "tessera/error.hpp"

namespace tessera {

// ------------------------------------------------------------- layout rule
// The one place the balanced-block rule lives; everything else calls these.

namespace {

// Out of line so the checks on the layout functions cost a compare and a
// not-taken branch each; they run per device per dim, never per element.
[[noreturn]] void bad_block_args(const char* op, std::int64_t n, std::int64_t k, std::int64_t c) {
  const std::string args = " (n=" + std::to_string(n) + ", k=" + std::to_string(k) + ", c=" + std::to_string(c) + ")";
  if (n < 0) throw ShapeError(std::string("[") + op + "] expected a dimension size n >= 0, got n=" + std::to_string(n) + args);
  if (k < 1) throw ShardingError(std::string("[") + op + "] expected a number of parts k >= 1, got k=" + std::to_string(k) + args);
  throw ShardingError(std::string("[") + op + "] expected a part index c in [0, " + std::to_string(k) + "), got c=" +
                      std::to_string(c) + args);
}

inline void check_block_args(const char* op, std::int64_t n, std::int64_t k, std::int64_t c) {
  if (n < 0 || k < 1 || c < 0 || c >= k) [[unlikely]]
    bad_block_args(op, n, k, c);
}

// The rule itself, on arguments already checked.
inline std::int64_t size_of_block(std::int64_t n, std::int64_t k, std::int64_t c) { return n / k + (c < n % k ? 1 : 0); }
inline std::int64_t start_of_block(std::int64_t n, std::int64_t k, std::int64_t c) {
  return c * (n / k) + std::min(c, n % k);
}

}  // namespace

std::int64_t block_size(std::int64_t n, std::int64_t k, std::int64_t c) {
  check_block_args("block_size", n, k, c);
  return size_of_block(n, k, c);
}

std::int64_t block_start(std::int64_t n, std::int64_t k, std::int64_t c) {
  check_block_args("block_start", n, k, c);
  return start_of_block(n, k, c);
}

Slice block_slice(std::int64_t n, std::int64_t k, std::int64_t c) {
  check_block_args("block_slice", n, k, c);
  const std::int64_t s = start_of_block(n, k, c);
  return {s, s + size_of_block(n, k, c)};
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// ----------------------------------------------------------- PartitionSpec

std::string PartitionSpec::Entry::str() const {
  if (axes_.empty()) return "None";
  if (!grouped_) return "'" + axes_[0] + "'";
  std::string s = "(";
  for (size_t i = 0; i < axes_.size(); ++i) s += (i ? ", '" : "'") + axes_[i] + "'";
  if (axes_.size() == 1) s += ",";
  return s + ")";
}

PartitionSpec::PartitionSpec(std::vector<Entry> entries, std::vector<std::string> unreduced)
    : entries_(std::move(entries)), unreduced_(std::move(unreduced)) {}

const PartitionSpec::Entry& PartitionSpec::operator[](int dim) const {
  static const Entry kNone;
  return dim >= 0 && dim < size() ? entries_[dim] : kNone;
}

std::string PartitionSpec::str() const {
  std::string s = "PartitionSpec(";
  for (size_t i = 0; i < entries_.size(); ++i) s += (i ? ", " : "") + entries_[i].str();
  if (entries_.size() == 1 && unreduced_.empty()) s += ",";  // as Python prints a one-element tuple
  if (!unreduced_.empty()) {
    s += entries_.empty() ? "unreduced={" : ", unreduced={";
    for (size_t i = 0; i < unreduced_.size(); ++i) s += (i ? ", '" : "'") + unreduced_[i] + "'";
    s += "}";
  }
  return s + ")";
}

bool PartitionSpec::operator==(const PartitionSpec& o) const {
  int n = std::max(size(), o.size());
  for (int i = 0; i < n; ++i)
    if (!((*this)[i] == o[i])) return false;
  auto a = unreduced_, b = o.unreduced_;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

std::size_t PartitionSpec::hash() const {
  // Trailing none entries do not count, matching operator==.
  int last = size();
  while (last > 0 && entries_[last - 1].is_none()) --last;
  std::size_t h = 0;
  auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (int i = 0; i < last; ++i) {
    mix(entries_[i].axes().size());
    for (const auto& a : entries_[i].axes()) mix(std::hash<std::string>()(a));
  }
  auto u = unreduced_;
  std::sort(u.begin(), u.end());
  for (const auto& a : u) mix(std::hash<std::string>()(a) * 31);
  return h;
}

using E = PartitionSpec::Entry;
PartitionSpec P() { return PartitionSpec(); }
PartitionSpec P(E e0) { return PartitionSpec({e0}); }
PartitionSpec P(E e0, E e1) { return PartitionSpec({e0, e1}); }
PartitionSpec P(E e0, E e1, E e2) { return PartitionSpec({e0, e1, e2}); }
PartitionSpec P(E e0, E e1, E e2, E e3) { return PartitionSpec({e0, e1, e2, e3}); }
PartitionSpec P(E e0, E e1, E e2, E e3, E e4) { return PartitionSpec({e0, e1, e2, e3, e4}); }
PartitionSpec P(E e0, E e1, E e2, E e3, E e4, E e5) { return PartitionSpec({e0, e1, e2, e3, e4, e5}); }

// ----------------------------------------------------------- NamedSharding

namespace detail {
void check_spec(const Mesh& mesh, const PartitionSpec& spec, const char* op) {
  std::set<std::string> used;
  auto check_axis = [&](const std::string& a) {
    if (mesh.axis_index(a) < 0) {
      std::string names;
      for (const auto& n : mesh.axis_names()) names += (names.empty() ? "'" : ", '") + n + "'";
      throw ShardingError(std::string("[") + op + "] " + spec.str() + " names axis '" + a +
                          "', which is not in the mesh (axes: " + names + ")");
    }
    if (!used.insert(a).second)
      throw ShardingError(std::string("[") + op + "] " + spec.str() + " uses mesh axis '" + a +
                          "' more than once; each axis may shard at most one dimension");
  };
  for (const auto& e : spec.entries())
    for (const auto& a : e.axes()) check_axis(a);
  for (const auto& a : spec.unreduced()) check_axis(a);
}
}  // namespace detail

NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec) : mesh_(std::move(mesh)), spec_(std::move(spec)) {
  detail::check_spec(mesh_, spec_, "NamedSharding");
}

void NamedSharding::check_pos(int pos, const char* op) const {
  if (pos < 0 || pos >= mesh_.size()) [[unlikely]]
    throw ShardingError(std::string("[") + op + "] expected a mesh position in [0, " + std::to_string(mesh_.size()) +
                        "), got " + std::to_string(pos) + " (mesh " + mesh_.str() + ")");
}

void NamedSharding::check_dim(int dim, const char* op) const {
  if (dim < 0) [[unlikely]]
    throw ShardingError(std::string("[") + op + "] expected a dimension >= 0, got " + std::to_string(dim));
}

void NamedSharding::check_shape(const Shape& shape, const char* op) const {
  if (static_cast<int>(shape.size()) < spec_.size()) [[unlikely]]
    throw ShardingError(std::string("[") + op + "] shape " + shape_str(shape) + " has rank " +
                        std::to_string(shape.size()) + " but " + spec_.str() + " has " + std::to_string(spec_.size()) +
                        " entries");
  for (auto n : shape)
    if (n < 0) [[unlikely]]
      throw ShapeError(std::string("[") + op + "] expected dimension sizes >= 0, got shape " + shape_str(shape));
}

int NamedSharding::num_parts(int dim) const {
  check_dim(dim, "num_parts");
  int k = 1;
  for (const auto& a : spec_[dim].axes()) k *= mesh_.axis_size(a);
  return k;
}

int NamedSharding::part_index(int dim, int pos) const {
  check_dim(dim, "part_index");
  check_pos(pos, "part_index");
  const auto& axes = spec_[dim].axes();
  if (axes.empty()) return 0;
  std::vector<int> c = mesh_.coords(pos);
  int idx = 0;
  for (const auto& a : axes) {
    int ai = mesh_.axis_index(a);
    idx = idx * mesh_.shape()[ai] + c[ai];
  }
  return idx;
}

std::vector<Slice> NamedSharding::shard_index(const Shape& shape, int pos) const {
  check_shape(shape, "shard_index");
  check_pos(pos, "shard_index");
  std::vector<Slice> idx(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    idx[d] = block_slice(shape[d], num_parts(static_cast<int>(d)), part_index(static_cast<int>(d), pos));
  return idx;
}

Shape NamedSharding::shard_shape(const Shape& shape, int pos) const {
  check_shape(shape, "shard_shape");
  check_pos(pos, "shard_shape");
  Shape s(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    s[d] = block_size(shape[d], num_parts(static_cast<int>(d)), part_index(static_cast<int>(d), pos));
  return s;
}

bool NamedSharding::is_fully_replicated() const {
  for (const auto& e : spec_.entries())
    for (const auto& a : e.axes())
      if (mesh_.axis_size(a) > 1) return false;
  return true;
}

void NamedSharding::check_rank(int rank, const char* op) const {
  if (!spec_.unreduced().empty())
    throw ShardingError(std::string("[") + op + "] " + spec_.str() +
                        " has unreduced axes (pending sums), which are not supported yet");
  if (spec_.size() > rank)
    throw ShardingError(std::string("[") + op + "] " + spec_.str() + " has " + std::to_string(spec_.size()) +
                        " entries but the array has rank " + std::to_string(rank));
}

std::string NamedSharding::str() const { return "NamedSharding(mesh=" + mesh_.str() + ", spec=" + spec_.str() + ")"; }

std::size_t NamedSharding::hash() const { return mesh_.hash() * 1000003u ^ spec_.hash(); }

}  // namespace tessera
