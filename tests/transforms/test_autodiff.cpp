// Autodiff: every differentiable primitive's JVP, transpose and batching
// rules against central finite differences in f64 (through jacfwd and
// jacrev) on several layouts; jacfwd == jacrev; chunked Jacobians equal
// unchunked ones bitwise; grad, value_and_grad (argnums, has_aux, pytrees),
// vjp, hessian, stop_gradient; composition with jit, vmap and each other;
// gradients keep the primals' shardings; the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::expect_same;

namespace ad_tree {
struct Params {
  ts::Array w, b;
};
}  // namespace ad_tree
TESSERA_TREE(ad_tree::Params, w, b)

namespace {

using Fn = std::function<ts::Array(const ts::Array&)>;

ts::Mesh line(int n, const char* axis = "x") { return ts::Mesh(ts::testing::first_devices(n), {n}, {axis}); }

std::vector<double> values(std::int64_t n, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = 0.3 + 0.9 * std::sin(1.7 * static_cast<double>(i) + salt);
  return v;
}

ts::Array input(const ts::Shape& shape, const ts::NamedSharding& s, int salt = 0) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return ts::device_put(values(n, salt), shape, s);
}

// Central differences of f at x: shape f(x).shape + x.shape.
std::vector<double> numeric_jacobian(const Fn& f, const ts::Array& x, std::int64_t& m) {
  const auto h0 = x.to_vector<double>();
  const double h = 1e-6;
  std::vector<std::vector<double>> cols;
  for (size_t i = 0; i < h0.size(); ++i) {
    auto p = h0, q = h0;
    p[i] += h;
    q[i] -= h;
    auto fp = f(ts::device_put(p, x.shape(), x.sharding())).to_vector<double>();
    auto fq = f(ts::device_put(q, x.shape(), x.sharding())).to_vector<double>();
    std::vector<double> c(fp.size());
    for (size_t k = 0; k < c.size(); ++k) c[k] = (fp[k] - fq[k]) / (2 * h);
    cols.push_back(std::move(c));
  }
  m = cols.empty() ? 0 : static_cast<std::int64_t>(cols[0].size());
  std::vector<double> j(static_cast<size_t>(m) * h0.size());
  for (std::int64_t k = 0; k < m; ++k)
    for (size_t i = 0; i < h0.size(); ++i) j[k * h0.size() + i] = cols[i][k];
  return j;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

// jacfwd and jacrev of f against central differences, on x laid out on
// several meshes; the Jacobians keep their shapes.
void check_derivatives(const std::string& what, const Fn& f, const ts::Shape& shape, double tol = 1e-6) {
  for (int n : {1, 3, 8}) {
    const ts::Mesh m = line(n);
    for (const auto& spec : {ts::P(), ts::P("x")}) {
      const ts::Array x = input(shape, ts::NamedSharding(m, spec));
      const std::string label = what + " at " + ts::typeof(x);
      std::int64_t rows = 0;
      const auto want = numeric_jacobian(f, x, rows);
      const ts::Array jf = ts::jacfwd(f)(x), jr = ts::jacrev(f)(x);
      ts::Shape js = f(x).shape();
      js.insert(js.end(), shape.begin(), shape.end());
      EXPECT_EQ(jf.shape(), js) << label;
      EXPECT_EQ(jr.shape(), js) << label;
      expect_near(jf.to_vector<double>(), want, tol, label + " (jacfwd)");
      expect_near(jr.to_vector<double>(), want, tol, label + " (jacrev)");
    }
  }
}

}  // namespace

