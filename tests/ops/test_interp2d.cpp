// interp2d: goldens from interpax 0.3.16, a reference written from the
// formulas (derivative tables, then the bicubic Hermite patch, in double),
// the Hermite form's properties (exact at the knots, C1 across cell edges,
// the finite-difference derivatives), fill, NaN, rest dims of several ranks,
// f32 and f64, the SPMD property over many meshes and layouts (bitwise equal
// to one device), errors, the rule, jit == eager, and vmap.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"
#include "test_util.hpp"
#include "trace_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
using ts::testing::expect_jit_matches;
using ts::testing::expect_same;
using ts::testing::for_each_layout;
using ts::testing::numel;
using ts::testing::rule_of;
using ts::testing::test_meshes;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- reference

// A tabulated function: knots x (nx), y (ny) and rows f (nx, ny, R).
struct Table {
  std::vector<double> x, y, f;
  std::int64_t R = 1;
  std::int64_t nx() const { return static_cast<std::int64_t>(x.size()); }
  std::int64_t ny() const { return static_cast<std::int64_t>(y.size()); }
  double at(const std::vector<double>& g, std::int64_t i, std::int64_t j, std::int64_t r) const {
    return g[static_cast<size_t>((i * ny() + j) * R + r)];
  }
};

// interpax's "cubic" knot derivatives of g (nx, ny, R) along x (axis 0) or
// y (axis 1): one-sided secants at the ends, the plain mean of the two
// neighbouring secants inside.
std::vector<double> fd(const Table& t, const std::vector<double>& g, int axis) {
  const std::vector<double>& k = axis == 0 ? t.x : t.y;
  const auto n = static_cast<std::int64_t>(k.size());
  std::vector<double> out(g.size());
  for (std::int64_t i = 0; i < t.nx(); ++i)
    for (std::int64_t j = 0; j < t.ny(); ++j)
      for (std::int64_t r = 0; r < t.R; ++r) {
        auto val = [&](std::int64_t m) { return axis == 0 ? t.at(g, m, j, r) : t.at(g, i, m, r); };
        auto secant = [&](std::int64_t m) { return (val(m + 1) - val(m)) / (k[m + 1] - k[m]); };
        const std::int64_t m = axis == 0 ? i : j;
        double d;
        if (m == 0)
          d = secant(0);
        else if (m == n - 1)
          d = secant(n - 2);
        else
          d = (secant(m - 1) + secant(m)) / 2;
        out[static_cast<size_t>((i * t.ny() + j) * t.R + r)] = d;
      }
  return out;
}

// clip(searchsorted(k, v, 'right'), 1, n - 1); NaN sorts last.
std::int64_t cell_of(const std::vector<double>& k, double v) {
  const auto n = static_cast<std::int64_t>(k.size());
  std::int64_t i = 0;
  while (i < n && (std::isnan(v) || k[i] <= v)) ++i;
  return std::min(std::max<std::int64_t>(i, 1), n - 1);
}

// interp2d from the formulas, one row of R values per query.
std::vector<double> ref_interp2d(const Table& t, const std::vector<double>& xq, const std::vector<double>& yq,
                                 const std::string& method, std::optional<double> fill) {
  const std::vector<double> fx = fd(t, t.f, 0), fy = fd(t, t.f, 1), fxy = fd(t, fx, 1);
  std::vector<double> out;
  for (size_t q = 0; q < xq.size(); ++q) {
    const double u = xq[q], v = yq[q];
    const bool inside = u >= t.x.front() && u <= t.x.back() && v >= t.y.front() && v <= t.y.back();
    const std::int64_t i = cell_of(t.x, u), j = cell_of(t.y, v);
    const double dx = t.x[i] - t.x[i - 1], dy = t.y[j] - t.y[j - 1];
    const double tx = (u - t.x[i - 1]) / dx, ty = (v - t.y[j - 1]) / dy;
    auto H = [](int a, double s) { return a == 0 ? 1 - 3 * s * s + 2 * s * s * s : 3 * s * s - 2 * s * s * s; };
    auto G = [](int a, double s) { return a == 0 ? s - 2 * s * s + s * s * s : s * s * s - s * s; };
    for (std::int64_t r = 0; r < t.R; ++r) {
      if (!inside && fill) {
        out.push_back(*fill);
        continue;
      }
      double acc = 0;
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) {
          const std::int64_t ci = i - 1 + a, cj = j - 1 + b;
          if (method == "linear") {
            const double wx = a == 0 ? (t.x[i] - u) / dx : (u - t.x[i - 1]) / dx;
            const double wy = b == 0 ? (t.y[j] - v) / dy : (v - t.y[j - 1]) / dy;
            acc += t.at(t.f, ci, cj, r) * wx * wy;
          } else {
            acc += t.at(t.f, ci, cj, r) * H(a, tx) * H(b, ty) + dx * t.at(fx, ci, cj, r) * G(a, tx) * H(b, ty) +
                   dy * t.at(fy, ci, cj, r) * H(a, tx) * G(b, ty) +
                   dx * dy * t.at(fxy, ci, cj, r) * G(a, tx) * G(b, ty);
          }
        }
      out.push_back(acc);
    }
  }
  return out;
}

// ------------------------------------------------------------------ helpers

