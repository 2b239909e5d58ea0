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
#include <limits>
#include <tuple>
#include <numeric>

#include "ifu/errors.hpp"
#include "ifu/loss.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/stages.hpp"

namespace tessera::ifu {


// The reverse pass holds about five times the forward's bytes per row (the
// flux cotangent in f64 and f32, the interpolation's factors), and its
// chunks run fastest at a few thousand rows (smaller ones pay the ops'
// dispatch, larger ones fall out of cache and fault in fresh pages): at
// most 4096 rows.
std::int64_t Pipeline::reverse_chunk() const { return std::min<std::int64_t>(opt_.chunk, 4096); }

Gradient Pipeline::value_and_grad(const Particles& p, const Observation& obs, LossKind kind,
                                  const GlobalParams& g) const {
  const Frame f = frame(p);
  // The forward pass in the reverse pass's chunks: the memory it frees is
  // then what the reverse pass reuses, and the peak is the larger of the
  // two, not their sum.
  const Partial part = particle_stage(p, f, g, reverse_chunk());
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
  const std::int64_t chunk = reverse_chunk();
  const auto& progress = opt_.on_progress;
  auto body = [&](const Array& coords, const Array& velocity, const Array& mass, const Array& age,
                  const Array& metallicity, const Array& ct, const std::vector<Array>& dust) {
    const std::int64_t n = coords.shape()[0];
    // calc_dusty_ifu: the chunk's transmissions come with its geometry,
    // outside the vjp (constants: the gas is not differentiated).
    const Array av = dust.empty() ? Array() : dust[0];
    std::vector<Array> dm, da, dz, dv;
    for_each_chunk(n, chunk, [&](std::int64_t lo, std::int64_t hi) {
      const ChunkGeometry c = chunk_geometry(f, coords, velocity, mass, lo, hi, g, av);
      const Array& mrows = c.mass;
      Array gm, ga, gz, gv;
      if (c.transmission.valid()) {
        auto stage = [&](const Array& m, const Array& a, const Array& z, const Array& vz) {
          return accumulate(c, m, a, z, vz, max_abs, Array());
        };
        auto [acc, pull] = vjp(stage, mrows, rows(age, lo, hi), rows(metallicity, lo, hi), c.vz);
        (void)acc;
        std::tie(gm, ga, gz, gv) = pull(ct);
      } else {
        // The rows under vjp, the resampling's pullback straight from the
        // cotangent: the chunk's accumulator is never formed.
        auto stage = [&](const Array& m, const Array& a, const Array& z, const Array& vz) {
          return rows_to_resample(c, m, a, z, vz);
        };
        auto [r, pull] = vjp(stage, mrows, rows(age, lo, hi), rows(metallicity, lo, hi), c.vz);
        const ResampleCotangents rc = resample_accumulate_vjp(ct, r[1], wave_rest_, target_, c.pix, nb * nb,
                                                              {.weights = r[0], .wave_scale = r[2]});
        std::tie(gm, ga, gz, gv) = pull(std::vector<Array>{rc.weights, rc.flux, rc.wave_scale});
      }
      dm.push_back(gm);
      da.push_back(ga);
      dz.push_back(gz);
      dv.push_back(gv);
      if (progress) progress(hi - lo);
    });
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
  out.mass_scale = exact_sum(multiply(astype(p.mass, DType::f64), astype(d_meff, DType::f64)));
  const double sum_dvz = exact_sum(d_vz);
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
  // the center: all piecewise constant, so their derivative is zero, but
  // for IllustrisTNG's alignment (below).
  out.coords = zeros(p.coords.shape(), opt_.dtype, p.coords.sharding());
  if (f.aligned) align_gradient(p, f, d_vz, sum_dvz, out);
  if (f.av.valid()) {
    // A star's A_V follows the gas column in front of it, which moves with
    // its depth; that derivative is not implemented: NaN says so.
    out.coords = full(out.coords.shape(), std::numeric_limits<double>::quiet_NaN(), opt_.dtype, out.coords.sharding());
  }
  return out;
}

// IllustrisTNG's alignment: rot = E Re, E the inertia tensor's sorted
// eigenvectors (columns v_j, eigenvalues l_j), Re the Euler rotation. Only
// rot's last column enters (v_z), so with w = sum_i d_vz_i (v_i - vsys)
// (exact sums), d loss / d rot = w e_z^T and d loss / d E = (w e_z^T) Re^T,
// whose columns g_j give, for distinct eigenvalues (the sign fix is locally
// constant),
//   d loss / d A = sym( sum_j sum_{l != j} (g_j . v_l) / (l_j - l_l) v_l v_j^T ).
// A = tr(O) I - O, O = sum_i m_i x_i x_i^T over the particles within the
// half-mass radius (x from the center), so with G = tr(dA) I - dA:
//   d loss / d x_i = 2 m_i G x_i,   d loss / d m_i = x_i^T G x_i.
void Pipeline::align_gradient(const Particles& p, const Frame& f, const Array& d_vz, double sum_dvz,
                              Gradient& out) const {
  using Mat3 = std::array<double, 9>;
  std::array<double, 3> w{};
  const Array g64 = astype(d_vz, DType::f64);
  for (int k = 0; k < 3; ++k) {
    w[k] = exact_sum(multiply(g64, astype(column(p.velocity, k), DType::f64))) - f.vs[k] * sum_dvz;
  }
  const Mat3& re = geo_.rotation;
  const Mat3 e = eigenvectors_sorted(f.inertia);
  Mat3 de{};  // (w e_z^T) Re^T: de[k][m] = w_k Re[m][2]
  for (int k = 0; k < 3; ++k)
    for (int m = 0; m < 3; ++m) de[k * 3 + m] = w[k] * re[m * 3 + 2];
  std::array<double, 3> lam{};
  for (int j = 0; j < 3; ++j)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) lam[j] += e[a * 3 + j] * f.inertia[a * 3 + b] * e[b * 3 + j];
  Mat3 ga{};
  for (int j = 0; j < 3; ++j)
    for (int l = 0; l < 3; ++l) {
      if (l == j) continue;
      const double gap = lam[j] - lam[l];
      if (gap == 0) {
        std::string text = "[ifu] the inertia tensor has a repeated eigenvalue: the alignment's direction, and so its ";
        text += "derivative, is not defined";
        throw InputError(text);
      }
      double gv = 0;
      for (int a = 0; a < 3; ++a) gv += de[a * 3 + j] * e[a * 3 + l];
      const double c = gv / gap;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) ga[a * 3 + b] += c * e[a * 3 + l] * e[b * 3 + j];
    }
  Mat3 go{};
  const double tr = ga[0] + ga[4] + ga[8];
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      const double sym = 0.5 * (ga[a * 3 + b] + ga[b * 3 + a]);
      go[a * 3 + b] = (a == b ? tr : 0.0) - sym;
    }
  // Per particle, in f64, then in the pipeline's float type.
  const Array d = astype(subtract(p.coords, f.center), DType::f64);
  const Array gx = matmul(d, device_put(std::vector<double>(go.begin(), go.end()), {3, 3},
                                        NamedSharding(mesh_, P())));  // (n, 3): (G x_i)^T, G symmetric
  const Array m = where(f.align_inside, astype(p.mass, DType::f64), 0.0);
  const Array dcoords = multiply(expand_dims(multiply(m, 2.0), 1), gx);
  const Array dmass = where(f.align_inside, sum(multiply(d, gx), {1}), 0.0);
  out.coords = add(out.coords, astype(dcoords, opt_.dtype));
  out.mass = add(out.mass, astype(dmass, opt_.dtype));
}

}  // namespace tessera::ifu
