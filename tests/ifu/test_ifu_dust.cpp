// Rubix 0.0.5's dust model (apps/ifu/dust.hpp): the extinction curves
// against formulas written here in double precision from the papers'
// coefficients (as Rubix uses them) and against numbers Rubix's own Python
// functions printed; the dust-to-gas fits and calculate_extinction likewise;
// A_V of a hand-built star + gas set against a plain loop and against
// Rubix's apply_spaxel_extinction; A_V bitwise the same on 1, 2, 3 and 8
// devices; derivatives in the gas mass; the extinguished resampling; config
// parsing and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "ifu/config.hpp"
#include "ifu/dust.hpp"
#include "ifu/errors.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace ifu = tessera::ifu;
using ts::testing::expect_error;

namespace {

ts::Mesh mesh_of(int k) {
  auto d = ts::devices();
  return ts::Mesh(std::vector<ts::Device>(d.begin(), d.begin() + k), {k}, {"data"});
}

// |got - want| <= rel * |want| + abs for every element.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, double abs,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(std::abs(got[i] - want[i]), rel * std::abs(want[i]) + abs)
        << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
}

// ------------------------------------------- references in double precision

double horner(const std::vector<double>& c, double x) {  // c[0] + c[1] x + ...
  double r = 0;
  for (std::size_t i = c.size(); i-- > 0;) r = r * x + c[i];
  return r;
}

// Cardelli, Clayton & Mathis (1989), eqs. 2-5, of x in 1/micron; Rubix
// hands it the wavelength in micron, so the tests do too.
// Rubix compares float32 wavelengths with the bounds rounded to float32.
double f32(double v) { return static_cast<float>(v); }

double ccm89_ref(double x, double rv) {
  double a = 0, b = 0;
  if (x >= f32(0.3) && x < f32(1.1)) {
    a = 0.574 * std::pow(x, 1.61);
    b = -0.527 * std::pow(x, 1.61);
  } else if (x >= f32(1.1) && x < f32(3.3)) {
    const double y = x - 1.82;
    a = horner({1, 0.17699, -0.50447, -0.02427, 0.72085, 0.01979, -0.77530, 0.32999}, y);
    b = horner({0, 1.41338, 2.28305, 1.07233, -5.38434, -0.62251, 5.30260, -2.09002}, y);
  } else if (x >= f32(3.3) && x <= f32(8.0)) {
    double fa = 0, fb = 0;
    if (x >= f32(5.9)) {
      const double y = x - 5.9;
      fa = -0.04473 * y * y - 0.009779 * y * y * y;
      fb = 0.2130 * y * y + 0.1207 * y * y * y;
    }
    a = 1.752 - 0.316 * x - 0.104 / ((x - 4.67) * (x - 4.67) + 0.341) + fa;
    b = -3.09 + 1.825 * x + 1.206 / ((x - 4.62) * (x - 4.62) + 0.263) + fb;
  } else if (x > f32(8.0) && x <= f32(10.0)) {
    const double y = x - 8.0;
    a = horner({-1.073, -0.628, 0.137, -0.070}, y);
    b = horner({13.670, 4.257, -0.420, 0.374}, y);
  }
  return a + b / rv;
}

// Gordon et al. (2023): A(lambda)/A(V) = a + b (1/Rv - 1/3.1), lambda in
// micron; UV: FM90 of 1/lambda; optical: a polynomial of 1/lambda plus
// three Drude profiles; NIR/MIR: two power laws joined by a smoothstep plus
// two modified Drude silicate features; smoothstep blends in the overlaps.
double smooth(double w, double lo, double hi) {
  const double t = std::clamp((w - lo) / (hi - lo), 0.0, 1.0);
  return t * t * (3 - 2 * t);
}
double drude_ref(double x, double amp, double x0, double fwhm) {
  const double g = fwhm / x0, d = x / x0 - x0 / x;
  return amp * g * g / (d * d + g * g);
}
double fm90_ref(double x, const double (&c)[4]) {
  const double xo = 4.60, gam = 0.99;
  double e = c[0] + c[1] * x + c[2] * x * x / ((x * x - xo * xo) * (x * x - xo * xo) + x * x * gam * gam);
  if (x >= 5.9) e += c[3] * (0.5392 * (x - 5.9) * (x - 5.9) + 0.05644 * std::pow(x - 5.9, 3));
  return e;
}
double opt_ref(double x, bool b) {
  const std::vector<double> pa = {-0.35848, 0.7122, 0.08746, -0.05403, 0.00674};
  const std::vector<double> pb = {0.12354, -2.68335, 2.01901, -0.39299, 0.03355};
  const double d1 = b ? 0.18453 : 0.03893, d2 = b ? 0.19728 : 0.02965, d3 = b ? 0.1713 : 0.01747;
  return horner(b ? pb : pa, x) + drude_ref(x, d1, 2.288, 0.243) + drude_ref(x, d2, 2.054, 0.179) +
         drude_ref(x, d3, 1.587, 0.243);
}
double ir_a_ref(double w) {
  const double scale = 0.38526, a1 = 1.68467, a2 = 0.78791, sw = 4.30578, swid = 4.78338;
  const double t = smooth(w, sw - swid / 2, sw + swid / 2);
  double v = scale * std::pow(w, -a1) * (1 - t) + scale * std::pow(sw, a2 - a1) * std::pow(w, -a2) * t;
  auto mdrude = [&](double s, double xo, double g0, double asym) {
    const double g = 2 * g0 / (1 + std::exp(asym * (w - xo)));
    return drude_ref(w, s, xo, g);
  };
  return v + mdrude(0.06652, 9.8434, 2.21205, -0.24703) + mdrude(0.0267, 19.58294, 17.0, -0.27);
}
double ir_b_ref(double w) { return -1.01251 * std::pow(w, 1.06099); }
double g23_ref(double w, double rv) {
  const double ua[4] = {0.81297, 0.2775, 1.06295, 0.11303}, ub[4] = {-2.97868, 1.89808, 3.10334, 0.65484};
  double a = 0, b = 0;
  if (w >= f32(0.09) && w < f32(0.3)) {
    a = fm90_ref(1 / w, ua), b = fm90_ref(1 / w, ub);
  } else if (w >= f32(0.3) && w <= f32(0.33)) {
    const double t = smooth(w, 0.3, 0.33);
    a = (1 - t) * fm90_ref(1 / w, ua) + t * opt_ref(1 / w, false);
    b = (1 - t) * fm90_ref(1 / w, ub) + t * opt_ref(1 / w, true);
  } else if (w > f32(0.33) && w < f32(0.9)) {
    a = opt_ref(1 / w, false), b = opt_ref(1 / w, true);
  } else if (w >= f32(0.9) && w <= f32(1.1)) {
    const double t = smooth(w, 0.9, 1.1);
    a = (1 - t) * opt_ref(1 / w, false) + t * ir_a_ref(w);
    b = (1 - t) * opt_ref(1 / w, true) + t * ir_b_ref(w);
  } else if (w > f32(1.1) && w < f32(35)) {
    a = ir_a_ref(w), b = ir_b_ref(w);
  }
  return a + b * (1 / rv - 1 / 3.1);
}

