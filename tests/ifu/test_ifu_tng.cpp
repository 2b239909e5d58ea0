// IllustrisTNG subhalo cutouts as `tessera ifu` input. The tests write small
// cutouts with the HDF5 C API (a few hundred stars, some wind particles, some
// gas) and check every converted field against values computed here from the
// raw numbers with Rubix 0.0.5's formulas (rubix/galaxy/input_handler/
// illustris.py, rubix/utils.py):
//   x_phys   = x * a^a_scaling * h^h_scaling * to_cgs        (convert_values_to_physical)
//   coords   = x_phys [cm] -> kpc, mass = GFM_InitialMass [g] -> Msun,
//   velocity = x_phys [cm/s] -> km/s, gas density [g/cm^3] -> Msun/kpc^3
//   age      = astropy Planck15 lookback time to z = 1/GFM_StellarFormationTime - 1  (SFTtoAge)
//   centre   = SubhaloData/pos_{x,y,z}, halfmassrad = SubhaloData/halfmassrad_stars,
//              both scaled like PartType4/Coordinates
// and that `tessera ifu` makes from a cutout the same cube as from the same
// galaxy in Rubix's own file format.
#include <gtest/gtest.h>
#if __has_include(<hdf5.h>)
#include <hdf5.h>
#else
#include <hdf5/serial/hdf5.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ifu/cosmology.hpp"
#include "ifu/errors.hpp"
#include "ifu/fits.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/tng.hpp"
#include "ifu/temp_dir.hpp"
#include "test_util.hpp"

namespace ifu = tessera::ifu;
using ifu::InputError;
using tessera::testing::expect_error;

namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
struct TempDir : tessera::testing::TempDir {
  TempDir() : tessera::testing::TempDir("tessera_ifu_tng_") {}
};

// ------------------------------------------------------------ the generator

// TNG's per-dataset unit attributes.
struct Scaling {
  double a_exp, h_exp, to_cgs;
};
constexpr double kCkpcCm = 3.085678e21, kMassG = 1.989e43;  // what TNG files carry
const Scaling kLength{1, -1, kCkpcCm}, kVelocity{0.5, 0, 1e5}, kMass{0, -1, kMassG},
    kDensity{-3, 2, kMassG / (kCkpcCm * kCkpcCm * kCkpcCm)}, kEnergy{0, 0, 1e10}, kNone{0, 0, 0};

struct Dataset {
  std::string name;
  std::vector<hsize_t> dims;  // {} = scalar
  std::vector<double> values;
  hid_t type = H5T_IEEE_F32LE;
  std::optional<Scaling> scaling;
};

struct Cutout {
  double a = 0.8, h = 0.6774;
  std::optional<double> time, hubble, redshift;  // when set, override the header attribute (NaN: omit it)
  bool header = true;
  std::vector<Dataset> sets;

  Dataset& find(const std::string& name) {
    for (auto& d : sets)
      if (d.name == name) return d;
    throw std::runtime_error("no dataset " + name);
  }
  void erase(const std::string& name) {
    sets.erase(std::remove_if(sets.begin(), sets.end(), [&](const Dataset& d) { return d.name == name; }),
               sets.end());
  }
  void erase_prefix(const std::string& prefix) {
    sets.erase(std::remove_if(sets.begin(), sets.end(), [&](const Dataset& d) { return d.name.rfind(prefix, 0) == 0; }),
               sets.end());
  }
};