TEST(Autodiff, UnaryAgainstFiniteDifferences) {
  const std::vector<std::pair<std::string, Fn>> fs = {
      {"exp", [](const ts::Array& x) { return ts::exp(x); }},
      {"log", [](const ts::Array& x) { return ts::log(x + 2.0); }},
      {"log1p/expm1", [](const ts::Array& x) { return ts::log1p(x + 1.0) * ts::expm1(x); }},
      {"sqrt/rsqrt", [](const ts::Array& x) { return ts::sqrt(x + 2.0) + ts::rsqrt(x + 3.0); }},
      {"sin/cos", [](const ts::Array& x) { return ts::sin(x) * ts::cos(2.0 * x); }},
      {"tanh/sigmoid", [](const ts::Array& x) { return ts::tanh(x) - ts::sigmoid(-x); }},
      {"abs/neg", [](const ts::Array& x) { return -ts::abs(x - 0.05); }},
  };
  for (const auto& [name, f] : fs) check_derivatives(name, f, {7});
}

TEST(Autodiff, BinaryAndSelectAgainstFiniteDifferences) {
  check_derivatives("x*x + x/3 - 1/x", [](const ts::Array& x) { return x * x + x / 3.0 - 1.0 / (x + 2.0); }, {2, 3});
  check_derivatives("pow", [](const ts::Array& x) { return ts::pow(x + 2.0, x) + ts::pow(x + 2.0, 2.5); }, {5});
  check_derivatives("max/min", [](const ts::Array& x) { return ts::maximum(x, 0.5) + ts::minimum(x, x * x); }, {6});
  check_derivatives("broadcasting", [](const ts::Array& x) { return x * ts::reshape(x, {3, 1}) + x; }, {3});
  check_derivatives("where", [](const ts::Array& x) { return ts::where(x > 0.5, x * x, ts::sin(x)); }, {6});
  check_derivatives("where scalar", [](const ts::Array& x) { return ts::where(x > 0.5, x * 3.0, 0.0); }, {6});
}

TEST(Autodiff, ReductionsAndLinalgAgainstFiniteDifferences) {
  check_derivatives("sum/mean", [](const ts::Array& x) { return ts::sum(x * x, {0}) + ts::mean(x, {1}); }, {3, 3});
  check_derivatives("max", [](const ts::Array& x) { return ts::max(ts::sin(x), {1}); }, {3, 4});
  check_derivatives("prod", [](const ts::Array& x) { return ts::prod(x + 2.0, {0}); }, {3, 2});
  check_derivatives("matmul x@x^T", [](const ts::Array& x) { return ts::matmul(x, ts::transpose(x)); }, {3, 4});
  check_derivatives("matmul broadcast batch", [](const ts::Array& x) {
    return ts::matmul(ts::reshape(x, {2, 2, 3}), ts::reshape(ts::sin(x), {3, 4}));
  }, {12});
  check_derivatives("dot_general batch", [](const ts::Array& x) {
    ts::Array a = ts::reshape(x, {2, 3, 2});
    return ts::dot_general(a, ts::cos(a), {.lhs_contracting = {1}, .rhs_contracting = {1}, .lhs_batch = {0}, .rhs_batch = {0}});
  }, {12});
}

TEST(Autodiff, ShapeOpsAgainstFiniteDifferences) {
  check_derivatives("reshape/transpose", [](const ts::Array& x) { return ts::transpose(ts::reshape(x, {2, 3})) * x.size(); }, {6});
  check_derivatives("slice step 2", [](const ts::Array& x) { return ts::slice(x * x, {{1, 8, 2}}); }, {9});
  check_derivatives("slice reversed", [](const ts::Array& x) { return ts::slice(x, {{ts::SliceSpec{6, 0, -3}}}) * 2.0; }, {9});
  check_derivatives("pad", [](const ts::Array& x) { return ts::pad(ts::sin(x), {{2, 1}}, 5.0); }, {5});
  check_derivatives("concatenate/stack", [](const ts::Array& x) {
    return ts::concatenate({x, ts::squeeze(ts::stack({x * 2.0, x * x}, 0), {1})}, 0);
  }, {1, 3});
  check_derivatives("flip/roll", [](const ts::Array& x) { return ts::roll(ts::flip(x * x, 0), 2, 0); }, {5});
  check_derivatives("broadcast_to/expand/squeeze", [](const ts::Array& x) {
    return ts::squeeze(ts::expand_dims(ts::broadcast_to(x, {2, 4}), 0)) * ts::sin(x);
  }, {4});
  check_derivatives("with_sharding_constraint", [](const ts::Array& x) {
    return ts::with_sharding_constraint(x * x, ts::NamedSharding(x.sharding().mesh(), ts::P()));
  }, {5});
}