// Remy-Ruyer et al. (2014) Table 1 as Rubix uses it: G/D = 10^(a + alpha (8.69 - x)).
double dtg_ref(bool mw, bool broken, double x) {
  if (!broken) return std::pow(10.0, -(2.21 + (mw ? 1.62 : 2.02) * (8.69 - x)));
  const double xt = mw ? 7.96 : 8.10;
  if (x > xt) return std::pow(10.0, -(2.21 + 1.00 * (8.69 - x)));
  return std::pow(10.0, -((mw ? 0.68 : 0.96) + (mw ? 3.08 : 3.10) * (8.69 - x)));
}

// Rubix's calculate_extinction: 3 pi m_H Sigma [g/cm^2] D/G / (0.4 ln 10 lambda_V rho).
double extinction_ref(double dust_column_msun_kpc2, double rho) {
  const double sigma = dust_column_msun_kpc2 * 1.989e33 / (3.08568e21 * 3.08568e21);
  return 3 * M_PI * 1.67262e-24 * sigma / (0.4 * std::log(10.0) * 5448e-8 * rho);
}

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// ----------------------------------------------------- the hand-built set
// The same values as the Rubix script whose output is pasted below.

const std::vector<float> kEdges = {-1.5f, -0.5f, 0.5f, 1.5f};
const std::vector<float> kGas = {0, 0, -2,   0.1f, -0.2f, -0.5f, 0.2f,  0.1f,  0.7f, -0.3f, 0.2f, 0.7f, 0, 0.4f, 1.9f,
                                 -1, -1, -1.2f, -1.2f, -0.8f, 2.5f, 1, -1, 0.3f, 1, 1, -3, 2, 0, 0.4f};
const std::vector<float> kGasMass = {1e6f, 2e6f, 3e6f, 1.5e6f, 4e6f, 2.5e6f, 1e6f, 5e6f, 3.5e6f, 7e6f};
const std::vector<float> kGasO = {0.002f, 0.0055f, 0.008f, 0.0004f, 0.012f, 0.002f, 0.0055f, 0.008f, 0.0004f, 0.012f};
const std::vector<float> kStars = {0,     0,     -3,    0.1f, 0,     -2,   0,    0.1f, -1,   0.2f, 0.2f, 0.7f,
                                   -0.2f, 0,     1,     0,    0,     5,    0.3f, -0.3f, 1.9f, -1,   -1.1f, 0,
                                   -0.9f, -1,    -5,    -1.1f, -1.2f, 3,   1,    -1,   0,    1.2f, -0.9f, 1,
                                   1,     0,     0,     0,    1,     0.5f, 1,    1,    -4,   1.1f, 1.1f, -2};

ifu::GasData hand_gas() {
  ifu::GasData g;
  g.n = 10;
  g.coords = kGas;
  g.mass = kGasMass;
  g.metals_per_cell = 10;
  g.metals.assign(100, 0.0f);
  for (int i = 0; i < 10; ++i) g.metals[i * 10] = 0.7f, g.metals[i * 10 + 4] = kGasO[i];
  return g;
}

ifu::DustView identity_view(const std::vector<float>& edges) {
  ifu::DustView v;
  v.edges.assign(edges.begin(), edges.end());
  return v;
}

