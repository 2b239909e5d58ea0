// Cosmology: the angular scale at a redshift, as Rubix computes it, and the
// lookback time that gives simulated star particles their ages.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace tessera::ifu {

/// A flat w0-wa cosmology. The distances (Rubix's BaseCosmology) use Om0, w0,
/// wa and h only; the lookback time (astropy's, which Rubix's SFTtoAge calls)
/// also counts the photons and neutrinos of Tcmb0, Neff and m_nu_ev.
struct Cosmology {
  std::string name;
  double Om0 = 0.3075, w0 = -1.0, wa = 0.0, h = 0.6774;
  double Tcmb0 = 2.7255;                          // K
  double Neff = 3.046;                            // effective number of neutrino species
  std::array<double, 3> m_nu_ev{0.0, 0.0, 0.06};  // neutrino masses, eV
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

/// Lookback time in Gyr to redshift z, as astropy's FLRW cosmologies compute
/// it: t_H * integral_0^z dz' / ((1+z') E_r(z')), t_H = 1/H0, with
/// E_r^2 = Or(z) (1+z)^4 + Om0 (1+z)^3 + Ode0 a^{-3(1+w0+wa)} exp(-3 wa (1-a)),
/// Or(z) = Ogamma0 (1 + nu_rel(z)) (photons of Tcmb0; neutrinos by the Komatsu
/// et al. 2011 fit that astropy uses) and Ode0 = 1 - Om0 - Or(0). For PLANCK15
/// it is astropy 8's Planck15.lookback_time to ~1e-13 relative.
double lookback_time_gyr(const Cosmology& c, double z);

/// The lookback time in Gyr to each scale factor a = 1/(1+z) (positive and
/// finite, else InputError): what Rubix's SFTtoAge returns as a star's age.
/// One table of the integral in ln a for all of them, interpolated; the same
/// values as lookback_time_gyr to ~1e-13 relative.
std::vector<double> lookback_times_from_scale_factors_gyr(const Cosmology& c, const std::vector<double>& a);

}  // namespace tessera::ifu
