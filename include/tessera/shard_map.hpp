// Manual mode: per-device SPMD code with explicit collectives (JAX's
// shard_map), built so that mistakes give errors instead of hangs.
//
//   auto f = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(xl), "x"); },
//                          mesh, /*in_specs=*/{ts::P("x")}, /*out_specs=*/ts::P());
//   ts::Array total = f(a);
//
// The body runs once per device, on that device's worker thread, on the
// device's local blocks (plain single-device arrays; ops inside run inline).
// Inputs not laid out per in_specs are resharded first; local blocks may
// differ in size (uneven layouts). Outputs are assembled per out_specs:
// concatenated along the dims they shard, one replica for the mesh axes they
// leave out (zero-copy: the global array shares the local buffers).
//
// check_vma (default on): each local value carries the set of mesh axes it
// varies over ("{V:x}" in typeof). Inputs vary over the axes their spec
// names, ops take the union of their operands', collectives update it (psum
// over x removes x, all_gather removes it, ppermute keeps it), and an
// out_specs entry that claims replication over a varying axis raises
// ShardingError naming the axis.
//
// No hangs: a collective that not every member of its group reaches raises
// CollectiveError on every waiting device after TESSERA_COLLECTIVE_TIMEOUT
// seconds (default 60), naming the collective, the axis and the devices that
// arrived; an exception in one body unblocks the others at once and reaches
// the caller; mismatched collectives (psum on one device, all_gather on
// another) are reported, never combined.
#pragma once

#include <concepts>
#include <functional>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array.hpp"
#include "tessera/tree.hpp"

namespace tessera {

struct ShardMapOptions {
  /// Track varying manual axes and check out_specs against them.
  bool check_vma = true;
};

/// One mesh axis name or several: psum(x, "x"), psum(x, {"x", "y"}).
class AxisNames {
 public:
  AxisNames(const char* name) : names_{name} {}
  AxisNames(std::string name) : names_{std::move(name)} {}
  AxisNames(std::initializer_list<std::string> names) : names_(names) {}
  AxisNames(std::vector<std::string> names) : names_(std::move(names)) {}
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<std::string> names_;
};

namespace detail {
using ShardMapBody = std::function<std::vector<Array>(const std::vector<Array>&)>;
/// Runs `body` once per device of `mesh` and assembles the outputs.
/// `loc` is where the shard_map was made: errors found while jit traces
/// the call name it.
std::vector<Array> shard_map_call(const ShardMapBody& body, const Mesh& mesh, const std::vector<PartitionSpec>& in_specs,
                                  const std::vector<PartitionSpec>& out_specs, const ShardMapOptions& opt,
                                  const std::vector<Array>& args, std::source_location loc = {});

// The argument with its arrays replaced by the next of `local` (a body's
// local blocks).
template <class A>
A with_local_leaves(A a, const std::vector<Array>& local, std::size_t& k) {
  tree_visit(a, [&](const std::string&, auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, Array>) leaf = local.at(k++);
  });
  return a;
}
}  // namespace detail