void number_attr(hid_t obj, const char* name, double v) {
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(obj, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Sclose(s);
}

void write_cutout(const std::string& path, const Cutout& c) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (c.header) {
    const hid_t g = H5Gcreate2(f, "Header", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const std::pair<const char*, double> attrs[] = {{"HubbleParam", c.hubble.value_or(c.h)},
                                                    {"Time", c.time.value_or(c.a)},
                                                    {"Redshift", c.redshift.value_or(1 / c.a - 1)}};
    for (const auto& [name, v] : attrs)
      if (!std::isnan(v)) number_attr(g, name, v);
    H5Gclose(g);
  }
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  for (const auto& d : c.sets) {
    const hid_t space = d.dims.empty() ? H5Screate(H5S_SCALAR)
                                       : H5Screate_simple(static_cast<int>(d.dims.size()), d.dims.data(), nullptr);
    const hid_t ds = H5Dcreate2(f, d.name.c_str(), d.type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (!d.values.empty()) H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.values.data());
    if (d.scaling) {
      number_attr(ds, "a_scaling", d.scaling->a_exp);
      number_attr(ds, "h_scaling", d.scaling->h_exp);
      number_attr(ds, "to_cgs", d.scaling->to_cgs);
    }
    H5Dclose(ds);
    H5Sclose(space);
  }
  H5Pclose(lcpl);
  H5Fclose(f);
}

// A disk of `n` star particles (every 15th a wind particle: formation time
// -0.2 ... 0, one exactly 0) around (pos_x, pos_y, pos_z) ckpc/h, and `gas`
// gas cells, in TNG's code units (ckpc/h, km sqrt(a)/s, 1e10 Msun/h).
Cutout make_cutout(int n = 300, int gas = 40, unsigned seed = 7) {
  Cutout c;
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::array<double, 3> centre{10500.0, 20250.0, 31125.5};  // ckpc/h
  auto particles = [&](const std::string& g, int count, double spread) {
    std::vector<double> pos, vel;
    for (int i = 0; i < count; ++i) {
      for (int k = 0; k < 3; ++k) pos.push_back(centre[k] + spread * normal(rng) * (k == 2 ? 0.2 : 1.0));
      for (int k = 0; k < 3; ++k) vel.push_back(40.0 * normal(rng) + (k == 0 ? 120.0 : 0.0));
    }
    const auto un = static_cast<hsize_t>(count);
    c.sets.push_back({g + "/Coordinates", {un, 3}, pos, H5T_IEEE_F64LE, kLength});
    c.sets.push_back({g + "/Velocities", {un, 3}, vel, H5T_IEEE_F32LE, kVelocity});
  };
  particles("PartType4", n, 0.9);
  std::vector<double> mass, metal, sft;
  for (int i = 0; i < n; ++i) {
    mass.push_back(1e-5 * (0.5 + u(rng)));
    metal.push_back(0.001 + 0.03 * u(rng));
    sft.push_back(i % 15 == 3 ? (i == 3 ? 0.0 : -0.2 * u(rng)) : 0.3 + 0.49 * u(rng));
  }
  const auto un = static_cast<hsize_t>(n);
  c.sets.push_back({"PartType4/GFM_InitialMass", {un}, mass, H5T_IEEE_F32LE, kMass});
  c.sets.push_back({"PartType4/GFM_Metallicity", {un}, metal, H5T_IEEE_F32LE, kNone});
  c.sets.push_back({"PartType4/GFM_StellarFormationTime", {un}, sft, H5T_IEEE_F32LE, kNone});
  if (gas > 0) {
    particles("PartType0", gas, 1.5);
    std::vector<double> gm, dens, energy, gz, metals, sfr, ne;
    for (int i = 0; i < gas; ++i) {
      gm.push_back(1e-5 * (0.8 + u(rng)));
      dens.push_back(1e-4 * (0.1 + u(rng)));
      energy.push_back(1e3 * (1 + 10 * u(rng)));
      gz.push_back(0.02 * u(rng));
      for (int k = 0; k < 10; ++k) metals.push_back(0.1 * u(rng));
      sfr.push_back(i % 3 == 0 ? 0.0 : 0.01 * u(rng));
      ne.push_back(1.1 * u(rng));
    }
    const auto ug = static_cast<hsize_t>(gas);
    c.sets.push_back({"PartType0/Masses", {ug}, gm, H5T_IEEE_F32LE, kMass});
    c.sets.push_back({"PartType0/Density", {ug}, dens, H5T_IEEE_F32LE, kDensity});
    c.sets.push_back({"PartType0/InternalEnergy", {ug}, energy, H5T_IEEE_F32LE, kEnergy});
    c.sets.push_back({"PartType0/GFM_Metallicity", {ug}, gz, H5T_IEEE_F32LE, kNone});
    c.sets.push_back({"PartType0/GFM_Metals", {ug, 10}, metals, H5T_IEEE_F32LE, kNone});
    c.sets.push_back({"PartType0/StarFormationRate", {ug}, sfr, H5T_IEEE_F32LE, kNone});
    c.sets.push_back({"PartType0/ElectronAbundance", {ug}, ne, H5T_IEEE_F32LE, kNone});
  }
  // What Rubix's IllustrisAPI appends from the subhalo's catalogue entry (ckpc/h).
  c.sets.push_back({"SubhaloData/pos_x", {}, {centre[0] + 0.01}, H5T_IEEE_F64LE, std::nullopt});
  c.sets.push_back({"SubhaloData/pos_y", {}, {centre[1] - 0.02}, H5T_IEEE_F64LE, std::nullopt});
  c.sets.push_back({"SubhaloData/pos_z", {}, {centre[2] + 0.005}, H5T_IEEE_F64LE, std::nullopt});
  c.sets.push_back({"SubhaloData/halfmassrad_stars", {}, {1.25}, H5T_IEEE_F64LE, std::nullopt});
  return c;
}

// ------------------------------------------------- independent expectations

// astropy's cgs units (Quantity.to): kpc and the nominal solar mass.
constexpr double kKpcCm = 3.0856775814913673e21, kMsunG = 1.988409870698051e33;

// Rubix: value * a**a_scaling * h**h_scaling * to_cgs (to_cgs 0 read as 1).
double physical(double x, const Scaling& s, double a, double h) {
  return x * std::pow(a, s.a_exp) * std::pow(h, s.h_exp) * (s.to_cgs == 0 ? 1.0 : s.to_cgs);
}

// Lookback time (Gyr) of astropy's Planck15 (H0 67.74, Om0 0.3075, Tcmb0
// 2.7255 K, Neff 3.046, m_nu = (0, 0, 0.06) eV, flat): Simpson's rule of
// 1/((1+z) E(z)) over [0, z] in 20000 steps, E written out from astropy's
// FlatLambdaCDM.efunc and nu_relative_density.
double planck15_lookback(double z) {
  const double h0_s = 67.74 / 3.0856775814913673e19;
  const double rho_crit = 3 * h0_s * h0_s / (8 * M_PI * 6.6743e-8);
  const double ogamma0 = 4 * 5.6703744191844314e-5 / std::pow(2.99792458e10, 3) * std::pow(2.7255, 4) / rho_crit;
  const double nu_y = 0.06 / (1.380649e-23 / 1.602176634e-19 * 0.7137658555036082 * 2.7255);
  auto nu_rel = [&](double zz) {
    return 0.22710731766 * (3.046 / 3) * (2 + std::pow(1 + std::pow(0.3173 * nu_y / (1 + zz), 1.83), 0.54644808743));
  };
  const double ode0 = 1 - 0.3075 - ogamma0 * (1 + nu_rel(0));
  auto f = [&](double zz) {
    const double zp1 = 1 + zz, orad = ogamma0 * (1 + nu_rel(zz));
    return 1 / (zp1 * std::sqrt(zp1 * zp1 * zp1 * (orad * zp1 + 0.3075) + ode0));
  };
  const int steps = 20000;
  const double dz = z / steps;
  double s = f(0) + f(z);
  for (int i = 1; i < steps; ++i) s += (i % 2 ? 4 : 2) * f(i * dz);
  const double hubble_time_gyr = 3.0856775814913673e19 / 67.74 / 3.15576e16;
  return hubble_time_gyr * s * dz / 3;
}

void expect_floats(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_FLOAT_EQ(got[i], static_cast<float>(want[i])) << what << " [" << i << "]";
}

}  // namespace

