#include "ifu/cosmology.hpp"

#include <cmath>

#include "ifu/errors.hpp"

namespace tessera::ifu {

Cosmology cosmology(const std::string& name) {
  // Planck 2015 (Planck Collaboration XIII 2016, TT,TE,EE+lowP+lensing+ext),
  // with the parameters Rubix uses.
  if (name == "PLANCK15") return Cosmology{"PLANCK15", 0.3075, -1.0, 0.0, 0.6774};
  std::string text = "[ifu config] cosmology.name '";
  text += name;
  text += "' is not supported (known: PLANCK15)";
  throw InputError(text);
}

double hubble_ratio(const Cosmology& c, double z) {
  const double a = 1.0 / (1.0 + z);
  return std::sqrt(c.Om0 * std::pow(1.0 + z, 3.0) +
                   (1.0 - c.Om0) * std::pow(a, -3.0 * (1.0 + c.w0 + c.wa)) * std::exp(-3.0 * c.wa * (1.0 - a)));
}

double comoving_distance_mpc(const Cosmology& c, double z) {
  constexpr int kPoints = 256;
  const double hubble_distance = 2.99792458e5 / (100.0 * c.h);  // c / H0 in Mpc
  double integral = 0.0;
  const double dz = z / (kPoints - 1);
  double prev = 1.0 / hubble_ratio(c, 0.0);
  for (int i = 1; i < kPoints; ++i) {
    const double cur = 1.0 / hubble_ratio(c, dz * i);
    integral += 0.5 * (prev + cur) * dz;
    prev = cur;
  }
  return hubble_distance * integral;
}

double angular_diameter_distance_mpc(const Cosmology& c, double z) { return comoving_distance_mpc(c, z) / (1.0 + z); }

double kpc_per_arcsec(const Cosmology& c, double z) {
  const double arcsec = M_PI / (180.0 * 3600.0);
  return angular_diameter_distance_mpc(c, z) * arcsec * 1e3;
}

}  // namespace tessera::ifu
