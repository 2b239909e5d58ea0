// Autodiff: every differentiable primitive's JVP, transpose and batching
// rules against central finite differences in f64 (through jacfwd and
// jacrev) on several layouts; jacfwd == jacrev; chunked Jacobians equal
// unchunked ones bitwise; grad, value_and_grad (argnums, has_aux, pytrees),
// vjp, hessian, stop_gradient; composition with jit, vmap and each other;
// gradients keep the primals' shardings; the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
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

// Finite differences that know their own error. For each input element i,
// with step h: the central difference c1 (step h), c2 (step 2h), and the
// one-sided differences forward and backward. Where f is smooth around x,
// c1 - f' = O(h^2) and Richardson's estimate of that error is |c2 - c1| / 3
// (c2 - f' being 4 times c1 - f'); rounding adds about eps * |f| / h per
// evaluation. An element whose one-sided differences disagree by more than
// h * |f''| could explain (1e-4 relative, so f'' up to 100) sits on a kink or
// jump (max, where) within a step: it is skipped, and counted. f is
// evaluated on one device (the same function; layouts do not change values
// beyond rounding, and the Jacobian under test keeps x's layout).
struct FdCount {
  std::int64_t checked = 0, skipped = 0;
};

FdCount expect_matches_finite_differences(const Fn& f, const ts::Array& x, const std::vector<double>& jac,
                                          const std::string& what) {
  const double h = 1e-6, eps = std::numeric_limits<double>::epsilon();
  const ts::NamedSharding one(line(1), ts::P());
  const auto x0 = x.to_vector<double>();
  auto eval = [&](size_t i, double step) {
    auto p = x0;
    p[i] += step;
    return f(ts::device_put(p, x.shape(), one)).to_vector<double>();
  };
  const auto f0 = f(ts::device_put(x0, x.shape(), one)).to_vector<double>();
  const size_t n = x0.size(), m = f0.size();
  FdCount count;
  EXPECT_EQ(jac.size(), m * n) << what;
  if (jac.size() != m * n) return count;
  std::int64_t wrong = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    const auto fp = eval(i, h), fm = eval(i, -h), fp2 = eval(i, 2 * h), fm2 = eval(i, -2 * h);
    for (size_t k = 0; k < m; ++k) {
      const double c1 = (fp[k] - fm[k]) / (2 * h), c2 = (fp2[k] - fm2[k]) / (4 * h);
      const double fwd = (fp[k] - f0[k]) / h, bwd = (f0[k] - fm[k]) / h;
      const double mag = 1 + std::abs(c1);
      if (std::abs(fwd - bwd) > 1e-4 * mag || std::abs(c2 - c1) > 1e-4 * mag) {
        ++count.skipped;
        continue;
      }
      const double fmax = std::max({std::abs(f0[k]), std::abs(fp2[k]), std::abs(fm2[k]), 1.0});
      const double tol = std::abs(c2 - c1) + 100 * eps * fmax / h + 1e-9 * mag;
      ++count.checked;
      if (!(std::abs(jac[k * n + i] - c1) <= tol) && wrong++ == 0)
        first = "d out[" + std::to_string(k) + "] / d x[" + std::to_string(i) + "] is " +
                std::to_string(jac[k * n + i]) + ", finite differences give " + std::to_string(c1) + " (tolerance " +
                std::to_string(tol) + ")";
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << count.checked
                      << " checked elements differ; first: " << first;
  return count;
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

// Tall operands against a few columns (a chunk of directions) run the GEMM
// in blocks of rows, the whole Jacobian in one call: the bits must agree.
// 1300 rows over 2 devices: 650 per device, blocked at n <= 64, k = 512.
TEST(Autodiff, ChunkedJacobianOfATallProductIsBitwise) {
  const ts::Mesh m = line(2);
  const ts::Array a = input({1300, 512}, ts::NamedSharding(m, ts::P("x")));
  const ts::Array x = input({512}, ts::NamedSharding(m, ts::P()), 1);
  auto f = [&](const ts::Array& v) { return ts::tanh(ts::matmul(a, v)) * 2.0 + 1.0; };
  const ts::Array whole = ts::jacfwd(f)(x);
  for (std::int64_t c : {16, 64, 100})
    EXPECT_EQ(ts::jacfwd(f, {.chunk_size = c})(x).to_vector<double>(), whole.to_vector<double>()) << "chunk " << c;
  // The narrow product itself against columns of the wide one.
  const ts::Array w = input({512, 512}, ts::NamedSharding(m, ts::P()), 2);
  const ts::Array wide = ts::matmul(a, w), narrow = ts::matmul(a, ts::slice(w, {{0, 512}, {40, 56}}));
  EXPECT_EQ(narrow.to_vector<double>(), ts::slice(wide, {{0, 1300}, {40, 56}}).to_vector<double>());
}

// A product with a basis direction is the operand's column itself: the
// Jacobian of A @ x is A exactly, -0 and inf entries included (a GEMM with
// the identity would add +0 to -0 and make inf * 0 = NaN terms).
TEST(Autodiff, JacfwdOfAProductIsTheMatrixExactly) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> av(6 * 4);
  for (size_t i = 0; i < av.size(); ++i) av[i] = 0.25 * static_cast<double>(i) - 2.0;
  av[5] = -0.0;
  av[10] = inf;
  for (int n : {1, 2, 3}) {
    const ts::Mesh m = line(n);
    const ts::Array a = ts::device_put(av, {6, 4}, ts::NamedSharding(m, ts::P("x")));
    const ts::Array x = input({4}, ts::NamedSharding(m, ts::P()), 1);
    for (std::int64_t c : {0, 1, 3}) {
      const auto j = ts::jacfwd([&](const ts::Array& v) { return ts::matmul(a, v); }, {.chunk_size = c})(x)
                         .to_vector<double>();
      ASSERT_EQ(j.size(), av.size());
      for (size_t i = 0; i < av.size(); ++i)
        EXPECT_TRUE(j[i] == av[i] && std::signbit(j[i]) == std::signbit(av[i]))
            << "entry " << i << ": " << j[i] << " for " << av[i] << " on " << n << " devices, chunk " << c;
    }
  }
}

// A chunked Jacobian holds its output and one chunk's values at a time:
// each chunk's columns are written into their place, not kept for a
// concatenation (and jacfwd's columns go last, with no transposed copy).
// Peaks are the allocator's, per device, over what the inputs hold.
TEST(Autodiff, ChunkedJacobianPeakIsTheOutputPlusOneChunk) {
  const ts::Mesh m = line(2);
  const std::int64_t rows = 4096, params = 128, chunk = 8;
  const ts::Array a = input({rows, params}, ts::NamedSharding(m, ts::P("x")));
  const ts::Array x = input({params}, ts::NamedSharding(m, ts::P()), 1);
  auto f = [&](const ts::Array& v) { return ts::tanh(ts::matmul(a, v)) * 2.0 + 1.0; };
  auto peak_of = [&](const std::function<ts::Array()>& run, ts::Array& out) {
    std::int64_t base = 0, peak = 0;
    for (const auto& d : m.devices()) {
      ts::reset_peak_memory(d);
      base = std::max<std::int64_t>(base, ts::memory_stats(d).bytes_in_use);
    }
    out = run();
    out.block_until_ready();
    for (const auto& d : m.devices()) peak = std::max<std::int64_t>(peak, ts::memory_stats(d).peak_bytes_in_use);
    return peak - base;
  };
  const std::int64_t one_chunk = chunk * rows * 8 / 2;  // one chunk of directions, rows sharded
  for (bool forward : {true, false}) {
    const char* what = forward ? "jacfwd" : "jacrev";
    ts::Array whole, chunked;
    (void)peak_of([&] { return forward ? ts::jacfwd(f)(x) : ts::jacrev(f)(x); }, whole);
    const std::int64_t peak =
        peak_of([&] { return forward ? ts::jacfwd(f, {.chunk_size = chunk})(x) : ts::jacrev(f, {.chunk_size = chunk})(x); },
                chunked);
    EXPECT_EQ(chunked.to_vector<double>(), whole.to_vector<double>()) << what;
    EXPECT_EQ(chunked.sharding(), whole.sharding()) << what;
    std::int64_t output = 0;  // the Jacobian's bytes on the fullest device
    for (const ts::Shard& sh : chunked.addressable_shards()) {
      std::int64_t n = 8;
      for (const ts::Slice& d : sh.index) n *= d.stop - d.start;
      output = std::max(output, n);
    }
    // Joining the chunks by concatenation held every chunk and the result
    // at once: at least twice the output.
    EXPECT_LE(peak, output + 8 * one_chunk) << what << ": peak " << peak << " B, output " << output << " B";
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
  // An operand laid out otherwise than the body takes it: the shard_map
  // first brings it there (the engine's path, on GPUs too).
  const ts::Mesh m2(ts::testing::first_devices(4), {2, 2}, {"x", "y"});
  auto body2 = ts::shard_map([](ts::Array xl) { return ts::sin(xl) * xl; }, m2, {ts::P("x")}, ts::P("x"));
  const ts::Array xy = ts::device_put(x.to_vector<double>(), {10}, ts::NamedSharding(m2, ts::P("y")));
  const ts::Array dx = ts::ones({10}, ts::f64, ts::NamedSharding(m2, ts::P("y")));
  auto [yv, ty] = ts::jvp([&](ts::Array a) { return body2(a); }, {xy}, {dx});
  expect_near(ty.to_vector<double>(), (ts::cos(x) * x + ts::sin(x)).to_vector<double>(), 1e-12,
              "jvp through shard_map, resharded operand");
  expect_near(ts::grad([&](ts::Array a) { return ts::sum(body2(a)); })(xy).to_vector<double>(),
              (ts::cos(x) * x + ts::sin(x)).to_vector<double>(), 1e-12, "grad through shard_map, resharded operand");
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

// jacfwd == jacrev on random programs, and both against finite differences:
// chains of differentiable ops (unary, binary with broadcasting, reductions,
// matmul, shape ops, stencils) drawn at random, on random layouts of meshes
// with 1 to 8 devices.
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
  std::int64_t checked = 0, total = 0;
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
    // And both against finite differences, every program: agreeing with
    // each other proves nothing when a rule is wrong in both modes.
    const FdCount fc = expect_matches_finite_differences(f, x, jf.to_vector<double>(), what + " (jacfwd)");
    const std::int64_t n = jf.size();
    // The programs' kinks and jumps (max, where) fall within a step of an
    // element only by chance: nearly every element is checked.
    EXPECT_GE(fc.checked, n - n / 20) << what << ": " << fc.skipped << " of " << n << " skipped";
    checked += fc.checked;
    total += n;
  }
  EXPECT_GE(checked, total - total / 100) << "elements checked against finite differences";
}

namespace {

// Row i of x along `axis`, as its own array.
ts::Array example_of(const ts::Array& x, int axis, std::int64_t i) {
  std::vector<ts::SliceSpec> sl(static_cast<size_t>(x.ndim()));
  sl[axis] = ts::SliceSpec{i, i + 1, 1};
  return ts::squeeze(ts::slice(x, sl), {axis});
}

void expect_each_near(const ts::Array& got, const std::vector<ts::Array>& per_example, double tol,
                      const std::string& what) {
  ASSERT_EQ(got.shape()[0], static_cast<std::int64_t>(per_example.size())) << what;
  for (size_t i = 0; i < per_example.size(); ++i) {
    const ts::Array gi = example_of(got, 0, static_cast<std::int64_t>(i));
    ASSERT_EQ(gi.shape(), per_example[i].shape()) << what << " example " << i;
    expect_near(gi.to_vector<double>(), per_example[i].to_vector<double>(), tol,
                what + " example " + std::to_string(i));
  }
}

}  // namespace

// Per-example gradients: vmap of grad against a loop of grad over the
// examples, element by element (a sum over the examples would hide
// gradients swapped between examples or spread over them).
TEST(Autodiff, PerExampleGradientsEqualALoopOfGrad) {
  auto loss = [](ts::Array w, ts::Array xi) {
    ts::Array h = ts::tanh(ts::matmul(ts::reshape(xi, {1, 6}), w));
    return ts::sum(h * h) + 0.1 * ts::sum(ts::sin(xi) * xi);
  };
  const std::vector<ts::Mesh> meshes{line(4), ts::Mesh(ts::testing::first_devices(6), {2, 3}, {"x", "y"})};
  for (const ts::Mesh& m : meshes) {
    const std::string batch_axis = m.axis_names().back();
    const ts::Array w = input({6, 4}, ts::NamedSharding(m, ts::P()), 3);
    const ts::Array x = input({13, 6}, ts::NamedSharding(m, ts::P(batch_axis)), 1);
    const std::string where = " on " + ts::typeof(x);
    std::vector<ts::Array> want_w, want_x;
    for (std::int64_t i = 0; i < 13; ++i) {
      auto [gw, gx] = ts::grad(loss, ts::argnums<0, 1>)(w, example_of(x, 0, i));
      want_w.push_back(gw);
      want_x.push_back(gx);
    }
    // With respect to the shared weights, one gradient per example.
    const ts::Array per_w = ts::vmap([&](ts::Array xi) { return ts::grad(loss)(w, xi); })(x);
    ASSERT_EQ(per_w.shape(), (ts::Shape{13, 6, 4}));
    expect_each_near(per_w, want_w, 1e-13, "vmap(grad w.r.t. w)" + where);
    // Both arguments, the batch along dim 1 of a transposed batch, chunked.
    const ts::Array xt = ts::transpose(x);
    auto both = ts::vmap([&](ts::Array wi, ts::Array xi) { return ts::grad(loss, ts::argnums<0, 1>)(wi, xi); },
                         {.in_axes = {ts::not_mapped, 1}, .chunk_size = 5});
    auto [pw, px] = both(w, xt);
    expect_each_near(pw, want_w, 1e-13, "vmap(grad) both args, in_axes 1, w" + where);
    expect_each_near(px, want_x, 1e-13, "vmap(grad) both args, in_axes 1, x" + where);
    // Per-example weights too: the weights batched along their last dim.
    const ts::Array ws = input({6, 4, 13}, ts::NamedSharding(m, ts::P(ts::none, ts::none, batch_axis)), 4);
    const ts::Array pw2 =
        ts::vmap([&](ts::Array wi, ts::Array xi) { return ts::grad(loss)(wi, xi); }, {.in_axes = {2, 0}})(ws, x);
    std::vector<ts::Array> want_w2;
    for (std::int64_t i = 0; i < 13; ++i) want_w2.push_back(ts::grad(loss)(example_of(ws, 2, i), example_of(x, 0, i)));
    expect_each_near(pw2, want_w2, 1e-13, "vmap(grad) per-example weights" + where);
  }
}

// Gradients in f32 against the f64 gradient of the same function at the same
// (f32-representable) point. Each result is a short chain of f32 operations
// on O(1) values, and sums of at most 24 terms; 64 f32 epsilons of the
// largest gradient element bound the rounding of such chains. A rule that
// loses precision in f32 (a cotangent cast through a narrower type, a
// constant rounded early) misses it by orders of magnitude.
TEST(Autodiff, F32GradientsAgainstF64) {
  using F = std::function<ts::Array(const ts::Array&)>;
  const std::vector<std::pair<std::string, F>> fs = {
      {"tanh(matmul)^2",
       [](const ts::Array& a) {
         ts::Array h = ts::tanh(ts::matmul(a, ts::transpose(ts::cos(a))));
         return ts::sum(h * h);
       }},
      {"softmax cross-entropy",
       [](const ts::Array& a) {
         ts::Array z = a - ts::max(a, {1}, {.keepdims = true});
         ts::Array lse = ts::log(ts::sum(ts::exp(z), {1}));
         return ts::mean(lse - ts::sum(z * ts::sin(a), {1}));
       }},
      {"mean/prod/sqrt",
       [](const ts::Array& a) { return ts::mean(ts::sqrt(a * a + 1.0)) + ts::sum(ts::prod(a * 0.5 + 1.0, {0})); }},
      {"cumsum/diff/roll",
       [](const ts::Array& a) {
         return ts::sum(ts::cumsum(ts::sin(a), 1) * ts::roll(a, 1, 0)) + ts::sum(ts::diff(a * a, 1, 1));
       }},
      {"take/scatter_add/segment_sum",
       [](const ts::Array& a) {
         const ts::NamedSharding r(a.sharding().mesh(), ts::P());
         const ts::Array idx = ts::device_put(std::vector<std::int32_t>{3, 0, 3, 1}, {4}, r);
         ts::Array t = ts::take(ts::exp(a * 0.5), idx, 0);
         ts::Array s = ts::scatter_add(a, idx, t * t);
         return ts::sum(ts::segment_sum(s * a, ts::device_put(std::vector<std::int32_t>{1, 0, 1, 1}, {4}, r), 2));
       }},
      {"pow/div/sigmoid",
       [](const ts::Array& a) { return ts::sum(ts::pow(a * a + 1.0, ts::sigmoid(a)) / (a * a + 2.0)); }},
  };
  const std::vector<ts::Mesh> meshes{line(1), line(3), ts::Mesh(ts::testing::first_devices(4), {2, 2}, {"x", "y"})};
  for (const ts::Mesh& m : meshes)
    for (const auto& spec : {ts::P(), ts::P(m.axis_names()[0]), ts::P(ts::none, m.axis_names().back())}) {
      const ts::NamedSharding s(m, spec);
      std::vector<float> h32(24);
      const auto h = values(24, 7);
      for (size_t i = 0; i < h.size(); ++i) h32[i] = static_cast<float>(h[i]);
      const std::vector<double> h64(h32.begin(), h32.end());  // the same points
      const ts::Array x32 = ts::device_put(h32, {4, 6}, s), x64 = ts::device_put(h64, {4, 6}, s);
      for (const auto& [name, f] : fs) {
        const std::string what = name + " on " + ts::typeof(x32);
        const ts::Array g32 = ts::grad(f)(x32), g64 = ts::grad(f)(x64);
        ASSERT_EQ(g32.dtype(), ts::f32) << what;
        EXPECT_EQ(g32.sharding(), x32.sharding()) << what;
        const auto a = g32.to_vector<double>(), b = g64.to_vector<double>();
        double scale = 1;
        for (double v : b) scale = std::max(scale, std::abs(v));
        const double tol = 64 * std::numeric_limits<float>::epsilon() * scale;
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << what << " element " << i;
      }
    }
}

namespace {

// One collective in a shard_map body, as the linear map it is on the
// body's sin(x): out[o] = sum of coef * sin(x[i]) over the terms (o, i, coef)
// (flat row-major indices of the global arrays), written out by hand.
struct CollectiveCase {
  std::string what;
  ts::Mesh mesh;
  ts::Shape in_shape, out_shape;
  ts::PartitionSpec in_spec, out_spec;
  std::function<ts::Array(ts::Array)> collective;
  std::vector<std::tuple<std::int64_t, std::int64_t, double>> terms;
};

// grad of L(x) = sum(W * y^2), y = shard_map(collective(sin(x))), against
// the chain rule done by hand: dL/dy[o] = 2 W[o] y[o], and the transpose of
// the map sends it back along each term, dL/dx[i] = sum over the terms
// (o, i, coef) of coef * cos(x[i]) * dL/dy[o]. The transposes the library
// must get right follow from the terms: psum_scatter's cotangent is the
// all_gather of its cotangent (each source row gets its output row's), pmean's
// is pbroadcast's divided by the group size, an untiled all_gather's is the
// device's own slice, an all_to_all's is the all_to_all back (split and
// concat swapped).
void check_collective_grad(const CollectiveCase& c) {
  const std::int64_t nin = ts::testing::numel(c.in_shape), nout = ts::testing::numel(c.out_shape);
  const auto hx = values(nin, 11);
  std::vector<double> hw(static_cast<size_t>(nout));
  for (std::int64_t o = 0; o < nout; ++o) hw[o] = 0.5 + 0.25 * std::cos(0.9 * static_cast<double>(o));
  std::vector<double> y(static_cast<size_t>(nout), 0.0);
  for (const auto& [o, i, coef] : c.terms) y[o] += coef * std::sin(hx[i]);
  std::vector<double> want(static_cast<size_t>(nin), 0.0);
  for (const auto& [o, i, coef] : c.terms) want[i] += coef * std::cos(hx[i]) * 2 * hw[o] * y[o];

  const ts::Array x = ts::device_put(hx, c.in_shape, ts::NamedSharding(c.mesh, c.in_spec));
  const ts::Array w = ts::device_put(hw, c.out_shape, ts::NamedSharding(c.mesh, ts::P()));
  auto coll = c.collective;
  auto f = ts::shard_map([coll](ts::Array xl) { return coll(ts::sin(xl)); }, c.mesh, {c.in_spec}, c.out_spec);
  const std::string label = c.what + " on " + c.mesh.str();
  const ts::Array out = f(x);
  ASSERT_EQ(out.shape(), c.out_shape) << label;
  expect_near(out.to_vector<double>(), y, 1e-14, label + " (forward)");
  auto loss = [&](ts::Array a) {
    ts::Array v = f(a);
    return ts::sum(w * v * v);
  };
  const ts::Array g = ts::grad(loss)(x);
  EXPECT_EQ(g.sharding(), x.sharding()) << label;
  expect_near(g.to_vector<double>(), want, 1e-13, label + " (grad)");
  expect_near(ts::jit(ts::grad(loss))(x).to_vector<double>(), want, 1e-13, label + " (jit(grad))");
}

}  // namespace

TEST(Autodiff, GradThroughCollectivesAgainstHandDerivedTransposes) {
  const ts::Mesh m3 = line(3), m4 = line(4), m23(ts::testing::first_devices(6), {2, 3}, {"x", "y"});
  using Terms = std::vector<std::tuple<std::int64_t, std::int64_t, double>>;
  std::vector<CollectiveCase> cases;
  {
    // Tiled psum_scatter of rows, 7 rows over 3 devices (blocks of 3, 2, 2):
    // y[r, c] = sum over devices d of sin(x[d*7 + r, c]).
    const std::int64_t k = 3, R = 7, C = 2;
    Terms t;
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t d = 0; d < k; ++d) t.emplace_back(r * C + c, (d * R + r) * C + c, 1.0);
    cases.push_back({"psum_scatter tiled, uneven",
                     m3,
                     {k * R, C},
                     {R, C},
                     ts::P("x"),
                     ts::P("x"),
                     [](ts::Array v) { return ts::psum_scatter(v, "x", 0, true); },
                     t});
  }
  {
    // The same over "y" of a 2x3 mesh, the columns split over "x": 5 rows over 3.
    const std::int64_t k = 3, R = 5, C = 4;
    Terms t;
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t d = 0; d < k; ++d) t.emplace_back(r * C + c, (d * R + r) * C + c, 1.0);
    cases.push_back({"psum_scatter tiled over y, uneven",
                     m23,
                     {k * R, C},
                     {R, C},
                     ts::P("y", "x"),
                     ts::P("y", "x"),
                     [](ts::Array v) { return ts::psum_scatter(v, "y", 0, true); },
                     t});
  }
  {
    // Untiled: each device's block is [4, C]; device d keeps the sum of
    // every block's row d: y[d*C + c] = sum over s of sin(x[s*4 + d, c]).
    const std::int64_t k = 4, C = 3;
    Terms t;
    for (std::int64_t d = 0; d < k; ++d)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t s = 0; s < k; ++s) t.emplace_back(d * C + c, (s * k + d) * C + c, 1.0);
    cases.push_back({"psum_scatter untiled",
                     m4,
                     {k * k, C},
                     {k * C},
                     ts::P("x"),
                     ts::P("x"),
                     [](ts::Array v) { return ts::psum_scatter(v, "x", 0, false); },
                     t});
  }
  {
    // pmean: y[r, c] = (1/4) sum over d of sin(x[d*R + r, c]), invariant.
    const std::int64_t k = 4, R = 3, C = 2;
    Terms t;
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t d = 0; d < k; ++d) t.emplace_back(r * C + c, (d * R + r) * C + c, 1.0 / k);
    cases.push_back(
        {"pmean", m4, {k * R, C}, {R, C}, ts::P("x"), ts::P(), [](ts::Array v) { return ts::pmean(v, "x"); }, t});
  }
  {
    // pmean over both axes of the 2x3 mesh: blocks [R, C] at (dx, dy),
    // y[r, c] = (1/6) sum over dx, dy of sin(x[dx*R + r, dy*C + c]).
    const std::int64_t R = 2, C = 3;
    Terms t;
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t dx = 0; dx < 2; ++dx)
          for (std::int64_t dy = 0; dy < 3; ++dy)
            t.emplace_back(r * C + c, (dx * R + r) * (3 * C) + dy * C + c, 1.0 / 6);
    cases.push_back({"pmean over x and y",
                     m23,
                     {2 * R, 3 * C},
                     {R, C},
                     ts::P("x", "y"),
                     ts::P(),
                     [](ts::Array v) {
                       return ts::pmean(v, ts::AxisNames({"x", "y"}));
                     },
                     t});
  }
  {
    // Untiled all_gather on a new middle dim: y[r, d, c] = sin(x[d*R + r, c]).
    const std::int64_t k = 4, R = 2, C = 3;
    Terms t;
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t d = 0; d < k; ++d)
        for (std::int64_t c = 0; c < C; ++c) t.emplace_back((r * k + d) * C + c, (d * R + r) * C + c, 1.0);
    cases.push_back({"all_gather untiled, axis 1",
                     m4,
                     {k * R, C},
                     {R, k, C},
                     ts::P("x"),
                     ts::P(),
                     [](ts::Array v) { return ts::all_gather(v, "x", 1, false); },
                     t});
  }
  {
    // Over "y" of the 2x3 mesh, on a new leading dim; the result still
    // varies over "x": y[dy, dx*R + r, c] = sin(x[dx*R + r, dy*C + c]).
    const std::int64_t R = 2, C = 2;
    Terms t;
    for (std::int64_t dy = 0; dy < 3; ++dy)
      for (std::int64_t dx = 0; dx < 2; ++dx)
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t c = 0; c < C; ++c)
            t.emplace_back((dy * 2 * R + dx * R + r) * C + c, (dx * R + r) * (3 * C) + dy * C + c, 1.0);
    cases.push_back({"all_gather untiled over y",
                     m23,
                     {2 * R, 3 * C},
                     {3, 2 * R, C},
                     ts::P("x", "y"),
                     ts::P(ts::none, "x"),
                     [](ts::Array v) { return ts::all_gather(v, "y", 0, false); },
                     t});
  }
  {
    // Tiled all_to_all, columns split, rows concatenated: device d gets
    // block [s*R + r, c] = sin(x[s*R + r, d*C + c]) from each s; laid out as
    // row blocks, y[d*3R + s*R + r, c].
    const std::int64_t k = 3, R = 2, C = 2;
    Terms t;
    for (std::int64_t d = 0; d < k; ++d)
      for (std::int64_t s = 0; s < k; ++s)
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t c = 0; c < C; ++c)
            t.emplace_back((d * k * R + s * R + r) * C + c, (s * R + r) * (k * C) + d * C + c, 1.0);
    cases.push_back({"all_to_all tiled",
                     m3,
                     {k * R, k * C},
                     {k * k * R, C},
                     ts::P("x"),
                     ts::P("x"),
                     [](ts::Array v) { return ts::all_to_all(v, "x", 1, 0, true); },
                     t});
  }
  {
    // Untiled over "y" of the 2x3 mesh: blocks [3, C] at (dx, dy); device
    // (dx, dy) gets [c, s] = its source s's row dy:
    // y[dx*C + c, dy*3 + s] = sin(x[dx*3 + dy, s*C + c]).
    const std::int64_t C = 2;
    Terms t;
    for (std::int64_t dx = 0; dx < 2; ++dx)
      for (std::int64_t dy = 0; dy < 3; ++dy)
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t s = 0; s < 3; ++s)
            t.emplace_back((dx * C + c) * 9 + dy * 3 + s, (dx * 3 + dy) * (3 * C) + s * C + c, 1.0);
    cases.push_back({"all_to_all untiled over y",
                     m23,
                     {6, 3 * C},
                     {2 * C, 9},
                     ts::P("x", "y"),
                     ts::P("x", "y"),
                     [](ts::Array v) { return ts::all_to_all(v, "y", 0, 1, false); },
                     t});
  }
  for (const auto& c : cases) check_collective_grad(c);
  // A tiled all_to_all of unequal split blocks runs forward, but the exchange
  // back cannot reassemble them: reverse mode says so.
  const ts::Array x = input({21, 2}, ts::NamedSharding(m3, ts::P("x")));
  auto uneven =
      ts::shard_map([](ts::Array v) { return ts::all_to_all(v, "x", 0, 1, true); }, m3, {ts::P("x")}, ts::P("x"));
  EXPECT_EQ(uneven(x).shape(), (ts::Shape{7, 6}));
  expect_error<ts::Error>([&] { ts::grad([&](ts::Array a) { return ts::sum(uneven(a)); })(x); }, "[all_to_all]",
                          {"differentiating a tiled all_to_all", "split axis (7)", "3 equal blocks"});
}

