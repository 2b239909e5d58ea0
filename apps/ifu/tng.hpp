// IllustrisTNG subhalo cutouts (the HDF5 files the TNG web API serves, as
// Rubix's IllustrisAPI stores them) read into a GalaxyData, converted to
// physical units the way Rubix's IllustrisHandler converts them.
#pragma once

#include <string>

#include "ifu/cosmology.hpp"
#include "ifu/galaxy_io.hpp"

namespace tessera::ifu {

namespace h5 {
class H5File;
}

/// Whether an open HDF5 file is laid out as a TNG cutout rather than as
/// Rubix's galaxy file: it has a /Header or a /PartType4 group and no
/// /particles group. (The reader then insists on the rest.)
bool looks_like_tng_cutout(const h5::H5File& f);

/// Reads a TNG cutout: /Header's HubbleParam (h), Time (a) and Redshift;
/// /PartType4's Coordinates, Velocities, GFM_InitialMass, GFM_Metallicity and
/// GFM_StellarFormationTime; optionally /PartType0 (gas: Coordinates,
/// Velocities and Masses, and Density, InternalEnergy, GFM_Metallicity,
/// GFM_Metals, StarFormationRate, ElectronAbundance when present) and
/// /SubhaloData (pos_x, pos_y, pos_z, halfmassrad_stars, which Rubix's
/// IllustrisAPI appends from the subhalo's catalogue entry). Other groups and
/// datasets are ignored.
///
/// Every dataset x becomes x * a^a_scaling * h^h_scaling * to_cgs (to_cgs = 0
/// read as 1) from its own attributes, or from TNG's data specification when
/// it has none of them, then Rubix's target unit: cm -> kpc, g -> Msun,
/// cm/s -> km/s, g/cm^3 -> Msun/kpc^3 (astropy's kpc and Msun). Star
/// particles with GFM_StellarFormationTime <= 0 (wind particles) are dropped;
/// a star's age is the lookback time to its formation scale factor in `c`
/// (Rubix's SFTtoAge). The centre and half-mass radius come from /SubhaloData
/// (scaled like Coordinates) or, without it, from the stars (docs/ifu.md).
/// Structure, missing datasets and attributes, shapes and a cutout whose stars
/// are all wind particles are InputErrors "[ifu galaxy] path: ...".
GalaxyData read_tng_cutout(const h5::H5File& f, const Cosmology& c);

/// The same, opening the file at `path`.
GalaxyData read_tng_cutout(const std::string& path, const Cosmology& c);

}  // namespace tessera::ifu
