// Rubix 0.0.5's dust model (dust.hpp has the API, docs/ifu.md "Dust" the
// formulas and the departures).
//
// The per-star A_V, on the mesh:
//   1. gas: centred, rotated and binned like the stars (elementwise, sharded);
//      its per-cell extinction e from mass and metals (float32, sharded,
//      differentiable).
//   2. the order: Rubix lexsorts the gas by (spaxel, z). Tessera has no sort,
//      and the order is integer data without a derivative, so the gas
//      spaxels and z go to the host (process_allgather: every process sorts
//      the same values), which sorts them stably and builds the tables of
//      the sorted gas: its z, a search key (spaxel, rank of z), each cell's
//      segment start, and each spaxel's [first, end) range. These go to
//      every device, replicated.
//   3. the column: e gathered whole to every device in sorted order (take),
//      split into exact limbs, cumsum'd along the sorted gas and the sum
//      before each spaxel's first cell subtracted: exact in float64 limbs
//      whatever the order of the additions, so C (each cell's inclusive
//      per-spaxel cumulative extinction, rounded once to float32) has the
//      same bits on every mesh.
//   4. stars: searchsorted of (spaxel, z) in the keys gives the cells around
//      each star, take reads C and z there, and jnp.interp's arithmetic runs
//      elementwise in float32. The stars stay sharded.
// The key of step 2 makes a two-key search one exact integer search: with U
// the sorted distinct gas z values, rank(z) = #{u in U : u <= z} =
// searchsorted(U, z, right), and key = spaxel * (|U| + 1) + rank(z). Then
// key(gas) <= key(star) exactly when the gas cell lies in an earlier spaxel
// or in the star's spaxel at z <= the star's z.
#include "ifu/dust.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "ifu/errors.hpp"
#include "ifu/stages.hpp"

