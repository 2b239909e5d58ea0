// The instruments Rubix 0.0.5 knows (its telescopes.yaml), as a built-in table.
#pragma once

#include <string>
#include <vector>

namespace tessera::ifu {

/// One instrument. Angles in arcsec, wavelengths in Angstrom.
struct Telescope {
  std::string name;
  double fov_arcsec;          // side of the (square) field of view
  double spatial_res_arcsec;  // side of one spaxel
  double wave_lo, wave_hi;    // the wavelength grid is arange(wave_lo, wave_hi, wave_res)
  double wave_res;            // spectral bin width
  double lsf_fwhm;            // instrument LSF FWHM (Rubix 0.0.5 does not use it: telescope.lsf.sigma is used)
  std::string aperture_type;  // "square", "circular" or "hexagonal"
  std::string pixel_type;     // "square"
};

/// The instrument called `name` (case-sensitive, as in Rubix). Unknown names
/// and instruments with a non-square aperture or pixel (only square ones are
/// supported) are an InputError naming the known or supported instruments.
const Telescope& telescope(const std::string& name);

/// Every instrument of the table, in Rubix's order (including the ones with a
/// circular or hexagonal aperture, which telescope() refuses).
std::vector<std::string> telescope_names();

}  // namespace tessera::ifu
