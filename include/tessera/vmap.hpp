// vmap and chunked maps: a function written for one example, applied to a
// batch.
//
//   auto f = [](ts::Array x, ts::Array w) { return ts::tanh(ts::matmul(w, x)); };  // x: one vector
//   ts::Array ys = ts::vmap(f, {.in_axes = {0, ts::not_mapped}})(xs, w);            // xs: a batch of vectors
//   ts::Array zs = ts::vmap(f, {.in_axes = {0, ts::not_mapped}, .chunk_size = 64})(xs, w);
//   ts::Array us = ts::map(g, xs, {.batch_size = 256});
//
// As JAX's vmap: the function sees one example (arrays without the batch
// dim) and every primitive it applies is applied to the whole batch by its
// batching rule, so the batch runs as a few large ops, not one op per
// example. Arguments and results are pytrees (tessera/tree.hpp); in_axes
// has one entry per argument (applied to every array in it) or one for all;
// out_axes one per result array or one for all. A batch sharded over mesh
// axes stays sharded: the batched ops partition like any other.
//
// Chunks bound memory: with chunk_size (map's batch_size) the batch runs c
// examples at a time and the results are joined; the last chunk may be
// smaller (no padding). When the mapped dim is sharded over devices, each
// device runs its own block in chunks (a shard_map over the batch axes), so
// every device holds at most c examples' intermediates, whatever the global
// batch and however unevenly it divides.
#pragma once

#include <limits>
#include <optional>
#include <string>

#include "tessera/jit.hpp"

namespace tessera {

/// An in_axes / out_axes entry: the argument is the same for every example
/// (in), or the result does not depend on the example (out).
inline constexpr int not_mapped = std::numeric_limits<int>::min();

struct VmapOptions {
  /// The batch dim of each argument (negative: from the end; not_mapped:
  /// shared). Empty: 0 for every argument; one entry: for every argument.
  std::vector<int> in_axes = {};
  /// Where the batch dim goes in each result array. Empty: 0 for all.
  std::vector<int> out_axes = {};
  /// A mesh axis the batch dim is sharded over, in the inputs, the results
  /// and every batched value between (JAX's spmd_axis_name).
  std::optional<std::string> spmd_axis_name = std::nullopt;
  /// Examples per chunk (0: the whole batch at once).
  std::int64_t chunk_size = 0;
};

struct MapOptions {
  /// Examples per step (0: one at a time, as lax.map without batch_size).
  std::int64_t batch_size = 0;
};

namespace detail {
/// vmap on flat arrays: axes[i] is array i's batch dim (or not_mapped).
/// `compile`: called eagerly, each batch (chunk) runs as one jit-compiled
/// program (the Jacobians' maps).
JitResult vmap_call(const std::vector<Array>& args, const std::vector<int>& axes, const VmapOptions& opt,
                    const TraceFn& f, const char* name, bool compile = false);
}  // namespace detail

/// The callable ts::vmap returns.
template <class F>
class Vmapped {
 public:
  Vmapped(F f, VmapOptions opt, const char* name) : f_(std::move(f)), opt_(std::move(opt)), name_(name) {}

  template <class... A>
  auto operator()(const A&... a) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
    constexpr std::size_t nargs = sizeof...(A);
    const auto& ia = opt_.in_axes;
    if (!(ia.empty() || ia.size() == 1 || ia.size() == nargs))
      throw ShapeError("[" + std::string(name_) + "] in_axes has " + std::to_string(ia.size()) + " entries for " +
                       std::to_string(nargs) + " arguments");
    std::vector<Array> arrays;
    std::vector<int> axes;
    std::size_t i = 0;
    (
        [&] {
          const int axis = ia.empty() ? 0 : ia.size() == 1 ? ia[0] : ia[i];
          for (const Array& leaf : tree_leaves(a)) {
            arrays.push_back(leaf);
            axes.push_back(axis);
          }
          ++i;
        }(),
        ...);
    detail::TraceFn fn = [&, this](const std::vector<Array>& tracers, std::any& tree) {
      std::size_t k = 0;
      std::tuple<A...> args{detail::substitute(a, tracers, k)...};
      return detail::flatten_result(std::apply(f_, args), tree);
    };
    return detail::unflatten_result<R>(detail::vmap_call(arrays, axes, opt_, fn, name_));
  }

 private:
  F f_;
  VmapOptions opt_;
  const char* name_;
};

/// `f` applied to a batch (see the top of this header).
template <class F>
Vmapped<F> vmap(F f, VmapOptions opt = {}) {
  return Vmapped<F>(std::move(f), std::move(opt), "vmap");
}

/// JAX's lax.map: `f` over the leading dim of `xs` (a pytree), batch_size
/// examples at a time (0: one at a time). Results are stacked along dim 0.
template <class F, class X>
auto map(F f, const X& xs, MapOptions opt = {}) {
  if (opt.batch_size < 0)
    throw ShapeError("[map] batch_size must be >= 0, got " + std::to_string(opt.batch_size));
  VmapOptions v;
  v.chunk_size = opt.batch_size == 0 ? 1 : opt.batch_size;
  return Vmapped<F>(std::move(f), std::move(v), "map")(xs);
}

}  // namespace tessera