// --------------------------------------------------------------- cosmology

TEST(IfuTng, LookbackTimeIsAstropysPlanck15) {
  // astropy 8.0.2: Planck15.lookback_time(z).value.
  const std::pair<double, double> astropy[] = {{0.5, 5.193695168401272},
                                               {1.0, 7.935066641872332},
                                               {3.0, 11.649046650023845},
                                               {19.0, 13.605476105084183},
                                               {1000.0, 13.797185151025717}};
  const ifu::Cosmology c = ifu::cosmology("PLANCK15");
  std::vector<double> a;
  for (const auto& [z, t] : astropy) {
    EXPECT_NEAR(ifu::lookback_time_gyr(c, z), t, 1e-12 * t) << "z = " << z;
    if (z < 100) {
      EXPECT_NEAR(planck15_lookback(z), t, 1e-11 * t) << "the test's own integral, z = " << z;
    }
    a.push_back(1 / (1 + z));
  }
  const auto many = ifu::lookback_times_from_scale_factors_gyr(c, a);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(many[i], astropy[i].second, 1e-12 * astropy[i].second);
  EXPECT_EQ(ifu::lookback_time_gyr(c, 0.0), 0.0);
  expect_error<InputError>([&] { ifu::lookback_times_from_scale_factors_gyr(c, {0.5, 0.0}); }, "[ifu] ",
                           {"scale factor must be positive"});
}