// A_V by plain loops in double: per star, the cells of its spaxel sorted by
// z, their inclusive cumulative extinction, interpolated at the star's z,
// held at the ends; 0 without gas. Positions as given (identity frame).
std::vector<double> av_loops(const ifu::GasData& g, const std::vector<float>& stars, const std::vector<float>& edges,
                             const ifu::DustConfig& d) {
  const int nb = static_cast<int>(edges.size()) - 1;
  auto bin = [&](float c) {
    int i = 0;
    while (i < nb && c >= edges[i + 1]) ++i;  // digitize - 1, clipped
    return std::clamp(i, 0, nb - 1);
  };
  const double side = (static_cast<double>(edges.back()) - edges.front()) / nb;
  struct Cell {
    double z, e;
  };
  std::vector<std::vector<Cell>> per(static_cast<std::size_t>(nb * nb));
  for (std::int64_t i = 0; i < g.n; ++i) {
    const float x = g.coords[i * 3], y = g.coords[i * 3 + 1], z = g.coords[i * 3 + 2];
    const bool in = x >= edges.front() && x <= edges.back() && y >= edges.front() && y <= edges.back();
    const double m = in ? g.mass[i] : 0.0;
    const double logoh = 12 + std::log10(static_cast<double>(g.metals[i * g.metals_per_cell + 4]) /
                                         (16.0 * g.metals[i * g.metals_per_cell]));
    const double dtg = dtg_ref(d.Xco == "MW", d.dust_to_gas_model == "broken power law fit", logoh);
    per[bin(x) + nb * bin(y)].push_back({z, extinction_ref(m * dtg, d.dust_grain_density) / (side * side)});
  }
  std::vector<double> out;
  for (std::size_t s = 0; s < stars.size() / 3; ++s) {
    auto cells = per[bin(stars[s * 3]) + nb * bin(stars[s * 3 + 1])];
    const double z = stars[s * 3 + 2];
    std::stable_sort(cells.begin(), cells.end(), [](const Cell& a, const Cell& b) { return a.z < b.z; });
    if (cells.empty()) {
      out.push_back(0);
      continue;
    }
    std::vector<double> cum;
    double c = 0;
    for (const Cell& cell : cells) cum.push_back(c += cell.e);
    std::size_t k = 0;  // cells at or below z
    while (k < cells.size() && cells[k].z <= z) ++k;
    if (k == 0)
      out.push_back(cum.front());
    else if (k == cells.size())
      out.push_back(cum.back());
    else
      out.push_back(cum[k - 1] + (z - cells[k - 1].z) / (cells[k].z - cells[k - 1].z) * (cum[k] - cum[k - 1]));
  }
  return out;
}

std::vector<float> av_on(int devices, const ifu::GasData& g, const std::vector<float>& stars, const ifu::DustView& view,
                         const ifu::DustConfig& d = {}) {
  const ts::Mesh mesh = mesh_of(devices);
  const ifu::GasOnMesh gas = ifu::put_gas(g, mesh);
  const auto n = static_cast<std::int64_t>(stars.size() / 3);
  const ts::Array sc = ts::device_put(stars, {n, 3}, ts::NamedSharding(mesh, ts::P("data", ts::none)));
  const ts::Array av = ifu::star_extinction_av(d, view, sc, gas);
  EXPECT_EQ(av.shape(), (ts::Shape{n}));
  EXPECT_EQ(av.dtype(), ts::DType::f32);
  EXPECT_EQ(av.sharding(), ts::NamedSharding(mesh, ts::P("data"))) << "A_V laid out like the stars";
  return av.to_vector<float>();
}

}  // namespace

// ------------------------------------------------------------------ curves

TEST(IfuDust, CurvesMatchThePapersFormulas) {
  std::vector<float> w;
  for (float v = 0.05f; v < 40.0f; v *= 1.07f) w.push_back(v);
  for (float v : {0.3f, 0.33f, 0.9f, 1.0f, 1.1f, 3.3f, 5.9f, 8.0f, 10.0f, 0.09f, 35.0f}) w.push_back(v);
  for (double rv : {2.5, 3.1, 5.0}) {
    std::vector<double> ccm, g23;
    for (float v : w) ccm.push_back(ccm89_ref(v, rv)), g23.push_back(g23_ref(v, rv));
    expect_close(ifu::extinction_curve("Cardelli89", rv, w), ccm, 2e-5, 2e-6, "Cardelli89");
    expect_close(ifu::extinction_curve("Gordon23", rv, w), g23, 2e-5, 2e-6, "Gordon23");
  }
}

TEST(IfuDust, CurvesMatchRubix) {
  // Printed by Rubix 0.0.5 (JAX 0.10.2, CPU, float32):
  //   Cardelli89(Rv=3.1)(wc), Cardelli89(Rv=5.0)(wc), Gordon23(Rv=3.1)(wg),
  //   Gordon23(Rv=2.5)(wg) with rubix.spectra.dust.extinction_models.
  const std::vector<float> wc = {0.2f, 0.35f, 0.47f, 0.55f, 0.7f, 0.935f, 1.5f, 2.5f, 4.0f, 6.5f, 9.0f, 12.0f};
  const std::vector<double> ccm31 = {0,          0.0745299608, 0.119800575, 0.154299766, 0.227504075, 0.362566829,
                                     0.801758766, 1.46455586,  2.31531715,  2.6170311,   4.13406467,  0};
  const std::vector<double> ccm50 = {0,          0.086447373, 0.138956815, 0.178972453, 0.26388219, 0.420541614,
                                     0.838728368, 1.28118205, 1.57090497,  1.49016714,  1.94220018, 0};
  const std::vector<float> wg = {0.05f, 0.1f, 0.2f, 0.31f, 0.5f, 0.95f, 1.05f, 2.0f, 5.0f, 10.0f, 20.0f, 40.0f};
  const std::vector<double> g2331 = {0,          5.06897926, 2.87754107,   1.78837061,   1.11985862,   0.431972384,
                                     0.355437696, 0.119797051, 0.0285515636, 0.0824199691, 0.0409811065, 0};
  const std::vector<double> g2325 = {0,          6.96838379,    3.53471279,   2.04212236,   1.15165782,  0.363267958,
                                     0.27479893, -0.0437484533, -0.403811932, -0.819647014, -1.84105802, 0};
  // float32 formulas in Rubix's order: within a few units in the last place
  // (XLA's and libm's pow, exp and division round alike but not always).
  expect_close(ifu::extinction_curve("Cardelli89", 3.1, wc), ccm31, 6e-7, 1e-9, "Cardelli89 Rv 3.1");
  expect_close(ifu::extinction_curve("Cardelli89", 5.0, wc), ccm50, 6e-7, 1e-9, "Cardelli89 Rv 5");
  expect_close(ifu::extinction_curve("Gordon23", 3.1, wg), g2331, 6e-7, 1e-9, "Gordon23 Rv 3.1");
  expect_close(ifu::extinction_curve("Gordon23", 2.5, wg), g2325, 6e-7, 1e-9, "Gordon23 Rv 2.5");
}