ts::NamedSharding single() { return ts::NamedSharding(test_meshes()[0], ts::P()); }

template <class T>
ts::Array put(const std::vector<double>& v, const ts::Shape& shape, const ts::NamedSharding& s) {
  return ts::device_put(std::vector<T>(v.begin(), v.end()), shape, s);
}

// The table's operands on `s` in dtype T; rest dims `rest` (numel R).
template <class T>
struct Operands {
  ts::Array x, y, f;
};
template <class T>
Operands<T> operands(const Table& t, const ts::Shape& rest, const ts::NamedSharding& s) {
  ts::Shape fs{t.nx(), t.ny()};
  fs.insert(fs.end(), rest.begin(), rest.end());
  return {put<T>(t.x, {t.nx()}, s), put<T>(t.y, {t.ny()}, s), put<T>(t.f, fs, s)};
}

// got == want within tol (absolute, scaled by max(1, |want|)); NaN only where NaN.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << what << " at " << k << ": got " << got[k];
      continue;
    }
    EXPECT_NEAR(got[k], want[k], tol * std::max(1.0, std::abs(want[k]))) << what << " at " << k;
  }
}

// The same values, bit for bit (NaN included).
bool same_bits(const ts::Array& a, const ts::Array& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<unsigned char> ha(static_cast<size_t>(a.nbytes())), hb(static_cast<size_t>(b.nbytes()));
  if (!ha.empty()) a.copy_to_host(ha.data(), a.dtype()), b.copy_to_host(hb.data(), b.dtype());
  return ha == hb;
}

template <class T>
std::vector<double> values(const ts::Array& a) {
  const auto v = a.to_vector<T>();
  return std::vector<double>(v.begin(), v.end());
}

// A table on a non-uniform grid with smooth, non-polynomial rows.
Table smooth_table(std::int64_t nx, std::int64_t ny, std::int64_t R, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> step(0.3, 1.7), u(-1, 1);
  Table t;
  t.R = R;
  // Knots exact in f32, so that f32 and f64 grids are the same points.
  t.x = {-1.0};
  for (std::int64_t i = 1; i < nx; ++i) t.x.push_back(static_cast<float>(t.x.back() + step(rng)));
  t.y = {2.0};
  for (std::int64_t j = 1; j < ny; ++j) t.y.push_back(static_cast<float>(t.y.back() + 0.5 * step(rng)));
  for (std::int64_t i = 0; i < nx; ++i)
    for (std::int64_t j = 0; j < ny; ++j)
      for (std::int64_t r = 0; r < R; ++r)
        t.f.push_back(std::sin(1.3 * t.x[i] + 0.2 * static_cast<double>(r)) * std::cos(0.7 * t.y[j]) + 0.3 * u(rng));
  return t;
}

// n queries spread over and a little beyond the grid, with the corners, a
// knot, points on the edges, outside points and NaN among them.
void make_queries(const Table& t, std::int64_t n, std::uint32_t seed, std::vector<double>& xq, std::vector<double>& yq) {
  std::mt19937 rng(seed);
  const double x0 = t.x.front(), x1 = t.x.back(), y0 = t.y.front(), y1 = t.y.back();
  std::uniform_real_distribution<double> ux(x0 - 0.2, x1 + 0.2), uy(y0 - 0.1, y1 + 0.1);
  xq.resize(static_cast<size_t>(n));
  yq.resize(static_cast<size_t>(n));
  for (std::int64_t q = 0; q < n; ++q) xq[q] = ux(rng), yq[q] = uy(rng);
  const std::vector<std::pair<double, double>> special{{x0, y0}, {x1, y1}, {t.x[1], t.y[1]}, {x1, 0.5 * (y0 + y1)},
                                                       {kNaN, y0}, {x0, kNaN},   {x0 - 1, y0}};
  for (size_t k = 0; k < special.size() && static_cast<std::int64_t>(k) < n; ++k)
    xq[k * 3 % n] = special[k].first, yq[k * 3 % n] = special[k].second;
}

// The golden grid of the interpax comparisons.
Table golden_table() {
  Table t;
  t.x = {0.0, 1.0, 2.5, 3.0, 4.5};
  t.y = {-1.0, 0.0, 0.5, 2.0};
  t.f = {1.0, 2.0, -0.5, 3.0,  0.25, -1.0, 4.0, 2.0, 3.5,  0.0,
         0.6, -2.0, 2.0, 1.5, -1.0, 0.5,  -3.0, 2.5, 0.75, 1.25};
  return t;
}
const std::vector<double> kGoldenXq{0.3, 1.7, 2.75, 4.0, 0.0, 4.5, 2.5, 1.0, 3.9, -0.1, 4.6, 2.0, kNaN};
const std::vector<double> kGoldenYq{-0.6, 0.2, 1.1, 1.9, -1.0, 2.0, 0.5, 0.0, -0.95, 0.0, 0.0, 2.1, 0.0};

// ==================================================================== goldens