// ----------------------------------------------------------------- reading

TEST(IfuTng, EveryFieldIsConvertedAsRubixDoes) {
  TempDir tmp;
  const Cutout cut = make_cutout();
  const std::string path = tmp / "cutout.h5";
  write_cutout(path, cut);
  const ifu::GalaxyData g = ifu::read_galaxy(path);
  const double a = cut.a, h = cut.h;
  Cutout raw = cut;
  // The file holds float32 velocities etc.: the raw numbers as stored.
  auto stored = [&](const std::string& name) {
    const Dataset& d = raw.find(name);
    std::vector<double> v = d.values;
    if (d.type == H5T_IEEE_F32LE)
      for (auto& x : v) x = static_cast<float>(x);
    return v;
  };
  const auto sft = stored("PartType4/GFM_StellarFormationTime");
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < sft.size(); ++i)
    if (sft[i] > 0) kept.push_back(i);
  ASSERT_EQ(kept.size(), 300u - 20u);  // every 15th particle is a wind particle
  ASSERT_EQ(g.n, static_cast<std::int64_t>(kept.size()));

  auto rows = [&](const std::vector<double>& v, std::size_t cols, auto&& fn) {
    std::vector<double> out;
    for (std::size_t i : kept)
      for (std::size_t c = 0; c < cols; ++c) out.push_back(fn(v[i * cols + c]));
    return out;
  };
  // coords: ckpc/h -> cm -> kpc; velocity: sqrt(a) km/s -> cm/s -> km/s; mass: 1e10 Msun/h -> g -> Msun.
  expect_floats(g.coords,
                rows(stored("PartType4/Coordinates"), 3, [&](double x) { return physical(x, kLength, a, h) / kKpcCm; }),
                "coords");
  expect_floats(g.velocity,
                rows(stored("PartType4/Velocities"), 3, [&](double x) { return physical(x, kVelocity, a, h) * 1e-5; }),
                "velocity");
  expect_floats(g.mass,
                rows(stored("PartType4/GFM_InitialMass"), 1, [&](double x) { return physical(x, kMass, a, h) / kMsunG; }),
                "mass");
  expect_floats(g.metallicity, rows(stored("PartType4/GFM_Metallicity"), 1, [](double x) { return x; }), "metallicity");
  // The age: the lookback time to the formation redshift 1/a_form - 1.
  expect_floats(g.age, rows(sft, 1, [](double af) { return planck15_lookback(1 / af - 1); }), "age");
  // Sanity of the unit chain: 1e10 Msun/h is about 1.476e10 Msun for h = 0.6774.
  EXPECT_NEAR(physical(1.0, kMass, a, h) / kMsunG, 1e10 / h, 1e10 / h * 3.5e-4);

  const std::array<double, 3> pos{raw.find("SubhaloData/pos_x").values[0], raw.find("SubhaloData/pos_y").values[0],
                                  raw.find("SubhaloData/pos_z").values[0]};
  for (int k = 0; k < 3; ++k) {
    const double want = physical(pos[k], kLength, a, h) / kKpcCm;
    EXPECT_NEAR(g.center[k], want, 1e-13 * want) << k;
  }
  EXPECT_NEAR(g.halfmassrad_stars, physical(1.25, kLength, a, h) / kKpcCm, 1e-15 * 2e3);
  EXPECT_DOUBLE_EQ(g.redshift, 1 / a - 1);

  // Gas, in Rubix's units: kpc, km/s, Msun, Msun/kpc^3, erg/g, and the dimensionless rest.
  const ifu::GasData& gas = g.gas;
  ASSERT_EQ(gas.n, 40);
  auto all = [&](const std::string& name, auto&& fn) {
    std::vector<double> v = stored(name);
    for (auto& x : v) x = fn(x);
    return v;
  };
  expect_floats(gas.coords, all("PartType0/Coordinates", [&](double x) { return physical(x, kLength, a, h) / kKpcCm; }),
                "gas coords");
  expect_floats(gas.velocity,
                all("PartType0/Velocities", [&](double x) { return physical(x, kVelocity, a, h) * 1e-5; }),
                "gas velocity");
  expect_floats(gas.mass, all("PartType0/Masses", [&](double x) { return physical(x, kMass, a, h) / kMsunG; }),
                "gas mass");
  expect_floats(gas.density,
                all("PartType0/Density",
                    [&](double x) { return physical(x, kDensity, a, h) * (kKpcCm * kKpcCm * kKpcCm) / kMsunG; }),
                "gas density");
  expect_floats(gas.internal_energy, all("PartType0/InternalEnergy", [&](double x) { return x * 1e10; }),
                "gas internal energy");
  expect_floats(gas.metallicity, all("PartType0/GFM_Metallicity", [](double x) { return x; }), "gas metallicity");
  expect_floats(gas.sfr, all("PartType0/StarFormationRate", [](double x) { return x; }), "gas sfr");
  expect_floats(gas.electron_abundance, all("PartType0/ElectronAbundance", [](double x) { return x; }),
                "gas electron abundance");
  EXPECT_EQ(gas.metals_per_cell, 10);
  expect_floats(gas.metals, all("PartType0/GFM_Metals", [](double x) { return x; }), "gas metals");
}