TEST(IfuDust, TransmissionMatchesRubixExtinguish) {
  // Printed by Rubix 0.0.5: Cardelli89(Rv=3.1).extinguish(wc, Av=0.5) and
  // Gordon23(Rv=3.1).extinguish(wg, Av=1.2), wc and wg in micron as above.
  const std::vector<double> ccm = {1,           0.966260016, 0.94632405,  0.931408167, 0.900532067, 0.846226513,
                                   0.691270828, 0.509435058, 0.344299614, 0.299635857, 0.149000272, 1};
  const std::vector<double> g23 = {1,           0.0036888395, 0.0415700115, 0.13854219,  0.290046632, 0.620373487,
                                   0.675133884, 0.875986516,  0.968936324,  0.912931979, 0.955716491, 1};
  const ts::Mesh mesh = mesh_of(3);
  // dust_curve_factor takes Angstrom (the telescope grid) and divides by 1e4.
  const std::vector<float> wc = {2000, 3500, 4700, 5500, 7000, 9350, 15000, 25000, 40000, 65000, 90000, 120000};
  const std::vector<float> wg = {500, 1000, 2000, 3100, 5000, 9500, 10500, 20000, 50000, 100000, 200000, 400000};
  ifu::DustConfig d;
  const ts::NamedSharding rows(mesh, ts::P("data"));
  auto t = ifu::dust_transmission(ifu::dust_curve_factor(d, wc, mesh), ts::device_put(std::vector<float>{0.5f, 0.0f, 0.5f}, {3}, rows));
  ASSERT_EQ(t.shape(), (ts::Shape{3, 12}));
  const auto tv = t.to_vector<float>();
  expect_close(std::vector<float>(tv.begin(), tv.begin() + 12), ccm, 1e-6, 1e-9, "Cardelli89 A_V 0.5");
  for (int j = 0; j < 12; ++j) EXPECT_EQ(tv[12 + j], 1.0f) << "A_V = 0 transmits everything";
  EXPECT_EQ(0, std::memcmp(tv.data(), tv.data() + 24, 12 * sizeof(float))) << "the same A_V, the same row";
  d.extinction_model = "Gordon23";
  t = ifu::dust_transmission(ifu::dust_curve_factor(d, wg, mesh), ts::device_put(std::vector<float>{1.2f}, {1}, rows));
  expect_close(t.to_vector<float>(), g23, 1e-6, 1e-9, "Gordon23 A_V 1.2");
}

// ---------------------------------------------------------- dust to gas

TEST(IfuDust, DustToGasMatchesRubixAndThePaper) {
  const std::vector<float> oh = {7.0f, 7.9f, 8.0f, 8.2f, 8.5f, 8.69f, 9.1f};
  // Printed by Rubix 0.0.5: calculate_dust_to_gas_ratio(oh, model, Xco) of
  // rubix.spectra.dust.dust_extinction, oh float32.
  struct Case {
    const char *xco, *model;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"MW", "power law slope free",
       {1.1277175e-05, 0.000323743268, 0.000470111263, 0.000991289038, 0.00303529296, 0.00616594916, 0.0284577925}},
      {"MW", "broken power law fit",
       {1.30257104e-06, 0.000770551153, 0.00125892658, 0.00199526316, 0.00398107525, 0.00616594916, 0.0158489607}},
      {"Z", "power law slope free",
       {2.3779387e-06, 0.000156387134, 0.000249000732, 0.000631248695, 0.00254800869, 0.00616594916, 0.0415146612}},
      {"Z", "broken power law fit",
       {6.32414128e-07, 0.000389943569, 0.000796161534, 0.00199526316, 0.00398107525, 0.00616594916, 0.0158489607}},
  };
  for (const Case& c : cases) {
    std::vector<float> got;
    std::vector<double> paper;
    for (float x : oh) {
      got.push_back(ifu::dust_to_gas_ratio(c.model, c.xco, x));
      paper.push_back(dtg_ref(std::string(c.xco) == "MW", std::string(c.model) == "broken power law fit", x));
    }
    expect_close(got, c.want, 2e-6, 0, c.model);
    expect_close(got, paper, 2e-5, 0, c.model);
  }
  expect_error<ifu::InputError>([] { ifu::dust_to_gas_ratio("power law slope fixed", "Z", 8.0f); }, "[ifu]",
                                {"power law slope fixed", "not supported", "does not implement"});
  expect_error<ifu::InputError>([] { ifu::dust_to_gas_ratio("broken", "Z", 8.0f); }, "[ifu]",
                                {"unknown", "'broken'", "broken power law fit"});
  expect_error<ifu::InputError>([] { ifu::dust_to_gas_ratio("broken power law fit", "CO", 8.0f); }, "[ifu]",
                                {"Xco", "'CO'", "MW, Z"});
}