// Values from interpax 0.3.16 with jax_enable_x64:
//   interpax.interp2d(xq, yq, x, y, f, method=m, extrap=e)
// for the golden table and queries above (the last four queries lie outside
// or are NaN).
TEST(Interp2d, InterpaxGoldens) {
  const Table t = golden_table();
  const auto s = single();
  const auto o = operands<double>(t, {}, s);
  const auto xq = put<double>(kGoldenXq, {13}, s), yq = put<double>(kGoldenYq, {13}, s);
  auto run = [&](const std::string& m, std::optional<double> fill) {
    return values<double>(ts::interp2d(xq, yq, o.x, o.y, o.f, {.method = m, .fill = fill}));
  };
  // extrap=False
  const std::vector<double> cubic{0.8105906, 0.45144474074074115, -0.7133333333333335, 1.144094375857341, 1.0,
                                  1.2500000000000036, 0.6, -1.0, -0.803933299999999, kNaN, kNaN, kNaN, kNaN};
  const std::vector<double> linear{0.9049999999999999, 0.6453333333333334, -0.42000000000000004, 0.9444444444444444,
                                   1.0, 1.25, 0.5999999999999999, -1.0, -0.8449999999999995, kNaN, kNaN, kNaN, kNaN};
  expect_close(run("cubic", kNaN), cubic, 1e-13, "cubic");
  expect_close(run("linear", kNaN), linear, 1e-13, "linear");
  // The default options: cubic, NaN outside.
  expect_close(values<double>(ts::interp2d(xq, yq, o.x, o.y, o.f)), cubic, 1e-13, "defaults");
  // extrap=0 gives 0 for the three outside queries (and NaN for the NaN
  // query, where interp2d gives the fill: NaN coordinates count as outside).
  auto zero = run("cubic", 0.0);
  std::vector<double> want = cubic;
  for (size_t k = 9; k < 13; ++k) want[k] = 0;
  expect_close(zero, want, 1e-13, "fill 0");
  // extrap=True: the edge cells' polynomials beyond the edges.
  want = cubic;
  want[9] = 2.279833333333333, want[10] = 2.5749629629629625, want[11] = -1.6384938271604952;
  expect_close(run("cubic", std::nullopt), want, 1e-13, "cubic extrapolated");
  want = linear;
  want[9] = 2.3000000000000003, want[10] = 2.5666666666666664, want[11] = -0.8266666666666668;
  expect_close(run("linear", std::nullopt), want, 1e-13, "linear extrapolated");
  // The reference agrees with interpax too.
  expect_close(ref_interp2d(t, kGoldenXq, kGoldenYq, "cubic", kNaN), cubic, 1e-13, "reference");

  // Rows of 2: f and f * f - 1 stacked on a last axis.
  Table t2 = t;
  t2.R = 2;
  t2.f.clear();
  for (double v : t.f) t2.f.push_back(v), t2.f.push_back(v * v - 1);
  const auto o2 = operands<double>(t2, {2}, s);
  const std::vector<double> q4x(kGoldenXq.begin(), kGoldenXq.begin() + 4), q4y(kGoldenYq.begin(), kGoldenYq.begin() + 4);
  auto r2 = ts::interp2d(put<double>(q4x, {4}, s), put<double>(q4y, {4}, s), o2.x, o2.y, o2.f);
  EXPECT_EQ(r2.shape(), (ts::Shape{4, 2}));
  expect_close(values<double>(r2),
               {0.8105906, 0.3288290100000002, 0.4514447407407411, 2.616136059259261, -0.7133333333333332,
                -0.20987499999999953, 1.1440943758573394, -0.3572097668038398},
               1e-13, "rest (2,)");

  // All in f32 (interpax computes in f32 there; we weigh in f64).
  const auto of = operands<float>(t, {}, s);
  auto rf = ts::interp2d(put<float>(q4x, {4}, s), put<float>(q4y, {4}, s), of.x, of.y, of.f);
  EXPECT_EQ(rf.dtype(), ts::f32);
  expect_close(values<float>(rf), {0.8105905055999756, 0.45144474506378174, -0.7133334279060364, 1.1440948247909546},
               1e-6, "f32");
}

// ============================================================ the reference

