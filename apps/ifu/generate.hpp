// Generated inputs: a seeded exponential-disk galaxy (the default galaxy of
// `tessera ifu` and the benchmarks) and a small smooth SSP grid (the tests).
#pragma once

#include <array>
#include <cstdint>

#include "ifu/config.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/ssp.hpp"

namespace tessera::ifu {

struct DiskOptions {
  std::int64_t particles = 100000;
  std::uint64_t seed = 1;
  double total_mass = 3e10;       // Msun, shared equally
  double scale_length = 1.6;      // kpc (surface density exp(-R/h))
  double scale_height = 0.3;      // kpc (exp(-|z|/h_z))
  double v_flat = 220.0;          // km/s, flat part of the rotation curve
  double r_turn = 1.0;            // kpc, v(R) = v_flat (1 - exp(-R/r_turn))
  double dispersion = 35.0;       // km/s per component
  double age_min = 0.05, age_max = 10.0;  // Gyr
  std::array<double, 3> center{12.5, -3.0, 7.25};       // kpc
  std::array<double, 3> bulk_velocity{120.0, -40.0, 15.0};  // km/s
};

/// A rotating exponential disk in the x-y plane: radii from a Gamma(2, h)
/// draw, heights from a Laplace draw, tangential velocities from the
/// rotation curve plus a Gaussian dispersion, ages uniform in
/// [age_min, age_max] Gyr with younger stars more metal rich, metallicities
/// inside the BC03 grid. The same seed gives the same galaxy.
GalaxyData generate_disk(const DiskOptions& opt);

/// Gas cells for a disk made by generate_disk with the same options (the
/// dust of calc_dusty_ifu): `cells` cells sharing `total_mass` Msun, in a
/// thinner exponential disk (scale length 1.25 h, height h_z / 2) around the
/// same center and rotating with it, with TNG's fields (GFM_Metals: 10
/// columns, hydrogen 0.74 at column 0, oxygen at column 4 falling from
/// 12 + log(O/H) = 8.9 at the center by 0.1 dex per kpc, so that both sides
/// of Remy-Ruyer's broken fit are met), density, internal energy, sfr and
/// electron abundance plausible but unused. Drawn from `seed`, apart from
/// the stars: adding gas changes no star.
GasData generate_gas(const DiskOptions& opt, std::int64_t cells, double total_mass, std::uint64_t seed);

/// Moves particles whose spaxel, aperture membership or systemic-velocity
/// selection float32 rounding could decide (within `margin` kpc of a bin
/// edge after the config's rotation, or of the 10 kpc sphere) by 2 * margin
/// away from it, so that a float32 program (Rubix) and a float64 one assign
/// them alike. Returns the number moved.
std::int64_t nudge_off_edges(GalaxyData& g, const Config& cfg, double margin = 1e-4);

/// A small smooth SSP grid with BC03's layout: log10(age/yr) axis of
/// `ages` points from 6 to 10.3, `metallicities` values of Z from 1e-4 to
/// 0.05, `wavelengths` from 3000 to 11000 Angstrom (non-uniform steps), flux
/// in Lsun/Angstrom per Msun that fades and reddens with age.
SspGrid generate_ssp_grid(std::int64_t metallicities = 4, std::int64_t ages = 14, std::int64_t wavelengths = 96);

/// The same galaxy with ages as Rubix 0.0.5 must be given them to look up
/// the same template positions: log10(age/yr) in the age dataset.
GalaxyData with_rubix_ages(const GalaxyData& g);

}  // namespace tessera::ifu