TEST(IfuDust, ExtinctionOfAColumnMatchesRubix) {
  // Printed by Rubix 0.0.5: calculate_extinction(jnp.array([1, 1e6, 3e8,
  // 1e12], float32), rho) for rho 3.5 and 2.0 g/cm^3.
  const std::vector<float> col = {1.0f, 1e6f, 3e8f, 1e12f};
  const std::vector<std::pair<double, std::vector<double>>> want = {
      {3.5, {1.87508359e-29, 1.87508372e-23, 5.62525105e-21, 1.87508362e-17}},
      {2.0, {3.28139643e-29, 3.28139631e-23, 9.84418923e-21, 3.28139637e-17}}};
  for (const auto& [rho, rubix] : want) {
    const ifu::ExtinctionConstants k = ifu::extinction_constants(rho);
    std::vector<float> got;
    std::vector<double> ref;
    for (float c : col) got.push_back(((k.k1 * c) * k.k2) / k.den), ref.push_back(extinction_ref(c, rho));
    expect_close(got, rubix, 3e-7, 0, "calculate_extinction");
    expect_close(got, ref, 1e-6, 0, "the formula");
  }
  expect_error<ifu::InputError>([] { ifu::extinction_constants(0.0); }, "[ifu]", {"grain density", "> 0"});
}

// ------------------------------------------------------------------- A_V

TEST(IfuDust, StarExtinctionMatchesLoopsAndRubix) {
  const ifu::GasData g = hand_gas();
  const ifu::DustView view = identity_view(kEdges);
  const ifu::DustConfig d;  // Rubix's packaged defaults: Cardelli89, broken power law fit, Z, 3.5 g/cm^3
  // Printed by Rubix 0.0.5: apply_spaxel_extinction(config, rubixdata, wave,
  // 9, 1.0) with these gas cells (the one outside the field given mass 0 and
  // its clipped spaxel, as filter_particles and spaxel_assignment do) and
  // stars; stars by spaxel 4 (below, at the first cell, between, at a tie,
  // between, above, at the last), 0 (between, below, above), 2 (below and
  // above its single cell), 5 (only the zero-mass cell), 7 (no gas), 8.
  const std::vector<double> rubix = {4.21534357e-26, 4.21534357e-26, 1.96716136e-25, 7.80759402e-25, 1.03368014e-24,
                                     1.79244245e-24, 1.79244245e-24, 1.4297993e-25,  1.05383596e-25, 2.21305609e-25,
                                     8.43069356e-25, 8.43069356e-25, 0,              0,              2.14733254e-27,
                                     2.14733254e-27};
  const std::vector<double> loops = av_loops(g, kStars, kEdges, d);
  const std::vector<float> got = av_on(1, g, kStars, view, d);
  // float32 log, pow and division against double: a few units in the last place.
  expect_close(got, loops, 5e-6, 0, "plain loops");
  expect_close(got, rubix, 2e-6, 0, "Rubix");
  EXPECT_EQ(got[0], got[1]) << "below all gas: the first cell's column, as at the first cell";
  EXPECT_EQ(got[5], got[6]) << "above all gas: the spaxel's total, as at the last cell";
  EXPECT_EQ(got[12], 0.0f) << "a spaxel holding only a cell outside the field (mass 0)";
  EXPECT_EQ(got[13], 0.0f) << "a spaxel without gas";
  // Other configs: the loops follow.
  ifu::DustConfig mw;
  mw.Xco = "MW";
  mw.dust_to_gas_model = "power law slope free";
  mw.dust_grain_density = 2.0;
  expect_close(av_on(2, g, kStars, view, mw), av_loops(g, kStars, kEdges, mw), 5e-6, 0, "MW, slope free, rho 2");
}

TEST(IfuDust, StarExtinctionIsBitwiseTheSameOnEveryMesh) {
  // A larger set in a rotated, shifted frame: 2999 cells (some outside the
  // field, some sharing z) and 4001 stars over 5 x 5 spaxels.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f), uz(-5.0f, 5.0f), um(1e5f, 1e7f), uo(0.001f, 0.012f);
  ifu::GasData g;
  g.n = 2999;
  g.metals_per_cell = 10;
  for (std::int64_t i = 0; i < g.n; ++i) {
    float z = uz(rng);
    if (i % 5 == 0) z = std::round(z * 4) / 4;  // ties
    g.coords.insert(g.coords.end(), {u(rng) + 10, u(rng) - 4, z + 1});
    g.mass.push_back(um(rng));
    std::vector<float> m(10, 0.0f);
    m[0] = 0.7f, m[4] = uo(rng);
    g.metals.insert(g.metals.end(), m.begin(), m.end());
  }
  std::vector<float> stars;
  for (int i = 0; i < 4001; ++i) stars.insert(stars.end(), {u(rng) + 10, u(rng) - 4, uz(rng) + 1});
  ifu::DustView view;
  view.center = {10, -4, 1};
  const double a = 0.4, b = -0.3;  // Rz(a) Rx(b)
  view.rotation = {std::cos(a), -std::sin(a) * std::cos(b), std::sin(a) * std::sin(b),
                   std::sin(a), std::cos(a) * std::cos(b),  -std::cos(a) * std::sin(b),
                   0,           std::sin(b),               std::cos(b)};
  for (int k = 0; k <= 5; ++k) view.edges.push_back(-2.5 + k);
  const std::vector<float> one = av_on(1, g, stars, view);
  int positive = 0;
  for (float v : one) positive += v > 0;
  EXPECT_GT(positive, 3000) << "most stars lie behind some gas";
  for (int devices : {2, 3, 8}) {
    const std::vector<float> other = av_on(devices, g, stars, view);
    ASSERT_EQ(other.size(), one.size());
    EXPECT_EQ(0, std::memcmp(other.data(), one.data(), one.size() * sizeof(float))) << devices << " devices";
  }
}

