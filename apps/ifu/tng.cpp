// IllustrisTNG subhalo cutouts, converted as Rubix 0.0.5's IllustrisHandler
// (rubix/galaxy/input_handler/illustris.py) converts them: every dataset by
// its own a_scaling, h_scaling and to_cgs attributes (utils.
// convert_values_to_physical), then from cgs to the units of Rubix's
// BaseHandler config with astropy's unit definitions; star ages from the
// formation scale factor by astropy's Planck15 lookback time (utils.SFTtoAge).
#include "ifu/tng.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "ifu/errors.hpp"
#include "ifu/h5.hpp"

namespace tessera::ifu {

namespace {

using h5::H5File;
using h5::Id;
using h5::quoted;

// How a TNG field scales: physical = code * a^a_exp * h^h_exp * to_cgs.
struct Scaling {
  double a_exp = 0, h_exp = 0, to_cgs = 1;
};

// TNG's data specification (the attributes its files carry), for datasets
// stored without them: lengths ckpc/h, velocities km sqrt(a)/s, masses
// 1e10 Msun/h, densities (1e10 Msun/h) / (ckpc/h)^3, energies (km/s)^2.
std::optional<Scaling> specified_scaling(const std::string& field) {
  constexpr double kCkpcCm = 3.085678e21, kMassG = 1.989e43;
  if (field == "Coordinates") return Scaling{1, -1, kCkpcCm};
  if (field == "Velocities") return Scaling{0.5, 0, 1e5};
  if (field == "Masses" || field == "GFM_InitialMass") return Scaling{0, -1, kMassG};
  if (field == "Density") return Scaling{-3, 2, kMassG / (kCkpcCm * kCkpcCm * kCkpcCm)};
  if (field == "InternalEnergy") return Scaling{0, 0, 1e10};
  if (field == "GFM_Metallicity" || field == "GFM_Metals" || field == "GFM_StellarFormationTime" ||
      field == "StarFormationRate" || field == "ElectronAbundance")
    return Scaling{0, 0, 1};
  return std::nullopt;
}

// From cgs to the unit Rubix stores (BaseHandler config), as astropy's
// Quantity.to computes the factor: the ratio of the units' SI scales.
enum class Target { kKpc, kMsun, kKmPerS, kMsunPerKpc3, kSame };
constexpr double kKpcM = 3.0856775814913673e19, kMsunKg = 1.988409870698051e30;
double target_factor(Target t) {
  switch (t) {
    case Target::kKpc:
      return 0.01 / kKpcM;
    case Target::kMsun:
      return 0.001 / kMsunKg;
    case Target::kKmPerS:
      return 0.01 / 1000.0;
    case Target::kMsunPerKpc3:
      return (0.001 / 1e-6) / (kMsunKg / (kKpcM * kKpcM * kKpcM));
    default:
      return 1.0;
  }
}

struct Header {
  double a = 1, h = 1, redshift = 0;
};

// A dataset read whole in physical units (double), with its shape and scaling.
struct Field {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
  Scaling scaling;
};

class Cutout {
 public:
  explicit Cutout(const H5File& f) : f_(f) {
    if (!f_.is_group("Header")) f_.bad("an IllustrisTNG cutout needs a '/Header' group" + groups_text());
    const Id g = f_.open_group("Header");
    const char* names[] = {"HubbleParam", "Time", "Redshift"};
    double* dst[] = {&header_.h, &header_.a, &header_.redshift};
    for (int i = 0; i < 3; ++i) {
      const auto v = f_.number_attr(g.get(), names[i], "/Header");
      if (!v) {
        std::string w = "the IllustrisTNG cutout's '/Header' has no attribute ";
        w += quoted(names[i]);
        w += " (expected HubbleParam, Time and Redshift)";
        f_.bad(w);
      }
      *dst[i] = *v;
    }
    if (!(header_.a > 0) || !(header_.h > 0) || !std::isfinite(header_.a) || !std::isfinite(header_.h))
      f_.bad("'/Header' attributes Time (" + std::to_string(header_.a) + ") and HubbleParam (" +
             std::to_string(header_.h) + ") must be positive");
  }

  const Header& header() const { return header_; }

