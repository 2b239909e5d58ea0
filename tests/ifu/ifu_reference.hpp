// An independent model of the IFU pipeline for the tests: plain loops in
// double, written from the stage formulas (docs/ifu.md, Rubix 0.0.5's
// calc_ifu), sharing no code with apps/ifu beyond the parsed Config and the
// input structs. It computes its own geometry (cosmology, bin edges,
// wavelength grid, rotation matrices), its own edge handling, the SSP lookup,
// the cube, the velocity map and the inertia-tensor alignment, so a slip in
// the pipeline's geometry shows up as a difference instead of being copied.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ifu/config.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/ssp.hpp"

namespace ifu_ref {

using Mat3 = std::array<double, 9>;  // row-major

inline Mat3 mul(const Mat3& a, const Mat3& b) {
  Mat3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
  return c;
}

inline Mat3 transpose(const Mat3& a) {
  Mat3 t{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) t[i * 3 + j] = a[j * 3 + i];
  return t;
}

// Right-handed active rotations (a column vector turns counter-clockwise when
// seen from the positive axis), angles in degrees.
inline Mat3 rot_x(double deg) {
  const double a = deg * M_PI / 180, c = std::cos(a), s = std::sin(a);
  return {1, 0, 0, 0, c, -s, 0, s, c};
}
inline Mat3 rot_y(double deg) {
  const double a = deg * M_PI / 180, c = std::cos(a), s = std::sin(a);
  return {c, 0, s, 0, 1, 0, -s, 0, c};
}
inline Mat3 rot_z(double deg) {
  const double a = deg * M_PI / 180, c = std::cos(a), s = std::sin(a);
  return {c, -s, 0, s, c, 0, 0, 0, 1};
}

/// Rubix's Euler rotation R = Rz(gamma) Ry(beta) Rx(alpha); positions are row
/// vectors, new = old @ R.
inline Mat3 euler(double alpha, double beta, double gamma) { return mul(rot_z(gamma), mul(rot_y(beta), rot_x(alpha))); }

// ------------------------------------------------------------------ geometry

/// The instruments the tests use, as Rubix 0.0.5's telescopes.yaml gives them.
struct Instrument {
  const char* name;
  double fov, res, wave_lo, wave_hi, wave_res;  // arcsec, arcsec, Angstrom
};
inline Instrument instrument(const std::string& name) {
  static const Instrument table[] = {
      {"MUSE", 5.0, 0.2, 4700.15, 9351.4, 1.25},
      {"NIRSpec_PRISM_CLEAR", 3.0, 0.1, 6000.0, 53000.0, 114.36},
  };
  for (const auto& t : table)
    if (name == t.name) return t;
  throw std::runtime_error("ifu_ref: no instrument " + name);
}

/// kpc per arcsec at redshift z for PLANCK15 (Om0 0.3075, h 0.6774, flat,
/// w = -1): the comoving distance as a 256-point trapezoid over [0, z],
/// divided by 1 + z.
inline double kpc_per_arcsec(double z) {
  const double om = 0.3075, h = 0.6774;
  auto inv_e = [&](double zz) { return 1.0 / std::sqrt(om * (1 + zz) * (1 + zz) * (1 + zz) + (1 - om)); };
  double integral = 0;
  for (int i = 0; i < 255; ++i) {
    const double a = z * i / 255.0, b = z * (i + 1) / 255.0;
    integral += (b - a) * (inv_e(a) + inv_e(b)) / 2;
  }
  const double dc_mpc = integral * 299792.458 / (100 * h);
  return dc_mpc / (1 + z) * 1e3 / 206264.80624709636;  // kpc per radian / arcsec per radian
}

struct Geometry {
  double kpc_per_arcsec = 0, aperture = 0, bin = 0;
  std::int64_t spaxels = 0;
  std::vector<double> edges;  // spaxels + 1, kpc
  std::vector<double> wave;   // the telescope's grid (float32 values), Angstrom
  double wave_res = 0;
  Mat3 rotation{};
};

inline Geometry geometry(const tessera::ifu::Config& cfg) {
  const Instrument t = instrument(cfg.telescope);
  Geometry g;
  g.kpc_per_arcsec = kpc_per_arcsec(cfg.dist_z);
  g.aperture = g.kpc_per_arcsec * t.fov;
  g.spaxels = static_cast<std::int64_t>(t.fov / t.res + 0.5);
  g.bin = g.aperture / static_cast<double>(g.spaxels);
  for (std::int64_t k = 0; k <= g.spaxels; ++k) g.edges.push_back(-g.aperture / 2 + g.bin * static_cast<double>(k));
  // numpy's float32 arange: the count from the double range; the values are
  // start + k * step, both float32, in float32 arithmetic.
  const auto n = static_cast<std::int64_t>(std::ceil((t.wave_hi - t.wave_lo) / t.wave_res));
  const float lo = static_cast<float>(t.wave_lo), step = static_cast<float>(t.wave_res);
  for (std::int64_t k = 0; k < n; ++k) {
    const float v = lo + static_cast<float>(k) * step;
    g.wave.push_back(v);
  }
  g.wave_res = t.wave_res;
  double a = cfg.rotation.alpha, b = cfg.rotation.beta, c = cfg.rotation.gamma;
  if (cfg.rotation.type == "face-on") a = b = c = 0;
  if (cfg.rotation.type == "edge-on") a = 90, b = c = 0;
  g.rotation = euler(a, b, c);
  return g;
}

// ------------------------------------------------------------- edge handling

/// Moves every particle that float32 rounding could put on either side of a
/// decision (within `margin` kpc of a bin edge line after rotation `R`, or of
/// one of the `spheres` around the center) 2 * margin away from it, in the
/// rotated frame, so that a float32 program and this double model decide
/// alike. Returns how many moved.
inline std::int64_t nudge(tessera::ifu::GalaxyData& g, const Geometry& geo, const Mat3& R, double margin,
                          const std::vector<double>& spheres) {
  std::int64_t moved = 0;
  for (std::int64_t i = 0; i < g.n; ++i) {
    bool any = false;
    for (int pass = 0; pass < 8; ++pass) {
      double d[3];
      for (int k = 0; k < 3; ++k) d[k] = static_cast<double>(g.coords[3 * i + k]) - g.center[k];
      bool near = false;
      const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
      for (double s : spheres)
        if (r > 0 && std::abs(r - s) < margin) {
          const double f = (r < s ? s - 2 * margin : s + 2 * margin) / r;
          for (double& v : d) v *= f;
          near = true;
        }
      // The rotated position p = d @ R; shifting p and rotating back (R is
      // orthogonal: d = p @ R^T) moves the particle off the edge lines.
      double p[3] = {0, 0, 0};
      for (int c = 0; c < 3; ++c)
        for (int k = 0; k < 3; ++k) p[c] += d[k] * R[k * 3 + c];
      for (int axis = 0; axis < 2; ++axis)
        for (double e : geo.edges)
          if (std::abs(p[axis] - e) < margin) {
            p[axis] = e + (p[axis] < e ? -2 * margin : 2 * margin);
            near = true;
          }
      if (!near) break;
      for (int k = 0; k < 3; ++k) {
        double back = 0;
        for (int c = 0; c < 3; ++c) back += p[c] * R[k * 3 + c];
        g.coords[3 * i + k] = static_cast<float>(g.center[k] + back);
      }
      any = true;
    }
    moved += any;
  }
  return moved;
}

// ----------------------------------------------------------------- SSP lookup

// interpax's "cubic" knot slopes along one axis: one-sided at the ends, the
// plain (unweighted) mean of the neighbouring secants inside.
inline std::vector<double> slopes(const std::vector<double>& f, const std::vector<double>& x, std::size_t stride,
                                  std::size_t n, std::size_t count, std::size_t inner) {
  std::vector<double> d(f.size());
  for (std::size_t o = 0; o < count; ++o)
    for (std::size_t r = 0; r < inner; ++r) {
      auto at = [&](std::size_t k) { return f[o * n * stride + k * stride + r]; };
      for (std::size_t k = 0; k < n; ++k) {
        auto sec = [&](std::size_t a) { return (at(a + 1) - at(a)) / (x[a + 1] - x[a]); };
        const double v = k == 0 ? sec(0) : k == n - 1 ? sec(n - 2) : (sec(k - 1) + sec(k)) / 2;
        d[o * n * stride + k * stride + r] = v;
      }
    }
  return d;
}

/// The templates as float32 values (Rubix casts them), bicubic Hermite
/// patches, zero outside the grid.
struct Ssp {
  std::size_t nz, na, nw;
  std::vector<double> zgrid, agrid, wave, f, fx, fy, fxy;
  explicit Ssp(const tessera::ifu::SspGrid& s)
      : nz(s.metallicity.size()), na(s.age.size()), nw(s.wavelength.size()) {
    for (double v : s.flux) f.push_back(static_cast<float>(v));
    for (double v : s.metallicity) zgrid.push_back(static_cast<float>(v));
    for (double v : s.age) agrid.push_back(static_cast<float>(v));
    for (double v : s.wavelength) wave.push_back(static_cast<float>(v));
    fx = slopes(f, zgrid, na * nw, nz, 1, na * nw);
    fy = slopes(f, agrid, nw, na, nz, nw);
    fxy = slopes(fx, agrid, nw, na, nz, nw);
  }
  std::vector<double> spectrum(double z, double a) const {
    std::vector<double> out(nw, 0.0);
    if (!(z >= zgrid.front() && z <= zgrid.back() && a >= agrid.front() && a <= agrid.back())) return out;
    auto cell = [](const std::vector<double>& g, double v) {
      const std::size_t i = std::upper_bound(g.begin(), g.end(), v) - g.begin();
      return std::clamp<std::size_t>(i, 1, g.size() - 1);
    };
    const std::size_t i = cell(zgrid, z), j = cell(agrid, a);
    const double dx = zgrid[i] - zgrid[i - 1], dy = agrid[j] - agrid[j - 1];
    const double tx = (z - zgrid[i - 1]) / dx, ty = (a - agrid[j - 1]) / dy;
    auto H = [](int c, double t) { return c == 0 ? 1 - 3 * t * t + 2 * t * t * t : 3 * t * t - 2 * t * t * t; };
    auto G = [](int c, double t) { return c == 0 ? t - 2 * t * t + t * t * t : t * t * t - t * t; };
    for (int p = 0; p < 2; ++p)
      for (int q = 0; q < 2; ++q) {
        const std::size_t base = ((i - 1 + p) * na + (j - 1 + q)) * nw;
        for (std::size_t k = 0; k < nw; ++k)
          out[k] += f[base + k] * H(p, tx) * H(q, ty) + dx * fx[base + k] * G(p, tx) * H(q, ty) +
                    dy * fy[base + k] * H(p, tx) * G(q, ty) + dx * dy * fxy[base + k] * G(p, tx) * G(q, ty);
      }
    return out;
  }
};

// ------------------------------------------------------------- the particles

inline double median_of(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The per-component median velocity of the particles within 10 kpc.
inline std::array<double, 3> systemic_velocity(const tessera::ifu::GalaxyData& g) {
  std::vector<double> sel[3];
  for (std::int64_t i = 0; i < g.n; ++i) {
    double r2 = 0;
    for (int k = 0; k < 3; ++k) r2 += std::pow(g.coords[3 * i + k] - g.center[k], 2);
    if (std::sqrt(r2) < 10)
      for (int k = 0; k < 3; ++k) sel[k].push_back(g.velocity[3 * i + k]);
  }
  return {median_of(sel[0]), median_of(sel[1]), median_of(sel[2])};
}

/// One particle after centering, rotation and the aperture: its spaxel (or
/// -1 when outside) and its rotated z velocity.
struct Placed {
  std::int64_t pix = -1;
  double vz = 0;
};

inline Placed place(const tessera::ifu::GalaxyData& g, std::int64_t i, const Geometry& geo, const Mat3& R,
                    const std::array<double, 3>& vsys) {
  double pos[3] = {0, 0, 0}, vel[3] = {0, 0, 0};
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 3; ++k) {
      pos[c] += (g.coords[3 * i + k] - g.center[k]) * R[k * 3 + c];
      vel[c] += (g.velocity[3 * i + k] - vsys[k]) * R[k * 3 + c];
    }
  Placed out;
  out.vz = vel[2];
  const double lo = geo.edges.front(), hi = geo.edges.back();
  if (!(pos[0] >= lo && pos[0] <= hi && pos[1] >= lo && pos[1] <= hi)) return out;
  // Bin k holds edges[k] <= v < edges[k + 1]; the top edge goes to the last bin.
  auto bin = [&](double v) {
    std::int64_t k = 0;
    while (k + 1 < geo.spaxels && v >= geo.edges[k + 1]) ++k;
    return k;
  };
  out.pix = bin(pos[0]) + geo.spaxels * bin(pos[1]);
  return out;
}

/// The stellar inertia-tensor frame (IllustrisTNG): the eigenvectors of
/// I = tr(S) 1 - S, S = sum m x x^T over the particles within `halfmassrad`
/// of the center (offsets in float32, as the pipeline takes them), as
/// columns sorted by ascending eigenvalue, each with its largest component
/// positive. Eigenvalues in closed form (the trigonometric solution of the
/// characteristic cubic), eigenvectors as the longest cross product of two
/// rows of I - lambda 1: another method than the pipeline's Jacobi sweeps.
inline Mat3 inertia_frame(const tessera::ifu::GalaxyData& g, double halfmassrad) {
  Mat3 s{};
  const float c[3] = {static_cast<float>(g.center[0]), static_cast<float>(g.center[1]), static_cast<float>(g.center[2])};
  for (std::int64_t i = 0; i < g.n; ++i) {
    double d[3];
    for (int k = 0; k < 3; ++k) d[k] = static_cast<float>(g.coords[3 * i + k] - c[k]);
    if (std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]) > halfmassrad) continue;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) s[a * 3 + b] += static_cast<double>(g.mass[i]) * d[a] * d[b];
  }
  const double tr = s[0] + s[4] + s[8];
  Mat3 m{};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) m[a * 3 + b] = (a == b ? tr : 0.0) - s[a * 3 + b];
  // Eigenvalues: m = q 1 + p B with det(B) / 2 = cos(3 phi).
  const double q = (m[0] + m[4] + m[8]) / 3;
  const double p1 = m[1] * m[1] + m[2] * m[2] + m[5] * m[5];
  const double p2 = std::pow(m[0] - q, 2) + std::pow(m[4] - q, 2) + std::pow(m[8] - q, 2) + 2 * p1;
  const double p = std::sqrt(p2 / 6);
  Mat3 b{};
  for (int k = 0; k < 9; ++k) b[k] = (m[k] - (k % 4 == 0 ? q : 0.0)) / p;
  const double det = b[0] * (b[4] * b[8] - b[5] * b[7]) - b[1] * (b[3] * b[8] - b[5] * b[6]) + b[2] * (b[3] * b[7] - b[4] * b[6]);
  const double phi = std::acos(std::clamp(det / 2, -1.0, 1.0)) / 3;
  const double l_hi = q + 2 * p * std::cos(phi), l_lo = q + 2 * p * std::cos(phi + 2 * M_PI / 3);
  const double lambda[3] = {l_lo, 3 * q - l_lo - l_hi, l_hi};
  Mat3 v{};
  for (int j = 0; j < 3; ++j) {
    Mat3 a = m;
    for (int k = 0; k < 3; ++k) a[k * 4] -= lambda[j];
    double best[3] = {0, 0, 0}, best_n = -1;
    for (int r = 0; r < 3; ++r) {
      const double* u = &a[r * 3];
      const double* w = &a[((r + 1) % 3) * 3];
      const double x[3] = {u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2], u[0] * w[1] - u[1] * w[0]};
      const double n = std::sqrt(x[0] * x[0] + x[1] * x[1] + x[2] * x[2]);
      if (n > best_n) best_n = n, best[0] = x[0] / n, best[1] = x[1] / n, best[2] = x[2] / n;
    }
    int big = 0;
    for (int k = 1; k < 3; ++k)
      if (std::abs(best[k]) > std::abs(best[big])) big = k;
    const double sign = best[big] < 0 ? -1 : 1;
    for (int k = 0; k < 3; ++k) v[k * 3 + j] = sign * best[k];
  }
  return v;
}