TEST(IfuDust, StarExtinctionDifferentiatesInTheGas) {
  const ifu::GasData g = hand_gas();
  const ifu::DustView view = identity_view(kEdges);
  const ts::Mesh mesh = mesh_of(3);
  const ifu::GasOnMesh gas = ifu::put_gas(g, mesh);
  const ts::Array sc = ts::device_put(kStars, {16, 3}, ts::NamedSharding(mesh, ts::P("data", ts::none)));
  // Under jvp and grad the cells' values cannot be read: the bound of the
  // exact column is measured first, on the primal gas.
  const double bound = ifu::gas_extinction_bound({}, view, gas);
  auto av_of_mass = [&](const ts::Array& mass) {
    ifu::GasOnMesh m = gas;
    m.mass = mass;
    return ifu::star_extinction_av({}, view, sc, m, bound);
  };
  // A_V is linear in the masses: its derivative along dm is A_V of dm.
  std::vector<float> dm_host(10);
  for (int i = 0; i < 10; ++i) dm_host[i] = 1e5f * static_cast<float>(i + 1);
  const ts::Array dm = ts::device_put(dm_host, {10}, ts::NamedSharding(mesh, ts::P("data")));
  auto [av, dav] = ts::jvp(av_of_mass, {gas.mass}, {dm});
  const ifu::GasOnMesh gdm{gas.coords, dm, gas.metals_h, gas.metals_o, gas.n};
  expect_close(dav.to_vector<float>(), widen(ifu::star_extinction_av({}, view, sc, gdm).to_vector<float>()), 1e-5, 1e-32,
               "jvp in the mass");
  EXPECT_EQ(0, std::memcmp(av.to_vector<float>().data(), av_of_mass(gas.mass).to_vector<float>().data(), 16 * 4));
  // Reverse mode: d(sum A_V)/d mass_i = sum over stars of d A_V / d mass_i,
  // finite and >= 0 (more gas, more dust), and 0 for the cell outside the field.
  auto total = [&](const ts::Array& mass) { return ts::sum(av_of_mass(mass)); };
  const ts::Array grad = ts::grad(total)(gas.mass);
  EXPECT_EQ(grad.sharding(), gas.mass.sharding());
  const auto gv = grad.to_vector<float>();
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(std::isfinite(gv[i]) && gv[i] >= 0) << i << ": " << gv[i];
  EXPECT_EQ(gv[9], 0.0f);
  EXPECT_GT(gv[0], 0.0f);
  // And in the oxygen fraction (through 12 + log O/H and the D/G fit).
  auto total_o = [&](const ts::Array& o) {
    ifu::GasOnMesh m = gas;
    m.metals_o = o;
    return ts::sum(ifu::star_extinction_av({}, view, sc, m, bound));
  };
  const auto go = ts::grad(total_o)(gas.metals_o).to_vector<float>();
  EXPECT_GT(go[0], 0.0f) << "more oxygen, more dust";
}

// -------------------------------------------- the extinguished resampling

