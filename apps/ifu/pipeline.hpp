// The IFU datacube pipeline on Tessera arrays (Rubix's calc_ifu, corrected).
//
// Star particles are sharded over a 1-d mesh axis "data" in any number, with
// no padding. The stages (docs/ifu.md):
//   global:      center check, systemic velocity (a sharded masked median),
//                the inertia-tensor alignment (IllustrisTNG: exact sums over
//                all particles), the rotation matrix;
//   per device,  a chunk of particles at a time (memory bounded by the chunk):
//                centering, rotation, aperture filter, spaxel assignment
//                (searchsorted), SSP lookup (interp2d, bicubic, on the
//                log10(age/yr) axis), Doppler factor, flux-conserving
//                resampling accumulated into the device's partial cube
//                (resample_accumulate, exact);
//   once:        one psum of the exact partial cubes, then PSF and LSF
//                convolutions on the cube sharded over wavelength, and noise
//                drawn per cube element from a counter-based key.
// The summation is exact, and every random number depends only on its cube
// element, so the cube is bitwise the same on any number of devices.
//
// The mesh may span several processes (mpirun): every process constructs
// the pipeline and calls put() and run() with the same galaxy, the host
// reads inside run() are of replicated values (reductions over every
// particle), and the returned cube is sharded over the processes: read it
// with process_allgather.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ifu/config.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/ssp.hpp"
#include "ifu/telescope.hpp"
#include "tessera/tessera.hpp"

namespace tessera::ifu {

struct PipelineOptions {
  /// Particles per device per step of the spectra stage (memory per device
  /// is about chunk * (wavelengths of the SSP grid) * 4 bytes for the
  /// spectra, plus the cube).
  std::int64_t chunk = 32768;
  /// Called from this process's device threads with the number of particles
  /// just done (under mpirun, only this process's particles are counted).
  std::function<void(std::int64_t)> on_progress;
  /// Seed of the noise key (Rubix uses PRNGKey(0)).
  std::uint64_t noise_seed = 0;
};

/// The geometry and grids a config implies (host values, float32 where Rubix
/// computes in float32).
struct Geometry {
  double kpc_per_arcsec = 0;
  double aperture_kpc = 0;        // side of the field of view
  std::int64_t spaxels = 0;       // per side
  std::vector<double> edges;      // spaxels + 1 bin edges, kpc
  std::vector<float> wave;        // the telescope's wavelength grid (Angstrom)
  std::array<double, 9> rotation{};  // Euler rotation matrix R (row-major), new = old @ R
};
Geometry geometry(const Config& cfg);

/// The result of one run.
struct Cube {
  Array data;           // f32 (ny, nx, nwave): cube[iy][ix][wave], luminosity density per spaxel (Lsun/Angstrom)
  Array velocity_map;   // f32 (ny, nx): mass-weighted mean line-of-sight velocity (km/s), NaN where empty
  std::int64_t particles = 0;
  std::int64_t in_aperture = 0;
  std::array<double, 3> systemic_velocity{};  // km/s, subtracted
};

/// Particles on the mesh.
struct Particles {
  Array coords, velocity;           // (n, 3) f32
  Array mass, age, metallicity;     // (n,) f32
  std::array<double, 3> center{};   // kpc
  double halfmassrad = 0;           // kpc
  std::int64_t n = 0;
};

class Pipeline {
 public:
  /// Checks the config against what is supported and puts the SSP grid and
  /// the wavelength grids on every device of `mesh` (1-d, axis "data").
  Pipeline(Config cfg, const SspGrid& ssp, Mesh mesh, PipelineOptions opt = {});
  /// The galaxy's particles sharded over "data" (uneven blocks allowed).
  Particles put(const GalaxyData& g) const;
  /// Runs every stage.
  Cube run(const Particles& p) const;

  const Config& config() const { return cfg_; }
  const Geometry& geometry() const { return geo_; }
  const Mesh& mesh() const { return mesh_; }
  /// Wavelength of the cube's first plane and the step (Angstrom).
  double wave0() const { return geo_.wave.empty() ? 0.0 : geo_.wave.front(); }
  double dwave() const;

 private:
  Config cfg_;
  Geometry geo_;
  Mesh mesh_;
  PipelineOptions opt_;
  double flux_max_ = 0;  // max |flux| of the SSP grid
  Array z_grid_, age_grid_, flux_grid_, wave_rest_, target_, edges_;
};

/// Rotation matrix (row-major) of a symmetric 3x3 matrix's eigenvectors as
/// columns, sorted by ascending eigenvalue, each with its largest component
/// positive (the inertia-tensor alignment; Jacobi iterations in double).
std::array<double, 9> eigenvectors_sorted(const std::array<double, 9>& sym);

}  // namespace tessera::ifu