// Random non-uniform grids, queries inside, on the edges, outside and NaN;
// both methods, three fills, rest dims of rank 0, 1 and 2, f64 and f32.
TEST(Interp2d, MatchesReference) {
  const auto s = single();
  const std::vector<std::pair<std::int64_t, std::int64_t>> grids{{2, 2}, {2, 7}, {5, 3}, {9, 11}};
  const std::vector<ts::Shape> rests{{}, {3}, {2, 3}};
  std::uint32_t seed = 1;
  for (auto [nx, ny] : grids)
    for (const ts::Shape& rest : rests) {
      const Table t = smooth_table(nx, ny, numel(rest), seed++);
      std::vector<double> xq, yq;
      make_queries(t, 40, seed++, xq, yq);
      const auto o64 = operands<double>(t, rest, s);
      const auto o32 = operands<float>(t, rest, s);
      const auto xq64 = put<double>(xq, {8, 5}, s), yq64 = put<double>(yq, {8, 5}, s);
      const auto xq32 = put<float>(xq, {8, 5}, s), yq32 = put<float>(yq, {8, 5}, s);
      std::vector<double> xq32v(xq.size()), yq32v(yq.size());  // the f32 queries, as the kernel sees them
      for (size_t k = 0; k < xq.size(); ++k) xq32v[k] = static_cast<float>(xq[k]), yq32v[k] = static_cast<float>(yq[k]);
      Table t32 = t;  // the f32 table
      for (auto* v : {&t32.x, &t32.y, &t32.f})
        for (double& e : *v) e = static_cast<float>(e);
      ts::Shape want_shape{8, 5};
      want_shape.insert(want_shape.end(), rest.begin(), rest.end());
      for (const std::string m : {"linear", "cubic"})
        for (std::optional<double> fill : {std::optional<double>(kNaN), std::optional<double>(-7.5),
                                           std::optional<double>()}) {
          const std::string what = m + " " + std::to_string(nx) + "x" + std::to_string(ny) + " rest " +
                                   ts::shape_str(rest) + " fill " + (fill ? std::to_string(*fill) : "extrapolate");
          const ts::Interp2dOptions opt{.method = m, .fill = fill};
          auto r = ts::interp2d(xq64, yq64, o64.x, o64.y, o64.f, opt);
          EXPECT_EQ(r.shape(), want_shape) << what;
          EXPECT_EQ(r.dtype(), ts::f64) << what;
          expect_close(values<double>(r), ref_interp2d(t, xq, yq, m, fill), 1e-12, what);
          auto r32 = ts::interp2d(xq32, yq32, o32.x, o32.y, o32.f, opt);
          EXPECT_EQ(r32.dtype(), ts::f32) << what;
          expect_close(values<float>(r32), ref_interp2d(t32, xq32v, yq32v, m, fill), 2e-6, what + " f32");
        }
    }
}

// ======================================================= the Hermite form

// At every knot both methods give the tabulated row exactly, in f32 and f64.
TEST(Interp2d, ExactAtKnots) {
  const auto s = single();
  const Table t = smooth_table(6, 5, 3, 11);
  std::vector<double> xq, yq;
  for (double u : t.x)
    for (double v : t.y) xq.push_back(u), yq.push_back(v);
  const auto n = static_cast<std::int64_t>(xq.size());
  for (const std::string m : {"linear", "cubic"}) {
    const auto o = operands<double>(t, {3}, s);
    EXPECT_EQ(values<double>(ts::interp2d(put<double>(xq, {n}, s), put<double>(yq, {n}, s), o.x, o.y, o.f,
                                          {.method = m})),
              t.f)
        << m;
    const auto of = operands<float>(t, {3}, s);
    const auto got = ts::interp2d(put<float>(xq, {n}, s), put<float>(yq, {n}, s), of.x, of.y, of.f, {.method = m});
    std::vector<float> want(t.f.begin(), t.f.end());
    EXPECT_EQ(got.to_vector<float>(), want) << m;
  }
}

// The cubic patch is C1: across every interior knot line the one-sided
// slopes agree, and on a knot they equal interpax's finite-difference
// derivative (the plain mean of the neighbouring secants, also on this
// non-uniform grid, where the spacing-weighted mean differs). Values are
// continuous across cell edges, and a function bilinear in x and y is
// reproduced exactly by both methods.
TEST(Interp2d, HermiteProperties) {
  const auto s = single();
  Table t;
  t.x = {0.0, 0.5, 2.0, 2.25, 4.0};
  t.y = {-1.0, 1.0, 1.5, 3.5};
  for (double u : t.x)
    for (double v : t.y) t.f.push_back(std::exp(0.4 * u) * (1 + v * v));
  const auto o = operands<double>(t, {}, s);
  auto eval = [&](const std::vector<double>& xq, const std::vector<double>& yq, const std::string& m = "cubic") {
    const auto n = static_cast<std::int64_t>(xq.size());
    return values<double>(ts::interp2d(put<double>(xq, {n}, s), put<double>(yq, {n}, s), o.x, o.y, o.f, {.method = m}));
  };
  const double h = 1e-6;
  for (size_t k = 1; k + 1 < t.x.size(); ++k)
    for (double v : {t.y[0], t.y[1], 1.2, 3.0}) {
      const double u = t.x[k];
      const auto F = eval({u - h, u, u + h, u - 1e-12, u + 1e-12}, {v, v, v, v, v});
      const double left = (F[1] - F[0]) / h, right = (F[2] - F[1]) / h;
      EXPECT_NEAR(left, right, 1e-4) << "x knot " << k << " y " << v;
      EXPECT_NEAR(F[3], F[4], 1e-10) << "value across x knot " << k;
      if (v == t.y[0] || v == t.y[1]) {
        const size_t j = v == t.y[0] ? 0 : 1;
        auto fv = [&](size_t i) { return t.f[i * t.y.size() + j]; };
        const double mean = ((fv(k) - fv(k - 1)) / (t.x[k] - t.x[k - 1]) + (fv(k + 1) - fv(k)) / (t.x[k + 1] - t.x[k])) / 2;
        EXPECT_NEAR(right, mean, 1e-4) << "fx at knot " << k;
      }
    }
  for (size_t k = 1; k + 1 < t.y.size(); ++k)
    for (double u : {0.2, 2.1, 3.9}) {
      const double v = t.y[k];
      const auto F = eval({u, u, u}, {v - h, v, v + h});
      EXPECT_NEAR((F[1] - F[0]) / h, (F[2] - F[1]) / h, 1e-4) << "y knot " << k << " x " << u;
    }
  // At the first knot the derivative is the first secant.
  const auto F = eval({0.0, h}, {-1.0, -1.0});
  EXPECT_NEAR((F[1] - F[0]) / h, (t.f[4] - t.f[0]) / 0.5, 1e-4);

  // f = 2 + 3x - y + 0.5xy: secants are exact, so is the cubic.
  Table b = t;
  b.f.clear();
  for (double u : b.x)
    for (double v : b.y) b.f.push_back(2 + 3 * u - v + 0.5 * u * v);
  const auto ob = operands<double>(b, {}, s);
  std::vector<double> xq, yq, want;
  make_queries(b, 50, 3, xq, yq);
  for (size_t q = 0; q < xq.size(); ++q) {
    const bool in = xq[q] >= 0 && xq[q] <= 4 && yq[q] >= -1 && yq[q] <= 3.5;
    want.push_back(in ? 2 + 3 * xq[q] - yq[q] + 0.5 * xq[q] * yq[q] : kNaN);
  }
  for (const std::string m : {"linear", "cubic"}) {
    auto r = ts::interp2d(put<double>(xq, {50}, s), put<double>(yq, {50}, s), ob.x, ob.y, ob.f, {.method = m});
    expect_close(values<double>(r), want, 1e-12, "bilinear " + m);
  }
}

