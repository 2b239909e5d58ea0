// jit: trace a function once per input signature into a program, partition
// and fuse it, cache the compiled form, and run it with one task per device.
//
//   auto step = ts::jit([](ts::Array x, ts::Array w) { return ts::sigmoid(ts::matmul(x, w)); });
//   ts::Array y = step(x, w);                 // traces and compiles, then runs
//   ts::Array y2 = step(x, w);                // same shapes, dtypes, shardings: cached
//   std::string ir = step.lower(x, w).as_text();
//
// Arguments are Arrays, std::vector<Array>, or static values (numbers, enums,
// strings): a static value is part of the cache key and reaches the function
// as itself (JAX's static_argnums). The function returns an Array, a
// std::vector<Array> or a std::tuple of Arrays. Inside it, arrays are traced
// values: their shape, dtype and sharding are known, their contents are not
// (reading them raises Error). Arrays the function captures rather than takes
// are baked into the program as constants when it is traced.
#pragma once

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

namespace tessera {

struct JitOptions {
  /// Layout of each Array argument, in order (vectors flattened); empty: as
  /// passed. Arguments laid out otherwise are resharded first.
  std::vector<NamedSharding> in_shardings = {};
  /// Layout of each result; empty: as the program gives it.
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

using TraceFn = std::function<std::vector<Array>(const std::vector<Array>&)>;

/// The non-template part of a jitted function: the cache of compiled
/// programs, keyed by the arguments' shapes, dtypes, shardings and statics.
class JitCache {
 public:
  JitCache(std::string name, JitOptions opt);
  ~JitCache();
  std::vector<Array> call(std::vector<Array> args, const std::string& statics, const TraceFn& f);
  Lowered lower(std::vector<Array> args, const std::string& statics, const TraceFn& f);
  int size() const;
  struct State;

 private:
  std::unique_ptr<State> st_;
};

template <class T>
struct is_array_vector : std::false_type {};
template <>
struct is_array_vector<std::vector<Array>> : std::true_type {};
template <class T>
struct is_array_tuple : std::false_type {};
template <class... T>
struct is_array_tuple<std::tuple<T...>> : std::bool_constant<(std::is_same_v<T, Array> && ...)> {};
template <class>
inline constexpr bool always_false = false;

template <class A>
void flatten_arg(const A& a, std::vector<Array>& arrays, std::string& statics) {
  if constexpr (std::is_same_v<A, Array>) {
    arrays.push_back(a);
    statics += "a;";
  } else if constexpr (is_array_vector<A>::value) {
    arrays.insert(arrays.end(), a.begin(), a.end());
    statics += 'v';
    statics += std::to_string(a.size());
    statics += ';';
  } else if constexpr (std::is_arithmetic_v<A> || std::is_enum_v<A>) {
    char buf[64];
    std::to_chars_result r;
    if constexpr (std::is_enum_v<A>)
      r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(a));
    else
      r = std::to_chars(buf, buf + sizeof buf, a);  // shortest text that reads back exactly
    statics += "n";
    statics.append(buf, r.ptr);
    statics += ";";
  } else if constexpr (std::is_convertible_v<const A&, std::string_view>) {
    const std::string_view s(a);
    statics += 's';
    statics += std::to_string(s.size());
    statics += ':';
    statics += s;
  } else {
    static_assert(always_false<A>,
                  "ts::jit arguments are Array, std::vector<Array>, or static numbers, enums and strings");
  }
}

template <class A>
auto substitute(const A& a, const std::vector<Array>& tracers, std::size_t& k) {
  if constexpr (std::is_same_v<A, Array>) {
    return tracers[k++];
  } else if constexpr (is_array_vector<A>::value) {
    std::vector<Array> v(tracers.begin() + static_cast<std::ptrdiff_t>(k),
                         tracers.begin() + static_cast<std::ptrdiff_t>(k + a.size()));
    k += a.size();
    return v;
  } else {
    return a;
  }
}

template <class R>
std::vector<Array> flatten_result(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Array>) {
    return {std::forward<R>(r)};
  } else if constexpr (is_array_vector<T>::value) {
    return std::forward<R>(r);
  } else if constexpr (is_array_tuple<T>::value) {
    return std::apply([](auto&&... x) { return std::vector<Array>{x...}; }, std::forward<R>(r));
  } else {
    static_assert(always_false<T>, "a jitted function returns Array, std::vector<Array> or std::tuple of Arrays");
  }
}

template <class R>
R unflatten_result(std::vector<Array> outs) {
  if constexpr (std::is_same_v<R, Array>) {
    return outs.at(0);
  } else if constexpr (is_array_vector<R>::value) {
    return outs;
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return R{outs.at(I)...};
    }(std::make_index_sequence<std::tuple_size_v<R>>{});
  }
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
    using R = std::decay_t<std::invoke_result_t<const F&, decltype(detail::substitute(
                                                              a, std::declval<const std::vector<Array>&>(),
                                                              std::declval<std::size_t&>()))...>>;
    std::vector<Array> arrays;
    std::string statics;
    (detail::flatten_arg(a, arrays, statics), ...);
    return detail::unflatten_result<R>(cache_->call(std::move(arrays), statics, trace_fn(a...)));
  }

  /// Traces and compiles for these arguments (or takes the cached program)
  /// without running it.
  template <class... A>
  Lowered lower(const A&... a) const {
    std::vector<Array> arrays;
    std::string statics;
    (detail::flatten_arg(a, arrays, statics), ...);
    return cache_->lower(std::move(arrays), statics, trace_fn(a...));
  }

  /// Number of programs compiled so far (one per distinct signature).
  int cache_size() const { return cache_->size(); }

 private:
  template <class... A>
  detail::TraceFn trace_fn(const A&... a) const {
    return [&, this](const std::vector<Array>& tracers) {
      std::size_t k = 0;
      // Braced initialisation evaluates left to right, in argument order.
      std::tuple<decltype(detail::substitute(a, tracers, k))...> args{detail::substitute(a, tracers, k)...};
      return detail::flatten_result(std::apply(f_, args));
    };
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
