// The datacube as a FITS image (cfitsio).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace tessera::ifu {

/// Coordinates and extra header cards of a cube.
struct CubeWcs {
  double spaxel_arcsec = 0;  // CDELT1/CDELT2 (spatial axes: offsets from the cube centre in arcsec)
  double wave0 = 0;          // CRVAL3: wavelength of the first plane, Angstrom
  double dwave = 0;          // CDELT3, Angstrom
  // BUNIT. The pipeline's values are luminosity densities per spaxel;
  // "solLum/Angstrom" is parsed by astropy and is FITS-standard (the "per
  // spaxel" goes in the card's comment, which says so).
  std::string bunit = "solLum/Angstrom";
  // Extra cards (key, value, comment). A value that reads fully as a finite
  // number is written as a number, anything else as a string (long strings
  // use the CONTINUE convention, keys over 8 characters HIERARCH). Keys the
  // writer sets itself (NAXIS*, WCS keys, BUNIT, ...) are refused.
  std::vector<std::tuple<std::string, std::string, std::string>> cards;
};

/// Writes the cube (row-major [iy][ix][wave], ny x nx x nwave float32) as the
/// primary image of a new FITS file (overwrites): NAXIS1 = x, NAXIS2 = y,
/// NAXIS3 = wavelength, so astropy/numpy see shape (nwave, ny, nx). WCS: linear
/// offsets XOFFSET/YOFFSET in arcsec with CRPIX at the cube centre and CRVAL 0;
/// WAVE in Angstrom from CRVAL3 = wave0 at CRPIX3 = 1. cfitsio failures are
/// InputErrors with cfitsio's message and the path.
void write_cube_fits(const std::string& path, const float* cube, std::int64_t ny, std::int64_t nx, std::int64_t nwave,
                     const CubeWcs& wcs);

/// A cube read back, in [iy][ix][wave] order, with its header.
struct FitsCube {
  std::int64_t nx = 0, ny = 0, nwave = 0;
  std::vector<float> data;  // [iy][ix][wave]
  std::map<std::string, std::string>
      header;  // key -> value text (strings without quotes; COMMENT/HISTORY joined by newlines)

  /// The value of `key` as a number; InputError when absent or not numeric.
  double number(const std::string& key) const;
  /// The value of `key` as text; InputError when absent.
  std::string text(const std::string& key) const;
};

/// Reads a 3-d float image written by write_cube_fits (or any 3-d primary image).
FitsCube read_cube_fits(const std::string& path);

}  // namespace tessera::ifu
