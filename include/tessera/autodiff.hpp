// Automatic differentiation, as in JAX: forward mode (jvp, jacfwd), reverse
// mode (vjp, grad, value_and_grad, jacrev), hessian and stop_gradient.
//
//   auto loss = [](ts::Array w, ts::Array x) { return ts::mean(ts::square(ts::matmul(x, w))); };
//   ts::Array g = ts::grad(loss)(w, x);                         // d loss / d w, laid out like w
//   auto [value, gw] = ts::value_and_grad(loss)(w, x);
//   auto [gw2, gx] = ts::grad(loss, ts::argnums<0, 1>)(w, x);  // several arguments: a tuple
//   auto [y, dy] = ts::jvp(f, {x}, {dx});
//   ts::Array J = ts::jacfwd(f, {.chunk_size = 64})(x);        // shape: f(x).shape + x.shape
//
// Every primitive carries a JVP rule, and the linear ones a transpose rule;
// reverse mode records the linear part of the JVP and runs it backwards, so
// the backward pass is made of ordinary ops: it runs eagerly, inside jit
// (compiled and partitioned with the forward pass), under vmap, and inside
// other transformations (hessian is jacfwd of jacrev). Differentiated
// arguments are pytrees of float arrays; gradients have the arguments'
// structure and each array's sharding. Integer and boolean values have no
// derivative. Jacobians chunk their basis through vmap's chunk_size, so
// memory grows with the chunk, not with the number of directions.
#pragma once

#include <functional>
#include <source_location>
#include <tuple>
#include <utility>

#include "tessera/jit.hpp"
#include "tessera/ops.hpp"
#include "tessera/vmap.hpp"

