// Rubix 0.0.5's dust model (its calc_dusty_ifu pipeline) on Tessera arrays.
//
// Per star, a visual extinction A_V from the dust column of the gas in front
// of it within its spaxel (Rubix's apply_spaxel_extinction), and per star and
// telescope wavelength the transmission 10^(-0.4 A(lambda)/A(V) A_V) that
// multiplies the star's resampled spectrum before it is added to the cube
// (Rubix's calculate_dusty_datacube_particlewise). docs/ifu.md ("Dust") has
// the formulas, what is gathered and why, and where this departs from Rubix.
//
// Precision as in Rubix (JAX without x64): the curves, the dust-to-gas
// ratios, the per-cell extinction and the interpolation at the star run in
// float32, in Rubix's order of operations. The per-spaxel cumulative column
// is summed exactly (exact_limbs) and rounded once to float32, so A_V has the
// same bits on every mesh.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ifu/config.hpp"
#include "ifu/galaxy_io.hpp"
#include "tessera/tessera.hpp"

namespace tessera::ifu {

/// Rubix 0.0.5's constants (rubix_config.yml `constants`) and the Johnson V
/// effective wavelength its calculate_extinction defaults to.
inline constexpr double kMassOfProtonGrams = 1.67262e-24;
inline constexpr double kMsunGrams = 1.989e33;
inline constexpr double kKpcCm = 3.08568e21;
inline constexpr double kVBandAngstrom = 5448.0;

// ------------------------------------------------------------ host formulas

/// A(lambda)/A(V) of `model` ("Cardelli89" or "Gordon23", else InputError)
/// at each `wave` value, evaluated as Rubix evaluates it (float32): the
/// argument is what Rubix passes, the wavelength in micron. Outside a
/// model's ranges the curve is 0 (Rubix never checks the range).
/// Cardelli89 compares its argument with CCM89's ranges of x = 1/lambda in
/// 1/micron but is handed lambda in micron (docs/ifu.md "Dust"): this keeps
/// that. Rv is not checked against a model's range (Rubix's check is
/// commented out).
std::vector<float> extinction_curve(const std::string& model, double Rv, std::span<const float> wave);

/// Remy-Ruyer et al. (2014) dust-to-gas ratio of one gas cell from its
/// 12 + log10(O/H), in float32 as Rubix's calculate_dust_to_gas_ratio.
/// `model`: "power law slope free" or "broken power law fit"; `xco`: "MW" or
/// "Z"; "power law slope fixed" and unknown names raise InputError.
float dust_to_gas_ratio(const std::string& model, const std::string& xco, float log_oh);

/// Rubix's calculate_extinction factor: A = dust column (Msun/kpc^2) *
/// factor(grain density). Returned as Rubix forms it: the float32 constants
/// k1 = 3 pi m_H, k2 = Msun/kpc^2 in g/cm^2 and the float32 denominator
/// 0.4 ln(10) lambda_V rho; A = ((k1 * column) * k2) / den.
struct ExtinctionConstants {
  float k1, k2, den;
};
ExtinctionConstants extinction_constants(double dust_grain_density);

// ----------------------------------------------------------- on the mesh

/// Gas cells on the mesh, sharded over "data" like the pipeline's Particles
/// (uneven blocks allowed).
struct GasOnMesh {
  Array coords;     // (n, 3) f32, kpc
  Array mass;       // (n,) f32, Msun
  Array metals_h;   // (n,) f32: hydrogen mass fraction (GFM_Metals column 0)
  Array metals_o;   // (n,) f32: oxygen mass fraction (GFM_Metals column 4)
  std::int64_t n = 0;
};

/// Puts the galaxy's gas on `mesh` (1-d, axis "data"). InputError "[ifu]
/// ..." when the galaxy has no gas, lacks the masses, coordinates or the
/// GFM_Metals fractions (hydrogen at column 0, oxygen at column 4, TNG's
/// order), or holds a value that is not finite.
GasOnMesh put_gas(const GasData& gas, const Mesh& mesh);

/// The observer's frame, as the pipeline puts the stars in it: positions
/// relative to `center`, rotated by new = old @ R (R row-major, the final
/// matrix: the IllustrisTNG alignment times the Euler rotation), binned
/// into spaxels by `edges` (Geometry::edges; spaxel = ix + n iy, indices
/// clipped to the field as Rubix's square_spaxel_assignment). The center
/// and R are rounded to float32 and the positions computed in float32, as
/// the pipeline does, so the spaxels and z agree with its per-chunk values.
struct DustView {
  std::array<double, 3> center{};
  std::array<double, 9> rotation{1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::vector<double> edges;
};

/// Per-gas-cell extinction (n_gas,) f32 sharded like the gas: Rubix's
/// calculate_extinction(mass_in_aperture * D/G(12 + log10(O / (16 H))))
/// divided by the spaxel area (the bin width squared, float32). Cells
/// outside the field of view have zero mass, as Rubix's filter gives them.
/// Differentiable in the gas mass and metal fractions.
Array gas_extinction(const DustConfig& dust, const DustView& view, const GasOnMesh& gas);

/// The visual extinction A_V (n,) f32 of every star, sharded like
/// `star_coords` (n, 3) (its rows over "data"): the cumulative extinction of
/// the gas of the star's spaxel, summed in order of increasing z (a cell
/// counts from its own z on, Rubix's inclusive cumsum), linearly
/// interpolated at the star's z between the cells around it (jnp.interp);
/// a star below all its spaxel's gas gets the first cell's value, one above
/// it all the spaxel's total, one in a spaxel without gas 0. The gas is
/// gathered (its spaxels and z to the host to sort, its extinction to every
/// device; docs/ifu.md "Dust" says why). Differentiable in the gas mass and
/// metal fractions (not in positions, which are read on the host). The
/// exact column needs a bound on the cells' extinction: without
/// `e_bound` it is measured (gas_extinction_bound), which a function traced
/// by jvp/grad cannot do, so a differentiated call passes the bound measured
/// beforehand on the same gas. InputError when gas.n is 0 or a cell's
/// extinction is not finite.
Array star_extinction_av(const DustConfig& dust, const DustView& view, const Array& star_coords,
                         const GasOnMesh& gas, std::optional<double> e_bound = std::nullopt);

/// The largest per-cell extinction (gas_extinction), read on the host
/// (eagerly, outside any transformation); the same on every mesh.
/// InputError when it is not finite (a cell without hydrogen).
double gas_extinction_bound(const DustConfig& dust, const DustView& view, const GasOnMesh& gas);

/// -0.4 A(lambda)/A(V) at the telescope wavelengths `wave_angstrom`
/// (evaluated at wave / 1e4 in float32, as Rubix passes them), (W,) f32
/// replicated on `mesh`: the factor dust_transmission takes.
Array dust_curve_factor(const DustConfig& dust, const std::vector<float>& wave_angstrom, const Mesh& mesh);

/// The transmission 10^(curve_factor[j] * av[i]) (m, W) f32 of each star
/// (av (m,)) at each wavelength: Rubix's extinguish, jnp.power(10,
/// -0.4 A(lambda)/A(V) * A_V). Elementwise: works on global arrays and on a
/// shard_map body's local chunk alike. Differentiable in av.
Array dust_transmission(const Array& curve_factor, const Array& av);

/// resample_accumulate with every row's resampled spectrum multiplied by
/// its transmission row before it is added (Rubix: resample, extinguish,
/// add). `transmission` is (n, T) for the n rows of `flux` and the target
/// grid; its values must lie in [0, 1] so that max_abs still bounds every
/// term (they do for A_V >= 0 and both curves on the telescopes' ranges).
/// The rows are resampled `rows_per_step` at a time into per-row exact
/// spectra, multiplied in float64 and summed exactly per segment, so the
/// result is an exact accumulator like resample_accumulate's (same max_abs:
/// it adds to opt.init and psums with the undusty ones) and has the same
/// bits on every mesh. Memory: 3 x rows_per_step x T float64 per step. The
/// rows must not be sharded (a shard_map body's local chunk), like
/// resample_accumulate with init. Differentiable as resample_accumulate is,
/// and in the transmission.
Array resample_accumulate_extinguished(const Array& flux, const Array& wave, const Array& target,
                                       const Array& segment_ids, std::int64_t num_segments, double max_abs,
                                       const ResampleOptions& opt, const Array& transmission,
                                       std::int64_t rows_per_step = 256);

}  // namespace tessera::ifu
