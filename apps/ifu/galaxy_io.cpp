// Galaxy files: the Rubix HDF5 layout (HDF5 C API) and .npz archives.
#include "ifu/galaxy_io.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>

#include "ifu/errors.hpp"
#include "ifu/h5.hpp"
#include "ifu/tng.hpp"
#include "tessera/sharding.hpp"
#include "ifu/npy.hpp"
#include "tessera/version.hpp"

namespace tessera::ifu {

namespace {

[[noreturn]] void fail(const char* ctx, const std::string& path, const std::string& what) {
  fail_input(ctx, path, what);
}

using h5::H5File;
using h5::Id;
using h5::QuietHdf5;
using h5::make_group;
using h5::quoted;
using h5::write_attr_string;
using h5::write_dataset;

// ---- units ----

enum class Quantity { kLength, kVelocity, kMass, kAge, kDimensionless };

const char* canonical(Quantity q) {
  switch (q) {
    case Quantity::kLength:
      return "kpc";
    case Quantity::kVelocity:
      return "km/s";
    case Quantity::kMass:
      return "Msun";
    case Quantity::kAge:
      return "Gyr";
    default:
      return "\"\" (dimensionless)";
  }
}

// Astropy's definitions (which Rubix converts with): the IAU 2012 parsec and
// the IAU 2015 nominal solar mass; a year is a Julian year.
constexpr double kKpcInM = 3.0856775814913673e19;
constexpr double kMsunInKg = 1.988409870698051e30;

// The factor taking a value in `unit` to the canonical unit of `q`; an
// InputError (naming the dataset) for units that are unknown, of the wrong
// kind, or depend on the Hubble parameter or the scale factor.
double unit_factor(const H5File& f, const std::string& dataset, const std::string& unit, Quantity q) {
  // Normalise spacing: runs of blanks -> one, none around '/' and '*' ("km / s" -> "km/s").
  std::string collapsed;
  for (char c : unit) {
    if (!std::isspace(static_cast<unsigned char>(c)))
      collapsed += c;
    else if (!collapsed.empty() && collapsed.back() != ' ')
      collapsed += ' ';
  }
  while (!collapsed.empty() && collapsed.back() == ' ') collapsed.pop_back();
  std::string u;
  for (std::size_t i = 0; i < collapsed.size(); ++i) {
    auto op = [&](std::size_t j) { return j < collapsed.size() && (collapsed[j] == '/' || collapsed[j] == '*'); };
    if (collapsed[i] == ' ' && ((i > 0 && op(i - 1)) || op(i + 1))) continue;
    u += collapsed[i];
  }
  // A leading scale factor: "1e10 Msun", "1e10*Msun".
  double scale = 1;
  if (!u.empty() && (std::isdigit(static_cast<unsigned char>(u[0])) || u[0] == '.')) {
    const std::size_t cut = u.find_first_of(" *");
    if (cut != std::string::npos) {
      double v = 0;
      auto [ptr, ec] = std::from_chars(u.data(), u.data() + cut, v);
      if (ec == std::errc() && ptr == u.data() + cut && v > 0 && std::isfinite(v)) {
        scale = v;
        u = u.substr(cut + 1);
      }
    }
  }
  auto reject = [&](const std::string& why) -> double {
    std::string w = "unit ";
    w += quoted(unit);
    w += " of ";
    w += quoted("/" + dataset);
    w += " ";
    w += why;
    f.bad(w);
  };
  if (u.find("/h") != std::string::npos || u.find("h^-1") != std::string::npos || u.find("h-1") != std::string::npos ||
      u.rfind("ckpc", 0) == 0 || u.rfind("cMpc", 0) == 0)
    return reject("depends on the Hubble parameter or the scale factor; store physical units (e.g. kpc)");
  struct Known {
    const char* name;
    Quantity q;
    double factor;
  };
  static const Known table[] = {
      {"kpc", Quantity::kLength, 1},
      {"pc", Quantity::kLength, 1e-3},
      {"Mpc", Quantity::kLength, 1e3},
      {"m", Quantity::kLength, 1 / kKpcInM},
      {"km", Quantity::kLength, 1e3 / kKpcInM},
      {"cm", Quantity::kLength, 1e-2 / kKpcInM},
      {"km/s", Quantity::kVelocity, 1},
      {"km s-1", Quantity::kVelocity, 1},
      {"km s^-1", Quantity::kVelocity, 1},
      {"m/s", Quantity::kVelocity, 1e-3},
      {"m s-1", Quantity::kVelocity, 1e-3},
      {"m s^-1", Quantity::kVelocity, 1e-3},
      {"cm/s", Quantity::kVelocity, 1e-5},
      {"cm s-1", Quantity::kVelocity, 1e-5},
      {"cm s^-1", Quantity::kVelocity, 1e-5},
      {"Msun", Quantity::kMass, 1},
      {"Msol", Quantity::kMass, 1},
      {"solMass", Quantity::kMass, 1},
      {"M_sun", Quantity::kMass, 1},
      {"kg", Quantity::kMass, 1 / kMsunInKg},
      {"g", Quantity::kMass, 1e-3 / kMsunInKg},
      {"Gyr", Quantity::kAge, 1},
      {"Myr", Quantity::kAge, 1e-3},
      {"kyr", Quantity::kAge, 1e-6},
      {"yr", Quantity::kAge, 1e-9},
      {"", Quantity::kDimensionless, 1},
      {"dimensionless", Quantity::kDimensionless, 1},
  };
  for (const Known& k : table) {
    if (u != k.name) continue;
    if (k.q != q) {
      std::string w = "is not a unit of the expected kind (expected one convertible to ";
      w += canonical(q);
      w += ")";
      return reject(w);
    }
    return scale * k.factor;
  }
  if (u == "Zsun" || u == "Z_sun" || u == "Zsol")
    return reject("is not supported: solar metallicity is not one agreed number; store the mass fraction Z");
  std::string w = "is not known (expected one convertible to ";
  w += canonical(q);
  w += ")";
  return reject(w);
}

std::string shape_text(const std::vector<std::int64_t>& s) { return tessera::shape_str(s); }

// One dataset read in canonical units, as float (particles) or double (galaxy).
template <class T>
std::vector<T> read_quantity(const H5File& f, const std::string& name, Quantity q, std::vector<std::int64_t>& shape) {
  const Id d = f.open_dataset(name);
  std::vector<T> v = f.read_all<T>(d, name, shape);
  const auto unit = f.unit(d, name);
  const double factor = unit ? unit_factor(f, name, *unit, q) : 1.0;
  if (factor != 1.0)
    for (auto& x : v) x = static_cast<T>(static_cast<double>(x) * factor);
  return v;
}

// A galaxy scalar stored as () or (1,).
double read_scalar(const H5File& f, const std::string& name, Quantity q) {
  std::vector<std::int64_t> shape;
  auto v = read_quantity<double>(f, name, q, shape);
  if (v.size() != 1 || shape.size() > 1)
    f.bad(quoted("/" + name) + " must be a scalar, its shape is " + shape_text(shape));
  return v[0];
}

// /particles/gas of Rubix's layout, when the file has it: what the dust of
// calc_dusty_ifu reads (coords, mass, metals) is required then, velocity
// and metallicity are read when present; Rubix's other gas fields (density,
// internal_energy, sfr, electron_abundance) are left: no stage uses them.
void read_gas_h5(const H5File& f, GasData& gas) {
  const std::string group = "particles/gas/";
  std::vector<std::int64_t> shape;
  for (const char* need : {"coords", "mass", "metals"})
    if (!f.exists(group + need))
      f.bad("'/particles/gas' lacks " + quoted("/" + group + need) +
            " (gas cells need coords (n, 3), mass (n,) and metals (n, k): GFM_Metals, hydrogen at column 0, oxygen at "
            "column 4)");
  gas.coords = read_quantity<float>(f, group + "coords", Quantity::kLength, shape);
  if (shape.size() != 2 || shape[1] != 3)
    f.bad("'/particles/gas/coords' must have shape (n, 3), it has " + shape_text(shape));
  gas.n = shape[0];
  auto check = [&](const char* field, std::vector<std::int64_t> want) {
    if (shape != want)
      f.bad(quoted("/" + group + field) + " must have shape " + shape_text(want) + " (one row per gas cell of coords), it has " +
            shape_text(shape));
  };
  gas.mass = read_quantity<float>(f, group + "mass", Quantity::kMass, shape);
  check("mass", {gas.n});
  gas.metals = read_quantity<float>(f, group + "metals", Quantity::kDimensionless, shape);
  if (shape.size() != 2 || shape[0] != gas.n)
    f.bad("'/particles/gas/metals' must have shape (" + std::to_string(gas.n) + ", k), it has " + shape_text(shape));
  gas.metals_per_cell = shape[1];
  if (f.exists(group + "velocity")) {
    gas.velocity = read_quantity<float>(f, group + "velocity", Quantity::kVelocity, shape);
    check("velocity", {gas.n, 3});
  }
  if (f.exists(group + "metallicity")) {
    gas.metallicity = read_quantity<float>(f, group + "metallicity", Quantity::kDimensionless, shape);
    check("metallicity", {gas.n});
  }
}

GalaxyData read_galaxy_h5(const std::string& path) {
  QuietHdf5 quiet;
  const H5File f(path, "ifu galaxy", false);
  // Rubix's star ages from formation times use astropy's Planck15 whatever
  // the config's cosmology (utils.SFTtoAge), so the reader needs no config.
  if (looks_like_tng_cutout(f)) return read_tng_cutout(f, cosmology("PLANCK15"));
  GalaxyData g;
  std::vector<std::int64_t> shape;
  const auto center = read_quantity<double>(f, "galaxy/center", Quantity::kLength, shape);
  if (center.size() != 3 || shape.size() != 1)
    f.bad("'/galaxy/center' must have shape (3,), it has " + shape_text(shape));
  std::copy(center.begin(), center.end(), g.center.begin());
  if (f.exists("galaxy/halfmassrad_stars"))
    g.halfmassrad_stars = read_scalar(f, "galaxy/halfmassrad_stars", Quantity::kLength);
  if (f.exists("galaxy/redshift")) g.redshift = read_scalar(f, "galaxy/redshift", Quantity::kDimensionless);

  const std::string stars = "particles/stars/";
  g.coords = read_quantity<float>(f, stars + "coords", Quantity::kLength, shape);
  if (shape.size() != 2 || shape[1] != 3)
    f.bad("'/particles/stars/coords' must have shape (n, 3), it has " + shape_text(shape));
  g.n = shape[0];
  if (g.n == 0) f.bad("'/particles/stars/coords' holds no particles");
  g.velocity = read_quantity<float>(f, stars + "velocity", Quantity::kVelocity, shape);
  if (shape != std::vector<std::int64_t>{g.n, 3}) {
    std::string w = "'/particles/stars/velocity' must have shape ";
    w += shape_text({g.n, 3});
    w += " like coords, it has ";
    w += shape_text(shape);
    f.bad(w);
  }
  const std::tuple<const char*, Quantity, std::vector<float>*> per_particle[] = {
      {"mass", Quantity::kMass, &g.mass},
      {"age", Quantity::kAge, &g.age},
      {"metallicity", Quantity::kDimensionless, &g.metallicity}};
  for (const auto& [field, q, dst] : per_particle) {
    *dst = read_quantity<float>(f, stars + field, q, shape);
    if (shape != std::vector<std::int64_t>{g.n}) {
      std::string w = quoted("/" + stars + field);
      w += " must have shape ";
      w += shape_text({g.n});
      w += " (one value per particle of coords), it has ";
      w += shape_text(shape);
      f.bad(w);
    }
  }
  if (f.is_group("particles/gas")) read_gas_h5(f, g.gas);
  return g;
}

GalaxyData read_galaxy_npz(const std::string& path) {
  auto arrays = read_npz(path);
  auto bad = [&](const std::string& what) { fail("ifu galaxy", path, what); };
  auto get = [&](const char* name) -> const NpyArray& {
    auto it = arrays.find(name);
    if (it == arrays.end()) {
      std::string w = "missing array ";
      w += quoted(name);
      w += " (the archive holds:";
      for (const auto& kv : arrays) {
        w += " ";
        w += kv.first;
      }
      w += ")";
      bad(w);
    }
    return it->second;
  };
  GalaxyData g;
  const NpyArray& coords = get("coords");
  if (coords.shape.size() != 2 || coords.shape[1] != 3)
    bad("array 'coords' must have shape (n, 3), it has " + shape_text(coords.shape));
  g.n = coords.shape[0];
  if (g.n == 0) bad("array 'coords' holds no particles");
  g.coords = coords.to_f32();
  const NpyArray& vel = get("velocity");
  if (vel.shape != std::vector<std::int64_t>{g.n, 3})
    bad("array 'velocity' must have shape " + shape_text({g.n, 3}) + " like coords, it has " + shape_text(vel.shape));
  g.velocity = vel.to_f32();
  const std::pair<const char*, std::vector<float>*> per_particle[] = {
      {"mass", &g.mass}, {"age", &g.age}, {"metallicity", &g.metallicity}};
  for (const auto& [field, dst] : per_particle) {
    const NpyArray& a = get(field);
    if (a.shape != std::vector<std::int64_t>{g.n}) {
      std::string w = "array ";
      w += quoted(field);
      w += " must have shape ";
      w += shape_text({g.n});
      w += " (one value per particle of coords), it has ";
      w += shape_text(a.shape);
      bad(w);
    }
    *dst = a.to_f32();
  }
  if (arrays.count("center")) {
    const NpyArray& c = arrays.at("center");
    if (c.shape != std::vector<std::int64_t>{3})
      bad("array 'center' must have shape (3,), it has " + shape_text(c.shape));
    const auto v = c.to_f64();
    std::copy(v.begin(), v.end(), g.center.begin());
  }
  const std::pair<const char*, double*> scalars[] = {{"halfmassrad_stars", &g.halfmassrad_stars},
                                                     {"redshift", &g.redshift}};
  for (const auto& [field, dst] : scalars) {
    if (!arrays.count(field)) continue;
    const NpyArray& a = arrays.at(field);
    if (a.size() != 1 || a.shape.size() > 1) {
      std::string w = "array ";
      w += quoted(field);
      w += " must be a scalar, its shape is ";
      w += shape_text(a.shape);
      bad(w);
    }
    *dst = a.to_f64()[0];
  }
  return g;
}

// ---- writing ----

bool starts_with_bytes(const std::string& path, const char* magic, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string head(n, '\0');
  return in.read(head.data(), static_cast<std::streamsize>(n)) && std::memcmp(head.data(), magic, n) == 0;
}

}  // namespace

GalaxyData read_galaxy(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("ifu galaxy", path, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  // HDF5 files start with this signature (at offset 0 unless a user block precedes it).
  if (starts_with_bytes(path, "\x89HDF\r\n\x1a\n", 8)) return read_galaxy_h5(path);
  if (starts_with_bytes(path, "PK", 2)) return read_galaxy_npz(path);
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".h5" || ext == ".hdf5" || ext == ".hdf") return read_galaxy_h5(path);  // e.g. with a user block
  fail("ifu galaxy", path, "neither an HDF5 file (Rubix's rubix_galaxy.h5 layout or an IllustrisTNG cutout) nor a .npz archive");
}

void write_galaxy_h5(const std::string& path, const GalaxyData& g) { write_galaxy_h5(path, g, StarUnits{}, {}); }

void write_galaxy_h5(const std::string& path, const GalaxyData& g, const StarUnits& units,
                     const std::function<void(const h5::H5File&)>& more) {
  auto check = [&](const std::vector<float>& v, const char* name, std::int64_t per) {
    if (static_cast<std::int64_t>(v.size()) != g.n * per) {
      std::string w = name;
      w += " holds ";
      w += std::to_string(v.size());
      w += " values, expected ";
      w += std::to_string(g.n * per);
      w += " for n = ";
      w += std::to_string(g.n);
      fail("ifu galaxy", path, w);
    }
  };
  if (g.n < 0) fail("ifu galaxy", path, "negative particle count");
  check(g.coords, "coords", 3);
  check(g.velocity, "velocity", 3);
  check(g.mass, "mass", 1);
  check(g.age, "age", 1);
  check(g.metallicity, "metallicity", 1);

  QuietHdf5 quiet;
  const H5File f(path, "ifu galaxy", true);
  const Id meta = make_group(f, "meta");
  for (const char* group : {"galaxy", "particles", "particles/stars"}) make_group(f, group);
  const auto n = static_cast<hsize_t>(g.n);
  write_dataset<double>(f, "galaxy/center", {3}, g.center.data(), "kpc");
  write_dataset<double>(f, "galaxy/halfmassrad_stars", {}, &g.halfmassrad_stars, "kpc");
  write_dataset<double>(f, "galaxy/redshift", {}, &g.redshift, "");
  write_dataset<float>(f, "particles/stars/coords", {n, 3}, g.coords.data(), units.coords);
  write_dataset<float>(f, "particles/stars/velocity", {n, 3}, g.velocity.data(), units.velocity);
  write_dataset<float>(f, "particles/stars/mass", {n}, g.mass.data(), units.mass);
  write_dataset<float>(f, "particles/stars/age", {n}, g.age.data(), units.age);
  write_dataset<float>(f, "particles/stars/metallicity", {n}, g.metallicity.data(), units.metallicity);
  // The gas, when there is some, with the fields and units of Rubix's
  // BaseHandler (those the galaxy holds).
  if (g.gas.n > 0) {
    const GasData& gas = g.gas;
    make_group(f, "particles/gas");
    const auto m = static_cast<hsize_t>(gas.n);
    auto field = [&](const char* name, const std::vector<float>& v, std::vector<hsize_t> dims, const char* unit) {
      hsize_t count = 1;
      for (hsize_t d : dims) count *= d;
      if (v.empty()) return;
      if (v.size() != count)
        fail("ifu galaxy", path, std::string("gas ") + name + " holds " + std::to_string(v.size()) +
                                     " values, expected " + std::to_string(count));
      write_dataset<float>(f, std::string("particles/gas/") + name, dims, v.data(), unit);
    };
    field("coords", gas.coords, {m, 3}, "kpc");
    field("velocity", gas.velocity, {m, 3}, "km/s");
    field("mass", gas.mass, {m}, "Msun");
    field("metallicity", gas.metallicity, {m}, "");
    field("metals", gas.metals, {m, static_cast<hsize_t>(std::max<std::int64_t>(gas.metals_per_cell, 1))}, "");
    field("density", gas.density, {m}, "Msun/kpc^3");
    field("internal_energy", gas.internal_energy, {m}, "erg/g");
    field("sfr", gas.sfr, {m}, "Msun/yr");
    field("electron_abundance", gas.electron_abundance, {m}, "");
  }
  if (more) more(f);
  // Provenance, on the free-form meta group (nothing reads it).
  write_attr_string(f, meta.get(), "created_by", std::string("tessera ifu ") + kVersion);
}

namespace detail {

std::vector<H5Numbers> read_h5_numbers(const std::string& path, const std::vector<std::string>& datasets,
                                       const char* ctx) {
  QuietHdf5 quiet;
  const H5File f(path, ctx, false);
  std::vector<H5Numbers> out;
  for (const auto& name : datasets) {
    const Id d = f.open_dataset(name);
    H5Numbers a;
    a.values = f.read_all<double>(d, name, a.shape);
    out.push_back(std::move(a));
  }
  return out;
}

void write_h5_numbers(const std::string& path, const std::vector<std::pair<std::string, H5Numbers>>& datasets,
                      const char* ctx) {
  QuietHdf5 quiet;
  const H5File f(path, ctx, true);
  for (const auto& [name, a] : datasets) {
    std::vector<hsize_t> dims(a.shape.begin(), a.shape.end());
    std::int64_t count = 1;
    for (auto s : a.shape) count *= s;
    if (static_cast<std::int64_t>(a.values.size()) != count) {
      std::string w = quoted(name);
      w += " has ";
      w += std::to_string(a.values.size());
      w += " values for shape ";
      w += shape_text(a.shape);
      f.bad(w);
    }
    write_dataset<double>(f, name, dims, a.values.data(), nullptr);
  }
}

}  // namespace detail

}  // namespace tessera::ifu