// ------------------------------------------------- derivatives across layouts

namespace {

ts::Mesh layout_mesh(bool explicit_y) {
  const auto ex = ts::AxisType::Explicit, au = ts::AxisType::Auto;
  return ts::Mesh(ts::testing::first_devices(8), {4, 2}, {"x", "y"}, {au, explicit_y ? ex : au});
}

std::vector<double> host_of(const ts::Array& a) { return a.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << what << " element " << i;
}

}  // namespace

// Tangents and cotangents are laid out as their primals, so rules meet
// values laid out alike even where the op itself was given an out_sharding
// or a reshape cannot keep the cotangent's layout. Each case once raised a
// sharding error from inside a rule; each is checked against its
// derivative written by hand.
TEST(AutodiffLayouts, RulesMeetValuesLaidOutAlike) {
  for (bool explicit_y : {false, true}) {
    const ts::Mesh mesh = layout_mesh(explicit_y);
    const std::string m = mesh.str();
    std::vector<double> a(16), b(16);
    for (int i = 0; i < 16; ++i) {
      a[static_cast<size_t>(i)] = 0.5 + 0.125 * i;
      b[static_cast<size_t>(i)] = 1.5 - 0.0625 * i;
    }
    const auto A = ts::device_put(a, {16}, ts::NamedSharding(mesh, ts::P("x")));
    const auto B = ts::device_put(b, {16}, ts::NamedSharding(mesh, ts::P("x")));
    // pow with out_sharding on another axis: d/da a^b = b a^(b-1), d/db = a^b log a.
    auto gp = ts::grad([&](ts::Array u, ts::Array v) { return ts::sum(ts::pow(u, v, {.out_sharding = ts::P("y")})); },
                       ts::argnums<0, 1>)(A, B);
    std::vector<double> ga(16), gb(16);
    for (size_t i = 0; i < 16; ++i) {
      ga[i] = b[i] * std::pow(a[i], b[i] - 1);
      gb[i] = std::pow(a[i], b[i]) * std::log(a[i]);
    }
    expect_near_all(host_of(std::get<0>(gp)), ga, "pow d/da on " + m);
    expect_near_all(host_of(std::get<1>(gp)), gb, "pow d/db on " + m);
    auto [pv, pt] = ts::jvp([&](ts::Array u) { return ts::pow(u, B, {.out_sharding = ts::P("y")}); }, {A}, {B});
    std::vector<double> jt(16);
    for (size_t i = 0; i < 16; ++i) jt[i] = ga[i] * b[i];
    expect_near_all(host_of(pt), jt, "pow jvp on " + m);

    // max over dim 0 with out_sharding: the tangent of the row holding the maximum.
    std::vector<double> x(4 * 6);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.0 + static_cast<double>(i));
    const auto X = ts::device_put(x, {4, 6}, ts::NamedSharding(mesh, ts::P("x", "y")));
    const auto gm = host_of(ts::grad([&](ts::Array u) {
      return ts::sum(ts::max(u, {0}, {.out_sharding = ts::P("y")}) *
                     ts::arange(1, 7, 1, ts::DType::f64, ts::NamedSharding(mesh, ts::P("y"))));
    })(X));
    std::vector<double> want_m(x.size(), 0.0);
    for (int c = 0; c < 6; ++c) {
      int arg = 0;
      for (int r = 1; r < 4; ++r)
        if (x[static_cast<size_t>(r * 6 + c)] > x[static_cast<size_t>(arg * 6 + c)]) arg = r;
      want_m[static_cast<size_t>(arg * 6 + c)] = c + 1;
    }
    expect_near_all(gm, want_m, "max with out_sharding on " + m);

    // reshape, expand_dims and a strided slice of dims split over devices:
    // the gradient of sum(w * f(x)) is w laid back where f took each element.
    const auto X3 =
        ts::device_put(std::vector<double>(12, 1.0), {3, 2, 2}, ts::NamedSharding(mesh, ts::P(ts::none, "y")));
    std::vector<double> w(12);
    for (size_t i = 0; i < 12; ++i) w[i] = 0.5 * static_cast<double>(i) - 2;
    const auto W = ts::device_put(w, {3, 4}, ts::NamedSharding(mesh, ts::P()));
    expect_near_all(host_of(ts::grad([&](ts::Array u) {
                      return ts::sum(W * ts::reshape(u, {3, 4}));
                    })(X3)),
                    w, "reshape on " + m);
    const auto X1 = ts::device_put(std::vector<double>{2.0}, {1}, ts::NamedSharding(mesh, ts::P("y")));
    expect_near_all(host_of(ts::grad([&](ts::Array u) { return ts::sum(ts::expand_dims(u, 0) * 3.0); })(X1)), {3.0},
                    "expand_dims on " + m);
    const auto X7 = ts::device_put(std::vector<double>(7, 1.0), {7}, ts::NamedSharding(mesh, ts::P("x")));
    const auto g7 = host_of(ts::grad([&](ts::Array u) {
      return ts::sum(ts::slice(u, {ts::SliceSpec{std::nullopt, std::nullopt, -2}}) *
                     ts::arange(1, 5, 1, ts::DType::f64, ts::NamedSharding(mesh, ts::P())));
    })(X7));
    expect_near_all(g7, {4, 0, 3, 0, 2, 0, 1}, "x[::-2] on " + m);
  }
}