  // ", it has: A, B" (the root's members), for messages about structure.
  std::string groups_text() const {
    std::vector<std::string> names;
    H5Literate(
        f_.id(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
        [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
          static_cast<std::vector<std::string>*>(data)->push_back(name);
          return 0;
        },
        &names);
    if (names.empty()) return " (the file is empty)";
    std::string s = " (the file has:";
    for (const auto& n : names) s += " /" + n;
    return s + ")";
  }

  // The scaling attributes of a dataset, or TNG's specification without them.
  Scaling scaling(const Id& d, const std::string& name, const std::string& field) const {
    const std::string where = "/" + name;
    const auto a = f_.number_attr(d.get(), "a_scaling", where);
    const auto h = f_.number_attr(d.get(), "h_scaling", where);
    const auto cgs = f_.number_attr(d.get(), "to_cgs", where);
    if (a && h && cgs) return Scaling{*a, *h, *cgs == 0 ? 1.0 : *cgs};  // TNG writes 0 for "no unit"
    if (!a && !h && !cgs) {
      if (auto s = specified_scaling(field)) return *s;
      f_.bad(quoted(where) + " has no a_scaling, h_scaling and to_cgs attributes");
    }
    std::string w = quoted(where);
    w += " has only some of the attributes a_scaling, h_scaling and to_cgs (missing:";
    if (!a) w += " a_scaling";
    if (!h) w += " h_scaling";
    if (!cgs) w += " to_cgs";
    w += ")";
    f_.bad(w);
  }

  // group/field in physical units: x a^a_exp h^h_exp to_cgs, then the target
  // unit, in Rubix's order of operations.
  Field read(const std::string& group, const std::string& field, Target t) const {
    const std::string name = group + "/" + field;
    const Id d = f_.open_dataset(name);
    Field out;
    out.values = f_.read_all<double>(d, name, out.shape);
    out.scaling = scaling(d, name, field);
    const double fa = std::pow(header_.a, out.scaling.a_exp), fh = std::pow(header_.h, out.scaling.h_exp);
    const double unit = target_factor(t);
    for (double& x : out.values) x = x * fa * fh * out.scaling.to_cgs * unit;
    return out;
  }

  // A scalar of /SubhaloData in physical units, scaled like `like` (Rubix
  // scales pos_* and halfmassrad_stars like the particles' Coordinates).
  double subhalo_scalar(const std::string& field, const Scaling& like) const {
    const std::string name = "SubhaloData/" + field;
    const Id d = f_.open_dataset(name);
    std::vector<std::int64_t> shape;
    const auto all = f_.read_all<double>(d, name, shape);
    if (all.size() != 1 || shape.size() > 1)
      f_.bad(quoted("/" + name) + " must be a scalar, its shape is " + tessera_shape(shape));
    const double v = all[0];
    return v * std::pow(header_.a, like.a_exp) * std::pow(header_.h, like.h_exp) * like.to_cgs *
           target_factor(Target::kKpc);
  }

  void require(const std::string& group, const std::vector<const char*>& fields, const char* what) const {
    for (const char* field : fields) {
      if (f_.exists(group + "/" + field)) continue;
      std::string w = "missing dataset ";
      w += quoted("/" + group + "/" + field);
      w += " (an IllustrisTNG cutout's ";
      w += what;
      w += " need";
      for (std::size_t i = 0; i < fields.size(); ++i) {
        w += i == 0 ? " " : i + 1 == fields.size() ? " and " : ", ";
        w += fields[i];
      }
      w += ")";
      f_.bad(w);
    }
  }

  // The shape must be (n) or (n, cols).
  void check_shape(const Field& x, const std::string& name, std::int64_t n, std::int64_t cols) const {
    const std::vector<std::int64_t> want = cols == 0 ? std::vector<std::int64_t>{n} : std::vector<std::int64_t>{n, cols};
    if (x.shape == want) return;
    std::string w = quoted("/" + name);
    w += " must have shape ";
    w += tessera_shape(want);
    w += " (one row per particle), it has ";
    w += tessera_shape(x.shape);
    f_.bad(w);
  }

  static std::string tessera_shape(const std::vector<std::int64_t>& s) {
    std::string out = "(";
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(s[i]);
    }
    if (s.size() == 1) out += ",";
    return out + ")";
  }

  const H5File& file() const { return f_; }

