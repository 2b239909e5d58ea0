// Particles of one galaxy: the Rubix HDF5 galaxy file, an IllustrisTNG
// subhalo cutout, or a .npz archive.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::ifu {

namespace h5 {
class H5File;
}

/// Gas cells, with Rubix's names and units (its GasData and BaseHandler
/// config). Only calc_dusty_ifu uses them (coords, mass, metals: dust.hpp);
/// a field the input lacks is empty (n = 0 when there is no gas).
struct GasData {
  std::int64_t n = 0;                      // number of gas cells
  std::vector<float> coords;               // n x 3 row-major, kpc
  std::vector<float> velocity;             // n x 3, km/s
  std::vector<float> mass;                 // Msun
  std::vector<float> density;              // Msun / kpc^3
  std::vector<float> internal_energy;      // erg / g
  std::vector<float> metallicity;          // mass fraction Z
  std::vector<float> metals;               // n x metals_per_cell mass fractions (TNG: H, He, C, N, O, Ne, Mg, Si, Fe, total)
  std::int64_t metals_per_cell = 0;
  std::vector<float> sfr;                  // star formation rate (see docs/ifu.md on its unit)
  std::vector<float> electron_abundance;   // electrons per hydrogen atom
};

/// The galaxy in canonical units: kpc, km/s, Msun, Gyr, mass fraction Z.
struct GalaxyData {
  std::array<double, 3> center{0, 0, 0};  // kpc
  double halfmassrad_stars = 0;           // kpc (0 when absent)
  double redshift = 0;                    // of the snapshot; the pipeline observes at galaxy.dist_z instead
  std::int64_t n = 0;                     // number of star particles
  std::vector<float> coords;              // n x 3 row-major, kpc
  std::vector<float> velocity;            // n x 3, km/s
  std::vector<float> mass;                // Msun
  std::vector<float> age;                 // Gyr
  std::vector<float> metallicity;         // mass fraction Z
  GasData gas;                            // IllustrisTNG cutouts and Rubix's /particles/gas
};

/// Reads a galaxy (the format is told by the file's signature, whatever its extension):
///  * HDF5, the Rubix layout: /galaxy/center (3,), /galaxy/halfmassrad_stars ()
///    and /galaxy/redshift () (both optional here), /particles/stars/{coords (n,3),
///    velocity (n,3), mass, age, metallicity (n,)}, and optionally
///    /particles/gas/{coords (m,3), mass (m,), metals (m,k)} (required when the
///    group exists) with velocity and metallicity when present. Any integer or float storage
///    type is converted. A dataset's string attribute `unit` is honoured: lengths
///    in kpc, pc, Mpc, m, km, cm; velocities in km/s, m/s, cm/s; masses in Msun
///    (Msol, solMass, M_sun), kg, g; ages in Gyr, Myr, kyr, yr; metallicity and
///    redshift dimensionless ("" or "dimensionless"); a leading scale factor
///    ("1e10 Msun") is allowed. Comoving or h-scaled units and unknown units are an
///    InputError naming the dataset; a missing attribute means the canonical unit.
///    (Rubix 0.0.5 itself reads the attribute but never converts: the files it
///    writes always hold the canonical units.)
///  * HDF5, an IllustrisTNG subhalo cutout (a /Header group with the attributes
///    HubbleParam, Time and Redshift, and a /PartType4 group; tng.hpp),
///    converted to the units above as Rubix's IllustrisHandler does.
///  * .npz (np.savez / np.savez_compressed): arrays coords, velocity, mass, age,
///    metallicity and optional center, halfmassrad_stars, redshift, all in the
///    canonical units; other arrays are ignored.
/// Missing datasets, shape mismatches and empty galaxies are InputErrors.
GalaxyData read_galaxy(const std::string& path);

/// Writes the Rubix layout (overwrites), float64 galaxy scalars and float32
/// particle arrays (the gas's under /particles/gas when g.gas.n > 0), each with its `unit` attribute as a variable-length UTF-8
/// string (what h5py writes), so rubix.utils.load_galaxy_data reads it.
void write_galaxy_h5(const std::string& path, const GalaxyData& g);

/// The unit attributes written beside the star fields.
struct StarUnits {
  const char* coords = "kpc";
  const char* velocity = "km/s";
  const char* mass = "Msun";
  const char* age = "Gyr";
  const char* metallicity = "";
};
/// The same with other units (a gradient's, say) and more datasets written
/// by `more` into the open file.
void write_galaxy_h5(const std::string& path, const GalaxyData& g, const StarUnits& units,
                     const std::function<void(const h5::H5File&)>& more);

namespace detail {

/// A numeric HDF5 dataset read whole as double.
struct H5Numbers {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

/// Reads the named datasets (paths inside the file) of an HDF5 file, one
/// H5Dread each. A missing dataset or one of a non-numeric type is an
/// InputError starting with "[ctx] path: ".
std::vector<H5Numbers> read_h5_numbers(const std::string& path, const std::vector<std::string>& datasets,
                                       const char* ctx);

/// Creates (overwrites) an HDF5 file holding the given float64 datasets at the
/// file's root.
void write_h5_numbers(const std::string& path, const std::vector<std::pair<std::string, H5Numbers>>& datasets,
                      const char* ctx);

}  // namespace detail

}  // namespace tessera::ifu
