// jit: trace a function once per input signature into a program, partition
// and fuse it, cache the compiled form, and run it with one task per device.
//
//   auto step = ts::jit([](ts::Array x, ts::Array w) { return ts::sigmoid(ts::matmul(x, w)); });
//   ts::Array y = step(x, w);                 // traces and compiles, then runs
//   ts::Array y2 = step(x, w);                // same shapes, dtypes, shardings: cached
//   std::string ir = step.lower(x, w).as_text();
//
// Arguments are pytrees (tessera/tree.hpp: Arrays, vectors, tuples, string
// maps, registered structs) whose arrays are traced; their other leaves
// (numbers, enums, strings) and their structure are static: part of the
// cache key, and they reach the function as themselves (JAX's
// static_argnums). The function returns a pytree of Arrays (an Array, a
// vector, a tuple, a registered struct...). Inside it, arrays are traced
// values: their shape, dtype and sharding are known, their contents are not
// (reading them raises Error). Arrays the function captures rather than takes
// are baked into the program as constants when it is traced.
#pragma once

#include <any>
#include <charconv>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array.hpp"
#include "tessera/error.hpp"
#include "tessera/tree.hpp"

namespace tessera {

struct JitOptions {
  /// Layouts of the arguments: one entry per argument, either a
  /// NamedSharding for all its arrays or a tree of them with the argument's
  /// structure (ts::ShardingTree: a sharding per field of a struct); or one
  /// NamedSharding per array leaf, in tree_leaves order. Empty: as passed.
  /// Arguments laid out otherwise are resharded first.
  std::vector<ShardingTree> in_shardings = {};
  /// Layout of each result array, or one for all; empty: as the program
  /// gives it.
  std::vector<NamedSharding> out_shardings = {};
};

namespace detail {
struct Compiled;
}

/// A traced and compiled program for one input signature.
class Lowered {
 public:
  explicit Lowered(std::shared_ptr<const detail::Compiled> c) : c_(std::move(c)) {}
  /// The program: every value with its type and sharding ("f32[4096@x,4096]"),
  /// then the compiled steps (fused loops, kernels, and every communication
  /// step with the bytes one device receives).
  std::string as_text() const;

 private:
  std::shared_ptr<const detail::Compiled> c_;
};

namespace detail {

/// Calls the function on traced arrays, returns its result's arrays and
/// stores its result tree (leaves emptied) in the std::any.
using TraceFn = std::function<std::vector<Array>(const std::vector<Array>&, std::any&)>;

struct JitResult {
  std::vector<Array> outs;
  std::shared_ptr<const std::any> tree;  // the result tree to refill
};

/// The non-template part of a jitted function: the cache of compiled
/// programs, keyed by the arguments' shapes, dtypes, shardings and statics.
class JitCache {
 public:
  JitCache(std::string name, JitOptions opt);
  ~JitCache();
  /// `in_shardings`: per array of `args` (empty: as they are).
  JitResult call(std::vector<Array> args, const std::string& statics, const TraceFn& f,
                 const std::vector<NamedSharding>& in_shardings = {});
  Lowered lower(std::vector<Array> args, const std::string& statics, const TraceFn& f,
                const std::vector<NamedSharding>& in_shardings = {});
  int size() const;
  const JitOptions& options() const;
  const std::string& name() const;
  struct State;

 private:
  std::unique_ptr<State> st_;
};

template <class>
inline constexpr bool always_false = false;

// Arguments are pytrees (tessera/tree.hpp): their arrays are traced; their
// other leaves (numbers, enums, strings) and their structure (lengths,
// keys) are static, part of the cache key.
template <class A>
void flatten_arg(const A& a, std::vector<Array>& arrays, std::string& statics) {
  if constexpr (is_tree_node<A>) {
    statics += tree_structure(a).str();
    statics += '|';
  }
  tree_visit(a, [&](const std::string&, const auto& leaf) {
    using L = std::decay_t<decltype(leaf)>;
    if constexpr (std::is_same_v<L, Array>) {
      arrays.push_back(leaf);
      statics += "a;";
    } else if constexpr (std::is_arithmetic_v<L> || std::is_enum_v<L>) {
      char buf[64];
      std::to_chars_result r;
      if constexpr (std::is_enum_v<L>)
        r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(leaf));
      else
        r = std::to_chars(buf, buf + sizeof buf, leaf);  // shortest text that reads back exactly
      statics += "n";
      statics.append(buf, r.ptr);
      statics += ";";
    } else if constexpr (std::is_convertible_v<const L&, std::string_view>) {
      const std::string_view s(leaf);
      statics += 's';
      statics += std::to_string(s.size());
      statics += ':';
      statics += s;
    } else {
      static_assert(always_false<L>,
                    "ts::jit arguments are pytrees of Arrays and static numbers, enums and strings");
    }
  });
}

// The argument with its arrays replaced by the next tracers.
template <class A>
A substitute(A a, const std::vector<Array>& tracers, std::size_t& k) {
  tree_visit(a, [&](const std::string&, auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, Array>) leaf = tracers[k++];
  });
  return a;
}

