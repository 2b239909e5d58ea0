#include "ifu/generate.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "ifu/pipeline.hpp"

namespace tessera::ifu {

GalaxyData generate_disk(const DiskOptions& o) {
  GalaxyData g;
  g.n = o.particles;
  g.center = o.center;
  g.halfmassrad_stars = 1.678 * o.scale_length;  // half-mass radius of an exponential disk
  g.redshift = 0.1;
  g.coords.resize(3 * g.n);
  g.velocity.resize(3 * g.n);
  g.mass.assign(g.n, static_cast<float>(o.total_mass / static_cast<double>(std::max<std::int64_t>(g.n, 1))));
  g.age.resize(g.n);
  g.metallicity.resize(g.n);
  std::mt19937_64 rng(o.seed);
  std::gamma_distribution<double> radius(2.0, o.scale_length);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::exponential_distribution<double> height(1.0 / o.scale_height);
  std::normal_distribution<double> disp(0.0, o.dispersion);
  for (std::int64_t i = 0; i < g.n; ++i) {
    const double r = radius(rng);
    const double phi = 2.0 * M_PI * uni(rng);
    const double z = (uni(rng) < 0.5 ? -1.0 : 1.0) * height(rng);
    const double v = o.v_flat * (1.0 - std::exp(-r / o.r_turn));
    const double pos[3] = {r * std::cos(phi), r * std::sin(phi), z};
    const double vel[3] = {-v * std::sin(phi) + disp(rng), v * std::cos(phi) + disp(rng), disp(rng) * 0.5};
    for (int k = 0; k < 3; ++k) {
      g.coords[3 * i + k] = static_cast<float>(pos[k] + o.center[k]);
      g.velocity[3 * i + k] = static_cast<float>(vel[k] + o.bulk_velocity[k]);
    }
    const double age = o.age_min + (o.age_max - o.age_min) * uni(rng);
    g.age[i] = static_cast<float>(age);
    // Younger stars are more metal rich; log10 Z in [-3.3, -1.4] (inside BC03's 1e-4 .. 0.05).
    const double logz = -1.4 - 1.9 * std::clamp(age / o.age_max * 0.7 + 0.3 * uni(rng), 0.0, 1.0);
    g.metallicity[i] = static_cast<float>(std::pow(10.0, logz));
  }
  return g;
}

GasData generate_gas(const DiskOptions& o, std::int64_t cells, double total_mass, std::uint64_t seed) {
  GasData g;
  g.n = cells;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> radius(2.0, 1.25 * o.scale_length);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::exponential_distribution<double> height(2.0 / o.scale_height);
  std::normal_distribution<double> disp(0.0, 10.0);
  g.metals_per_cell = 10;
  g.mass.assign(static_cast<std::size_t>(cells),
                static_cast<float>(total_mass / static_cast<double>(std::max<std::int64_t>(cells, 1))));
  for (std::int64_t i = 0; i < cells; ++i) {
    const double r = radius(rng), phi = 2.0 * M_PI * uni(rng);
    const double z = (uni(rng) < 0.5 ? -1.0 : 1.0) * height(rng);
    const double v = o.v_flat * (1.0 - std::exp(-r / o.r_turn));
    const double pos[3] = {r * std::cos(phi), r * std::sin(phi), z};
    const double vel[3] = {-v * std::sin(phi) + disp(rng), v * std::cos(phi) + disp(rng), disp(rng)};
    for (int k = 0; k < 3; ++k) {
      g.coords.push_back(static_cast<float>(pos[k] + o.center[k]));
      g.velocity.push_back(static_cast<float>(vel[k] + o.bulk_velocity[k]));
    }
    // 12 + log10(X_O / (16 X_H)) = log_oh: X_O = 16 X_H 10^(log_oh - 12).
    const double log_oh = 8.9 - 0.1 * r + 0.05 * (uni(rng) - 0.5);
    const double h = 0.74, o_frac = 16.0 * h * std::pow(10.0, log_oh - 12.0);
    const double metals[10] = {h, 0.25, 0.1 * o_frac, 0.03 * o_frac, o_frac, 0.2 * o_frac, 0.06 * o_frac,
                               0.06 * o_frac, 0.1 * o_frac, 1.8 * o_frac};
    for (double m : metals) g.metals.push_back(static_cast<float>(m));
    g.metallicity.push_back(static_cast<float>(metals[9]));
    g.density.push_back(static_cast<float>(1e7 * std::exp(-r / o.scale_length)));
    g.internal_energy.push_back(static_cast<float>(1e12 * (1.0 + uni(rng))));
    g.sfr.push_back(static_cast<float>(1e-4 * std::exp(-r / o.scale_length)));
    g.electron_abundance.push_back(static_cast<float>(1.0 + 0.2 * uni(rng)));
  }
  return g;
}

std::int64_t nudge_off_edges(GalaxyData& g, const Config& cfg, double margin) {
  const Geometry geo = geometry(cfg);
  const auto& R = geo.rotation;
  const double e0 = geo.edges.front();
  const double bin = (geo.edges.back() - geo.edges.front()) / static_cast<double>(geo.spaxels);
  std::int64_t moved = 0;
  for (std::int64_t i = 0; i < g.n; ++i) {
    bool changed = false;
    for (int pass = 0; pass < 4; ++pass) {
      double d[3];
      for (int k = 0; k < 3; ++k) d[k] = static_cast<double>(g.coords[3 * i + k]) - g.center[k];
      const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
      double shift[3] = {0, 0, 0};
      bool near = false;
      if (std::abs(r - 10.0) < margin && r > 0) {
        const double f = (r < 10.0 ? 10.0 - 2 * margin : 10.0 + 2 * margin) / r - 1.0;
        for (int k = 0; k < 3; ++k) shift[k] = d[k] * f;
        near = true;
      } else {
        for (int axis = 0; axis < 2; ++axis) {
          // new = old @ R: moving old along column `axis` of R moves only that coordinate.
          const double x = d[0] * R[0 * 3 + axis] + d[1] * R[1 * 3 + axis] + d[2] * R[2 * 3 + axis];
          const double k = std::round((x - e0) / bin);
          if (k < 0 || k > static_cast<double>(geo.spaxels)) continue;
          const double e = e0 + k * bin;
          if (std::abs(x - e) >= margin) continue;
          const double delta = (x < e ? -2.0 : 2.0) * margin - (x - e);
          for (int c = 0; c < 3; ++c) shift[c] += delta * R[c * 3 + axis];
          near = true;
        }
      }
      if (!near) break;
      for (int k = 0; k < 3; ++k) g.coords[3 * i + k] = static_cast<float>(g.coords[3 * i + k] + shift[k]);
      changed = true;
    }
    moved += changed;
  }
  return moved;
}

SspGrid generate_ssp_grid(std::int64_t nz, std::int64_t na, std::int64_t nw) {
  SspGrid s;
  s.source = "generated";
  for (std::int64_t i = 0; i < nz; ++i)
    s.metallicity.push_back(1e-4 * std::pow(500.0, static_cast<double>(i) / static_cast<double>(nz - 1)));
  for (std::int64_t j = 0; j < na; ++j) s.age.push_back(6.0 + 4.3 * static_cast<double>(j) / static_cast<double>(na - 1));
  for (std::int64_t k = 0; k < nw; ++k)
    s.wavelength.push_back(std::round(3000.0 * std::pow(11000.0 / 3000.0, static_cast<double>(k) / static_cast<double>(nw - 1))));
  s.flux.resize(static_cast<std::size_t>(nz * na * nw));
  for (std::int64_t i = 0; i < nz; ++i)
    for (std::int64_t j = 0; j < na; ++j) {
      const double t = 3500.0 + 25000.0 * std::exp(-(s.age[j] - 6.0) / 0.9);  // colour temperature, K
      const double amp = std::pow(10.0, -0.8 * (s.age[j] - 6.0));             // fading
      for (std::int64_t k = 0; k < nw; ++k) {
        const double lam = s.wavelength[k] * 1e-8;  // cm
        const double planck = 1.0 / (std::pow(lam / 5e-5, 5.0) * (std::exp(1.4388 / (lam * t)) - 1.0));
        const double line = 1.0 - 0.3 * std::log10(s.metallicity[i] / 1e-5) / 3.0 *
                                      std::exp(-0.5 * std::pow((s.wavelength[k] - 5175.0) / 60.0, 2.0));
        s.flux[(i * na + j) * nw + k] = amp * planck * line;
      }
    }
  return s;
}

GalaxyData with_rubix_ages(const GalaxyData& g) {
  GalaxyData r = g;
  for (float& a : r.age) a = static_cast<float>(std::log10(static_cast<double>(a) * 1e9));
  return r;
}

}  // namespace tessera::ifu