namespace tessera {

/// x with a zero derivative: transformations treat it as a constant.
Array stop_gradient(const Array& x, std::source_location loc = std::source_location::current());

/// grad/value_and_grad: which arguments to differentiate (JAX's argnums).
template <int... N>
struct Argnums {};
template <int... N>
inline constexpr Argnums<N...> argnums{};
/// grad/value_and_grad: the function returns (value, aux); aux is passed
/// through undifferentiated (JAX's has_aux).
struct HasAux {};
inline constexpr HasAux has_aux{};

struct JacobianOptions {
  /// Directions (basis vectors) per batch; 0: all at once. Bounds memory.
  std::int64_t chunk_size = 0;
};

namespace detail {
using Pullback = std::function<std::vector<Array>(const std::vector<Array>&)>;
/// jvp on flat arrays: the results, and their tangents in tangents_out.
JitResult jvp_call(const TraceFn& f, const std::vector<Array>& primals, const std::vector<Array>& tangents,
                   std::vector<Array>& tangents_out);
/// vjp on flat arrays: the results, and the pullback from their cotangents
/// (an empty Array: zero) to the primals' (zeros where none).
JitResult vjp_call(const TraceFn& f, const std::vector<Array>& primals, Pullback& pullback);
/// The Jacobian of f at x, of shape f(x).shape + x.shape.
Array jacobian_call(const std::function<Array(const Array&)>& f, const Array& x, std::int64_t chunk, bool forward,
                    const char* name);

using CustomFnBody = std::function<Array(const std::vector<Array>&)>;
using CustomJvpRule = std::function<std::pair<Array, Array>(const std::vector<Array>&, const std::vector<Array>&)>;
using CustomFwd = std::function<std::pair<Array, std::vector<Array>>(const std::vector<Array>&)>;
using CustomBwd = std::function<std::vector<Array>(const std::vector<Array>&, const Array&)>;
/// Runs a custom_jvp (jvp set) or custom_vjp (fwd and bwd set) function.
Array custom_call(const char* name, const CustomFnBody& fn, const CustomJvpRule& jvp, const CustomFwd& fwd,
                  const CustomBwd& bwd, const std::vector<Array>& args);

// f applied to the arrays of `v` as separate arguments (or as one vector
// when f takes one).
template <class F>
decltype(auto) call_spread(const F& f, const std::vector<Array>& v) {
  auto need = [&](std::size_t n) {
    if (v.size() != n)
      throw ShapeError("[jvp] the function takes " + std::to_string(n) + " arrays, got " + std::to_string(v.size()));
  };
  if constexpr (std::is_invocable_v<const F&, const std::vector<Array>&>) {
    return f(v);
  } else if constexpr (std::is_invocable_v<const F&, Array>) {
    need(1);
    return f(v[0]);
  } else if constexpr (std::is_invocable_v<const F&, Array, Array>) {
    need(2);
    return f(v[0], v[1]);
  } else if constexpr (std::is_invocable_v<const F&, Array, Array, Array>) {
    need(3);
    return f(v[0], v[1], v[2]);
  } else {
    static_assert(std::is_invocable_v<const F&, Array, Array, Array, Array>,
                  "ts::jvp with vectors takes a function of up to 4 Arrays or of a std::vector<Array>");
    need(4);
    return f(v[0], v[1], v[2], v[3]);
  }
}

// The leaves of the arguments at positions N...
template <int... N, class... A>
std::vector<Array> leaves_at(const std::tuple<const A&...>& args) {
  std::vector<Array> out;
  (
      [&] {
        for (const Array& l : tree_leaves(std::get<N>(args))) out.push_back(l);
      }(),
      ...);
  return out;
}

// The arguments with those at positions N... refilled from `arrays`.
template <int... N, class... A, std::size_t... I>
std::tuple<A...> refill(const std::tuple<const A&...>& args, const std::vector<Array>& arrays,
                        std::index_sequence<I...>) {
  std::size_t k = 0;
  auto one = [&](auto i, const auto& a) {
    using T = std::decay_t<decltype(a)>;
    if constexpr (((static_cast<int>(decltype(i)::value) == N) || ...)) return substitute(T(a), arrays, k);
    else return T(a);
  };
  // Braced initialisation evaluates left to right: `k` advances in order.
  return std::tuple<A...>{one(std::integral_constant<std::size_t, I>{}, std::get<I>(args))...};
}

// The gradients of the arguments at N... (one tree, or a tuple of trees).
template <int... N, class... A>
auto gradient_trees(const std::tuple<const A&...>& args, const std::vector<Array>& cts) {
  std::size_t k = 0;
  if constexpr (sizeof...(N) == 1) {
    return substitute(std::decay_t<decltype(std::get<N...>(args))>(std::get<N...>(args)), cts, k);
  } else {
    return std::tuple<std::decay_t<decltype(std::get<N>(args))>...>{
        substitute(std::decay_t<decltype(std::get<N>(args))>(std::get<N>(args)), cts, k)...};
  }
}

}  // namespace detail

/// A function of Arrays returning an Array, differentiated by `rule`
/// instead of through its ops (JAX's custom_jvp): rule(primals, tangents)
/// returns (f(primals), the tangent of the result); every tangent is an
/// array (zeros where the input has none).
///
///   auto softplus = ts::custom_jvp(
///       [](ts::Array x) { return ts::log1p(ts::exp(x)); },
///       [](const std::vector<ts::Array>& p, const std::vector<ts::Array>& t) {
///         return std::make_pair(ts::log1p(ts::exp(p[0])), t[0] * ts::sigmoid(p[0]));
///       });
template <class F>
auto custom_jvp(F f, detail::CustomJvpRule rule) {
  detail::CustomFnBody body = [f](const std::vector<Array>& v) { return Array(detail::call_spread(f, v)); };
  return [body, rule](const auto&... a) {
    return detail::custom_call("custom_jvp", body, rule, {}, {}, std::vector<Array>{Array(a)...});
  };
}

/// A function of Arrays returning an Array, differentiated in reverse mode
/// by `fwd` and `bwd` (JAX's custom_vjp): fwd(primals) returns (f(primals),
/// residuals), bwd(residuals, cotangent) the cotangent of every input.
/// Forward mode through it raises an error (give it a custom_jvp instead).
template <class F>
auto custom_vjp(F f, detail::CustomFwd fwd, detail::CustomBwd bwd) {
  detail::CustomFnBody body = [f](const std::vector<Array>& v) { return Array(detail::call_spread(f, v)); };
  return [body, fwd, bwd](const auto&... a) {
    return detail::custom_call("custom_vjp", body, {}, fwd, bwd, std::vector<Array>{Array(a)...});
  };
}

/// The results of f at `primals` and their tangents along `tangents`
/// (one Array per argument of f).
template <class F>
auto jvp(const F& f, const std::vector<Array>& primals, const std::vector<Array>& tangents) {
  using R = std::decay_t<decltype(detail::call_spread(f, primals))>;
  std::vector<Array> t_out;
  detail::TraceFn fn = [&](const std::vector<Array>& in, std::any& tree) {
    return detail::flatten_result(detail::call_spread(f, in), tree);
  };
  auto res = detail::jvp_call(fn, primals, tangents, t_out);
  R out = detail::unflatten_result<R>(res);
  R tan = tree_unflatten(std::any_cast<const R&>(*res.tree), t_out);
  return std::pair<R, R>(std::move(out), std::move(tan));
}

/// The results of f at `primals` and the pullback: from cotangents of the
/// results (the results' tree) to the tuple of the arguments' cotangents.
template <class F, class... A>
auto vjp(const F& f, const A&... primals) {
  using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
  const std::tuple<const A&...> args(primals...);
  std::vector<Array> leaves;
  (
      [&] {
        for (const Array& l : tree_leaves(primals)) leaves.push_back(l);
      }(),
      ...);
  detail::TraceFn fn = [&](const std::vector<Array>& in, std::any& tree) {
    std::size_t k = 0;
    std::tuple<A...> subst{detail::substitute(primals, in, k)...};
    return detail::flatten_result(std::apply(f, subst), tree);
  };
  detail::Pullback back;
  auto res = detail::vjp_call(fn, leaves, back);
  R out = detail::unflatten_result<R>(res);
  std::tuple<A...> shapes{primals...};
  auto pullback = [back, shapes](const R& ct) {
    auto cts = back(tree_leaves(ct));
    std::size_t k = 0;
    return std::apply([&](const auto&... a) { return std::tuple<A...>{detail::substitute(a, cts, k)...}; }, shapes);
  };
  return std::make_pair(std::move(out), std::move(pullback));
}

/// The callable value_and_grad returns.
template <class F, bool Aux, int... N>
class ValueAndGrad {
 public:
  explicit ValueAndGrad(F f, const char* name) : f_(std::move(f)), name_(name) {}