// ============================================================ fill and NaN

TEST(Interp2d, OutsideNaNAndDtypes) {
  const auto s = single();
  const Table t = smooth_table(8, 8, 2, 21);
  const double x0 = t.x.front(), x1 = t.x.back(), y0 = t.y.front(), y1 = t.y.back();
  // Just outside on each side, a NaN in each coordinate, and the corners.
  const std::vector<double> xq{x0 - 1e-9, x1 + 1e-9, 0.5 * (x0 + x1), 0.5 * (x0 + x1), kNaN, x0, x0, x1};
  const std::vector<double> yq{y0, y1, y0 - 1e-9, y1 + 1e-9, y0, kNaN, y0, y1};
  const auto o = operands<float>(t, {2}, s);
  const auto xa = put<double>(xq, {8}, s), ya = put<double>(yq, {8}, s);
  for (const std::string m : {"linear", "cubic"}) {
    auto r = ts::interp2d(xa, ya, o.x, o.y, o.f, {.method = m, .fill = -7.0});
    EXPECT_EQ(r.dtype(), ts::f32);  // f's dtype, whatever the coordinates'
    const auto v = r.to_vector<float>();
    for (size_t k = 0; k < 12; ++k) EXPECT_EQ(v[k], -7.0f) << m << " " << k;
    // The corners are inside: their rows are the table's.
    EXPECT_EQ(v[12], static_cast<float>(t.f[0]));
    EXPECT_EQ(v[15], static_cast<float>(t.f.back()));
    auto d = ts::interp2d(xa, ya, o.x, o.y, o.f, {.method = m}).to_vector<float>();
    for (size_t k = 0; k < 12; ++k) EXPECT_TRUE(std::isnan(d[k])) << m << " " << k;
    // Extrapolating: finite beyond the edges, NaN for NaN coordinates.
    auto e = ts::interp2d(xa, ya, o.x, o.y, o.f, {.method = m, .fill = std::nullopt}).to_vector<float>();
    for (size_t k = 0; k < 8; ++k) EXPECT_TRUE(std::isfinite(e[k])) << m << " " << k;
    for (size_t k = 8; k < 12; ++k) EXPECT_TRUE(std::isnan(e[k])) << m << " " << k;
  }

  // A NaN in f reaches the queries whose cell reads that row, no others:
  // cubic reads knots i-2 .. i+1 of the cell [x[i-1], x[i]], linear i-1, i.
  Table tn = t;
  tn.f[(6 * 8 + 5) * 2 + 1] = kNaN;  // f[6, 5, 1]
  const auto on = operands<double>(tn, {2}, s);
  auto mid = [](const std::vector<double>& k, int c) { return 0.5 * (k[c - 1] + k[c]); };
  const std::vector<double> qx{mid(t.x, 2), mid(t.x, 5), mid(t.x, 6), mid(t.x, 7)};
  const std::vector<double> qy{mid(t.y, 2), mid(t.y, 5), mid(t.y, 6), mid(t.y, 6)};
  auto c = values<double>(ts::interp2d(put<double>(qx, {4}, s), put<double>(qy, {4}, s), on.x, on.y, on.f));
  EXPECT_TRUE(std::isfinite(c[0]) && std::isfinite(c[1]));  // cell (2, 2): knots 0..3
  for (size_t k = 2; k < 8; k += 2) EXPECT_TRUE(std::isnan(c[k + 1]) && std::isfinite(c[k])) << k;
  auto l = values<double>(
      ts::interp2d(put<double>(qx, {4}, s), put<double>(qy, {4}, s), on.x, on.y, on.f, {.method = "linear"}));
  EXPECT_TRUE(std::isfinite(l[3]));  // cell (5, 5): knots 4, 5
  EXPECT_TRUE(std::isnan(l[5]) && std::isnan(l[7]));

  // Dtypes: integer f and coordinates give f32; f64 f gives f64.
  auto ix = ts::device_put(std::vector<std::int32_t>{0, 2}, {2}, s);
  auto iq = ts::device_put(std::vector<std::int32_t>{1, 0, 2}, {3}, s);
  auto fi = ts::device_put(std::vector<std::int32_t>{0, 10, 20, 30}, {2, 2}, s);
  auto ri = ts::interp2d(iq, iq, ix, ix, fi, {.method = "linear"});
  EXPECT_EQ(ri.dtype(), ts::f32);
  EXPECT_EQ(ri.to_vector<float>(), (std::vector<float>{15, 0, 30}));
  EXPECT_EQ(ts::interp2d(iq, iq, ix, ix, ts::astype(fi, ts::f64)).dtype(), ts::f64);
  // Empty queries and empty rows.
  auto e0 = ts::interp2d(put<double>({}, {0, 3}, s), put<double>({}, {0, 3}, s), o.x, o.y, o.f);
  EXPECT_EQ(e0.shape(), (ts::Shape{0, 3, 2}));
  auto fe = ts::zeros({8, 8, 0}, ts::f32, s);
  EXPECT_EQ(ts::interp2d(xa, ya, o.x, o.y, fe).shape(), (ts::Shape{8, 0}));
}