TEST(Autodiff, StencilsAndIndexingAgainstFiniteDifferences) {
  check_derivatives("diff n=2", [](const ts::Array& x) { return ts::diff(x * x, 2, 0); }, {7});
  check_derivatives("diff prepend/append", [](const ts::Array& x) {
    return ts::diff(x, 1, 0, {.prepend = ts::slice(x, {{0, 2}}), .append = ts::sum(x)});
  }, {5});
  check_derivatives("cumsum", [](const ts::Array& x) { return ts::cumsum(ts::sin(x), 0); }, {6});
  check_derivatives("convolve", [](const ts::Array& x) {
    return ts::convolve(x, ts::device_put(std::vector<double>{0.5, -1, 2}, {3}, ts::NamedSharding(x.sharding().mesh(), ts::P())), 0);
  }, {6}, 1e-5);
  auto idx = [](const ts::Array& x, std::vector<std::int32_t> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return ts::device_put(v, {n}, ts::NamedSharding(x.sharding().mesh(), ts::P()));
  };
  check_derivatives("take", [&](const ts::Array& x) { return ts::take(x * x, idx(x, {2, 0, 2, 4}), 0); }, {5});
  check_derivatives("take axis 1", [&](const ts::Array& x) { return ts::take(ts::reshape(x, {2, 3}), idx(x, {2, 2, 0}), 1); }, {6});
  check_derivatives("scatter_add", [&](const ts::Array& x) {
    return ts::scatter_add(ts::sin(x), idx(x, {1, 1, 3}), ts::slice(x * x, {{0, 3}}));
  }, {5});
  check_derivatives("segment_sum", [&](const ts::Array& x) { return ts::segment_sum(x * x, idx(x, {0, 2, 0, 1, 2}), 3); }, {5});
}

TEST(Autodiff, JacfwdEqualsJacrevAndChunksAreBitwise) {
  const ts::Mesh m = line(8);
  auto g = [](const ts::Array& x) {
    ts::Array h = ts::tanh(ts::matmul(ts::reshape(x, {4, 3}), ts::reshape(ts::cos(x), {3, 4})));
    return ts::concatenate({ts::cumsum(ts::sum(h * h, {1}), 0), ts::diff(x * x, 1, 0)}, 0);
  };
  for (const auto& spec : {ts::P(), ts::P("x")}) {
    const ts::Array x = input({12}, ts::NamedSharding(m, spec));
    const ts::Array jf = ts::jacfwd(g)(x), jr = ts::jacrev(g)(x);
    expect_near(jf.to_vector<double>(), jr.to_vector<double>(), 1e-12, "jacfwd vs jacrev");
    for (std::int64_t c : {1, 5, 12, 100}) {
      EXPECT_EQ(ts::jacfwd(g, {.chunk_size = c})(x).to_vector<double>(), jf.to_vector<double>()) << "jacfwd chunk " << c;
      EXPECT_EQ(ts::jacrev(g, {.chunk_size = c})(x).to_vector<double>(), jr.to_vector<double>()) << "jacrev chunk " << c;
    }
  }
}

