// Fitting the galaxy to an observed cube by gradient descent
// (Pipeline::value_and_grad), as Rubix's fitting notebooks do with
// jax.value_and_grad and optax.
//
// The fitted fields keep their physical range by reparameterisation: the
// optimiser moves an unconstrained u and the field is
//   age          20 Gyr * sigmoid(u)    (0 - 20 Gyr)
//   metallicity  0.05 * sigmoid(u)      (0 - 0.05)
//   mass         exp(u)                 (positive)
//   velocity     u                      (km/s)
// and the global parameters velocity_offset = u, mass_scale = exp(u). Every
// step is elementwise on each device's particles, and the sums L-BFGS takes
// are exact, so a fit follows the same path on every device count.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ifu/galaxy_io.hpp"
#include "ifu/pipeline.hpp"

namespace tessera::ifu {

enum class Fittable { age, metallicity, mass, velocity, velocity_offset, mass_scale };

/// "age,metallicity,..." -> the fields; an unknown or unfittable name (coords:
/// their derivative is zero almost everywhere) is an InputError saying which
/// names are fittable.
std::vector<Fittable> parse_fit_params(const std::string& csv);
const char* fittable_name(Fittable f);

struct FitOptions {
  std::vector<Fittable> params{Fittable::age, Fittable::metallicity};
  LossKind loss = LossKind::nll;
  std::string optimizer = "adam";  // "adam" or "lbfgs"
  int steps = 100;
  double lr = 0.05;  // Adam's step in u; L-BFGS's first step length
  /// Called after every step with the step number (1-based) and the loss at
  /// the parameters the step started from.
  std::function<void(int step, double loss)> on_step;
};

struct FitResult {
  Particles particles;     // the fitted fields (the others as given)
  GlobalParams globals;
  std::vector<double> losses;  // the loss before every step, then at the end
  Array model;                 // the model cube at the end
};

FitResult fit(const Pipeline& pipe, const Particles& start, const Observation& obs, const FitOptions& opt,
              const GlobalParams& g0 = {});

/// A host cube ([iy][ix][wave], ny x nx x nwave) on the pipeline's mesh as
/// read_observation lays it out, after its checks: the telescope's shape and
/// finite values. Errors name `source` and say which cube (`what`).
Array put_observed(const Pipeline& pipe, const std::vector<float>& data, std::int64_t ny, std::int64_t nx,
                   std::int64_t nwave, const std::string& source, const char* what);

/// The observed cube (and an optional variance cube) from FITS files,
/// checked against the pipeline's telescope: the shape and the wavelength
/// grid (CRVAL3, CDELT3 when present), finite values. Errors name the file.
Observation read_observation(const Pipeline& pipe, const std::string& cube_path, const std::string& variance_path = "",
                             double snr = 0);

/// The particles' fields back on the host, as a galaxy (center and the like
/// from `like`). Under mpirun every process must call it (it gathers).
GalaxyData to_galaxy(const Particles& p, const GalaxyData& like);

/// Writes a gradient in the galaxy file's layout (/particles/stars/<field>
/// holding d loss / d field, unit attributes "1/<unit>" scaled by the loss),
/// with /gradient/loss, /gradient/velocity_offset, /gradient/mass_scale and
/// the loss's name as an attribute. Under mpirun every process must call it
/// (it gathers); only process 0 should pass write = true.
void write_gradient_h5(const std::string& path, const Gradient& g, LossKind loss, const GalaxyData& like,
                       bool write = true);

}  // namespace tessera::ifu