// ====================================================================== SPMD

// The result on every test mesh, with the queries in a spread of layouts
// (uneven, fewer rows than devices, empty) and the grid, the table and
// sometimes yq in random layouts, is bitwise the one-device result, laid
// out like the queries.
TEST(Interp2d, SpmdMatchesOneDevice) {
  std::mt19937 rng(7);
  const Table t = smooth_table(6, 9, 6, 31);
  for (const ts::Shape& qs : {ts::Shape{7, 5}, ts::Shape{3, 1}, ts::Shape{0, 4}}) {
    std::vector<double> xq, yq;
    make_queries(t, numel(qs), 41, xq, yq);
    for (const std::string m : {"linear", "cubic"}) {
      const ts::Interp2dOptions opt{.method = m, .fill = 0.0};
      const auto s1 = single();
      const auto want = ts::interp2d(put<double>(xq, qs, s1), put<float>(yq, qs, s1), put<float>(t.x, {t.nx()}, s1),
                                     put<double>(t.y, {t.ny()}, s1), put<float>(t.f, {t.nx(), t.ny(), 2, 3}, s1), opt);
      std::vector<double> yq32;  // yq as its f32 operand holds it
      for (double e : yq) yq32.push_back(static_cast<float>(e));
      expect_close(values<float>(want), ref_interp2d(t, xq, yq32, m, 0.0), 1e-5, "one device " + m);
      for_each_layout(2, [&](const ts::NamedSharding& s) {
        auto random_layout = [&](int rank) {
          return ts::NamedSharding(s.mesh(), ts::testing::random_spec(rng, s.mesh(), rank));
        };
        const ts::Array x = put<float>(t.x, {t.nx()}, random_layout(1));
        const ts::Array y = put<double>(t.y, {t.ny()}, random_layout(1));
        const ts::Array f = put<float>(t.f, {t.nx(), t.ny(), 2, 3}, random_layout(4));
        const bool same = std::uniform_int_distribution<int>(0, 2)(rng) > 0;
        const auto xs = put<double>(xq, qs, s);
        const auto ys = put<float>(yq, qs, same ? s : random_layout(2));
        auto r = ts::interp2d(xs, ys, x, y, f, opt);
        const std::string what = m + " " + ts::typeof(xs) + " " + ts::typeof(ys) + " " + ts::typeof(f);
        ASSERT_EQ(r.shape(), want.shape()) << what;
        if (same) {
          EXPECT_EQ(r.sharding(), s) << what << " -> " << ts::typeof(r);
        }
        EXPECT_TRUE(same_bits(r, want)) << what;
      });
    }
  }
}

// Replicated tables and sharded queries: nothing moves.
TEST(Interp2d, PurelyLocal) {
  const ts::Mesh mesh = ts::make_mesh({8}, {"x"});
  const ts::NamedSharding rep(mesh, ts::P()), rows(mesh, ts::P("x"));
  const Table t = smooth_table(4, 6, 5, 51);
  const auto o = operands<float>(t, {5}, rep);
  std::vector<double> xq, yq;
  make_queries(t, 64, 52, xq, yq);
  const auto xs = put<float>(xq, {64}, rows), ys = put<float>(yq, {64}, rows);
  ts::Array r;
  auto ex = ts::explain([&] { r = ts::interp2d(xs, ys, o.x, o.y, o.f); });
  EXPECT_EQ(ex.bytes_moved(), 0) << ex.str();
  EXPECT_EQ(r.sharding(), rows);
  EXPECT_EQ(ts::typeof(r), "f32[64@x,5]");
}