TEST(Autodiff, GradValueAndGradArgnumsAuxTrees) {
  const ts::Mesh m = line(4);
  const ts::Array w = input({3, 2}, ts::NamedSharding(m, ts::P("x"))), x = input({5, 3}, ts::NamedSharding(m, ts::P()), 1);
  auto loss = [](ts::Array w, ts::Array x) { return ts::sum(ts::tanh(ts::matmul(x, w))); };
  // d/dw sum(tanh(x w)) = x^T (1 - tanh^2)
  const ts::Array t = ts::tanh(ts::matmul(x, w));
  const ts::Array want_w = ts::matmul(ts::transpose(x), 1.0 - t * t);
  const ts::Array want_x = ts::matmul(1.0 - t * t, ts::transpose(w));
  const ts::Array gw = ts::grad(loss)(w, x);
  expect_near(gw.to_vector<double>(), want_w.to_vector<double>(), 1e-12, "grad");
  EXPECT_EQ(gw.sharding(), w.sharding()) << "the gradient keeps the primal's layout";
  auto [value, g2] = ts::value_and_grad(loss)(w, x);
  EXPECT_NEAR(value.item<double>(), ts::sum(t).item<double>(), 1e-12);
  auto [gw3, gx3] = ts::grad(loss, ts::argnums<0, 1>)(w, x);
  expect_near(gw3.to_vector<double>(), want_w.to_vector<double>(), 1e-12, "argnums 0");
  expect_near(gx3.to_vector<double>(), want_x.to_vector<double>(), 1e-12, "argnums 1");
  EXPECT_EQ(gx3.sharding(), x.sharding());
  // has_aux: the aux result passes through.
  auto with_aux = [&](ts::Array w, ts::Array x) { return std::make_pair(loss(w, x), ts::matmul(x, w)); };
  auto [gw4, aux] = ts::grad(with_aux, ts::has_aux)(w, x);
  expect_near(gw4.to_vector<double>(), want_w.to_vector<double>(), 1e-12, "has_aux");
  EXPECT_EQ(aux.to_vector<double>(), ts::matmul(x, w).to_vector<double>());
  // Pytrees: a registered struct of parameters.
  ad_tree::Params p{w, input({2}, ts::NamedSharding(m, ts::P()), 2)};
  auto tree_loss = [](const ad_tree::Params& p, ts::Array x) { return ts::sum(ts::tanh(ts::matmul(x, p.w) + p.b)); };
  ad_tree::Params gp = ts::grad(tree_loss)(p, x);
  const ts::Array tt = ts::tanh(ts::matmul(x, w) + p.b);
  expect_near(gp.b.to_vector<double>(), ts::sum(1.0 - tt * tt, {0}).to_vector<double>(), 1e-12, "tree b");
  expect_near(gp.w.to_vector<double>(), ts::matmul(ts::transpose(x), 1.0 - tt * tt).to_vector<double>(), 1e-12, "tree w");
  // vjp and jvp directly.
  auto [y, pull] = ts::vjp([](ts::Array a) { return ts::sin(a); }, x);
  auto [ct] = pull(ts::ones(y.shape(), y.dtype(), y.sharding()));
  expect_near(ct.to_vector<double>(), ts::cos(x).to_vector<double>(), 1e-15, "vjp");
  auto [y2, dy] = ts::jvp([](ts::Array a, ts::Array b) { return a * b; }, {x, x}, {ts::ones(x.shape(), x.dtype(), x.sharding()), ts::Array()});
  expect_near(dy.to_vector<double>(), x.to_vector<double>(), 1e-15, "jvp with a zero tangent");
  (void)y2;
}