  template <class... A>
  auto operator()(const A&... a) const {
    static_assert(((N >= 0 && N < static_cast<int>(sizeof...(A))) && ...), "argnums out of range");
    const std::tuple<const A&...> args(a...);
    using Result = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
    const std::vector<Array> leaves = detail::leaves_at<N...>(args);
    detail::TraceFn fn = [&](const std::vector<Array>& in, std::any& tree) {
      auto subst = detail::refill<N...>(args, in, std::index_sequence_for<A...>{});
      Result r = std::apply(f_, subst);
      return detail::flatten_result(r, tree);
    };
    detail::Pullback back;
    auto res = detail::vjp_call(fn, leaves, back);
    Result r = detail::unflatten_result<Result>(res);
    const Array& value = value_of(r);
    if (value.ndim() != 0 || !(value.dtype() == DType::f32 || value.dtype() == DType::f64))
      throw ShapeError("[" + std::string(name_) + "] the function must return a float scalar" +
                       (Aux ? " (with its aux)" : "") + ", got " + typeof(value));
    std::vector<Array> cts(res.outs.size());
    cts[0] = ones({}, value.dtype(), value.sharding());
    auto grads = detail::gradient_trees<N...>(args, back(cts));
    return std::make_pair(std::move(r), std::move(grads));
  }

 private:
  static const Array& value_of(const auto& r) {
    if constexpr (Aux) return std::get<0>(r);
    else return r;
  }
  F f_;
  const char* name_;
};

/// f's value and its gradient with respect to argument 0 (argnums<...>:
/// those arguments, the gradients as a tuple). With has_aux f returns
/// (value, aux) and the first member of the result is that pair.
template <class F, int... N>
auto value_and_grad(F f, Argnums<N...> = {}) {
  if constexpr (sizeof...(N) == 0) return ValueAndGrad<F, false, 0>(std::move(f), "value_and_grad");
  else return ValueAndGrad<F, false, N...>(std::move(f), "value_and_grad");
}
template <class F, int... N>
auto value_and_grad(F f, Argnums<N...>, HasAux) {
  if constexpr (sizeof...(N) == 0) return ValueAndGrad<F, true, 0>(std::move(f), "value_and_grad");
  else return ValueAndGrad<F, true, N...>(std::move(f), "value_and_grad");
}
template <class F>
auto value_and_grad(F f, HasAux) {
  return ValueAndGrad<F, true, 0>(std::move(f), "value_and_grad");
}

/// The gradient of f (a float scalar) with respect to argument 0, or to the
/// arguments in argnums<...> (a tuple); with has_aux, (gradient, aux).
template <class F, class... Opt>
auto grad(F f, Opt... opt) {
  auto vg = value_and_grad(std::move(f), opt...);
  return [vg](const auto&... a) {
    auto [r, g] = vg(a...);
    if constexpr ((std::is_same_v<Opt, HasAux> || ...)) return std::make_pair(std::move(g), std::get<1>(r));
    else return g;
  };
}

/// The Jacobian of f: Array -> Array at x (further arguments are passed
/// through undifferentiated), by forward mode: shape f(x).shape + x.shape.
template <class F>
auto jacfwd(F f, JacobianOptions opt = {}) {
  return [f, opt](const Array& x, const auto&... rest) {
    return detail::jacobian_call([&](const Array& a) { return Array(f(a, rest...)); }, x, opt.chunk_size, true,
                                 "jacfwd");
  };
}

/// The Jacobian by reverse mode (one pullback per result element, batched).
template <class F>
auto jacrev(F f, JacobianOptions opt = {}) {
  return [f, opt](const Array& x, const auto&... rest) {
    return detail::jacobian_call([&](const Array& a) { return Array(f(a, rest...)); }, x, opt.chunk_size, false,
                                 "jacrev");
  };
}

/// The Hessian of a scalar f: jacfwd of jacrev.
template <class F>
auto hessian(F f, JacobianOptions opt = {}) {
  return jacfwd(jacrev(std::move(f), opt), opt);
}

}  // namespace tessera