// Explicit axes: the result keeps the queries' layout, the replicated
// table is used where it is.
TEST(Interp2d, ExplicitMesh) {
  const ts::Mesh mesh = ts::make_mesh({8}, {"X"}, {ts::AxisType::Explicit});
  const ts::NamedSharding rep(mesh, ts::P()), rows(mesh, ts::P("X"));
  const Table t = smooth_table(4, 6, 4, 81);
  std::vector<double> xq, yq;
  make_queries(t, 20, 82, xq, yq);
  const auto o = operands<float>(t, {4}, rep);
  const auto o1 = operands<float>(t, {4}, single());
  const auto want = ts::interp2d(put<float>(xq, {20}, single()), put<float>(yq, {20}, single()), o1.x, o1.y, o1.f);
  auto r = ts::interp2d(put<float>(xq, {20}, rows), put<float>(yq, {20}, rows), o.x, o.y, o.f);
  EXPECT_EQ(ts::typeof(r), "f32[20@X,4]");
  EXPECT_TRUE(same_bits(r, want));
  // A table sharded over an Explicit axis is gathered (it must be whole);
  // yq replicated meets xq's layout.
  auto rs = ts::interp2d(put<float>(xq, {20}, rows), put<float>(yq, {20}, rep), o.x, o.y,
                         put<float>(t.f, {4, 6, 4}, ts::NamedSharding(mesh, ts::P(ts::none, ts::none, "X"))));
  EXPECT_EQ(ts::typeof(rs), "f32[20@X,4]");
  EXPECT_TRUE(same_bits(rs, want));
}

// ==================================================================== errors

TEST(Interp2d, Errors) {
  const auto s = single();
  auto a = [&](ts::Shape shape) { return ts::zeros(shape, ts::f32, s); };
  const auto q = a({3}), x = a({4}), y = a({5}), f = a({4, 5, 2});
  expect_error<ts::ShapeError>([&] { ts::interp2d(q, q, a({4, 1}), y, f); }, "[interp2d]",
                               {"x must be 1-d", "(4, 1)"});
  expect_error<ts::ShapeError>([&] { ts::interp2d(q, q, x, a({}), f); }, "[interp2d]", {"y must be 1-d", "()"});
  expect_error<ts::ShapeError>([&] { ts::interp2d(q, q, a({1}), y, a({1, 5})); }, "[interp2d]",
                               {"x needs at least 2 points", "(1,)"});
  expect_error<ts::ShapeError>([&] { ts::interp2d(q, q, x, a({1}), a({4, 1})); }, "[interp2d]",
                               {"y needs at least 2 points", "(1,)"});
  expect_error<ts::ShapeError>([&] { ts::interp2d(q, q, x, y, a({5, 4, 2})); }, "[interp2d]",
                               {"f must have shape (nx, ny, ...) = (4, 5, ...)", "got (5, 4, 2)"});
  expect_error<ts::ShapeError>([&] { ts::interp2d(q, q, x, y, a({4})); }, "[interp2d]", {"f must have shape", "(4,)"});
  expect_error<ts::ShapeError>([&] { ts::interp2d(q, a({3, 1}), x, y, f); }, "[interp2d]",
                               {"xq and yq must have the same shape", "xq (3,)", "yq (3, 1)"});
  expect_error<ts::ValueError>([&] { ts::interp2d(q, q, x, y, f, {.method = "nearest"}); }, "[interp2d]",
                          {"unknown method \"nearest\"", "\"linear\" or \"cubic\""});
  expect_error<ts::Error>([&] { ts::interp2d(q, ts::Array{}, x, y, f); }, "[interp2d]", {"yq"});
  const auto other = ts::zeros({4}, ts::f32, ts::NamedSharding(test_meshes()[1], ts::P()));
  expect_error<ts::ShardingError>([&] { ts::interp2d(q, q, other, y, f); }, "[interp2d]", {"different meshes"});
  // Not differentiable in the grid (tests/transforms/test_ifu_rules.cpp has
  // the derivatives): the message names the op and the way out; with
  // stop_gradient, it runs.
  const auto xv = ts::device_put(std::vector<float>{0, 1, 2, 3}, {4}, s);
  const auto yv = ts::device_put(std::vector<float>{0, 1, 2, 3, 4}, {5}, s);
  const auto fn = [&](ts::Array xq, ts::Array grid) { return ts::interp2d(xq, xq, grid, yv, f); };
  expect_error<ts::Error>([&] { ts::jvp(fn, {q, xv}, {ts::Array(), ts::ones(xv.shape(), xv.dtype(), xv.sharding())}); },
                          "[interp2d]", {"not differentiable with respect to the grid x/y", "stop_gradient"});
  auto [val, tan] = ts::jvp([&](ts::Array xq, ts::Array grid) { return fn(xq, ts::stop_gradient(grid)); }, {q, xv},
                            {ts::Array(), ts::ones(xv.shape(), xv.dtype(), xv.sharding())});
  EXPECT_EQ(val.shape(), (ts::Shape{3, 2}));
}

// ================================================================ primitive

TEST(Interp2d, RuleText) {
  const ts::NamedSharding rep(ts::make_mesh({8}, {"x"}), ts::P());
  auto z = [&](ts::Shape s) { return ts::zeros(s, ts::f32, rep); };
  const auto q = z({5, 3}), x = z({4}), y = z({6}), f = z({4, 6, 2});
  // Elementwise over the queries; grid, table and the rest dims whole.
  auto r = rule_of([&] { ts::interp2d(q, q, x, y, f); });
  EXPECT_EQ(r.first, "([i,j],[i,j],[k],[l],[k,l,m])->([i,j,m]) {i=5,j=3,k=4,l=6,m=2} need_replication={k,l,m}");
  EXPECT_EQ(r.second, "interp2d method=cubic fill=nan");
  const auto f2 = z({4, 6});
  r = rule_of([&] { ts::interp2d(q, q, x, y, f2, {.method = "linear", .fill = std::nullopt}); });
  EXPECT_EQ(r.first, "([i,j],[i,j],[k],[l],[k,l])->([i,j]) {i=5,j=3,k=4,l=6} need_replication={k,l}");
  EXPECT_EQ(r.second, "interp2d method=linear fill=extrapolate");
  r = rule_of([&] { ts::interp2d(q, q, x, y, f, {.fill = -0.5}); });
  EXPECT_EQ(r.second, "interp2d method=cubic fill=-0.5");
}