TEST(Autodiff, ComposesWithJitVmapAndItself) {
  const ts::Mesh m = line(8);
  const ts::Array w = input({6, 4}, ts::NamedSharding(m, ts::P())), x = input({13, 6}, ts::NamedSharding(m, ts::P("x")), 1);
  auto loss = [](ts::Array w, ts::Array x) { return ts::mean(ts::tanh(ts::matmul(x, w)) * ts::tanh(ts::matmul(x, w))); };
  const ts::Array g = ts::grad(loss)(w, x);
  // grad under jit: forward and backward in one compiled program.
  auto jg = ts::jit([&](ts::Array w, ts::Array x) { return ts::grad(loss)(w, x); });
  expect_near(jg(w, x).to_vector<double>(), g.to_vector<double>(), 1e-13, "jit(grad)");
  // grad of jit.
  expect_near(ts::grad(ts::jit(loss))(w, x).to_vector<double>(), g.to_vector<double>(), 1e-13, "grad(jit)");
  // Per-example gradients: vmap of grad, against a loop.
  auto per = ts::vmap([&](ts::Array xi) { return ts::grad([&](ts::Array w, ts::Array xi) {
    return ts::sum(ts::tanh(ts::matmul(xi, w))); })(w, xi); })(x);
  ASSERT_EQ(per.shape(), (ts::Shape{13, 6, 4}));
  ts::Array sum_per = ts::sum(per, {0});
  expect_near(sum_per.to_vector<double>(),
              ts::grad([](ts::Array w, ts::Array x) { return ts::sum(ts::tanh(ts::matmul(x, w))); })(w, x).to_vector<double>(),
              1e-12, "vmap(grad) summed");
  // hessian of a scalar function against the analytic one: f = sum(x^3) -> diag(6x).
  const ts::Array v = input({4}, ts::NamedSharding(m, ts::P("x")));
  const ts::Array h = ts::hessian([](const ts::Array& a) { return ts::sum(a * a * a); })(v);
  auto hv = h.to_vector<double>(), vv = v.to_vector<double>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(hv[i * 4 + j], i == j ? 6 * vv[i] : 0.0, 1e-12);
  // stop_gradient: d/dx (x * stop_gradient(x)) = stop_gradient(x).
  const ts::Array gs = ts::grad([](ts::Array a) { return ts::sum(a * ts::stop_gradient(a)); })(v);
  expect_near(gs.to_vector<double>(), vv, 1e-15, "stop_gradient");
}

TEST(Autodiff, Errors) {
  const ts::Mesh m = line(2);
  const ts::Array x = input({4}, ts::NamedSharding(m, ts::P()));
  expect_error<ts::ShapeError>([&] { ts::grad([](ts::Array a) { return a * 2.0; })(x); }, "[value_and_grad]",
                               {"must return a float scalar", "f64[4]"});
  expect_error<ts::ShapeError>([&] { ts::jvp([](ts::Array a) { return a; }, {x}, {ts::ones({3}, ts::f64, x.sharding())}); },
                               "[jvp]", {"tangent 0", "f64[3]", "f64[4]"});
  expect_error<ts::DTypeError>([&] { ts::jacfwd([](const ts::Array& a) { return a; })(ts::astype(x, ts::i32)); }, "[jacfwd]",
                               {"floating point"});
  // A primitive without a derivative says so and names the way out.
  expect_error<ts::Error>([&] {
    ts::grad([](ts::Array a) { return ts::sum(ts::interp(a, a, a)); })(x);
  }, "[interp]", {"not differentiable", "stop_gradient"});
}