// A result: a pytree whose arrays are the program's outputs.
template <class R>
std::vector<Array> flatten_result(const R& r, std::any& tree) {
  tree = tree_map([](const Array&) { return Array(); }, r);
  return tree_leaves(r);
}

template <class R>
R unflatten_result(const JitResult& res) {
  return tree_unflatten(std::any_cast<const R&>(*res.tree), res.outs);
}

// The paths of the arrays of all arguments ("arg 1.coords"), for messages.
template <class... A>
std::vector<std::string> argument_paths(const A&... a) {
  std::vector<std::string> out;
  std::size_t i = 0;
  (
      [&] {
        for (const auto& p : tree_paths(a)) out.push_back("argument " + std::to_string(i) + (p.empty() ? "" : " ") + p);
        ++i;
      }(),
      ...);
  return out;
}

}  // namespace detail

/// The callable ts::jit returns. Copies share one cache.
template <class F>
class Jitted {
 public:
  Jitted(F f, JitOptions opt, std::string name)
      : f_(std::move(f)), cache_(std::make_shared<detail::JitCache>(std::move(name), std::move(opt))) {}

  template <class... A>
  auto operator()(const A&... a) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
    std::vector<Array> arrays;
    std::string statics;
    (detail::flatten_arg(a, arrays, statics), ...);
    auto layouts = in_shardings(arrays, a...);
    return detail::unflatten_result<R>(cache_->call(std::move(arrays), statics, trace_fn(a...), layouts));
  }

  /// Traces and compiles for these arguments (or takes the cached program)
  /// without running it.
  template <class... A>
  Lowered lower(const A&... a) const {
    std::vector<Array> arrays;
    std::string statics;
    (detail::flatten_arg(a, arrays, statics), ...);
    auto layouts = in_shardings(arrays, a...);
    return cache_->lower(std::move(arrays), statics, trace_fn(a...), layouts);
  }

  /// Number of programs compiled so far (one per distinct signature).
  int cache_size() const { return cache_->size(); }

 private:
  template <class... A>
  detail::TraceFn trace_fn(const A&... a) const {
    return [&, this](const std::vector<Array>& tracers, std::any& tree) {
      std::size_t k = 0;
      // Braced initialisation evaluates left to right, in argument order.
      std::tuple<A...> args{detail::substitute(a, tracers, k)...};
      return detail::flatten_result(std::apply(f_, args), tree);
    };
  }

  // The layout of every array leaf: in_shardings per leaf (all plain
  // shardings, one per array), or per argument (a sharding for all its
  // arrays, or a tree of them checked against the argument's structure). A
  // count that fits neither names the leaves.
  template <class... A>
  std::vector<NamedSharding> in_shardings(const std::vector<Array>& arrays, const A&... a) const {
    const auto& in = cache_->options().in_shardings;
    if (in.empty()) return {};
    bool plain = true;
    for (const auto& t : in) plain = plain && !t.is_tree();
    std::vector<NamedSharding> out;
    if (plain && in.size() == arrays.size()) {
      for (const auto& t : in) out.push_back(t.values().front());
      return out;
    }
    if (in.size() == sizeof...(A)) {
      std::size_t i = 0;
      (
          [&] {
            for (auto& s : in[i].expand(a, cache_->name().c_str(), "in_shardings entry " + std::to_string(i)))
              out.push_back(std::move(s));
            ++i;
          }(),
          ...);
      return out;
    }
    std::string paths;
    for (const auto& p : detail::argument_paths(a...)) paths += (paths.empty() ? "" : ", ") + p;
    throw ShardingError("[" + cache_->name() + "] in_shardings has " + std::to_string(in.size()) + " entries for " +
                        std::to_string(arrays.size()) + " array leaves (" + paths + ") in " +
                        std::to_string(sizeof...(A)) + " arguments");
  }

  F f_;
  std::shared_ptr<detail::JitCache> cache_;
};

/// Wraps `f` for tracing, partitioning, fusion and caching (see the top of
/// this header). `name` appears in the program text and in errors.
template <class F>
Jitted<F> jit(F f, JitOptions opt = {}, std::string name = "jit") {
  return Jitted<F>(std::move(f), std::move(opt), std::move(name));
}

}  // namespace tessera