// jit == eager bitwise on every test mesh, the queries in a spread of
// layouts, the rest in random ones; the program applies interp2d.
TEST(Interp2d, JitMatchesEager) {
  std::mt19937 rng(9);
  const Table t = smooth_table(5, 4, 3, 61);
  const auto fn = [](ts::Array xq, ts::Array yq, ts::Array x, ts::Array y, ts::Array f) {
    return ts::interp2d(xq, yq, x, y, f, {.method = "cubic", .fill = 0.0}) * 2.0f;
  };
  const auto lin = [](ts::Array xq, ts::Array yq, ts::Array x, ts::Array y, ts::Array f) {
    return ts::interp2d(xq, yq, x, y, f, {.method = "linear"});
  };
  auto jfn = ts::jit(fn);
  auto jlin = ts::jit(lin);
  int cases = 0;
  for (const ts::Shape& qs : {ts::Shape{6, 5}, ts::Shape{1, 3}, ts::Shape{0, 2}}) {
    std::vector<double> xq, yq;
    make_queries(t, numel(qs), 62, xq, yq);
    for_each_layout(2, [&](const ts::NamedSharding& s) {
      auto random_layout = [&](int rank) {
        return ts::NamedSharding(s.mesh(), ts::testing::random_spec(rng, s.mesh(), rank));
      };
      const auto xs = put<float>(xq, qs, s), ys = put<float>(yq, qs, random_layout(2));
      const auto x = put<double>(t.x, {5}, random_layout(1)), y = put<float>(t.y, {4}, random_layout(1));
      const auto f = put<float>(t.f, {5, 4, 3}, random_layout(3));
      const std::string what = ts::typeof(xs) + " " + ts::typeof(ys) + " " + ts::typeof(f);
      expect_jit_matches(jfn, fn, "interp2d", what, xs, ys, x, y, f);
      expect_jit_matches(jlin, lin, "interp2d", what, xs, ys, x, y, f);
      ++cases;
    });
  }
  EXPECT_GT(cases, 100);
}

// vmap over the queries is one call over all of them; a table per example
// runs example by example. Both equal the examples stacked.
TEST(Interp2d, Vmap) {
  const auto s = single();
  const Table t = smooth_table(5, 6, 4, 71);
  const auto o = operands<double>(t, {4}, s);
  std::vector<double> xq, yq;
  make_queries(t, 3 * 7, 72, xq, yq);
  const auto xb = put<double>(xq, {3, 7}, s), yb = put<double>(yq, {3, 7}, s);
  auto example = [&](const ts::Array& b, std::int64_t e) { return ts::squeeze(ts::slice(b, {{e, e + 1, 1}}), {0}); };
  std::vector<ts::Array> per;
  for (std::int64_t e = 0; e < 3; ++e) per.push_back(ts::interp2d(example(xb, e), example(yb, e), o.x, o.y, o.f));
  const auto want = ts::stack(per, 0);

  auto over_queries = ts::vmap([&](ts::Array a, ts::Array b) { return ts::interp2d(a, b, o.x, o.y, o.f); });
  ts::Array got;
  const auto rec = ts::testing::record_rules([&] { got = over_queries(xb, yb); });
  int binds = 0;
  for (const auto& p : rec.params) binds += p.rfind("interp2d", 0) == 0;
  EXPECT_EQ(binds, 1);
  expect_same(got, want, "vmap over queries");

  // Only xq batched (yq shared), the batch dim last.
  const auto y0 = example(yb, 0);
  auto xq_only = ts::vmap([&](ts::Array a, ts::Array b) { return ts::interp2d(a, b, o.x, o.y, o.f); },
                          {.in_axes = {1, ts::not_mapped}});
  const auto xt = ts::transpose(xb, {1, 0});
  std::vector<ts::Array> per0;
  for (std::int64_t e = 0; e < 3; ++e) per0.push_back(ts::interp2d(example(xb, e), y0, o.x, o.y, o.f));
  expect_same(xq_only(xt, y0), ts::stack(per0, 0), "vmap over xq");

  // A table per example (2 tables), the queries shared.
  const auto f2 = ts::stack({o.f, o.f * -2.0}, 0);
  auto over_tables = ts::vmap([&](ts::Array table) { return ts::interp2d(example(xb, 0), y0, o.x, o.y, table); });
  const auto tables = over_tables(f2);
  expect_same(tables, ts::stack({per0[0], ts::interp2d(example(xb, 0), y0, o.x, o.y, o.f * -2.0)}, 0),
              "vmap over tables");
}

}  // namespace
