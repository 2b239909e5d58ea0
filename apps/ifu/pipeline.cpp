// The IFU pipeline's stages (pipeline.hpp has the overview, docs/ifu.md the
// physics and where it departs from Rubix 0.0.5).
#include "ifu/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ifu/cosmology.hpp"
#include "ifu/errors.hpp"
#include "ifu/stages.hpp"

namespace tessera::ifu {

namespace {

constexpr double kDeg = M_PI / 180.0;

using Mat3 = std::array<double, 9>;

Mat3 matmul3(const Mat3& a, const Mat3& b) {
  Mat3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
  return c;
}

/// R = Rz(gamma) Ry(beta) Rx(alpha), the right-handed active rotations.
Mat3 euler(double alpha_deg, double beta_deg, double gamma_deg) {
  const double a = alpha_deg * kDeg, b = beta_deg * kDeg, g = gamma_deg * kDeg;
  const Mat3 rx{1, 0, 0, 0, std::cos(a), -std::sin(a), 0, std::sin(a), std::cos(a)};
  const Mat3 ry{std::cos(b), 0, std::sin(b), 0, 1, 0, -std::sin(b), 0, std::cos(b)};
  const Mat3 rz{std::cos(g), -std::sin(g), 0, std::sin(g), std::cos(g), 0, 0, 0, 1};
  return matmul3(rz, matmul3(ry, rx));
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}




}  // namespace

std::array<double, 9> eigenvectors_sorted(const std::array<double, 9>& sym) {
  // Cyclic Jacobi: rotate away the largest off-diagonal element until the
  // matrix is diagonal; the product of the rotations holds the eigenvectors.
  Mat3 a = sym, v{1, 0, 0, 0, 1, 0, 0, 0, 1};
  for (int sweep = 0; sweep < 64; ++sweep) {
    const double off = std::abs(a[1]) + std::abs(a[2]) + std::abs(a[5]);
    if (off == 0.0 || off < 1e-300) break;
    for (int p = 0; p < 2; ++p) {
      for (int q = p + 1; q < 3; ++q) {
        const double apq = a[p * 3 + q];
        if (apq == 0.0) continue;
        const double theta = (a[q * 3 + q] - a[p * 3 + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int k = 0; k < 3; ++k) {  // a <- J^T a J
          const double akp = a[k * 3 + p], akq = a[k * 3 + q];
          a[k * 3 + p] = c * akp - s * akq;
          a[k * 3 + q] = s * akp + c * akq;
        }
        for (int k = 0; k < 3; ++k) {
          const double apk = a[p * 3 + k], aqk = a[q * 3 + k];
          a[p * 3 + k] = c * apk - s * aqk;
          a[q * 3 + k] = s * apk + c * aqk;
        }
        for (int k = 0; k < 3; ++k) {
          const double vkp = v[k * 3 + p], vkq = v[k * 3 + q];
          v[k * 3 + p] = c * vkp - s * vkq;
          v[k * 3 + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  std::array<int, 3> order{0, 1, 2};
  std::sort(order.begin(), order.end(), [&](int x, int y) { return a[x * 3 + x] < a[y * 3 + y]; });
  Mat3 out{};
  for (int j = 0; j < 3; ++j) {
    const int c = order[j];
    int big = 0;
    for (int k = 1; k < 3; ++k)
      if (std::abs(v[k * 3 + c]) > std::abs(v[big * 3 + c])) big = k;
    const double sign = v[big * 3 + c] < 0 ? -1.0 : 1.0;
    for (int k = 0; k < 3; ++k) out[k * 3 + j] = sign * v[k * 3 + c];
  }
  return out;
}

Geometry geometry(const Config& cfg) {
  Geometry g;
  const Telescope& tel = telescope(cfg.telescope);
  g.kpc_per_arcsec = kpc_per_arcsec(cosmology(cfg.cosmology), cfg.dist_z);
  g.aperture_kpc = g.kpc_per_arcsec * tel.fov_arcsec;
  g.spaxels = static_cast<std::int64_t>(std::floor(tel.fov_arcsec / tel.spatial_res_arcsec + 1e-9));
  if (g.spaxels < 1) {
    std::string text = "[ifu] telescope ";
    text += tel.name;
    text += " has fewer than one spaxel across its field of view";
    throw InputError(text);
  }
  const double bin = g.aperture_kpc / static_cast<double>(g.spaxels);
  for (std::int64_t k = 0; k <= g.spaxels; ++k) g.edges.push_back(-g.aperture_kpc / 2 + bin * static_cast<double>(k));
  // numpy's arange length, values start + k * step rounded to float32 (as
  // jnp.arange builds the telescope's grid).
  const auto nwave = static_cast<std::int64_t>(std::ceil((tel.wave_hi - tel.wave_lo) / tel.wave_res));
  for (std::int64_t k = 0; k < nwave; ++k)
    g.wave.push_back(static_cast<float>(static_cast<float>(tel.wave_lo) + static_cast<float>(k) * static_cast<float>(tel.wave_res)));
  const RotationConfig& r = cfg.rotation;
  g.rotation = euler(r.alpha, r.beta, r.gamma);
  return g;
}

Array Pipeline::real_array(const std::vector<double>& v, const Shape& shape) const {
  const NamedSharding rep(mesh_, P());
  if (opt_.dtype == DType::f64) return device_put(v, shape, rep);
  std::vector<float> f(v.begin(), v.end());
  return device_put(f, shape, rep);
}

Pipeline::Pipeline(Config cfg, const SspGrid& ssp, Mesh mesh, PipelineOptions opt)
    : cfg_(std::move(cfg)), geo_(ifu::geometry(cfg_)), mesh_(std::move(mesh)), opt_(std::move(opt)) {
  if (mesh_.axis_names() != std::vector<std::string>{"data"})
    throw InputError("[ifu] the pipeline runs on a 1-d mesh with axis \"data\", got " + mesh_.str());
  if (cfg_.noise && cfg_.noise_distribution != "normal") {
    std::string text = "[ifu] noise_distribution '";
    text += cfg_.noise_distribution;
    text += "' is not supported (normal)";
    throw InputError(text);
  }
  if (opt_.dtype != DType::f32 && opt_.dtype != DType::f64)
    throw InputError(std::string("[ifu] the pipeline computes in f32 or f64, got ") + dtype_name(opt_.dtype));
  if (opt_.chunk < 1) throw InputError("[ifu] the chunk size must be >= 1, got " + std::to_string(opt_.chunk));
  const auto nz = static_cast<std::int64_t>(ssp.metallicity.size());
  const auto na = static_cast<std::int64_t>(ssp.age.size());
  const auto nw = static_cast<std::int64_t>(ssp.wavelength.size());
  if (nz < 2 || na < 2 || nw < 2 || static_cast<std::int64_t>(ssp.flux.size()) != nz * na * nw)
    throw InputError("[ifu] the SSP grid " + ssp.source + " is malformed");
  const NamedSharding rep(mesh_, P());
  // Rubix casts the templates to float32; so does the pipeline.
  z_grid_ = real_array(ssp.metallicity, {nz});
  age_grid_ = real_array(ssp.age, {na});
  flux_grid_ = real_array(ssp.flux, {nz, na, nw});
  for (double f : ssp.flux) flux_max_ = std::max(flux_max_, std::abs(static_cast<double>(static_cast<float>(f))));
  // Observed-frame template wavelengths: (1 + z) * lambda in float32.
  std::vector<float> rest(ssp.wavelength.begin(), ssp.wavelength.end());
  for (float& w : rest) w = static_cast<float>(1.0f + static_cast<float>(cfg_.dist_z)) * w;
  wave_rest_ = astype(device_put(rest, {nw}, rep), opt_.dtype);
  target_ = astype(device_put(geo_.wave, {static_cast<std::int64_t>(geo_.wave.size())}, rep), opt_.dtype);
  edges_ = real_array(geo_.edges, {static_cast<std::int64_t>(geo_.edges.size())});
}

double Pipeline::dwave() const { return telescope(cfg_.telescope).wave_res; }

Particles Pipeline::put(const GalaxyData& g) const {
  // Sizes and values: a NaN would surface stages later as a puzzle.
  auto check = [&](const std::vector<float>& v, std::int64_t per, const char* name) {
    if (static_cast<std::int64_t>(v.size()) != g.n * per) {
      std::string text = "[ifu] the galaxy has ";
      text += std::to_string(g.n) + " particles but " + std::to_string(v.size()) + " values of " + name;
      throw InputError(text);
    }
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) {
        std::string text = "[ifu] ";
        text += name;
        text += " of particle " + std::to_string(i / static_cast<std::size_t>(per)) + " is not finite";
        throw InputError(text);
      }
  };
  check(g.coords, 3, "coords");
  check(g.velocity, 3, "velocity");
  check(g.mass, 1, "mass");
  check(g.age, 1, "age");
  check(g.metallicity, 1, "metallicity");
  const NamedSharding rows1(mesh_, P("data")), rows2(mesh_, P("data", none));
  Particles p;
  p.n = g.n;
  p.center = g.center;
  p.halfmassrad = g.halfmassrad_stars;
  p.coords = astype(device_put(g.coords, {g.n, 3}, rows2), opt_.dtype);
  p.velocity = astype(device_put(g.velocity, {g.n, 3}, rows2), opt_.dtype);
  p.mass = astype(device_put(g.mass, {g.n}, rows1), opt_.dtype);
  p.age = astype(device_put(g.age, {g.n}, rows1), opt_.dtype);
  p.metallicity = astype(device_put(g.metallicity, {g.n}, rows1), opt_.dtype);
  if (dusty()) p.gas = put_gas(g.gas, mesh_);
  return p;
}

Pipeline::Frame Pipeline::frame(const Particles& p) const {
  if (p.n == 0) throw InputError("[ifu] the galaxy has no star particles");
  const NamedSharding rep(mesh_, P());
  Frame f;
  f.center = real_array({p.center[0], p.center[1], p.center[2]}, {3});

  // --- Centering (Rubix's center_particles): the center must lie inside the
  // particles' bounding box; the systemic velocity is the per-component
  // median of the velocities of the particles within 10 kpc of it. (The
  // values read on the host here and below are reductions over all the
  // particles: replicated, so every process holds them, whatever mesh.)
  {
    const auto lo = min(p.coords, {0}).to_vector<double>();
    const auto hi = max(p.coords, {0}).to_vector<double>();
    for (int k = 0; k < 3; ++k)
      if (!(p.center[k] >= lo[k] && p.center[k] <= hi[k])) {
        std::string text = "[ifu] the galaxy center (";
        text += fmt(p.center[0]) + ", " + fmt(p.center[1]) + ", " + fmt(p.center[2]);
        text += ") kpc lies outside the particles' bounding box";
        throw InputError(text);
      }
  }
  // Distances from the center, compiled: the chain runs as one loop, with
  // no (n, 3) temporaries.
  static const auto distance = jit([](const Array& coords, const Array& c) {
    const Array d = subtract(coords, c);
    return sqrt(sum(multiply(d, d), {1}));
  });
  const Array radius = distance(p.coords, f.center);
  f.near = less(radius, 10.0f);
  f.vsys = median(p.velocity, {0}, {.where = broadcast_to(expand_dims(f.near, 1), {p.n, 3}), .keepdims = false});
  const auto vs = f.vsys.to_vector<double>();
  for (int k = 0; k < 3; ++k) f.vs[k] = vs[k];
  if (std::isnan(vs[0]) || std::isnan(vs[1]) || std::isnan(vs[2]))
    throw InputError("[ifu] no star particle lies within 10 kpc of the galaxy center: cannot take the systemic velocity");

  // --- Rotation. IllustrisTNG: align with the stellar inertia tensor of the
  // particles within the half-mass radius (summed exactly over all of them),
  // then the Euler rotation.
  Mat3 rot = geo_.rotation;
  f.mass_max = max(abs(p.mass)).item<double>();
  if (cfg_.simulation == "IllustrisTNG") {
    if (!(p.halfmassrad > 0))
      throw InputError("[ifu] simulation IllustrisTNG aligns with the inertia tensor within /galaxy/halfmassrad_stars, "
                       "which the galaxy file does not give");
    const Array inside = less_equal(radius, real(p.halfmassrad));
    const Array m = astype(where(inside, p.mass, 0.0f), DType::f64);
    const Array d = astype(subtract(p.coords, f.center), DType::f64);
    // Terms m x_i x_j, bounded by max(m) * max |x|^2.
    const double bound = std::max(f.mass_max * p.halfmassrad * p.halfmassrad * 4.0, kTiny);
    Mat3 outer{};
    for (int i = 0; i < 3; ++i)
      for (int j = i; j < 3; ++j) {
        const Array term = multiply(m, multiply(column(d, i), column(d, j)));
        outer[i * 3 + j] = outer[j * 3 + i] = exact_total(sum(exact_limbs(term, bound), {1}), DType::f64).item<double>();
      }
    const double trace = outer[0] + outer[4] + outer[8];
    Mat3 inertia{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) inertia[i * 3 + j] = (i == j ? trace : 0.0) - outer[i * 3 + j];
    rot = matmul3(eigenvectors_sorted(inertia), rot);
    f.aligned = true;
    f.inertia = inertia;
    f.align_inside = inside;
  }
  f.rot = rot;
  f.rmat = real_array(std::vector<double>(rot.begin(), rot.end()), {3, 3});
  f.vmax = max(abs(p.velocity)).item<double>() + std::abs(vs[0]) + std::abs(vs[1]) + std::abs(vs[2]);

  // --- Dust (calc_dusty_ifu): A_V of every star from the gas in front of
  // it, in the final frame. Once per run, eagerly (it reads the gas's
  // spaxels and the column's bound on the host), outside the chunk loop and
  // outside any vjp: the gradient takes the transmissions as constants.
  // The positions go in as float32 whatever the dtype: the dust model is
  // Rubix's float32 one.
  if (dusty()) {
    if (p.gas.n <= 0)
      throw InputError("[ifu] pipeline calc_dusty_ifu needs the galaxy's gas cells (/particles/gas/{coords, mass, "
                       "metals} in Rubix's galaxy file, PartType0 in an IllustrisTNG cutout), and the particles were "
                       "put without gas");
    const DustView view{p.center, f.rot, geo_.edges};
    f.av = star_extinction_av(cfg_.dust, view, astype(p.coords, DType::f32), p.gas);
    f.curve = dust_curve_factor(cfg_.dust, geo_.wave, mesh_);
  }
  return f;
}

Pipeline::ChunkGeometry Pipeline::chunk_geometry(const Frame& f, const Array& coords, const Array& velocity,
                                                 const Array& mass, std::int64_t lo, std::int64_t hi,
                                                 const GlobalParams& g, const Array& av) const {
  const std::int64_t nb = geo_.spaxels;
  const Scalar e_lo = real(geo_.edges.front()), e_hi = real(geo_.edges.back());
  const Array pos = matmul(subtract(rows(coords, lo, hi), f.center), f.rmat);
  const Array vel = matmul(subtract(rows(velocity, lo, hi), f.vsys), f.rmat);
  const Array x = column(pos, 0), y = column(pos, 1);
  ChunkGeometry c;
  c.mass = rows(mass, lo, hi);
  if (g.mass_scale != 1) c.mass = multiply(c.mass, real(g.mass_scale));
  c.vz = column(vel, 2);
  if (g.velocity_offset != 0) c.vz = add(c.vz, real(g.velocity_offset));
  c.inside = logical_and(logical_and(greater_equal(x, e_lo), less_equal(x, e_hi)),
                         logical_and(greater_equal(y, e_lo), less_equal(y, e_hi)));
  auto bin = [&](const Array& v) { return clip(subtract(searchsorted(edges_, v, Side::right), 1), 0, nb - 1); };
  c.pix = add(bin(x), multiply(bin(y), static_cast<int>(nb)));
  if (av.valid()) c.transmission = dust_transmission(f.curve, rows(av, lo, hi));
  return c;
}

std::vector<Array> Pipeline::rows_to_resample(const ChunkGeometry& c, const Array& mass, const Array& age,
                                              const Array& metallicity, const Array& vz) const {
  const Array m = where(c.inside, mass, 0.0f);
  const Array z = where(c.inside, metallicity, 0.0f);
  // Ages in Gyr on the templates' log10(age/yr) axis; filtered particles
  // get age 0, whose log is -inf: outside the grid, no light.
  const Array age_yr = multiply(where(c.inside, age, 0.0f), 1e9f);
  const Array log_age = divide(log(age_yr), real(std::log(10.0)));
  const Interp2dOptions lookup{.method = cfg_.ssp_method, .fill = 0.0};
  const Array spectra = interp2d(z, log_age, z_grid_, age_grid_, flux_grid_, lookup);
  const Array doppler = exp(divide(vz, real(kSpeedOfLight)));
  return {m, spectra, doppler};
}

Array Pipeline::accumulate(const ChunkGeometry& c, const Array& mass, const Array& age, const Array& metallicity,
                           const Array& vz, double max_abs, const Array& init) const {
  const std::int64_t nb = geo_.spaxels;
  const std::vector<Array> r = rows_to_resample(c, mass, age, metallicity, vz);
  // Into the accumulator in the same pass (init): no per-chunk partial
  // cube, no add.
  ResampleOptions ro{.weights = r[0], .wave_scale = r[2]};
  if (init.valid()) ro.init = init;
  if (!c.transmission.valid()) return resample_accumulate(r[1], wave_rest_, target_, c.pix, nb * nb, max_abs, ro);
  // Dust: each star's resampled spectrum times its transmission, then
  // added (Rubix dims on the telescope's grid, after resampling). The
  // transmission lies in [0, 1], so max_abs still bounds every term.
  return resample_accumulate_extinguished(r[1], wave_rest_, target_, c.pix, nb * nb, max_abs, ro, c.transmission);
}

namespace {

/// The bound of the cube's exact accumulator. Terms are mass * (interpolated
/// template, resampled): bicubic overshoot and the flux-conservation factor
/// stay far below 2^10 of the grid's maximum (the kernel refuses a term
/// above the bound, it never wraps).
double cube_bound(double mass_max, double flux_max) { return std::max(mass_max * flux_max * 1024.0, kTiny); }

}  // namespace

Pipeline::Partial Pipeline::particle_stage(const Particles& p, const Frame& f, const GlobalParams& g,
                                           std::int64_t chunk) const {
  // The per-particle stages, a chunk at a time on each device, into the
  // device's exact partial cube; then one psum.
  const std::int64_t nb = geo_.spaxels;
  const double scale = std::abs(g.mass_scale);
  const double max_abs = cube_bound(f.mass_max * scale, flux_max_);
  const double mv_abs = std::max(f.mass_max * scale * (f.vmax + std::abs(g.velocity_offset)) * 2.0, kTiny);
  const double m_abs = std::max(f.mass_max * scale, kTiny);
  const auto& progress = opt_.on_progress;
  auto body = [&](const Array& coords, const Array& velocity, const Array& mass, const Array& age,
                  const Array& metallicity, const std::vector<Array>& dust) {
    const std::int64_t n = coords.shape()[0];
    const Array av = dust.empty() ? Array() : dust[0];
    Array acc, mv, ms, count;
    // At least one step, so that a device without particles still gives its
    // (zero) accumulator to the psum.
    for_each_chunk(n, chunk, [&](std::int64_t lo, std::int64_t hi) {
      const ChunkGeometry c = chunk_geometry(f, coords, velocity, mass, lo, hi, g, av);
      acc = accumulate(c, c.mass, rows(age, lo, hi), rows(metallicity, lo, hi), c.vz, max_abs, acc);
      // The velocity map's sums, exact too: sum m v_z and sum m per spaxel.
      const Array m = where(c.inside, c.mass, 0.0f);
      const Array mvz = segment_sum(transpose(exact_limbs(multiply(m, c.vz), mv_abs)), c.pix, nb * nb);
      const Array mm = segment_sum(transpose(exact_limbs(m, m_abs)), c.pix, nb * nb);
      mv = mv.valid() ? add(mv, mvz) : mvz;
      ms = ms.valid() ? add(ms, mm) : mm;
      const Array cnt = sum(astype(c.inside, DType::i64));
      count = count.valid() ? add(count, cnt) : cnt;
      if (progress) progress(hi - lo);
    });
    return std::vector<Array>{psum(acc, "data"), psum(mv, "data"), psum(ms, "data"), psum(count, "data")};
  };
  std::vector<Array> parts;
  try {
    parts = shard_map(body, mesh_,
                      std::vector<PartitionSpec>{P("data", none), P("data", none), P("data"), P("data"), P("data"),
                                                 P("data")},
                      std::vector<PartitionSpec>{P()})(p.coords, p.velocity, p.mass, p.age, p.metallicity, f.dust_args());
  } catch (const ValueError& e) {
    // The bound above is 2^10 x (largest mass x largest template flux); only
    // a template grid whose bicubic overshoot exceeds that reaches here.
    std::string text = "[ifu] a particle's spectrum exceeds 1024 x (largest mass x largest template flux), the bound "
                       "of the exact cube; are the templates in ";
    text += cfg_.ssp_template;
    text += " sane? (";
    text += e.what();
    text += ")";
    throw InputError(text);
  }
  return Partial{parts[0], parts[1], parts[2], parts[3].item<std::int64_t>()};
}

Array Pipeline::observe(const Array& cube_in) const {
  Array cube = cube_in;
  const NamedSharding rep(mesh_, P());
  // --- PSF: a normalised Gaussian on every wavelength plane, the cube
  // sharded over wavelength (each device convolves its own planes).
  if (cfg_.psf) {
    const int k = cfg_.psf_size;
    std::vector<double> kern(static_cast<std::size_t>(k) * k);
    double total = 0;
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) {
        const double xa = a - (k - 1) / 2.0, yb = b - (k - 1) / 2.0;
        total += kern[a * k + b] = std::exp(-(xa * xa + yb * yb) / (2.0 * cfg_.psf_sigma * cfg_.psf_sigma));
      }
    for (double& v : kern) v /= total;
    Array planes = with_sharding_constraint(transpose(cube, {2, 0, 1}), P("data", none, none));
    planes = convolve2d(planes, real_array(kern, {k, k}));
    cube = transpose(planes, {1, 2, 0});
  }
  // --- LSF: a normalised Gaussian of 25 taps, one wavelength bin apart
  // (half-width 12 bins: Rubix's extend factor), along every spaxel's
  // spectrum.
  if (cfg_.lsf) {
    const double step = dwave();
    std::vector<double> kern;
    double total = 0;
    for (int t = -12; t <= 12; ++t) {
      const double x = t * step;
      kern.push_back(std::exp(-0.5 * x * x / (cfg_.lsf_sigma * cfg_.lsf_sigma)));
      total += kern.back();
    }
    for (double& v : kern) v /= total;
    cube = convolve(with_sharding_constraint(cube, P(none, none, "data")), real_array(kern, {25}), -1);
  }
  return cube;
}

Array Pipeline::model(const Particles& p, const GlobalParams& g) const {
  const Frame f = frame(p);
  const Partial part = particle_stage(p, f, g, opt_.chunk);
  const std::int64_t nb = geo_.spaxels;
  return observe(reshape(exact_total(part.acc, opt_.dtype), {nb, nb, static_cast<std::int64_t>(geo_.wave.size())}));
}

Cube Pipeline::run(const Particles& p, const GlobalParams& g) const {
  const Frame f = frame(p);
  Cube out;
  out.particles = p.n;
  out.systemic_velocity = f.vs;
  const Partial part = particle_stage(p, f, g, opt_.chunk);
  const std::int64_t nb = geo_.spaxels;
  const auto nwave = static_cast<std::int64_t>(geo_.wave.size());
  Array cube = reshape(exact_total(part.acc, opt_.dtype), {nb, nb, nwave});
  {
    const Array mvz = exact_total(transpose(part.mv), DType::f64);
    const Array mm = exact_total(transpose(part.ms), DType::f64);
    out.velocity_map = reshape(astype(where(greater(mm, 0.0), divide(mvz, mm), std::numeric_limits<double>::quiet_NaN()),
                                      DType::f32),
                               {nb, nb});
    out.in_aperture = part.in_aperture;
  }
  cube = observe(cube);
  // --- Noise, after the reduction: S/N per spaxel from the median of the
  // positive spaxel totals; one normal draw per cube element from a
  // counter-based key, so the noise is the same on every mesh.
  if (cfg_.noise && std::isfinite(cfg_.signal_to_noise)) {
    // Each spaxel's total, summed exactly: the wavelength dim is sharded, and
    // a float sum of its parts would round differently on every mesh.
    const double peak = std::max(max(abs(cube)).item<double>(), kTiny);
    const Array total = exact_total(sum(exact_limbs(cube, peak), {3}), opt_.dtype);
    const Array bright = greater(total, 0.0f);
    Array med = median(total, {}, {.where = bright, .keepdims = false});
    med = where(isnan(med), 0.0f, med);
    const Array s2n = where(bright, divide(divide(sqrt(med), real(cfg_.signal_to_noise)), sqrt(total)), 0.0f);
    const NamedSharding layout(mesh_, P(none, none, "data"));
    const Array draw = random::normal(random::key(opt_.noise_seed), cube.shape(), opt_.dtype, layout);
    cube = add(cube, multiply(multiply(cube, draw), expand_dims(s2n, 2)));
  }
  out.data = cube;
  return out;
}

}  // namespace tessera::ifu