 private:
  const H5File& f_;
  Header header_;
};

// The rows of `x` (`cols` values each) whose keep flag is set, as float.
std::vector<float> kept_rows(const std::vector<double>& x, const std::vector<char>& keep, std::size_t cols) {
  std::vector<float> out;
  out.reserve(x.size());
  for (std::size_t i = 0; i < keep.size(); ++i)
    if (keep[i])
      for (std::size_t c = 0; c < cols; ++c) out.push_back(static_cast<float>(x[i * cols + c]));
  return out;
}

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

// The mass-weighted mean position of the particles whose flag is set.
std::array<double, 3> mass_centre(const std::vector<double>& pos, const std::vector<double>& mass,
                                  const std::vector<char>& in) {
  double m = 0;
  std::array<double, 3> c{0, 0, 0};
  for (std::size_t i = 0; i < mass.size(); ++i) {
    if (!in[i]) continue;
    m += mass[i];
    for (int k = 0; k < 3; ++k) c[k] += mass[i] * pos[3 * i + k];
  }
  if (m > 0)
    for (auto& v : c) v /= m;
  return c;
}

// Without /SubhaloData: the shrinking-sphere centre of the stars (Power et al.
// 2003): start at the mass-weighted mean with the radius reaching the
// farthest star, shrink the radius by 10% and recentre on the stars inside,
// until fewer than max(32, n/100) stars would remain. It follows the densest
// stellar clump, as the subhalo's potential minimum does, where a plain
// centre of mass would be pulled by satellites and streams.
std::array<double, 3> shrinking_sphere_centre(const std::vector<double>& pos, const std::vector<double>& mass) {
  const std::size_t n = mass.size();
  std::vector<char> in(n, 1);
  std::array<double, 3> c = mass_centre(pos, mass, in);
  auto dist = [&](std::size_t i) {
    const double dx = pos[3 * i] - c[0], dy = pos[3 * i + 1] - c[1], dz = pos[3 * i + 2] - c[2];
    return std::sqrt(dx * dx + dy * dy + dz * dz);
  };
  double r = 0;
  for (std::size_t i = 0; i < n; ++i) r = std::max(r, dist(i));
  const std::size_t stop = std::max<std::size_t>(32, n / 100);
  while (r > 0) {
    r *= 0.9;
    std::size_t inside = 0;
    for (std::size_t i = 0; i < n; ++i) inside += (in[i] = dist(i) <= r ? 1 : 0);
    if (inside < stop) break;
    c = mass_centre(pos, mass, in);
  }
  return c;
}

// The radius of the sphere around `c` that holds half of the stars' mass:
// the distance of the first star, in order of distance, at which the
// enclosed mass reaches half the total.
double half_mass_radius(const std::vector<double>& pos, const std::vector<double>& mass,
                        const std::array<double, 3>& c) {
  const std::size_t n = mass.size();
  std::vector<std::pair<double, double>> rm(n);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double dx = pos[3 * i] - c[0], dy = pos[3 * i + 1] - c[1], dz = pos[3 * i + 2] - c[2];
    rm[i] = {std::sqrt(dx * dx + dy * dy + dz * dz), mass[i]};
    total += mass[i];
  }
  std::sort(rm.begin(), rm.end());
  double enclosed = 0;
  for (const auto& [r, m] : rm) {
    enclosed += m;
    if (enclosed >= 0.5 * total) return r;
  }
  return rm.empty() ? 0.0 : rm.back().first;
}

void read_gas(const Cutout& cut, GasData& gas) {
  const std::string g = "PartType0";
  cut.require(g, {"Coordinates", "Velocities", "Masses"}, "gas cells (/PartType0)");
  const Field coords = cut.read(g, "Coordinates", Target::kKpc);
  if (coords.shape.size() != 2 || coords.shape[1] != 3)
    cut.file().bad("'/PartType0/Coordinates' must have shape (n, 3), it has " + Cutout::tessera_shape(coords.shape));
  gas.n = coords.shape[0];
  gas.coords = to_float(coords.values);
  const Field vel = cut.read(g, "Velocities", Target::kKmPerS);
  cut.check_shape(vel, g + "/Velocities", gas.n, 3);
  gas.velocity = to_float(vel.values);
  const std::tuple<const char*, Target, std::vector<float>*> per_cell[] = {
      {"Masses", Target::kMsun, &gas.mass},
      {"Density", Target::kMsunPerKpc3, &gas.density},
      {"InternalEnergy", Target::kSame, &gas.internal_energy},  // (km/s)^2 -> cm^2/s^2 = erg/g by to_cgs
      {"GFM_Metallicity", Target::kSame, &gas.metallicity},
      {"StarFormationRate", Target::kSame, &gas.sfr},
      {"ElectronAbundance", Target::kSame, &gas.electron_abundance}};
  for (const auto& [field, target, dst] : per_cell) {
    if (!cut.file().exists(g + "/" + field)) continue;
    const Field x = cut.read(g, field, target);
    cut.check_shape(x, g + "/" + field, gas.n, 0);
    *dst = to_float(x.values);
  }
  if (cut.file().exists(g + "/GFM_Metals")) {
    const Field x = cut.read(g, "GFM_Metals", Target::kSame);
    if (x.shape.size() != 2 || x.shape[0] != gas.n)
      cut.file().bad("'/PartType0/GFM_Metals' must have shape (" + std::to_string(gas.n) +
                     ", species) (one row per cell), it has " + Cutout::tessera_shape(x.shape));
    gas.metals_per_cell = x.shape[1];
    gas.metals = to_float(x.values);
  }
}

}  // namespace

