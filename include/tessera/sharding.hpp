// Partition specs, named shardings and the layout rule.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tessera/mesh.hpp"

namespace tessera {

/// Array shape: sizes per dimension, row-major.
using Shape = std::vector<std::int64_t>;

/// Tag for an unsharded dimension in a PartitionSpec: ts::P("x", ts::none).
struct NoneType {
  constexpr bool operator==(const NoneType&) const = default;
};
inline constexpr NoneType none{};

/// A half-open range [start, stop) of global indices along one dimension.
struct Slice {
  std::int64_t start = 0;
  std::int64_t stop = 0;
  std::int64_t size() const { return stop - start; }
  bool operator==(const Slice&) const = default;
};

/// How each array dimension maps onto mesh axes.
class PartitionSpec {
 public:
  /// One dimension's entry: unsharded (none), one mesh axis ("x"), or several
  /// axes major to minor ({"x", "y"}).
  class Entry {
   public:
    Entry() = default;
    Entry(NoneType) {}
    Entry(const char* axis) : axes_{axis}, grouped_(false) {}
    Entry(std::string axis) : axes_{std::move(axis)}, grouped_(false) {}
    Entry(std::initializer_list<std::string> axes) : axes_(axes), grouped_(true) {}
    Entry(std::vector<std::string> axes) : axes_(std::move(axes)), grouped_(true) {}
    /// The mesh axes, major to minor; empty when unsharded.
    const std::vector<std::string>& axes() const { return axes_; }
    bool is_none() const { return axes_.empty(); }
    /// Equal when they name the same axes in the same order ("x" == {"x"}).
    bool operator==(const Entry& o) const { return axes_ == o.axes_; }
    /// "None", "'x'" or "('x', 'y')".
    std::string str() const;

   private:
    std::vector<std::string> axes_;
    bool grouped_ = false;  // written as a tuple in str()
  };

  PartitionSpec() = default;
  explicit PartitionSpec(std::vector<Entry> entries, std::vector<std::string> unreduced = {});

  const std::vector<Entry>& entries() const { return entries_; }
  /// Number of entries (may be less than the array's rank: trailing dims are unsharded).
  int size() const { return static_cast<int>(entries_.size()); }
  /// Entry for dimension `dim`; none past the end.
  const Entry& operator[](int dim) const;
  /// Axes the value is summed over (a pending all-reduce); usually empty.
  const std::vector<std::string>& unreduced() const { return unreduced_; }

  /// "PartitionSpec('x', None)".
  std::string str() const;
  /// Equal after dropping trailing none entries (P("x") == P("x", none)).
  bool operator==(const PartitionSpec& o) const;
  std::size_t hash() const;

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> unreduced_;
};

/// Builds a PartitionSpec: P(), P("x"), P("x", "y"), P({"x", "y"}, none).
PartitionSpec P();
PartitionSpec P(PartitionSpec::Entry e0);
PartitionSpec P(PartitionSpec::Entry e0, PartitionSpec::Entry e1);
PartitionSpec P(PartitionSpec::Entry e0, PartitionSpec::Entry e1, PartitionSpec::Entry e2);
PartitionSpec P(PartitionSpec::Entry e0, PartitionSpec::Entry e1, PartitionSpec::Entry e2,
                PartitionSpec::Entry e3);
PartitionSpec P(PartitionSpec::Entry e0, PartitionSpec::Entry e1, PartitionSpec::Entry e2,
                PartitionSpec::Entry e3, PartitionSpec::Entry e4);
PartitionSpec P(PartitionSpec::Entry e0, PartitionSpec::Entry e1, PartitionSpec::Entry e2,
                PartitionSpec::Entry e3, PartitionSpec::Entry e4, PartitionSpec::Entry e5);

/// A mesh plus a partition spec. Construction checks that every named axis
/// exists and is used once (ShardingError); the rank is checked where the
/// sharding meets an array.
class NamedSharding {
 public:
  NamedSharding(Mesh mesh, PartitionSpec spec);

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }

  // The layout queries below check their arguments: a mesh position outside
  // [0, mesh().size()), a negative dim, or a shape of lower rank than the
  // spec raises ShardingError; a negative dimension size raises ShapeError.
  // Dims past the spec's entries are unsharded.

  /// Number of parts dimension `dim` is split into (product of its axes' sizes).
  int num_parts(int dim) const;
  /// Part index along `dim` of the device at mesh position `pos`: the
  /// mixed-radix number of its coordinates on the dim's axes, major to minor.
  int part_index(int dim, int pos) const;
  /// Global index slices held by the device at mesh position `pos`.
  std::vector<Slice> shard_index(const Shape& shape, int pos) const;
  /// Shape of the shard held at mesh position `pos`.
  Shape shard_shape(const Shape& shape, int pos) const;
  /// True when every device holds the whole array.
  bool is_fully_replicated() const;
  /// Checks that the spec fits an array of rank `rank`; raises ShardingError
  /// "[op] ..." otherwise.
  void check_rank(int rank, const char* op) const;

  /// "NamedSharding(mesh=Mesh('x': 2, 'y': 4), spec=PartitionSpec('x', 'y'))".
  std::string str() const;
  bool operator==(const NamedSharding& o) const { return mesh_ == o.mesh_ && spec_ == o.spec_; }
  std::size_t hash() const;

 private:
  void check_pos(int pos, const char* op) const;
  void check_dim(int dim, const char* op) const;
  void check_shape(const Shape& shape, const char* op) const;
  Mesh mesh_;
  PartitionSpec spec_;
};

/// The layout rule: a dimension of size n split into k balanced blocks; part c
/// holds [block_start(n, k, c), block_start(n, k, c) + block_size(n, k, c)).
/// Sizes differ by at most one; the first n % k parts hold the extra element.
/// Arguments are checked: n < 0 raises ShapeError, k < 1 or c outside
/// [0, k) raises ShardingError ("[block_size] expected ...").
std::int64_t block_start(std::int64_t n, std::int64_t k, std::int64_t c);
std::int64_t block_size(std::int64_t n, std::int64_t k, std::int64_t c);
/// Both at once.
Slice block_slice(std::int64_t n, std::int64_t k, std::int64_t c);

/// "(10, 8)".
std::string shape_str(const Shape& shape);

}  // namespace tessera

template <>
struct std::hash<tessera::PartitionSpec> {
  std::size_t operator()(const tessera::PartitionSpec& p) const noexcept { return p.hash(); }
};
template <>
struct std::hash<tessera::NamedSharding> {
  std::size_t operator()(const tessera::NamedSharding& s) const noexcept { return s.hash(); }
};