TEST(IfuTng, WithoutScalingAttributesTngsSpecificationApplies) {
  TempDir tmp;
  Cutout with = make_cutout(120, 10, 3);
  Cutout without = with;
  for (auto& d : without.sets) d.scaling.reset();
  write_cutout(tmp / "with.h5", with);
  write_cutout(tmp / "without.h5", without);
  const auto g1 = ifu::read_galaxy(tmp / "with.h5");
  const auto g2 = ifu::read_galaxy(tmp / "without.h5");
  EXPECT_EQ(g1.coords, g2.coords);
  EXPECT_EQ(g1.velocity, g2.velocity);
  EXPECT_EQ(g1.mass, g2.mass);
  EXPECT_EQ(g1.age, g2.age);
  EXPECT_EQ(g1.center, g2.center);
  EXPECT_EQ(g1.gas.density, g2.gas.density);
  EXPECT_EQ(g1.gas.internal_energy, g2.gas.internal_energy);
}

TEST(IfuTng, WithoutSubhaloDataTheStarsGiveCentreAndHalfMassRadius) {
  TempDir tmp;
  Cutout cut = make_cutout(400, 0, 11);
  cut.erase_prefix("SubhaloData/");
  write_cutout(tmp / "c.h5", cut);
  const auto g = ifu::read_galaxy(tmp / "c.h5");
  EXPECT_EQ(g.gas.n, 0);
  // Recomputed here from the converted stars (double): shrinking spheres
  // (radius x 0.9 per step, recentred on the mass inside, until fewer than
  // max(32, n/100) stars would stay inside), then the radius at which the
  // mass enclosed, star by star outwards, first reaches half the total.
  const auto pos_raw = cut.find("PartType4/Coordinates").values;
  const auto m_raw = cut.find("PartType4/GFM_InitialMass").values;
  const auto sft = cut.find("PartType4/GFM_StellarFormationTime").values;
  std::vector<std::array<double, 3>> p;
  std::vector<double> m;
  for (std::size_t i = 0; i < sft.size(); ++i) {
    if (static_cast<float>(sft[i]) <= 0) continue;
    p.push_back({});
    for (int k = 0; k < 3; ++k) p.back()[k] = physical(pos_raw[3 * i + k], kLength, cut.a, cut.h) / kKpcCm;
    m.push_back(physical(static_cast<float>(m_raw[i]), kMass, cut.a, cut.h) / kMsunG);
  }
  auto centre_of = [&](const std::vector<std::size_t>& idx) {
    std::array<double, 3> c{0, 0, 0};
    double mt = 0;
    for (auto i : idx) {
      mt += m[i];
      for (int k = 0; k < 3; ++k) c[k] += m[i] * p[i][k];
    }
    for (auto& v : c) v /= mt;
    return c;
  };
  auto r_of = [&](std::size_t i, const std::array<double, 3>& c) {
    return std::hypot(p[i][0] - c[0], p[i][1] - c[1], p[i][2] - c[2]);
  };
  std::vector<std::size_t> idx(p.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::array<double, 3> c = centre_of(idx);
  double r = 0;
  for (auto i : idx) r = std::max(r, r_of(i, c));
  for (;;) {
    r *= 0.9;
    std::vector<std::size_t> in;
    for (auto i : idx)
      if (r_of(i, c) <= r) in.push_back(i);
    if (in.size() < std::max<std::size_t>(32, p.size() / 100)) break;
    c = centre_of(in);
  }
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(g.center[k], c[k], 1e-9 * std::abs(c[k])) << k;
  std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return r_of(x, c) < r_of(y, c); });
  double total = 0, enclosed = 0, half = 0;
  for (double mi : m) total += mi;
  for (auto i : idx) {
    enclosed += m[i];
    if (enclosed >= 0.5 * total) {
      half = r_of(i, c);
      break;
    }
  }
  EXPECT_NEAR(g.halfmassrad_stars, half, 1e-9);
  // The disk was drawn with sigma 0.9 ckpc/h in x and y (about 1.06 kpc): a
  // half-mass radius of about 1.2 sigma, and the centre near the true one.
  EXPECT_GT(g.halfmassrad_stars, 0.8);
  EXPECT_LT(g.halfmassrad_stars, 2.0);
  EXPECT_NEAR(g.center[0], physical(10500.0, kLength, cut.a, cut.h) / kKpcCm, 0.5);
}