TEST(IfuDust, ExtinguishedResamplingMultipliesEachRowAfterResampling) {
  const ts::Mesh one = mesh_of(1);
  const ts::NamedSharding rep(one, ts::P());
  const std::int64_t n = 37, k = 40, t = 25, segs = 4;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uf(0.5f, 2.0f), ut(0.2f, 1.0f), us(0.999f, 1.001f);
  std::vector<float> flux, trans, scale, weights, wave, target;
  std::vector<std::int32_t> seg;
  for (std::int64_t i = 0; i < n * k; ++i) flux.push_back(uf(rng));
  for (std::int64_t i = 0; i < n * t; ++i) trans.push_back(ut(rng));
  for (std::int64_t i = 0; i < n; ++i)
    scale.push_back(us(rng)), weights.push_back(uf(rng)), seg.push_back(static_cast<std::int32_t>(i % segs));
  for (std::int64_t i = 0; i < k; ++i) wave.push_back(4000.0f + 25.0f * static_cast<float>(i));
  for (std::int64_t i = 0; i < t; ++i) target.push_back(4100.0f + 30.0f * static_cast<float>(i));
  const double max_abs = 1e4;
  auto put = [&](const auto& v, const ts::Shape& s) { return ts::device_put(v, s, rep); };
  const ts::Array f = put(flux, {n, k}), w = put(wave, {k}), tg = put(target, {t}), tr = put(trans, {n, t});
  const ts::ResampleOptions opt{.weights = put(weights, {n}), .wave_scale = put(scale, {n})};
  // Reference: each row resampled alone, times its transmission, summed in double.
  std::vector<double> want(static_cast<std::size_t>(segs * t), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const ts::ResampleOptions o1{.weights = put(std::vector<float>{weights[i]}, {1}),
                                 .wave_scale = put(std::vector<float>{scale[i]}, {1})};
    const auto row = ts::exact_total(ts::resample_accumulate(ts::slice(f, {ts::SliceSpec{i, i + 1}}), w, tg,
                                                             put(std::vector<std::int32_t>{0}, {1}), 1, max_abs, o1),
                                     ts::DType::f64)
                         .to_vector<double>();
    for (std::int64_t j = 0; j < t; ++j) want[seg[i] * t + j] += row[j] * trans[i * t + j];
  }
  std::vector<double> first;
  for (std::int64_t step : {1, 5, 256}) {
    const ts::Array acc = ifu::resample_accumulate_extinguished(f, w, tg, put(seg, {n}), segs, max_abs, opt, tr, step);
    ASSERT_EQ(acc.shape(), (ts::Shape{3, segs, t}));
    const auto got = ts::exact_total(acc, ts::DType::f64).to_vector<double>();
    for (std::size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(got[e], want[e], 1e-12 * std::abs(want[e])) << e;
    if (first.empty())
      first = got;
    else
      EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(double))) << "step " << step;
  }
  // A transmission of 1 gives resample_accumulate's cube.
  const ts::Array ones = ts::ones({n, t}, ts::DType::f32, rep);
  const auto plain = ts::exact_total(ts::resample_accumulate(f, w, tg, put(seg, {n}), segs, max_abs, opt), ts::DType::f64)
                         .to_vector<double>();
  const auto unit = ts::exact_total(ifu::resample_accumulate_extinguished(f, w, tg, put(seg, {n}), segs, max_abs, opt, ones),
                                    ts::DType::f64)
                        .to_vector<double>();
  for (std::size_t e = 0; e < plain.size(); ++e) EXPECT_NEAR(unit[e], plain[e], 1e-12 * std::abs(plain[e])) << e;
}

TEST(IfuDust, ExtinguishedResamplingInsideShardMapIsBitwiseTheSameOnEveryMesh) {
  const std::int64_t n = 101, k = 30, t = 20, segs = 6;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uf(0.5f, 2.0f), ua(0.0f, 0.8f);
  std::vector<float> flux, av, wave, target;
  std::vector<std::int32_t> seg;
  for (std::int64_t i = 0; i < n * k; ++i) flux.push_back(uf(rng));
  for (std::int64_t i = 0; i < n; ++i) av.push_back(ua(rng)), seg.push_back(static_cast<std::int32_t>((i * 7) % segs));
  for (std::int64_t i = 0; i < k; ++i) wave.push_back(4500.0f + 20.0f * static_cast<float>(i));
  for (std::int64_t i = 0; i < t; ++i) target.push_back(4550.0f + 25.0f * static_cast<float>(i));
  std::vector<double> first;
  for (int devices : {1, 2, 3, 8}) {
    const ts::Mesh mesh = mesh_of(devices);
    const ts::NamedSharding rep(mesh, ts::P()), rows(mesh, ts::P("data")), rows2(mesh, ts::P("data", ts::none));
    const ts::Array w = ts::device_put(wave, {k}, rep), tg = ts::device_put(target, {t}, rep);
    const ts::Array curve = ifu::dust_curve_factor({}, target, mesh);
    auto body = [&](const ts::Array& fl, const ts::Array& a, const ts::Array& s) {
      const ts::Array acc = ifu::resample_accumulate_extinguished(fl, w, tg, s, segs, 1e4, {},
                                                                  ifu::dust_transmission(curve, a), 16);
      return ts::psum(acc, "data");
    };
    const ts::Array acc = ts::shard_map(body, mesh, std::vector<ts::PartitionSpec>{ts::P("data", ts::none), ts::P("data"), ts::P("data")},
                                        ts::P())(ts::device_put(flux, {n, k}, rows2), ts::device_put(av, {n}, rows),
                                                 ts::device_put(seg, {n}, rows));
    const auto got = ts::exact_total(acc, ts::DType::f64).to_vector<double>();
    if (first.empty())
      first = got;
    else
      EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(double))) << devices << " devices";
  }
}

// ---------------------------------------------------------- config, errors