/// Returns a callable that runs `f` per device. `f` takes one pytree per
/// in_spec (an Array, or a tree of them: tessera/tree.hpp). An in_spec is
/// one PartitionSpec for every array of its argument, or a tree of specs
/// with the argument's structure (ts::SpecTree: a spec per field). `f`
/// returns a pytree of Arrays with one out spec per array in tree_leaves
/// order, or one out spec for all (an Array, a std::vector or std::tuple of
/// Arrays, a registered struct...). Non-array leaves of the arguments reach
/// every device's body as they are.
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<SpecTree> in_specs, std::vector<PartitionSpec> out_specs,
               ShardMapOptions opt = {}, std::source_location loc = std::source_location::current()) {
  return [=](const auto&... args) {
    constexpr std::size_t n = sizeof...(args);
    if (n != in_specs.size())
      throw ShardingError("[shard_map] expected " + std::to_string(in_specs.size()) +
                          " arguments (one per in_spec), got " + std::to_string(n));
    // Every array of an argument is laid out by the argument's in_spec (or
    // by its entry in the argument's tree of specs).
    std::vector<Array> in;
    std::vector<PartitionSpec> leaf_specs;
    [[maybe_unused]] std::size_t i = 0;  // unused for a function of no arguments
    (
        [&] {
          for (Array& a : tree_leaves(args)) in.push_back(std::move(a));
          for (PartitionSpec& s : in_specs[i].expand(args, "shard_map", "in_specs entry " + std::to_string(i)))
            leaf_specs.push_back(std::move(s));
          ++i;
        }(),
        ...);
    using R = std::decay_t<decltype(f(args...))>;
    // The result tree of a body run, to rebuild the global result from.
    struct Shape {
      std::mutex mu;
      std::optional<R> tree;
    };
    auto shape = std::make_shared<Shape>();
    detail::ShardMapBody body = [f, shape, args...](const std::vector<Array>& local) mutable {
      std::size_t k = 0;
      // Braced initialisation evaluates left to right, in argument order.
      std::tuple<std::decay_t<decltype(args)>...> trees{detail::with_local_leaves(args, local, k)...};
      if (k != local.size()) throw ShardingError("[shard_map] internal: argument count changed");
      R r = std::apply(f, trees);
      std::vector<Array> leaves = tree_leaves(r);
      std::lock_guard<std::mutex> lock(shape->mu);
      if (!shape->tree) shape->tree.emplace(std::move(r));
      return leaves;
    };
    std::vector<Array> out = detail::shard_map_call(body, mesh, leaf_specs, out_specs, opt, in, loc);
    return tree_unflatten(*shape->tree, out);
  };
}

/// Single-output form (or one out spec for every output).
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<SpecTree> in_specs, PartitionSpec out_spec, ShardMapOptions opt = {},
               std::source_location loc = std::source_location::current()) {
  return shard_map(std::move(f), std::move(mesh), std::move(in_specs), std::vector<PartitionSpec>{std::move(out_spec)},
                   opt, loc);
}

/// in_specs given as a std::vector<PartitionSpec>.
template <class F, class V, class O>
  requires std::same_as<std::decay_t<V>, std::vector<PartitionSpec>>
auto shard_map(F f, Mesh mesh, const V& in_specs, O out_specs, ShardMapOptions opt = {},
               std::source_location loc = std::source_location::current()) {
  return shard_map(std::move(f), std::move(mesh), std::vector<SpecTree>(in_specs.begin(), in_specs.end()),
                   std::move(out_specs), opt, loc);
}

// ------------------------------------------------ collectives (inside bodies)

/// Sum over the devices of the named axes; the result no longer varies over them.
Array psum(const Array& x, const AxisNames& axes);
Array pmean(const Array& x, const AxisNames& axes);
Array pmax(const Array& x, const AxisNames& axes);
Array pmin(const Array& x, const AxisNames& axes);
/// Gathers x from the devices of the axes. tiled=false stacks the pieces on a
/// new dim at `axis` (pieces must be equal); tiled=true concatenates along
/// `axis` (pieces may differ in size along it).
Array all_gather(const Array& x, const AxisNames& axes, int axis = 0, bool tiled = false);
/// Sums over the axes and leaves each device its part of `scatter_dimension`:
/// tiled=true splits that dim into as many balanced blocks as devices;
/// tiled=false needs it equal to the number of devices and removes it.
Array psum_scatter(const Array& x, const AxisNames& axes, int scatter_dimension = 0, bool tiled = false);
/// Sends x from axis index src to dst for each (src, dst) pair; devices that
/// receive nothing get zeros.
Array ppermute(const Array& x, const AxisNames& axes, const std::vector<std::pair<int, int>>& perm);
/// Splits x along split_axis into one block per device and sends block j to
/// device j, which concatenates what it receives along concat_axis
/// (tiled=true) or stacks it there in a new dim after removing split_axis
/// (tiled=false: split_axis must equal the number of devices), as JAX does.
Array all_to_all(const Array& x, const AxisNames& axes, int split_axis, int concat_axis, bool tiled = false);
/// This device's index along the axis (an i32 scalar).
Array axis_index(const std::string& axis);
/// Number of devices along the axis.
int axis_size(const std::string& axis);


}  // namespace tessera