TEST(IfuTng, ErrorsNameTheFileAndWhatWasExpected) {
  TempDir tmp;
  const std::string p = tmp / "bad.h5";
  auto expect_bad = [&](const Cutout& c, std::vector<std::string> words) {
    write_cutout(p, c);
    expect_error<InputError>([&] { ifu::read_galaxy(p); }, "[ifu galaxy] " + p + ": ", words);
  };
  {
    Cutout c = make_cutout(50, 10);
    c.erase_prefix("PartType4/");
    expect_bad(c, {"no '/PartType4' group", "/Header", "/PartType0"});
  }
  {
    Cutout c = make_cutout(50, 0);
    c.time = std::nan("");
    expect_bad(c, {"'/Header' has no attribute 'Time'", "HubbleParam, Time and Redshift"});
  }
  {
    Cutout c = make_cutout(50, 0);
    c.erase("PartType4/GFM_Metallicity");
    expect_bad(c, {"missing dataset '/PartType4/GFM_Metallicity'", "GFM_StellarFormationTime"});
  }
  {
    Cutout c = make_cutout(50, 0);
    for (auto& x : c.find("PartType4/GFM_StellarFormationTime").values) x = -std::abs(x);
    expect_bad(c, {"all 50 star particles", "wind particles", "GFM_StellarFormationTime <= 0"});
  }
  {
    Cutout c = make_cutout(50, 0);
    Dataset& v = c.find("PartType4/Velocities");
    v.dims = {49, 3};
    v.values.resize(49 * 3);
    expect_bad(c, {"'/PartType4/Velocities' must have shape (50, 3)", "(49, 3)"});
  }
  {
    Cutout c = make_cutout(50, 0);
    c.find("PartType4/Coordinates").scaling.reset();
    c.find("PartType4/Coordinates").dims = {150};
    expect_bad(c, {"'/PartType4/Coordinates' must have shape (n, 3)"});
  }
  {
    Cutout c = make_cutout(50, 10);
    c.erase("PartType0/Masses");
    expect_bad(c, {"missing dataset '/PartType0/Masses'", "gas cells"});
  }
  {
    Cutout c = make_cutout(50, 0);
    c.erase("SubhaloData/pos_y");
    expect_bad(c, {"missing dataset '/SubhaloData/pos_y'"});
  }
  {
    // Only some of the unit attributes: which scaling is meant is unknown.
    write_cutout(p, make_cutout(50, 0));
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "PartType4/Velocities", H5P_DEFAULT);
    H5Adelete(d, "h_scaling");
    H5Dclose(d);
    H5Fclose(f);
    expect_error<InputError>([&] { ifu::read_galaxy(p); }, "[ifu galaxy] " + p + ": ",
                             {"'/PartType4/Velocities' has only some of the attributes", "missing: h_scaling"});
  }
  {
    // A /PartType4 group without the header is still read as a cutout, and says what it lacks.
    Cutout c = make_cutout(50, 0);
    c.header = false;
    expect_bad(c, {"needs a '/Header' group", "/PartType4"});
  }
}