TEST(IfuDust, ConfigReadsTheDustSection) {
  const std::string base = std::string(ifu::default_config_yaml());
  ifu::Config c = ifu::parse_config(base, "test");
  EXPECT_FALSE(c.dust.present);
  EXPECT_EQ(c.dust.extinction_model, "Cardelli89");
  EXPECT_EQ(c.dust.dust_to_gas_model, "broken power law fit");
  EXPECT_EQ(c.dust.Xco, "Z");
  c = ifu::parse_config(base + "  dust:\n    extinction_model: Gordon23\n    Rv: 2.9\n    dust_to_gas_model: power law "
                               "slope free\n    Xco: MW\n    dust_grain_density: 3.0\n    dust_to_gas_ratio: 0.01\n",
                        "test");
  EXPECT_TRUE(c.dust.present);
  EXPECT_EQ(c.dust.extinction_model, "Gordon23");
  EXPECT_EQ(c.dust.Rv, 2.9);
  EXPECT_EQ(c.dust.dust_to_gas_model, "power law slope free");
  EXPECT_EQ(c.dust.Xco, "MW");
  EXPECT_EQ(c.dust.dust_grain_density, 3.0);
  EXPECT_NO_THROW(ifu::check_dusty_config(c));
  auto bad = [&](const std::string& dust, std::initializer_list<std::string> words) {
    expect_error<ifu::InputError>([&] { ifu::parse_config(base + "  dust:\n" + dust, "test.yml"); },
                                  "[ifu config] test.yml: ", words);
  };
  bad("    extinction_model: F99\n", {"unknown ssp.dust.extinction_model 'F99'", "Cardelli89, Gordon23"});
  bad("    dust_to_gas_model: power law slope fixed\n",
      {"ssp.dust.dust_to_gas_model 'power law slope fixed' is not supported", "does not implement"});
  bad("    dust_to_gas_model: linear\n", {"unknown ssp.dust.dust_to_gas_model 'linear'", "broken power law fit"});
  bad("    Xco: CO\n", {"unknown ssp.dust.Xco 'CO'", "MW, Z"});
  bad("    Rv: -3.1\n", {"'ssp.dust.Rv' must be a number > 0", "got '-3.1'"});
  bad("    Rv: \"3.1\"\n", {"'ssp.dust.Rv' must be a number"});
  bad("    dust_grain_density: 0\n", {"'ssp.dust.dust_grain_density' must be a number > 0"});
  bad("    rv: 3.1\n", {"unknown key 'ssp.dust.rv'", "Rv"});
  // calc_dusty_ifu: accepted with the dust keys Rubix requires, refused
  // without them.
  std::string dusty = base;
  dusty.replace(dusty.find("calc_ifu"), 8, "calc_dusty_ifu");
  expect_error<ifu::InputError>([&] { ifu::parse_config(dusty, "d.yml"); }, "[ifu config] d.yml: ",
                                {"missing required key 'ssp.dust'", "calc_dusty_ifu"});
  c = ifu::parse_config(dusty + "  dust:\n    extinction_model: Gordon23\n    Rv: 3.1\n    dust_grain_density: 3.5\n",
                        "d.yml");
  EXPECT_EQ(c.pipeline, "calc_dusty_ifu");
  EXPECT_EQ(c.dust.extinction_model, "Gordon23");
  c = ifu::parse_config(base + "  dust:\n    extinction_model: Cardelli89\n    Rv: 3.1\n", "d.yml");
  expect_error<ifu::InputError>([&] { ifu::check_dusty_config(c); }, "[ifu config] d.yml: ",
                                {"missing required key 'ssp.dust.dust_grain_density'", "calc_dusty_ifu"});
  c = ifu::parse_config(base, "d.yml");
  expect_error<ifu::InputError>([&] { ifu::check_dusty_config(c); }, "[ifu config] d.yml: ",
                                {"missing required key 'ssp.dust'"});
}

TEST(IfuDust, BadInputSaysWhat) {
  const ts::Mesh mesh = mesh_of(2);
  expect_error<ifu::InputError>([] { ifu::extinction_curve("F99", 3.1, std::vector<float>{0.5f}); }, "[ifu]",
                                {"unknown extinction model 'F99'", "Cardelli89, Gordon23"});
  expect_error<ifu::InputError>([] { ifu::extinction_curve("Gordon23", 0.0, std::vector<float>{0.5f}); }, "[ifu]",
                                {"Rv > 0"});
  ifu::GasData none;
  expect_error<ifu::InputError>([&] { ifu::put_gas(none, mesh); }, "[ifu] ",
                                {"calc_dusty_ifu needs the galaxy's gas cells", "has none"});
  ifu::GasData g = hand_gas();
  g.metals_per_cell = 1;
  g.metals.assign(10, 0.7f);
  expect_error<ifu::InputError>([&] { ifu::put_gas(g, mesh); }, "[ifu] ", {"GFM_Metals", "oxygen at column 4", "got 1"});
  g = hand_gas();
  g.mass.pop_back();
  expect_error<ifu::InputError>([&] { ifu::put_gas(g, mesh); }, "[ifu] ", {"10 gas cells but 9 values of gas mass"});
  g = hand_gas();
  g.coords[4] = std::nanf("");
  expect_error<ifu::InputError>([&] { ifu::put_gas(g, mesh); }, "[ifu] ", {"gas coords of cell 1 is not finite"});
  g = hand_gas();
  g.metals[0] = 0.0f;  // no hydrogen: 12 + log(O/0) is infinite
  const ifu::GasOnMesh gas = ifu::put_gas(g, mesh);
  const ts::Array sc = ts::device_put(kStars, {16, 3}, ts::NamedSharding(mesh, ts::P("data", ts::none)));
  expect_error<ifu::InputError>([&] { ifu::star_extinction_av({}, identity_view(kEdges), sc, gas); }, "[ifu] ",
                                {"not finite", "hydrogen"});
  expect_error<ifu::InputError>([&] { ifu::star_extinction_av({}, identity_view(kEdges), sc, ifu::GasOnMesh{}); },
                                "[ifu] ", {"has none"});
  expect_error<ifu::InputError>(
      [&] { ifu::put_gas(hand_gas(), ts::Mesh(std::vector<ts::Device>{ts::devices()[0]}, {1}, {"x"})); }, "[ifu] ",
      {"\"data\""});
}
