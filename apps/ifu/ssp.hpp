// Simple-stellar-population template grids (the BC03lr.h5 layout Rubix ships).
#pragma once

#include <string>
#include <vector>

namespace tessera::ifu {

/// A grid of SSP spectra: flux(metallicity, age, wavelength).
struct SspGrid {
  std::string source;               // the file it was read from
  std::vector<double> age;          // as stored; for BC03lr.h5 it is log10(age/yr), used as-is as in Rubix 0.0.5
  std::vector<double> metallicity;  // Z (mass fraction)
  std::vector<double> wavelength;   // Angstrom
  std::vector<double> flux;         // (metallicity, age, wavelength) row-major, Lsun/Angstrom per Msun
};

/// Reads the datasets age (na,), metallicity (nz,), wavelength (nw,) and flux
/// (nz, na, nw) of any integer or float type. Each axis must hold at least 2
/// finite, strictly increasing values and the flux must be finite; violations
/// are InputErrors naming the dataset.
SspGrid read_ssp_h5(const std::string& path);

/// Writes `g` in the same layout (float64; overwrites), after the same checks.
void write_ssp_h5(const std::string& path, const SspGrid& g);

}  // namespace tessera::ifu