// ----------------------------------------------------------- the command line

TEST(IfuTng, CommandLineCubeEqualsTheOneFromRubixsFormat) {
#ifndef TESSERA_CLI
  GTEST_SKIP() << "the tessera program is not built (TESSERA_BUILD_TOOLS off)";
#else
  TempDir tmp;
  const std::string data = TESSERA_IFU_TEST_DATA;  // the golden test's config and cut BC03 grid
  write_cutout(tmp / "cutout.h5", make_cutout(300, 40, 5));
  const ifu::GalaxyData g = ifu::read_galaxy(tmp / "cutout.h5");
  ifu::write_galaxy_h5(tmp / "rubix_galaxy.h5", g);
  auto run = [&](const std::string& input, const std::string& out) {
    const std::string cmd = std::string("TESSERA_NUM_CPU_DEVICES=2 '") + TESSERA_CLI + "' ifu --config '" + data +
                            "/config.yml' --input '" + input + "' --ssp '" + data + "/ssp_bc03_cut.h5' --output '" +
                            out + "' --no-plots --quiet";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return ifu::read_cube_fits(out);
  };
  const ifu::FitsCube from_cutout = run(tmp / "cutout.h5", tmp / "tng.fits");
  const ifu::FitsCube from_rubix = run(tmp / "rubix_galaxy.h5", tmp / "rubix.fits");
  ASSERT_EQ(from_cutout.data.size(), from_rubix.data.size());
  ASSERT_EQ(from_cutout.data.size(), 30u * 30u * 411u);
  EXPECT_EQ(std::memcmp(from_cutout.data.data(), from_rubix.data.data(), from_cutout.data.size() * sizeof(float)), 0);
  // Not an empty comparison: the stars shine in most of the field.
  double total = 0;
  std::size_t lit = 0;
  for (std::size_t s = 0; s < 900; ++s) {
    double spaxel = 0;
    for (std::size_t w = 0; w < 411; ++w) spaxel += from_cutout.data[s * 411 + w];
    lit += spaxel > 0;
    total += spaxel;
  }
  EXPECT_GT(total, 0);
  EXPECT_GT(lit, 100u);
#endif
}