bool looks_like_tng_cutout(const H5File& f) {
  return !f.exists("particles") && (f.is_group("Header") || f.is_group("PartType4"));
}

GalaxyData read_tng_cutout(const H5File& f, const Cosmology& c) {
  const Cutout cut(f);
  const std::string s = "PartType4";
  if (!f.is_group(s))
    f.bad("an IllustrisTNG cutout without star particles: no '/PartType4' group" + cut.groups_text());
  cut.require(s, {"Coordinates", "Velocities", "GFM_InitialMass", "GFM_Metallicity", "GFM_StellarFormationTime"},
              "star particles (/PartType4)");
  const Field coords = cut.read(s, "Coordinates", Target::kKpc);
  if (coords.shape.size() != 2 || coords.shape[1] != 3)
    f.bad("'/PartType4/Coordinates' must have shape (n, 3), it has " + Cutout::tessera_shape(coords.shape));
  const std::int64_t n_all = coords.shape[0];
  if (n_all == 0) f.bad("'/PartType4' holds no star particles");
  const Field vel = cut.read(s, "Velocities", Target::kKmPerS);
  cut.check_shape(vel, s + "/Velocities", n_all, 3);
  const Field mass = cut.read(s, "GFM_InitialMass", Target::kMsun);
  cut.check_shape(mass, s + "/GFM_InitialMass", n_all, 0);
  const Field z = cut.read(s, "GFM_Metallicity", Target::kSame);
  cut.check_shape(z, s + "/GFM_Metallicity", n_all, 0);
  const Field sft = cut.read(s, "GFM_StellarFormationTime", Target::kSame);
  cut.check_shape(sft, s + "/GFM_StellarFormationTime", n_all, 0);

  // Wind particles (gas cells in the wind phase, stored with the stars) have
  // a formation time <= 0; they are not stars.
  std::vector<char> keep(static_cast<std::size_t>(n_all));
  std::int64_t n = 0;
  for (std::size_t i = 0; i < keep.size(); ++i) n += (keep[i] = sft.values[i] > 0 ? 1 : 0);
  if (n == 0)
    f.bad("all " + std::to_string(n_all) +
          " star particles in '/PartType4' are wind particles (GFM_StellarFormationTime <= 0): no stars to observe");

  GalaxyData g;
  g.n = n;
  g.redshift = cut.header().redshift;
  g.coords = kept_rows(coords.values, keep, 3);
  g.velocity = kept_rows(vel.values, keep, 3);
  g.mass = kept_rows(mass.values, keep, 1);
  g.metallicity = kept_rows(z.values, keep, 1);
  std::vector<double> a_form, pos, m;
  a_form.reserve(static_cast<std::size_t>(n));
  pos.reserve(3 * static_cast<std::size_t>(n));
  m.reserve(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    a_form.push_back(sft.values[i]);
    for (int k = 0; k < 3; ++k) pos.push_back(coords.values[3 * i + k]);
    m.push_back(mass.values[i]);
  }
  for (std::size_t i = 0; i < a_form.size(); ++i)
    if (!std::isfinite(a_form[i]))
      f.bad("'/PartType4/GFM_StellarFormationTime' holds a non-finite formation time");
  g.age = to_float(lookback_times_from_scale_factors_gyr(c, a_form));

  const bool subhalo = f.is_group("SubhaloData");
  if (subhalo) {
    const char* axes[] = {"pos_x", "pos_y", "pos_z"};
    for (int k = 0; k < 3; ++k) {
      if (!f.exists(std::string("SubhaloData/") + axes[k]))
        f.bad(std::string("missing dataset '/SubhaloData/") + axes[k] +
              "' (the subhalo's position: /SubhaloData needs pos_x, pos_y and pos_z)");
      g.center[k] = cut.subhalo_scalar(axes[k], coords.scaling);
    }
  } else {
    g.center = shrinking_sphere_centre(pos, m);
  }
  if (subhalo && f.exists("SubhaloData/halfmassrad_stars"))
    g.halfmassrad_stars = cut.subhalo_scalar("halfmassrad_stars", coords.scaling);
  else
    g.halfmassrad_stars = half_mass_radius(pos, m, g.center);

  if (f.is_group("PartType0")) read_gas(cut, g.gas);
  return g;
}

GalaxyData read_tng_cutout(const std::string& path, const Cosmology& c) {
  h5::QuietHdf5 quiet;
  const H5File f(path, "ifu galaxy", false);
  return read_tng_cutout(f, c);
}

}  // namespace tessera::ifu
