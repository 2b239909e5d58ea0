// The quick-look pictures' choices that need no PLplot: the white-light
// image and the spaxels whose spectra are shown. Built with or without
// PLplot (TESSERA_IFU_PLOTS), so the same choices can be tested everywhere.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "ifu/plots.hpp"

namespace tessera::ifu {
namespace {

std::string format_number(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

std::vector<double> white_light(const QuicklookInput& in) {
  const std::int64_t n = in.nx * in.ny;
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const float* s = in.cube + i * in.nwave;
    double sum = 0;
    for (std::int64_t k = 0; k < in.nwave; ++k)
      if (std::isfinite(s[k])) sum += s[k];
    out[static_cast<std::size_t>(i)] = sum * in.dwave;
  }
  return out;
}

// The spaxels worth a look: the brightest one and the centre tell about the
// nucleus, the rings at one and two half-light radii about the disk. The
// half-light radius is measured around the cube centre (not the brightest
// spaxel) by adding spaxels in order of radius until half the positive light
// is reached. On each ring (|r - target| <= 0.75 spaxel, wide enough that
// every ring inside the cube holds spaxels) the brightest lit spaxel not yet
// chosen is taken; a ring with none is skipped.
std::vector<SpectrumPick> pick_spectrum_spaxels(const std::vector<double>& white, std::int64_t ny, std::int64_t nx,
                                                double spaxel_arcsec) {
  std::vector<SpectrumPick> picks;
  if (nx <= 0 || ny <= 0 || white.size() != static_cast<std::size_t>(nx * ny)) return picks;
  auto at = [&](std::int64_t ix, std::int64_t iy) { return white[static_cast<std::size_t>(iy * nx + ix)]; };
  auto taken = [&](std::int64_t ix, std::int64_t iy) {
    return std::any_of(picks.begin(), picks.end(), [&](const SpectrumPick& p) { return p.ix == ix && p.iy == iy; });
  };
  const double cx = 0.5 * static_cast<double>(nx - 1), cy = 0.5 * static_cast<double>(ny - 1);
  auto radius = [&](std::int64_t ix, std::int64_t iy) {
    return std::hypot(static_cast<double>(ix) - cx, static_cast<double>(iy) - cy);
  };

  std::size_t best = 0;
  for (std::size_t i = 1; i < white.size(); ++i)
    if (white[i] > white[best]) best = i;
  const std::int64_t bx = static_cast<std::int64_t>(best) % nx, by = static_cast<std::int64_t>(best) / nx;
  const std::int64_t mx = nx / 2, my = ny / 2;
  if (bx == mx && by == my) {
    picks.push_back({bx, by, "brightest, centre"});
  } else {
    picks.push_back({bx, by, "brightest"});
    picks.push_back({mx, my, "centre"});
  }

  std::vector<std::size_t> order(white.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<double> r(white.size());
  double total = 0;
  for (std::size_t i = 0; i < white.size(); ++i) {
    r[i] = radius(static_cast<std::int64_t>(i) % nx, static_cast<std::int64_t>(i) / nx);
    if (white[i] > 0) total += white[i];
  }
  if (!(total > 0)) return picks;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return r[a] < r[b]; });
  double acc = 0, r_half = 0;
  for (std::size_t i : order) {
    if (white[i] > 0) acc += white[i];
    if (acc >= 0.5 * total) {
      r_half = r[i];
      break;
    }
  }

  for (double target : {std::max(r_half, 1.0), std::max(2.0 * r_half, 2.0)}) {
    std::int64_t px = -1, py = -1;
    double pv = 0;
    for (std::int64_t iy = 0; iy < ny; ++iy)
      for (std::int64_t ix = 0; ix < nx; ++ix) {
        if (std::fabs(radius(ix, iy) - target) > 0.75 || taken(ix, iy)) continue;
        if (at(ix, iy) > pv) {
          pv = at(ix, iy);
          px = ix;
          py = iy;
        }
      }
    if (px < 0) continue;
    std::string role = "r = ";
    role += format_number("%.1f", radius(px, py) * spaxel_arcsec);
    role += "\"";
    picks.push_back({px, py, std::move(role)});
  }
  return picks;
}

}  // namespace tessera::ifu
