// The pipeline's gradient (Pipeline::value_and_grad, pipeline.hpp).
//
// Reverse mode through the particle stage, rematerialised by chunk:
//   1. forward, as model(): the exact cube, then PSF and LSF under vjp;
//   2. the loss and its cotangent on the model cube (loss.cpp), pulled back
//      through LSF and PSF to the cube before them;
//   3. on every device, a chunk of particles at a time: the chunk's stage
//      again under vjp (spectra, Doppler shift, resampling into an exact
//      accumulator), pulled back from that cotangent. Nothing of a chunk
//      outlives its step, so memory is the chunk's plus the cube's, as in
//      the forward pass; the particle stage runs twice in all.
// A particle's gradient depends only on the particle and the cube's
// cotangent (resample_accumulate's pullback reads each row's cotangent from
// the accumulator's first limb alone), so it has the same bits whatever the
// device and chunk a particle lands in. The gradients of the global
// parameters and of the systemic velocity are sums over particles, taken
// exactly.
#include <cmath>
#include <tuple>
#include <numeric>

#include "ifu/errors.hpp"
#include "ifu/loss.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/stages.hpp"

namespace tessera::ifu {

namespace {

/// The exact sum of the (n,) f32 array x in f64.
double exact_sum_rows(const Array& x) {
  const Array x64 = astype(x, DType::f64);
  const double bound = max(abs(x64)).item<double>();
  if (!(bound > 0)) return bound == 0 ? 0.0 : bound;
  return exact_total(sum(exact_limbs(x64, bound), {1}), DType::f64).item<double>();
}

Array rows_of(const Array& x, std::int64_t lo, std::int64_t hi) { return slice(x, {SliceSpec{lo, hi}}); }

}  // namespace

Gradient Pipeline::value_and_grad(const Particles& p, const Observation& obs, LossKind kind,
                                  const GlobalParams& g) const {
  if (cfg_.simulation == "IllustrisTNG")
    throw InputError("[ifu] gradients through the IllustrisTNG inertia-tensor alignment are not supported yet "
                     "(simulation: NIHAO rotates by the configured angles only)");
  const Frame f = frame(p);
  const Partial part = particle_stage(p, f, g);
  const std::int64_t nb = geo_.spaxels;
  const auto nwave = static_cast<std::int64_t>(geo_.wave.size());
  const Array cube = reshape(exact_total(part.acc, opt_.dtype), {nb, nb, nwave});

  Gradient out;
  auto [model, pull_observe] = vjp([this](const Array& c) { return observe(c); }, cube);
  const LossResult loss = loss_value_and_grad(kind, model, obs);
  out.loss = loss.value;
  out.model = model;
  // The cube's cotangent as the accumulator's (its first limb is read).
  const Array ct_cube = std::get<0>(pull_observe(loss.grad));
  const Array ct_acc = broadcast_to(expand_dims(astype(reshape(ct_cube, {nb * nb, nwave}), DType::f64), 0),
                                    {3, nb * nb, nwave});

  const double scale = std::abs(g.mass_scale);
  const double max_abs = std::max(f.mass_max * scale * flux_max_ * 1024.0, kTiny);
  // The reverse pass holds about five times the forward's bytes per row
  // (the flux cotangent in f64 and f32, the interpolation's factors), and
  // its chunks run fastest at a few thousand rows (smaller ones pay the
  // ops' dispatch, larger ones fall out of cache and fault in fresh
  // pages): at most 4096 rows.
  const std::int64_t chunk = std::min<std::int64_t>(opt_.chunk, 4096);
  const auto& progress = opt_.on_progress;
  auto body = [&](const Array& coords, const Array& velocity, const Array& mass, const Array& age,
                  const Array& metallicity, const Array& ct, const std::vector<Array>& dust) {
    const std::int64_t n = coords.shape()[0];
    // calc_dusty_ifu: the chunk's transmissions come with its geometry,
    // outside the vjp (constants: the gas is not differentiated).
    const Array av = dust.empty() ? Array() : dust[0];
    std::vector<Array> dm, da, dz, dv;
    std::int64_t lo = 0;
    do {
      const std::int64_t hi = std::min(n, lo + chunk);
      const ChunkGeometry c = chunk_geometry(f, coords, velocity, lo, hi, g, av);
      Array mrows = rows_of(mass, lo, hi);
      if (g.mass_scale != 1) mrows = multiply(mrows, real(g.mass_scale));
      Array gm, ga, gz, gv;
      if (c.transmission.valid()) {
        auto stage = [&](const Array& m, const Array& a, const Array& z, const Array& vz) {
          return accumulate(c, m, a, z, vz, max_abs, Array());
        };
        auto [acc, pull] = vjp(stage, mrows, rows_of(age, lo, hi), rows_of(metallicity, lo, hi), c.vz);
        (void)acc;
        std::tie(gm, ga, gz, gv) = pull(ct);
      } else {
        // The rows under vjp, the resampling's pullback straight from the
        // cotangent: the chunk's accumulator is never formed.
        auto stage = [&](const Array& m, const Array& a, const Array& z, const Array& vz) {
          return rows_to_resample(c, m, a, z, vz);
        };
        auto [r, pull] = vjp(stage, mrows, rows_of(age, lo, hi), rows_of(metallicity, lo, hi), c.vz);
        const ResampleCotangents rc = resample_accumulate_vjp(ct, r[1], wave_rest_, target_, c.pix, nb * nb,
                                                              {.weights = r[0], .wave_scale = r[2]});
        std::tie(gm, ga, gz, gv) = pull(std::vector<Array>{rc.weights, rc.flux, rc.wave_scale});
      }
      dm.push_back(gm);
      da.push_back(ga);
      dz.push_back(gz);
      dv.push_back(gv);
      if (progress) progress(hi - lo);
      lo = hi;
    } while (lo < n);
    auto join = [](const std::vector<Array>& parts) { return parts.size() == 1 ? parts[0] : concatenate(parts, 0); };
    return std::vector<Array>{join(dm), join(da), join(dz), join(dv)};
  };
  std::vector<Array> per;
  try {
    per = shard_map(body, mesh_,
                    std::vector<PartitionSpec>{P("data", none), P("data", none), P("data"), P("data"), P("data"), P(),
                                               P("data")},
                    std::vector<PartitionSpec>{P("data")})(p.coords, p.velocity, p.mass, p.age, p.metallicity, ct_acc,
                                                           f.dust_args());
  } catch (const ValueError& e) {
    throw InputError(std::string("[ifu] a particle's spectrum exceeds the bound of the exact cube (") + e.what() + ")");
  }
  const Array& d_meff = per[0];  // d loss / d (mass * scale)
  out.mass = g.mass_scale != 1 ? multiply(d_meff, real(g.mass_scale)) : d_meff;
  out.age = per[1];
  out.metallicity = per[2];
  const Array& d_vz = per[3];
  out.mass_scale = exact_sum_rows(multiply(astype(p.mass, DType::f64), astype(d_meff, DType::f64)));
  const double sum_dvz = exact_sum_rows(d_vz);
  out.velocity_offset = sum_dvz;

  // Velocities: v_z = (v - vsys) . R[:, 2] + offset, where vsys is the
  // median of the velocities near the center: each particle's own term,
  // and through the median the selected particles get -R[:, 2] sum d_vz.
  const std::array<double, 3> r2{f.rot[2], f.rot[5], f.rot[8]};
  Array dvel = multiply(expand_dims(d_vz, 1), real_array({r2[0], r2[1], r2[2]}, {3}));
  {
    const Array where_near = broadcast_to(expand_dims(f.near, 1), {p.n, 3});
    auto med = [&](const Array& v) { return median(v, {0}, {.where = where_near, .keepdims = false}); };
    auto [vs_again, pull_median] = vjp(med, p.velocity);
    (void)vs_again;
    const Array ct_vsys = real_array({-r2[0] * sum_dvz, -r2[1] * sum_dvz, -r2[2] * sum_dvz}, {3});
    dvel = add(dvel, std::get<0>(pull_median(ct_vsys)));
  }
  out.velocity = dvel;
  // Positions enter through the spaxel, the aperture and the particles near
  // the center: all piecewise constant, so their derivative is zero.
  out.coords = zeros(p.coords.shape(), opt_.dtype, p.coords.sharding());
  return out;
}

}  // namespace tessera::ifu