namespace tessera::ifu {

namespace {

[[noreturn]] void fail(const std::string& what) { throw InputError("[ifu] " + what); }

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

// lax.integer_pow's products (binary exponentiation), so the rounding is
// the one JAX's `y ** k` gives.
struct Powers {
  float p1, p2, p3, p4, p5, p6, p7;
  explicit Powers(float y) : p1(y), p2(y * y) {
    p3 = y * p2;
    p4 = p2 * p2;
    p5 = y * p4;
    p6 = p2 * p4;
    p7 = p3 * p4;
  }
};

// ---------------------------------------------------------- Cardelli89

float ccm89(float w, float rv) {
  float a = 0.0f, b = 0.0f;
  // CCM89's ranges of x = 1/lambda (1/micron), applied to Rubix's argument.
  const bool ir = 0.3f <= w && w < 1.1f;
  const bool opt = 1.1f <= w && w < 3.3f;
  const bool nuv = 3.3f <= w && w <= 8.0f;
  const bool fnuv = 5.9f <= w && w <= 8.0f;
  const bool fuv = 8.0f < w && w <= 10.0f;
  if (ir) {
    const float p = std::pow(w, 1.61f);
    a = 0.574f * p;
    b = -0.527f * p;
  }
  if (opt) {
    const Powers y(w - 1.82f);
    a = 1.0f + 0.17699f * y.p1 - 0.50447f * y.p2 - 0.02427f * y.p3 + 0.72085f * y.p4 + 0.01979f * y.p5 -
        0.77530f * y.p6 + 0.32999f * y.p7;
    b = 1.41338f * y.p1 + 2.28305f * y.p2 + 1.07233f * y.p3 - 5.38434f * y.p4 - 0.62251f * y.p5 + 5.30260f * y.p6 -
        2.09002f * y.p7;
  }
  if (nuv) {
    const float da = w - 4.67f, db = w - 4.62f;
    a = 1.752f - 0.316f * w - 0.104f / (da * da + 0.341f);
    b = -3.09f + 1.825f * w + 1.206f / (db * db + 0.263f);
  }
  if (fnuv) {
    const Powers y(w - 5.9f);
    a = a + (-0.04473f * y.p2 - 0.009779f * y.p3);
    b = b + (0.2130f * y.p2 + 0.1207f * y.p3);
  }
  if (fuv) {
    const Powers y(w - 8.0f);
    a = -1.073f - 0.628f * y.p1 + 0.137f * y.p2 - 0.070f * y.p3;
    b = 13.670f + 4.257f * y.p1 - 0.420f * y.p2 + 0.374f * y.p3;
  }
  return a + b / rv;
}

// ------------------------------------------------------------ Gordon23

// x clipped into [0, 1] over [lo, hi], then x^2 (3 - 2x) (smoothstep, N = 1),
// in Rubix's order: (3 + 2 (-x)) * x^2.
float smoothstep(float w, double lo, double hi) {
  float x = (w - static_cast<float>(lo)) / static_cast<float>(hi - lo);
  x = std::clamp(x, 0.0f, 1.0f);
  return (3.0f + 2.0f * (-x)) * (x * x);
}

// Drude profile; amp (fwhm/x0)^2 is a Python float in Rubix, rounded once.
float drude(float x, double amp, double x0, double fwhm) {
  const double g2 = std::pow(fwhm / x0, 2.0);  // Python's ** on floats
  const float d = x / static_cast<float>(x0) - static_cast<float>(x0) / x;
  return static_cast<float>(amp * g2) / (d * d + static_cast<float>(g2));
}

float modified_drude(float x, float scale, float x0, float gamma0, float asym) {
  const float gamma = static_cast<float>(2.0 * gamma0) / (1.0f + std::exp(asym * (x - x0)));
  const float g = gamma / x0;
  const float d = x / x0 - x0 / x;
  return scale * (g * g) / (d * d + g * g);
}

// Polynomial (5 coefficients, Horner) plus three Drude profiles, at x = 1/lambda.
float poly_drude(float x, const double (&p)[14]) {
  float c = static_cast<float>(p[4]);
  for (int i = 3; i >= 0; --i) c = static_cast<float>(p[i]) + c * x;
  return c + drude(x, p[5], p[6], p[7]) + drude(x, p[8], p[9], p[10]) + drude(x, p[11], p[12], p[13]);
}

constexpr double kG23OptA[14] = {-0.35848, 0.7122, 0.08746, -0.05403, 0.00674, 0.03893, 2.288,
                                 0.243,    0.02965, 2.054, 0.179,    0.01747, 1.587,   0.243};
constexpr double kG23OptB[14] = {0.12354, -2.68335, 2.01901, -0.39299, 0.03355, 0.18453, 2.288,
                                 0.243,   0.19728,  2.054,   0.179,    0.1713,  1.587,   0.243};
// scale, alpha, alpha2, swave, swidth, then two (amp, center, fwhm, asym) silicate features.
constexpr double kG23IrA[13] = {0.38526, 1.68467, 0.78791, 4.30578, 4.78338, 0.06652, 9.8434,
                                2.21205, -0.24703, 0.0267, 19.58294, 17.0, -0.27};

float nirmir_intercept(float w) {
  const double* p = kG23IrA;
  const double scale = p[0], alpha = p[1], alpha2 = p[2], swave = p[3], swidth = p[4];
  const float pow1 = static_cast<float>(scale) * std::pow(w, static_cast<float>(-1.0 * alpha));
  // Rubix forms scale * (swave^-alpha / swave^-alpha2) in Python floats.
  const double norm = std::pow(swave, -1.0 * alpha) / std::pow(swave, -1.0 * alpha2);
  const float pow2 = static_cast<float>(scale * norm) * std::pow(w, static_cast<float>(-1.0 * alpha2));
  const float wt = smoothstep(w, swave - swidth / 2, swave + swidth / 2);
  float axav = pow1 * (1.0f - wt) + pow2 * wt;
  axav += modified_drude(w, static_cast<float>(p[5]), static_cast<float>(p[6]), static_cast<float>(p[7]),
                         static_cast<float>(p[8]));
  axav += modified_drude(w, static_cast<float>(p[9]), static_cast<float>(p[10]), static_cast<float>(p[11]),
                         static_cast<float>(p[12]));
  return axav;
}

float g23_ir_b(float w) { return -1.01251f * std::pow(w / 1.0f, static_cast<float>(-(-1.06099))); }

float fm90(float x, double c1, double c2, double c3, double c4, double xo, double gamma) {
  float e = static_cast<float>(c1) + static_cast<float>(c2) * x;
  const float x2 = x * x;
  const float t = x2 - static_cast<float>(std::pow(xo, 2.0));
  e += static_cast<float>(c3) * (x2 / (t * t + x2 * static_cast<float>(std::pow(gamma, 2.0))));
  if (x >= 5.9f) {
    const Powers y(x - 5.9f);
    e = e + static_cast<float>(c4) * (0.5392f * y.p2 + 0.05644f * y.p3);
  }
  return e;
}

float g23_uv_a(float x) { return fm90(x, 0.81297, 0.2775, 1.06295, 0.11303, 4.60, 0.99); }
float g23_uv_b(float x) { return fm90(x, -2.97868, 1.89808, 3.10334, 0.65484, 4.60, 0.99); }

float g23(float w, double rv) {
  float a = 0.0f, b = 0.0f;
  const float x = 1.0f / w;
  if (1.0f <= w && w < 35.0f) {
    a = nirmir_intercept(w);
    b = g23_ir_b(w);
  }
  if (0.3f <= w && w < 1.1f) {
    a = poly_drude(x, kG23OptA);
    b = poly_drude(x, kG23OptB);
  }
  if (w >= 0.9f && w <= 1.1f) {
    const float wt = smoothstep(w, 0.9, 1.1);
    a = (1.0f - wt) * poly_drude(x, kG23OptA) + wt * nirmir_intercept(w);
    b = (1.0f - wt) * poly_drude(x, kG23OptB) + wt * g23_ir_b(w);
  }
  if (0.09f <= w && w <= 0.3f) {
    a = g23_uv_a(x);
    b = g23_uv_b(x);
  }
  if (w >= 0.3f && w <= 0.33f) {
    const float wt = smoothstep(w, 0.3, 0.33);
    a = (1.0f - wt) * g23_uv_a(x) + wt * poly_drude(x, kG23OptA);
    b = (1.0f - wt) * g23_uv_b(x) + wt * poly_drude(x, kG23OptB);
  }
  return a + b * static_cast<float>(1.0 / rv - 1.0 / 3.1);
}

// ------------------------------------------------------- dust-to-gas fits

// log(G/D) = a + alpha (x_sun - x), with a second (b, alpha_l) branch at or
// below x_t for the broken fit (Remy-Ruyer et al. 2014, Table 1).
struct DtgFit {
  bool broken;
  double a, alpha_h, b, alpha_l, x_t;
};

DtgFit dtg_fit(const std::string& model, const std::string& xco) {
  const bool mw = xco == "MW";
  if (!mw && xco != "Z") fail("unknown ssp.dust.Xco '" + xco + "' (known: MW, Z)");
  if (model == "power law slope free") return {false, 2.21, mw ? 1.62 : 2.02, 0, 0, 0};
  if (model == "broken power law fit")
    return mw ? DtgFit{true, 2.21, 1.00, 0.68, 3.08, 7.96} : DtgFit{true, 2.21, 1.00, 0.96, 3.10, 8.10};
  if (model == "power law slope fixed")
    fail("ssp.dust.dust_to_gas_model 'power law slope fixed' is not supported: Rubix 0.0.5 does not implement it "
         "(supported: power law slope free, broken power law fit)");
  fail("unknown ssp.dust.dust_to_gas_model '" + model +
       "' (Remy-Ruyer et al. 2014 fits in Rubix 0.0.5: power law slope free, broken power law fit)");
}

constexpr double kSolarLogOH = 8.69;  // Asplund et al. 2009, as Rubix

// 10^y in float32, as jnp.power(10, y) with y float32.
float pow10f(float y) { return std::pow(10.0f, y); }

Array pow10(const Array& y) { return pow(10.0f, y); }

Array f32_array(const std::vector<double>& v, const Shape& shape, const NamedSharding& s) {
  std::vector<float> f(v.begin(), v.end());
  return device_put(f, shape, s);
}

// Positions in the observer's frame, as the pipeline's chunk loop forms them.
struct Placed {
  Array x, y, z, pixel;  // pixel i32
};

Placed place(const DustView& view, const Array& coords) {
  if (view.edges.size() < 2) fail("the dust model needs the spaxel edges (at least 2), got " +
                                  std::to_string(view.edges.size()));
  const Mesh& mesh = coords.sharding().mesh();
  const NamedSharding rep(mesh, P());
  const Array center = f32_array({view.center[0], view.center[1], view.center[2]}, {3}, rep);
  const Array rmat = f32_array(std::vector<double>(view.rotation.begin(), view.rotation.end()), {3, 3}, rep);
  const Array edges = f32_array(view.edges, {static_cast<std::int64_t>(view.edges.size())}, rep);
  const auto nb = static_cast<std::int64_t>(view.edges.size()) - 1;
  const Array pos = matmul(subtract(coords, center), rmat);
  Placed p{column(pos, 0), column(pos, 1), column(pos, 2), Array()};
  auto bin = [&](const Array& c) { return clip(subtract(searchsorted(edges, c, Side::right), 1), 0, nb - 1); };
  p.pixel = add(bin(p.x), multiply(bin(p.y), static_cast<int>(nb)));
  return p;
}

float spaxel_area(const DustView& view) {
  // Rubix: (aperture / n) ** 2 in float32.
  const auto nb = static_cast<double>(view.edges.size() - 1);
  const auto bin = static_cast<float>((view.edges.back() - view.edges.front()) / nb);
  return bin * bin;
}

}  // namespace

// ------------------------------------------------------------- host side

std::vector<float> extinction_curve(const std::string& model, double Rv, std::span<const float> wave) {
  const bool ccm = model == "Cardelli89";
  if (!ccm && model != "Gordon23")
    fail("unknown extinction model '" + model + "' (Rubix 0.0.5 knows Cardelli89, Gordon23)");
  if (!(Rv > 0) || !std::isfinite(Rv)) fail("the extinction curve needs Rv > 0, got " + std::to_string(Rv));
  std::vector<float> out;
  out.reserve(wave.size());
  for (float w : wave) out.push_back(ccm ? ccm89(w, static_cast<float>(Rv)) : g23(w, Rv));
  return out;
}

float dust_to_gas_ratio(const std::string& model, const std::string& xco, float log_oh) {
  const DtgFit f = dtg_fit(model, xco);
  const float dx = static_cast<float>(kSolarLogOH) - log_oh;
  const float hi = pow10f(static_cast<float>(f.a) + static_cast<float>(f.alpha_h) * dx);
  if (!f.broken) return 1.0f / hi;
  const float lo = pow10f(static_cast<float>(f.b) + static_cast<float>(f.alpha_l) * dx);
  return 1.0f / (log_oh > static_cast<float>(f.x_t) ? hi : lo);
}

ExtinctionConstants extinction_constants(double dust_grain_density) {
  if (!(dust_grain_density > 0) || !std::isfinite(dust_grain_density))
    fail("the dust grain density must be > 0 g/cm^3, got " + std::to_string(dust_grain_density));
  ExtinctionConstants c{};
  c.k1 = static_cast<float>(3 * M_PI * kMassOfProtonGrams);
  c.k2 = static_cast<float>(kMsunGrams / (kKpcCm * kKpcCm));
  // 0.4 * jnp.log(10) * (5448 * 1e-8) * rho, each product in float32.
  c.den = ((0.4f * std::log(10.0f)) * static_cast<float>(kVBandAngstrom * 1e-8)) * static_cast<float>(dust_grain_density);
  return c;
}

// ----------------------------------------------------------- on the mesh

GasOnMesh put_gas(const GasData& gas, const Mesh& mesh) {
  if (mesh.axis_names() != std::vector<std::string>{"data"})
    fail("the dust model runs on a 1-d mesh with axis \"data\", got " + mesh.str());
  if (gas.n <= 0)
    fail("calc_dusty_ifu needs the galaxy's gas cells (the dust column in front of each star), and the galaxy has "
         "none");
  auto check = [&](const std::vector<float>& v, std::int64_t per, const char* name) {
    if (static_cast<std::int64_t>(v.size()) != gas.n * per)
      fail("the galaxy has " + std::to_string(gas.n) + " gas cells but " + std::to_string(v.size()) + " values of gas " +
           name + " (expected " + std::to_string(gas.n * per) + ")");
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        fail(std::string("gas ") + name + " of cell " + std::to_string(i / static_cast<std::size_t>(per)) +
             " is not finite");
  };
  check(gas.coords, 3, "coords");
  check(gas.mass, 1, "mass");
  if (gas.metals_per_cell < 5)
    fail("the dust-to-gas ratio needs the gas cells' element fractions (GFM_Metals: hydrogen at column 0, oxygen at "
         "column 4), got " + std::to_string(gas.metals_per_cell) + " per cell");
  check(gas.metals, gas.metals_per_cell, "metals");
  std::vector<float> h(static_cast<std::size_t>(gas.n)), o(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    h[i] = gas.metals[i * static_cast<std::size_t>(gas.metals_per_cell)];
    o[i] = gas.metals[i * static_cast<std::size_t>(gas.metals_per_cell) + 4];
  }
  const NamedSharding rows1(mesh, P("data")), rows2(mesh, P("data", none));
  GasOnMesh g;
  g.n = gas.n;
  g.coords = device_put(gas.coords, {gas.n, 3}, rows2);
  g.mass = device_put(gas.mass, {gas.n}, rows1);
  g.metals_h = device_put(h, {gas.n}, rows1);
  g.metals_o = device_put(o, {gas.n}, rows1);
  return g;
}

Array gas_extinction(const DustConfig& dust, const DustView& view, const GasOnMesh& gas) {
  if (gas.n <= 0) fail("calc_dusty_ifu needs the galaxy's gas cells, and the galaxy has none");
  const Placed p = place(view, gas.coords);
  // Rubix's filter_particles: cells outside the field of view get mass 0
  // (they keep their spaxel, clipped to the edge, and their z).
  const auto e_lo = static_cast<float>(view.edges.front()), e_hi = static_cast<float>(view.edges.back());
  const Array inside = logical_and(logical_and(greater_equal(p.x, e_lo), less_equal(p.x, e_hi)),
                                   logical_and(greater_equal(p.y, e_lo), less_equal(p.y, e_hi)));
  const Array mass = where(inside, gas.mass, 0.0f);
  // 12 + log10(O / (16 H)): number ratio from mass fractions; jnp.log10 is
  // log(x) * float32(1 / ln 10).
  const Array ratio = divide(gas.metals_o, multiply(16.0f, gas.metals_h));
  const Array log_oh = add(12.0f, multiply(log(ratio), static_cast<float>(0.4342944819032518)));
  const DtgFit f = dtg_fit(dust.dust_to_gas_model, dust.Xco);
  const Array dx = subtract(static_cast<float>(kSolarLogOH), log_oh);
  Array gd = pow10(add(static_cast<float>(f.a), multiply(static_cast<float>(f.alpha_h), dx)));
  if (f.broken)
    gd = where(greater(log_oh, static_cast<float>(f.x_t)), gd,
               pow10(add(static_cast<float>(f.b), multiply(static_cast<float>(f.alpha_l), dx))));
  const Array dust_mass = multiply(mass, divide(1.0f, gd));
  const ExtinctionConstants k = extinction_constants(dust.dust_grain_density);
  const Array e = divide(multiply(multiply(k.k1, dust_mass), k.k2), k.den);
  return divide(e, spaxel_area(view));
}

double gas_extinction_bound(const DustConfig& dust, const DustView& view, const GasOnMesh& gas) {
  const double bound = max(abs(gas_extinction(dust, view, gas))).item<double>();
  if (!std::isfinite(bound))
    fail("the dust extinction of a gas cell is not finite (a cell without hydrogen, GFM_Metals column 0 = 0?)");
  return bound;
}

Array star_extinction_av(const DustConfig& dust, const DustView& view, const Array& star_coords,
                         const GasOnMesh& gas, std::optional<double> e_bound) {
  if (gas.n <= 0) fail("calc_dusty_ifu needs the galaxy's gas cells, and the galaxy has none");
  if (star_coords.ndim() != 2 || star_coords.shape()[1] != 3)
    fail("star_extinction_av expects star coordinates (n, 3), got " + shape_str(star_coords.shape()));
  const Mesh& mesh = gas.coords.sharding().mesh();
  const NamedSharding rep(mesh, P());
  const std::int64_t n = gas.n;
  const Array e = gas_extinction(dust, view, gas);
  const Placed g = place(view, gas.coords);

  // --- The order (host): stable sort by (spaxel, z), as jnp.lexsort.
  const std::vector<float> gz = process_allgather<float>(g.z);
  const std::vector<std::int64_t> gpix = process_allgather<std::int64_t>(g.pixel);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](std::int64_t a, std::int64_t b) {
    if (gpix[a] != gpix[b]) return gpix[a] < gpix[b];
    return gz[a] < gz[b];
  });
  std::vector<float> distinct(gz);
  std::sort(distinct.begin(), distinct.end());
  // -0.0 == 0.0: one value, as searchsorted compares them.
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const auto stride = static_cast<std::int64_t>(distinct.size()) + 1;
  const auto nspax = static_cast<std::int64_t>((view.edges.size() - 1) * (view.edges.size() - 1));
  std::vector<float> z_sorted(perm.size());
  std::vector<std::int64_t> key(perm.size()), first(perm.size());
  std::vector<std::int64_t> spax_lo(static_cast<std::size_t>(nspax), 0), spax_hi(static_cast<std::size_t>(nspax), 0);
  for (std::size_t k = 0; k < perm.size(); ++k) {
    const auto i = static_cast<std::size_t>(perm[k]);
    z_sorted[k] = gz[i];
    const auto rank =
        static_cast<std::int64_t>(std::upper_bound(distinct.begin(), distinct.end(), gz[i]) - distinct.begin());
    key[k] = gpix[i] * stride + rank;
    first[k] = (k > 0 && gpix[perm[k - 1]] == gpix[i]) ? first[k - 1] : static_cast<std::int64_t>(k);
  }
  for (std::int64_t s = 0, k = 0; s < nspax; ++s) {
    spax_lo[s] = k;
    while (k < n && gpix[perm[k]] == s) ++k;
    spax_hi[s] = k;
  }

  // --- The column (every device, exact): C[k] = sum of e over the sorted
  // cells first[k] .. k.
  const Array perm_a = device_put(perm, {n}, rep);
  const Array e_sorted = take(with_sharding_constraint(e, rep), perm_a);
  // The bound fixes the limbs' quanta; max is exact, so it is the same on
  // every mesh, and so are the limbs.
  const double bound = e_bound ? *e_bound : gas_extinction_bound(dust, view, gas);
  if (!(bound >= 0) || !std::isfinite(bound)) fail("the extinction bound must be finite and >= 0, got " + std::to_string(bound));
  const Array limbs = exact_limbs(e_sorted, std::max(bound, kTiny));  // (3, n)
  const Array cum = cumsum(limbs, 1);
  const Array padded = concatenate({zeros({3, 1}, DType::f64, rep), cum}, 1);  // padded[:, k + 1] = cum[:, k]
  const Array before = take(padded, device_put(first, {n}, rep), 1);            // the sum before the spaxel
  const Array column_c = exact_total(subtract(cum, before), DType::f32);        // (n,) replicated

  // --- Stars: the cells around each star, and jnp.interp's arithmetic.
  const Placed s = place(view, star_coords);
  const Array distinct_a = device_put(distinct, {stride - 1}, rep);
  const Array skey = add(multiply(astype(s.pixel, DType::i64), stride),
                         searchsorted(distinct_a, s.z, Side::right, DType::i64));
  const Array idx = searchsorted(device_put(key, {n}, rep), skey, Side::right, DType::i64);
  const Array lo = take(device_put(spax_lo, {nspax}, rep), s.pixel);
  const Array hi = take(device_put(spax_hi, {nspax}, rep), s.pixel);
  const Array i0 = clip(subtract(idx, std::int64_t{1}), std::int64_t{0}, n - 1);
  const Array i1 = clip(idx, std::int64_t{0}, n - 1);
  const Array zs = device_put(z_sorted, {n}, rep);
  const Array c0 = take(column_c, i0), c1 = take(column_c, i1);
  const Array z0 = take(zs, i0), z1 = take(zs, i1);
  const Array dx = subtract(z1, z0);
  // jnp.interp: |dx| <= spacing(eps) reads fp[i - 1] (no division by ~0).
  const auto eps = static_cast<float>(std::ldexp(1.0, -46));
  const Array dx0 = less_equal(abs(dx), eps);
  const Array mid = where(dx0, c0, add(c0, multiply(divide(subtract(s.z, z0), where(dx0, 1.0f, dx)), subtract(c1, c0))));
  Array av = where(equal(idx, lo), c1, mid);  // below the spaxel's gas: the first cell's column
  av = where(equal(idx, hi), c0, av);          // above it: the spaxel's total
  return where(equal(lo, hi), 0.0f, av);       // no gas in the spaxel
}