// --------------------------------------------------------------------- cubes

struct Result {
  std::vector<double> cube;      // (ny, nx, nwave)
  std::vector<double> velocity;  // (ny, nx), NaN where no mass
  std::int64_t in_aperture = 0;
};

/// Options the model needs beyond the config.
struct Options {
  bool rubix_ages = false;  // ages hold log10(age/yr) already (Rubix 0.0.5's lookup), not Gyr
  Mat3 rotation{};          // the total rotation (defaults to the config's Euler rotation when all zero)
  // Dust (calc_dusty_ifu), when av is not empty: particle i's resampled
  // spectrum is multiplied by 10^(-0.4 curve[j] av[i]) at telescope
  // wavelength j (curve = A(lambda)/A(V) there) before it is added.
  std::vector<double> av, curve;
};

/// Every stage in double, particle by particle: centering, rotation,
/// aperture, spaxels, SSP lookup, Doppler shift, flux-conserving resampling,
/// dust when given (Options::av), then PSF and LSF when configured (noise
/// is not modelled).
inline Result run(const tessera::ifu::Config& cfg, const tessera::ifu::SspGrid& grid,
                  const tessera::ifu::GalaxyData& g, const Options& opt = {}) {
  const Geometry geo = ifu_ref::geometry(cfg);
  const Mat3 R = opt.rotation == Mat3{} ? geo.rotation : opt.rotation;
  const std::size_t nb = geo.spaxels, T = geo.wave.size();
  const Ssp ssp(grid);
  const std::array<double, 3> vsys = systemic_velocity(g);
  const std::vector<double>& target = geo.wave;
  Result res;
  res.cube.assign(nb * nb * T, 0.0);
  std::vector<double> mv(nb * nb, 0.0), ms(nb * nb, 0.0);
  // Observed-frame template wavelengths before the Doppler factor: float32,
  // as the pipelines hold them.
  std::vector<double> w0(ssp.nw);
  for (std::size_t k = 0; k < ssp.nw; ++k)
    w0[k] = static_cast<float>(static_cast<float>(1 + cfg.dist_z) * static_cast<float>(ssp.wave[k]));
  for (std::int64_t i = 0; i < g.n; ++i) {
    const Placed pl = place(g, i, geo, R, vsys);
    if (pl.pix < 0) continue;
    ++res.in_aperture;
    const double m = g.mass[i];
    mv[pl.pix] += m * pl.vz;
    ms[pl.pix] += m;
    const double log_age = opt.rubix_ages ? static_cast<double>(g.age[i]) : std::log10(g.age[i] * 1e9);
    const std::vector<double> s = ssp.spectrum(g.metallicity[i], log_age);
    std::vector<double> w(s.size());
    for (std::size_t k = 0; k < s.size(); ++k) w[k] = w0[k] * std::exp(pl.vz / 299792.458);
    double lin = 0;
    for (std::size_t k = 1; k < w.size(); ++k)
      if (w[k] >= target.front() && w[k] <= target.back()) lin += s[k] * (w[k] - w[k - 1]);
    // Linear interpolation (numpy's interp): the end values outside.
    std::vector<double> p(T);
    std::size_t c = 1;  // the target grid increases: the cell only moves up
    for (std::size_t j = 0; j < T; ++j) {
      const double t = target[j];
      if (t < w.front()) p[j] = s.front();
      else if (t >= w.back()) p[j] = s.back();
      else {
        while (w[c] <= t) ++c;  // w[c - 1] <= t < w[c]
        p[j] = s[c - 1] + (t - w[c - 1]) / (w[c] - w[c - 1]) * (s[c] - s[c - 1]);
      }
    }
    double lout = 0;
    for (std::size_t j = 1; j < T; ++j) lout += p[j] * (target[j] - target[j - 1]);
    const double f = lout == 0 ? 0 : m * lin / lout;
    for (std::size_t j = 0; j < T; ++j)
      res.cube[pl.pix * T + j] += p[j] * f * (opt.av.empty() ? 1.0 : std::pow(10.0, -0.4 * opt.curve[j] * opt.av[i]));
  }
  res.velocity.resize(nb * nb);
  for (std::size_t s = 0; s < nb * nb; ++s) res.velocity[s] = ms[s] > 0 ? mv[s] / ms[s] : std::nan("");
  // PSF: a normalised size x size Gaussian (sigma in spaxels), zero boundary,
  // out[a][b] = sum_pq plane[a + h - p][b + h - q] K[p][q].
  if (cfg.psf) {
    const int k = cfg.psf_size, h = k / 2;
    std::vector<double> kern(k * k);
    double tot = 0;
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b)
        tot += kern[a * k + b] = std::exp(-((a - h) * (a - h) + (b - h) * (b - h)) / (2 * cfg.psf_sigma * cfg.psf_sigma));
    std::vector<double> out(res.cube.size(), 0.0);
    for (std::size_t y = 0; y < nb; ++y)
      for (std::size_t x = 0; x < nb; ++x)
        for (int a = 0; a < k; ++a)
          for (int b = 0; b < k; ++b) {
            const std::int64_t yy = static_cast<std::int64_t>(y) + h - a, xx = static_cast<std::int64_t>(x) + h - b;
            if (yy < 0 || xx < 0 || yy >= static_cast<std::int64_t>(nb) || xx >= static_cast<std::int64_t>(nb)) continue;
            for (std::size_t l = 0; l < T; ++l)
              out[(y * nb + x) * T + l] += res.cube[(yy * nb + xx) * T + l] * kern[a * k + b] / tot;
          }
    res.cube = std::move(out);
  }
  // LSF: 25 taps one wavelength bin apart, sigma in Angstrom, zero boundary.
  if (cfg.lsf) {
    std::vector<double> k1;
    double t1 = 0;
    for (int t = -12; t <= 12; ++t) k1.push_back(std::exp(-0.5 * std::pow(t * geo.wave_res / cfg.lsf_sigma, 2))), t1 += k1.back();
    std::vector<double> out(res.cube.size(), 0.0);
    for (std::size_t s = 0; s < nb * nb; ++s)
      for (std::size_t l = 0; l < T; ++l)
        for (int t = 0; t < 25; ++t) {
          const std::int64_t src = static_cast<std::int64_t>(l) + 12 - t;
          if (src >= 0 && src < static_cast<std::int64_t>(T)) out[s * T + l] += res.cube[s * T + src] * k1[t] / t1;
        }
    res.cube = std::move(out);
  }
  return res;
}

}  // namespace ifu_ref