// Without check_vma, an output the body computes varying over an axis its
// spec leaves out is taken as replicated, and each replica's body gets a
// share of its cotangent (as in JAX): ppermute there and back is the
// identity, so the gradient is the cotangent itself, not size times it.
TEST(AutodiffLayouts, ShardMapWithoutCheckVmaGivesEachReplicaItsShare) {
  const ts::Mesh mesh(ts::testing::first_devices(6), {3, 2}, {"x", "z"});
  const auto x = ts::device_put(std::vector<double>{-1.25, 0.5}, {2}, ts::NamedSharding(mesh, ts::P()));
  auto body = [](ts::Array v) {
    return ts::ppermute(ts::ppermute(v, {"x"}, {{0, 1}, {1, 2}, {2, 0}}), {"x"}, {{1, 0}, {2, 1}, {0, 2}});
  };
  auto f = ts::shard_map(body, mesh, {ts::P()}, ts::P(), ts::ShardMapOptions{.check_vma = false});
  const auto g = host_of(ts::grad([&](ts::Array v) {
    return ts::sum(f(v) * ts::arange(1, 3, 1, ts::DType::f64, ts::NamedSharding(mesh, ts::P())));
  })(x));
  expect_near_all(g, {1.0, 2.0}, "grad through ppermute there and back");
}