Array dust_curve_factor(const DustConfig& dust, const std::vector<float>& wave_angstrom, const Mesh& mesh) {
  std::vector<float> micron(wave_angstrom.size());
  for (std::size_t i = 0; i < micron.size(); ++i) micron[i] = wave_angstrom[i] / 1e4f;
  std::vector<float> c = extinction_curve(dust.extinction_model, dust.Rv, micron);
  for (float& v : c) v = -0.4f * v;
  return device_put(c, {static_cast<std::int64_t>(c.size())}, NamedSharding(mesh, P()));
}

Array dust_transmission(const Array& curve_factor, const Array& av) {
  if (curve_factor.ndim() != 1 || av.ndim() != 1)
    fail("dust_transmission expects a (W,) curve factor and (m,) A_V, got " + shape_str(curve_factor.shape()) + " and " +
         shape_str(av.shape()));
  return pow(10.0f, multiply(expand_dims(curve_factor, 0), expand_dims(av, 1)));
}

Array resample_accumulate_extinguished(const Array& flux, const Array& wave, const Array& target,
                                       const Array& segment_ids, std::int64_t num_segments, double max_abs,
                                       const ResampleOptions& opt, const Array& transmission,
                                       std::int64_t rows_per_step) {
  const std::int64_t n = flux.shape()[0];
  const std::int64_t nt = target.shape()[0];
  if (transmission.ndim() != 2 || transmission.shape()[0] != n || transmission.shape()[1] != nt)
    fail("resample_accumulate_extinguished expects the transmission (" + std::to_string(n) + ", " +
         std::to_string(nt) + "), got " + shape_str(transmission.shape()));
  if (rows_per_step < 1) fail("rows_per_step must be >= 1, got " + std::to_string(rows_per_step));
  const NamedSharding rep(flux.sharding().mesh(), P());
  auto rows = [](const Array& x, std::int64_t a, std::int64_t b) { return slice(x, {SliceSpec{a, b}}); };
  Array acc = opt.init ? *opt.init : Array();
  std::int64_t lo = 0;
  do {
    const std::int64_t hi = std::min(n, lo + rows_per_step);
    // One segment per row: each row's resampled spectrum on its own, exact.
    ResampleOptions ro;
    if (opt.weights) ro.weights = rows(*opt.weights, lo, hi);
    if (opt.wave_scale) ro.wave_scale = rows(*opt.wave_scale, lo, hi);
    const Array wave_rows = wave.ndim() == 2 ? rows(wave, lo, hi) : wave;
    const Array own = arange(0, static_cast<double>(hi - lo), 1, DType::i32, rep);
    const Array per_row = exact_total(
        resample_accumulate(rows(flux, lo, hi), wave_rows, target, own, hi - lo, max_abs, ro), DType::f64);
    const Array dimmed = multiply(per_row, astype(rows(transmission, lo, hi), DType::f64));
    // (3, rows, T) -> (rows, 3, T) -> per segment -> (3, segments, T).
    const Array limbs = transpose(exact_limbs(dimmed, max_abs), {1, 0, 2});
    const Array part = transpose(segment_sum(limbs, rows(segment_ids, lo, hi), num_segments), {1, 0, 2});
    acc = acc.valid() ? add(acc, part) : part;
    lo = hi;
  } while (lo < n);
  return acc;
}

}  // namespace tessera::ifu