TEST(Autodiff, ThroughShardMap) {
  const ts::Mesh m = line(4);
  auto body = ts::shard_map([](ts::Array xl) { return ts::sin(xl) * xl; }, m, {ts::P("x")}, ts::P("x"));
  const ts::Array x = input({10}, ts::NamedSharding(m, ts::P("x")));
  // Forward mode: the shard_map of the body's jvp.
  const ts::Array j = ts::jacfwd([&](const ts::Array& a) { return body(a); })(x);
  std::int64_t rows = 0;
  const auto want = numeric_jacobian([&](const ts::Array& a) { return body(a); }, x, rows);
  expect_near(j.to_vector<double>(), want, 1e-6, "jacfwd through shard_map");
  // Through collectives: jvp of a body with psum, all_gather and ppermute.
  auto mixed = ts::shard_map(
      [](ts::Array xl) {
        ts::Array total = ts::psum(ts::sum(ts::sin(xl)), "x");
        ts::Array g = ts::all_gather(xl * xl, "x", 0, true);
        ts::Array r = ts::ppermute(xl * 3.0, "x", {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
        return std::make_tuple(g * total, r);
      },
      m, {ts::P("x")}, std::vector<ts::PartitionSpec>{ts::P(), ts::P("x")});
  const ts::Array x8 = input({8}, ts::NamedSharding(m, ts::P("x")));
  auto flat = [&](const ts::Array& a) {
    auto [g, r] = mixed(a);
    return ts::concatenate({g, r}, 0);
  };
  std::int64_t r8 = 0;
  expect_near(ts::jacfwd(flat)(x8).to_vector<double>(), numeric_jacobian(flat, x8, r8), 1e-6, "jacfwd through collectives");
  // grad inside a body, with respect to a varying value: the transposes of
  // psum (the identity), all_gather (this device's slice) and ppermute (the
  // inverse permutation).
  auto inner = ts::shard_map(
      [](ts::Array xl) {
        return ts::grad([](ts::Array a) {
          ts::Array g = ts::all_gather(a * a, "x", 0, true);
          ts::Array p = ts::ppermute(ts::sin(a), "x", {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
          return ts::psum(ts::sum(p * a), "x") + ts::sum(g) / 4.0;
        })(xl);
      },
      m, {ts::P("x")}, ts::P("x"));
  // d/dx_i: from the gathered squares (summed over all, over 4) x_i / 2; from sum(ppermute(sin x) * x): the
  // element received from the left neighbour, sin(x_{i-2}) (blocks of 2),
  // plus x_{i+2} cos(x_i) sent to the right.
  const auto hx = x8.to_vector<double>();
  std::vector<double> want_g(8);
  for (int i = 0; i < 8; ++i)
    want_g[i] = 0.5 * hx[i] + std::sin(hx[(i + 6) % 8]) + hx[(i + 2) % 8] * std::cos(hx[i]);
  expect_near(inner(x8).to_vector<double>(), want_g, 1e-12, "grad inside a body");
  // With respect to a replicated (invariant) value that meets varying ones:
  // the implicit broadcast's transpose sums over the devices, as in JAX.
  const ts::Array w = input({2}, ts::NamedSharding(m, ts::P()), 5);
  auto by_w = ts::shard_map(
      [](ts::Array xl, ts::Array wl) {
        return ts::grad([&](ts::Array v) { return ts::psum(ts::sum(ts::sin(v) * xl), "x"); })(wl);
      },
      m, {ts::P("x"), ts::P()}, ts::P());
  const ts::Array xr = ts::reshape(x8, {4, 2});
  expect_near(by_w(x8, w).to_vector<double>(), (ts::cos(w) * ts::sum(xr, {0})).to_vector<double>(), 1e-12,
              "grad of an invariant input inside a body");
  // Reverse mode through a whole shard_map: the body's vjp per device.
  const ts::Array gx = ts::grad([&](ts::Array a) { return ts::sum(body(a)); })(x);
  expect_near(gx.to_vector<double>(), (ts::cos(x) * x + ts::sin(x)).to_vector<double>(), 1e-12, "grad through shard_map");
  EXPECT_EQ(gx.sharding(), x.sharding());
  // A sharded batch and a replicated weight, a psum inside: the weight's
  // cotangent is summed over the devices.
  const ts::Array xb = input({10, 3}, ts::NamedSharding(m, ts::P("x")), 2), wb = input({3, 2}, ts::NamedSharding(m, ts::P()), 3);
  auto layer = ts::shard_map([](ts::Array xl, ts::Array wl) { return ts::psum(ts::sum(ts::tanh(ts::matmul(xl, wl))), "x"); },
                             m, {ts::P("x"), ts::P()}, ts::P());
  auto [gxb, gwb] = ts::grad([&](ts::Array a, ts::Array b) { return layer(a, b); }, ts::argnums<0, 1>)(xb, wb);
  auto [rxb, rwb] = ts::grad([](ts::Array a, ts::Array b) { return ts::sum(ts::tanh(ts::matmul(a, b))); },
                             ts::argnums<0, 1>)(xb, wb);
  expect_near(gxb.to_vector<double>(), rxb.to_vector<double>(), 1e-12, "grad of the batch through shard_map");
  expect_near(gwb.to_vector<double>(), rwb.to_vector<double>(), 1e-12, "grad of the weight through shard_map");
  EXPECT_EQ(gwb.sharding(), wb.sharding());
  // Under jit too: forward and backward shard_maps in one program.
  auto jg = ts::jit([&](ts::Array a, ts::Array b) { return ts::grad([&](ts::Array v) { return layer(a, v); })(b); });
  expect_near(jg(xb, wb).to_vector<double>(), rwb.to_vector<double>(), 1e-12, "jit(grad) through shard_map");
}

TEST(Autodiff, CustomJvpAndVjp) {
  const ts::Mesh m = line(4);
  const ts::Array x = input({6}, ts::NamedSharding(m, ts::P("x")));
  // custom_jvp: the rule is used, not the ops (here it scales by 3 to tell).
  int rule_calls = 0;
  auto f = ts::custom_jvp([](ts::Array a) { return ts::sin(a); },
                          [&](const std::vector<ts::Array>& p, const std::vector<ts::Array>& t) {
                            ++rule_calls;
                            return std::make_pair(ts::sin(p[0]), t[0] * ts::cos(p[0]) * 3.0);
                          });
  expect_near(f(x).to_vector<double>(), ts::sin(x).to_vector<double>(), 0, "custom_jvp runs the function");
  const auto want = (ts::cos(x) * 3.0).to_vector<double>();
  expect_near(ts::grad([&](ts::Array a) { return ts::sum(f(a)); })(x).to_vector<double>(), want, 1e-15, "grad");
  auto [y, dy] = ts::jvp([&](ts::Array a) { return f(a); }, {x}, {ts::ones(x.shape(), x.dtype(), x.sharding())});
  expect_near(dy.to_vector<double>(), want, 1e-15, "jvp");
  EXPECT_GE(rule_calls, 2);
  // Under jit the function is traced through; grad of it inside jit uses the rule.
  auto jg = ts::jit([&](ts::Array a) { return ts::grad([&](ts::Array b) { return ts::sum(f(b)); })(a); });
  expect_near(jg(x).to_vector<double>(), want, 1e-15, "jit(grad)");
  // Per-example: vmap of grad.
  const ts::Array xs = input({3, 4}, ts::NamedSharding(m, ts::P()));
  const ts::Array per = ts::vmap([&](ts::Array a) { return ts::grad([&](ts::Array b) { return ts::sum(f(b)); })(a); })(xs);
  expect_near(per.to_vector<double>(), (ts::cos(xs) * 3.0).to_vector<double>(), 1e-15, "vmap(grad)");

  // custom_vjp: a clipped gradient, as users write for stability.
  auto clipped = ts::custom_vjp(
      [](ts::Array a, ts::Array b) { return a * b; },
      [](const std::vector<ts::Array>& p) { return std::make_pair(p[0] * p[1], std::vector<ts::Array>{p[0], p[1]}); },
      [](const std::vector<ts::Array>& res, const ts::Array& ct) {
        return std::vector<ts::Array>{ts::clip(ct * res[1], -0.1, 0.1), ct * res[0]};
      });
  const ts::Array w = input({6}, ts::NamedSharding(m, ts::P("x")), 3);
  auto [gx, gw] = ts::grad([&](ts::Array a, ts::Array b) { return ts::sum(clipped(a, b)); }, ts::argnums<0, 1>)(x, w);
  expect_near(gx.to_vector<double>(), ts::clip(w, -0.1, 0.1).to_vector<double>(), 0, "custom_vjp bwd (clipped)");
  expect_near(gw.to_vector<double>(), x.to_vector<double>(), 0, "custom_vjp bwd");
  expect_error<ts::Error>([&] { ts::jacfwd([&](const ts::Array& a) { return clipped(a, w); })(x); }, "[custom_vjp]",
                          {"forward-mode", "custom_jvp"});
}

// jacfwd == jacrev on random programs: chains of differentiable ops (unary,
// binary with broadcasting, reductions, matmul, shape ops, stencils) drawn
// at random, on random layouts of meshes with 1 to 8 devices.
TEST(Autodiff, JacfwdEqualsJacrevOnRandomPrograms) {
  std::mt19937 rng(20261123);
  const auto meshes = ts::testing::test_meshes();
  using Step = std::function<ts::Array(const ts::Array&, const ts::Array&)>;  // (current, input)
  const std::vector<std::pair<const char*, Step>> steps = {
      {"sin", [](const ts::Array& v, const ts::Array&) { return ts::sin(v); }},
      {"tanh", [](const ts::Array& v, const ts::Array&) { return ts::tanh(v); }},
      {"exp", [](const ts::Array& v, const ts::Array&) { return ts::exp(v * 0.3); }},
      {"mul x", [](const ts::Array& v, const ts::Array& x) { return v * ts::reshape(ts::sum(x), {1, 1}); }},
      {"add x", [](const ts::Array& v, const ts::Array& x) { return v + ts::cos(x); }},
      {"div", [](const ts::Array& v, const ts::Array&) { return v / (v * v + 1.0); }},
      {"max", [](const ts::Array& v, const ts::Array& x) { return ts::maximum(v, x * 0.5); }},
      {"where", [](const ts::Array& v, const ts::Array& x) { return ts::where(x > 0.4, v, v * v); }},
      {"matmul", [](const ts::Array& v, const ts::Array& x) { return ts::matmul(v, ts::matmul(ts::transpose(x), x)) * 0.05; }},
      {"sum keepdims", [](const ts::Array& v, const ts::Array&) { return v - ts::mean(v, {1}, {.keepdims = true}); }},
      {"transpose", [](const ts::Array& v, const ts::Array&) { return ts::transpose(ts::transpose(v) * 2.0); }},
      {"cumsum", [](const ts::Array& v, const ts::Array&) { return ts::cumsum(v, 0) * 0.3; }},
      {"diff", [](const ts::Array& v, const ts::Array&) { return ts::diff(v, 1, 1, {.prepend = ts::slice(v, {{}, {0, 1}})}); }},
      {"flip/roll", [](const ts::Array& v, const ts::Array&) { return ts::roll(ts::flip(v, 0), 1, 1); }},
      {"pad/slice", [](const ts::Array& v, const ts::Array&) { return ts::slice(ts::pad(v, {{1, 0}, {0, 2}}, 0.5), {{0, 4}, {1, 6}}); }},
      {"reshape", [](const ts::Array& v, const ts::Array&) { return ts::reshape(ts::reshape(v, {20}) * 1.5, {4, 5}); }},
  };
  for (int prog = 0; prog < 24; ++prog) {
    const ts::Mesh& m = meshes[rng() % meshes.size()];
    const ts::PartitionSpec spec = ts::testing::random_spec(rng, m, 2);
    const ts::Array x = input({4, 5}, ts::NamedSharding(m, spec), prog);
    std::vector<size_t> pick;
    std::string text;
    for (int k = 0; k < 4; ++k) {
      pick.push_back(rng() % steps.size());
      text += std::string(k ? " -> " : "") + steps[pick.back()].first;
    }
    auto f = [&](const ts::Array& a) {
      ts::Array v = a;
      for (size_t i : pick) v = steps[i].second(v, a);
      return v;
    };
    const std::string what = text + " on " + ts::typeof(x);
    const ts::Array jf = ts::jacfwd(f)(x), jr = ts::jacrev(f)(x);
    ASSERT_EQ(jf.shape(), jr.shape()) << what;
    expect_near(jf.to_vector<double>(), jr.to_vector<double>(), 1e-11, what);
    // And against finite differences, now and then.
    if (prog % 6 == 0) {
      std::int64_t rows = 0;
      expect_near(jf.to_vector<double>(), numeric_jacobian(f, x, rows), 1e-5, what + " (finite differences)");
    }
  }
}
