// Cosmology: the angular scale at a redshift, as Rubix computes it.
#pragma once

#include <string>

namespace tessera::ifu {

/// A flat w0-wa cosmology.
struct Cosmology {
  std::string name;
  double Om0 = 0.3075, w0 = -1.0, wa = 0.0, h = 0.6774;
};

/// The named cosmology ("PLANCK15"); InputError for unknown names.
Cosmology cosmology(const std::string& name);

/// E(z) = H(z)/H0 = sqrt(Om0 (1+z)^3 + (1-Om0) a^{-3(1+w0+wa)} exp(-3 wa (1-a))), a = 1/(1+z).
double hubble_ratio(const Cosmology& c, double z);

/// Comoving distance in Mpc: (c/H0) * the trapezoid rule of 1/E over 256
/// points of [0, z] (Rubix's quadrature; exact to ~1e-6 at z = 0.1).
double comoving_distance_mpc(const Cosmology& c, double z);

/// Angular-diameter distance D_C / (1 + z), in Mpc.
double angular_diameter_distance_mpc(const Cosmology& c, double z);

/// kpc per arcsec at redshift z (1.90476 at z = 0.1 for PLANCK15).
double kpc_per_arcsec(const Cosmology& c, double z);

}  // namespace tessera::ifu
