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

#include <source_location>

#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array.hpp"

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

template <class R>
std::vector<Array> to_outputs(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Array>) {
    return {std::forward<R>(r)};
  } else if constexpr (std::is_same_v<T, std::vector<Array>>) {
    return std::forward<R>(r);
  } else {
    return std::apply([](auto&&... a) { return std::vector<Array>{Array(a)...}; }, std::forward<R>(r));
  }
}

template <class R, std::size_t... I>
R from_outputs(const std::vector<Array>& v, std::index_sequence<I...>) {
  return R{v[I]...};
}

template <class F, std::size_t... I>
std::vector<Array> call_body(F& f, const std::vector<Array>& in, std::index_sequence<I...>) {
  return to_outputs(f(in[I]...));
}
}  // namespace detail

/// Returns a callable that runs `f` per device. `f` takes one Array per
/// in_spec and returns an Array (one out spec), or a std::vector<Array> /
/// std::tuple of Arrays (one out spec each).
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs,
               ShardMapOptions opt = {}, std::source_location loc = std::source_location::current()) {
  return [=](const auto&... args) {
    std::vector<Array> in{Array(args)...};
    constexpr std::size_t n = sizeof...(args);
    detail::ShardMapBody body = [f](const std::vector<Array>& local) mutable {
      if (local.size() != n) throw ShardingError("[shard_map] internal: argument count changed");
      return detail::call_body(f, local, std::make_index_sequence<n>{});
    };
    std::vector<Array> out = detail::shard_map_call(body, mesh, in_specs, out_specs, opt, in, loc);
    using R = decltype(f((void(args), std::declval<Array>())...));
    if constexpr (std::is_same_v<std::decay_t<R>, Array>)
      return out.at(0);
    else if constexpr (std::is_same_v<std::decay_t<R>, std::vector<Array>>)
      return out;
    else
      return detail::from_outputs<std::decay_t<R>>(out, std::make_index_sequence<std::tuple_size_v<std::decay_t<R>>>{});
  };
}

/// Single-output form: out_specs is one PartitionSpec.
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, PartitionSpec out_spec, ShardMapOptions opt = {},
               std::source_location loc = std::source_location::current()) {
  return shard_map(std::move(f), std::move(mesh), std::move(in_specs), std::vector<PartitionSpec>{std::move(out_spec)},
                   opt, loc);
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

namespace config {
/// Seconds a collective waits for the rest of its group before raising
/// CollectiveError (default: TESSERA_COLLECTIVE_TIMEOUT, else 60).
void set_collective_timeout(double seconds);
double collective_timeout();
}  // namespace config

}  // namespace tessera