// On a mesh with Explicit and Auto axes, operands that disagree only on an
// Auto axis are reconciled as on an all-Auto mesh (the batch of a vmap
// sharded over the Explicit axis made a dot's operands disagree on 'x').
TEST(AutodiffLayouts, AutoAxisDisagreementNextToExplicitAxes) {
  const ts::Mesh mesh = layout_mesh(true);
  std::vector<double> a(3 * 3 * 2), b(2 * 4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25 * static_cast<double>(i) - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 1.5 - 0.5 * static_cast<double>(i);
  const auto As = ts::device_put(a, {3, 3, 2}, ts::NamedSharding(mesh, ts::P(ts::none, "x")));
  const auto B = ts::device_put(b, {2, 4}, ts::NamedSharding(mesh, ts::P(ts::none, "x")));
  const auto got =
      ts::vmap([&](ts::Array r) { return ts::dot(r, B); })(ts::reshard(As, ts::P("y", "x"))).to_vector<double>();
  std::vector<double> want;
  for (int e = 0; e < 3; ++e)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        for (int k = 0; k < 2; ++k) s += a[static_cast<size_t>(e * 6 + i * 2 + k)] * b[static_cast<size_t>(k * 4 + j)];
        want.push_back(s);
      }
  expect_near_all(got, want, "vmap of dot with the batch over Explicit 'y'");
}
