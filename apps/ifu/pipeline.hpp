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
#include "ifu/dust.hpp"
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
  /// The float type of every stage: f32 as Rubix (the cube it makes), or
  /// f64 (derivative checks by finite differences, precision studies).
  DType dtype = DType::f32;
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
  /// The gas cells (calc_dusty_ifu only; gas.n = 0 otherwise): the dust in
  /// front of the stars. Always float32 (the dust model runs in float32, as
  /// Rubix's), whatever PipelineOptions::dtype. (Initialised by default, so
  /// that brace-initialised Particles of the dust-free callers need not
  /// name it.)
  GasOnMesh gas = {};
};

/// Global parameters of the differentiable pipeline, besides the particle
/// fields: a line-of-sight velocity offset added to every particle (km/s,
/// after the systemic velocity is removed) and a factor on every mass.
/// The defaults leave the cube as run() makes it.
struct GlobalParams {
  double velocity_offset = 0;
  double mass_scale = 1;
};

/// The losses of a model cube against an observed one (loss.hpp).
enum class LossKind { nll, cosine, mse };

/// An observed cube to fit (same shape and wavelength grid as the model).
struct Observation {
  Array cube;      // f32 (ny, nx, nwave), finite
  Array variance;  // f32, same shape: per-element variance for nll; invalid: from snr
  double snr = 0;  // without variance: sigma = |cube| / snr (elements with sigma 0 are left out)
  Array mask;      // bool, same shape: the elements the loss counts; invalid: all
  std::string source = "the observed cube";  // named in error messages (a file name)
};

/// A loss and its gradient w.r.t. every particle field and global parameter.
struct Gradient {
  double loss = 0;
  Array coords, velocity;           // (n, 3) f32, laid out as Particles
  Array mass, age, metallicity;     // (n,) f32
  double velocity_offset = 0, mass_scale = 0;
  Array model;                      // the model cube the loss was taken of
};

class Pipeline {
 public:
  /// Checks the config against what is supported and puts the SSP grid and
  /// the wavelength grids on every device of `mesh` (1-d, axis "data").
  Pipeline(Config cfg, const SspGrid& ssp, Mesh mesh, PipelineOptions opt = {});
  /// The galaxy's particles sharded over "data" (uneven blocks allowed);
  /// with pipeline calc_dusty_ifu its gas cells too (InputError "[ifu] ..."
  /// when the galaxy has none).
  Particles put(const GalaxyData& g) const;
  /// Runs every stage.
  Cube run(const Particles& p, const GlobalParams& g = {}) const;
  /// The noiseless model cube (every stage but noise): what a loss compares
  /// with an observation.
  Array model(const Particles& p, const GlobalParams& g = {}) const;
  /// The loss of the model cube against `obs` and its gradient w.r.t. the
  /// particle fields and the global parameters (gradient.cpp). The particle
  /// stage runs twice, a chunk at a time both times: once forward for the
  /// cube, then, from the cube's cotangent, each chunk again under vjp
  /// (rematerialised), so memory stays bounded by the chunk and the cube.
  /// Per-particle gradients depend only on the particle and the cotangent;
  /// sums over particles are exact: the gradient is bitwise the same on
  /// every device count and chunk size. With calc_dusty_ifu the stars'
  /// transmissions are constants of the gradient: the gas fields are not
  /// differentiated, and A_V is not differentiated in the star positions.
  Gradient value_and_grad(const Particles& p, const Observation& obs, LossKind loss, const GlobalParams& g = {}) const;

  const Config& config() const { return cfg_; }
  /// Whether the config asks for Rubix's calc_dusty_ifu (dust.hpp).
  bool dusty() const { return cfg_.pipeline == "calc_dusty_ifu"; }
  const Geometry& geometry() const { return geo_; }
  const Mesh& mesh() const { return mesh_; }
  /// Wavelength of the cube's first plane and the step (Angstrom).
  double wave0() const { return geo_.wave.empty() ? 0.0 : geo_.wave.front(); }
  double dwave() const;

 private:
  struct Frame;
  struct ChunkGeometry;
  // The global stages (center check, systemic velocity, rotation).
  Frame frame(const Particles& p) const;
  // The rotated positions, spaxel, aperture mask and line-of-sight velocity
  // of rows [lo, hi) of a device's block, and with dust their transmission
  // from `av` (the device's block of Frame::av; invalid without dust).
  // Nothing here is differentiated but the velocity.
  ChunkGeometry chunk_geometry(const Frame& f, const Array& coords, const Array& velocity, const Array& mass,
                               std::int64_t lo, std::int64_t hi, const GlobalParams& g,
                               const Array& av = Array()) const;
  // The rows' spectra (dimmed by the chunk's transmission, when it has
  // one) accumulated into `init` (or a fresh accumulator): differentiable
  // in mass, age, metallicity and vz.
  Array accumulate(const ChunkGeometry& c, const Array& mass, const Array& age, const Array& metallicity,
                   const Array& vz, double max_abs, const Array& init) const;
  // What accumulate resamples: the rows' weights (masses in the aperture),
  // spectra and Doppler factors; differentiable in the same.
  std::vector<Array> rows_to_resample(const ChunkGeometry& c, const Array& mass, const Array& age,
                                      const Array& metallicity, const Array& vz) const;
  // The particle stage: the exact cube (before PSF and LSF) and the maps.
  struct Partial;
  Partial particle_stage(const Particles& p, const Frame& f, const GlobalParams& g, std::int64_t chunk) const;
  // The gradient's chunk (gradient.cpp).
  std::int64_t reverse_chunk() const;
  // The gradient through IllustrisTNG's inertia-tensor alignment, added to
  // out's coords and mass (gradient.cpp).
  void align_gradient(const Particles& p, const Frame& f, const Array& d_vz, double sum_dvz, Gradient& out) const;
  // PSF and LSF on the cube (linear).
  Array observe(const Array& cube) const;

  Config cfg_;
  Geometry geo_;
  Mesh mesh_;
  PipelineOptions opt_;
  double flux_max_ = 0;  // max |flux| of the SSP grid
  // A constant in the stages' float type (an f32 stage rounds it to float,
  // as Rubix's float32 program does).
  Scalar real(double v) const { return opt_.dtype == DType::f64 ? Scalar(v) : Scalar(static_cast<float>(v)); }
  Array real_array(const std::vector<double>& v, const Shape& shape) const;
  Array z_grid_, age_grid_, flux_grid_, wave_rest_, target_, edges_;
};

/// Rotation matrix (row-major) of a symmetric 3x3 matrix's eigenvectors as
/// columns, sorted by ascending eigenvalue, each with its largest component
/// positive (the inertia-tensor alignment; Jacobi iterations in double).
std::array<double, 9> eigenvectors_sorted(const std::array<double, 9>& sym);

}  // namespace tessera::ifu
