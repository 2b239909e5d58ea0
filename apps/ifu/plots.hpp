// Quick-look PNG pictures of a mock IFU datacube, drawn with PLplot (pngcairo):
// the white-light image, a few spaxel spectra and the velocity map.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ifu/errors.hpp"

namespace tessera::ifu {

/// Pixel sizes of the pictures: the two maps, and the spectra.
inline constexpr int quicklook_map_width = 800;
inline constexpr int quicklook_map_height = 700;
inline constexpr int quicklook_spectra_width = 900;
inline constexpr int quicklook_spectra_height = 600;

struct QuicklookInput {
  const float* cube = nullptr;  // row-major [iy][ix][wave], ny x nx x nwave, luminosity density per spaxel
  std::int64_t ny = 0, nx = 0, nwave = 0;
  double wave0 = 0, dwave = 0;      // Angstrom: wavelength of plane k is wave0 + k*dwave
  double spaxel_arcsec = 0;         // spaxel size
  const float* velocity = nullptr;  // ny x nx line-of-sight velocity in km/s (NaN where a spaxel has no light), or null
  std::string title;                // e.g. "MUSE, z = 0.1, 100000 particles"
  std::string bunit;                // unit text for axis labels, e.g. "L_sun/Å"
};

/// Per-spaxel sum over wavelength times dwave (the integrated luminosity), row-major
/// [iy][ix]; non-finite cube values count as 0.
std::vector<double> white_light(const QuicklookInput& in);

/// A spaxel whose spectrum the spectra picture shows, and why it was chosen.
struct SpectrumPick {
  std::int64_t ix = 0, iy = 0;
  std::string role;  // "brightest", "centre", "brightest, centre", or "r = 1.5\"" (radius from the cube centre)
};

/// The spaxels the spectra picture shows, from the white-light image `white`
/// ([iy][ix], ny x nx): the brightest, the centre, and the brightest spaxel on
/// each of the rings at the half-light radius and twice it (when lit and not
/// already chosen). No spaxel appears twice.
std::vector<SpectrumPick> pick_spectrum_spaxels(const std::vector<double>& white, std::int64_t ny, std::int64_t nx,
                                                double spaxel_arcsec);

/// Writes <dir>/<stem>_white.png, <stem>_spectra.png and (with a velocity map)
/// <stem>_velocity.png; returns the paths written, in that order. Creates `dir`
/// if needed. Throws InputError ("[ifu plots] ...") on bad input, an unwritable
/// folder or a missing PLplot device. Safe to call from several threads (PLplot's global state is
/// serialised inside).
std::vector<std::string> write_quicklooks(const std::string& dir, const std::string& stem, const QuicklookInput& in);

/// A fit's loss against the step, as a PNG (log axis when the loss falls by
/// more than a factor 20).
void write_loss_curve(const std::string& path, const std::vector<double>& losses, const std::string& title);

/// The white-light image of the model minus that of `observed` (the same
/// layout as in.cube), as a PNG with a diverging colour map around zero.
void write_residual_map(const std::string& path, const QuicklookInput& in, const std::vector<float>& observed);

}  // namespace tessera::ifu
