// Quick-look pictures with PLplot's pngcairo device.
//
// PLplot keeps its streams, colour maps and driver table in process-wide
// state, so every call holds one mutex from the first PLplot call to the last.
// Each picture gets a fresh stream (plmkstrm) that plend1 frees again, so
// pictures never share settings and several calls in one process work.
//
// PLplot reports some failures by printing and calling exit() (plexit); a
// library must not do that, so everything that could lead there is checked
// first: the device must be in PLplot's driver list, the output file must be
// openable, and the data ranges handed to PLplot are finite and non-empty.
// Recoverable PLplot errors (plabort) are captured per stream with plsError
// instead of being printed, and turned into an InputError.
#include "ifu/plots.hpp"

#include <plplot/plplot.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <numeric>

namespace tessera::ifu {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDevice = "pngcairo";

// Colour map 0 (lines and text): the indices the drawing code uses.
enum Col0 : PLINT {
  kBackground = 0,
  kForeground = 1,
  kLine0 = 2,  // kLine0 .. kLine0 + 3: spectrum lines
  kBlank = 6,  // spaxels without data
};

[[noreturn]] void fail(const std::string& what) {
  std::string msg = "[ifu plots] ";
  msg += what;
  throw InputError(msg);
}

// PLplot treats '#' as the start of an escape sequence; a literal one is "##".
std::string escape_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '#') out += '#';
  }
  return out;
}

std::string format_number(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// The unit of the white-light image: the spectral density unit times
// Angstrom, i.e. the density's "per Angstrom" dropped when it has one.
std::string integrated_unit(const std::string& bunit) {
  for (const char* per : {"/Å", "/AA", "/A", "/Angstrom", " Å^-1", " A^-1"}) {
    const std::size_t n = std::strlen(per);
    if (bunit.size() > n && bunit.compare(bunit.size() - n, n, per) == 0) return bunit.substr(0, bunit.size() - n);
  }
  if (bunit.empty()) return "";
  std::string out = bunit;
  out += " Å";
  return out;
}

std::string with_unit(const std::string& quantity, const std::string& unit) {
  std::string out = quantity;
  if (!unit.empty()) {
    out += " [";
    out += unit;
    out += "]";
  }
  return out;
}

// Every PLplot-visible check that could otherwise end in plexit.
bool device_available() {
  int ndev = 256;
  std::vector<const char*> menu(static_cast<std::size_t>(ndev)), names(static_cast<std::size_t>(ndev));
  const char** pm = menu.data();
  const char** pn = names.data();
  plgDevs(&pm, &pn, &ndev);
  for (int i = 0; i < ndev; ++i)
    if (names[static_cast<std::size_t>(i)] && std::strcmp(names[static_cast<std::size_t>(i)], kDevice) == 0)
      return true;
  return false;
}

void check_writable(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::string what = "cannot write ";
    what += path;
    what += ": ";
    what += std::strerror(errno);
    fail(what);
  }
  std::fclose(f);
}

// One PLplot stream writing one PNG. The constructor makes the stream current
// and initialises it; the destructor ends it (plend1 writes the file) and makes
// the previous stream current again.
class Picture {
 public:
  Picture(const std::string& path, int width, int height) : path_(path) {
    check_writable(path);
    plgstrm(&previous_);
    PLINT s = -1;
    plmkstrm(&s);
    if (s < 0) fail("PLplot has no free stream left");
    errmsg_[0] = '\0';
    plsError(&errcode_, errmsg_);
    plsdev(kDevice);
    plsfnam(path.c_str());
    plspage(0.0, 0.0, width, height, 0, 0);
    set_palette();
    plinit();
    check("plinit");
    pladv(0);
    plschr(0.0, 1.15);
    plwidth(1.0);
  }
  Picture(const Picture&) = delete;
  Picture& operator=(const Picture&) = delete;
  ~Picture() { close(); }

  // Ends the stream; throws when PLplot reported an error or the file is not a
  // PNG afterwards.
  void finish() {
    check("drawing");
    close();
    std::error_code ec;
    const auto size = fs::file_size(path_, ec);
    char magic[8] = {};
    std::ifstream f(path_, std::ios::binary);
    f.read(magic, 8);
    if (ec || size < 8 || !f || std::memcmp(magic, "\x89PNG\r\n\x1a\n", 8) != 0) {
      std::string what = "PLplot did not write a PNG to ";
      what += path_;
      fail(what);
    }
  }

  // Throws if PLplot aborted an operation since the last check.
  void check(const char* where) {
    if (errcode_ == 0) return;
    std::string what = "PLplot failed during ";
    what += where;
    what += ": ";
    std::string m = errmsg_;
    while (!m.empty() && (m.back() == '\n' || m.front() == '\n'))
      m = m.back() == '\n' ? m.substr(0, m.size() - 1) : m.substr(1);
    what += m;
    close();
    fail(what);
  }

 private:
  static void set_palette() {
    // White background, black text, four distinguishable line colours, grey.
    const PLINT r[] = {255, 0, 31, 230, 44, 150, 190};
    const PLINT g[] = {255, 0, 119, 120, 160, 40, 190};
    const PLINT b[] = {255, 0, 180, 10, 44, 170, 190};
    plscmap0(r, g, b, 7);
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    plend1();  // also frees a stream that never got to plinit
    plsstrm(previous_);
  }

  std::string path_;
  PLINT previous_ = 0;
  PLINT errcode_ = 0;
  char errmsg_[1024];
  bool closed_ = false;
};

// Colour map 1 from control points in RGB (0..1).
void set_cmap1(const std::vector<std::array<double, 4>>& points) {
  std::vector<PLFLT> pos, r, g, b;
  for (const auto& p : points) {
    pos.push_back(p[0]);
    r.push_back(p[1]);
    g.push_back(p[2]);
    b.push_back(p[3]);
  }
  plscmap1n(256);
  plscmap1l(1, static_cast<PLINT>(points.size()), pos.data(), r.data(), g.data(), b.data(), nullptr);
}

// Dark to bright through purple, red and yellow: faint outskirts stay visible
// against a bright centre.
void cmap_sequential() {
  set_cmap1({{0.00, 0.00, 0.00, 0.02},
             {0.20, 0.21, 0.04, 0.40},
             {0.45, 0.62, 0.15, 0.40},
             {0.70, 0.93, 0.39, 0.13},
             {0.87, 0.98, 0.70, 0.10},
             {1.00, 0.99, 1.00, 0.66}});
}

// Blue (approaching) - white (0) - red (receding); used symmetric around 0.
void cmap_diverging() {
  set_cmap1({{0.00, 0.02, 0.19, 0.38},
             {0.25, 0.26, 0.58, 0.77},
             {0.50, 0.97, 0.97, 0.97},
             {0.75, 0.84, 0.38, 0.30},
             {1.00, 0.40, 0.00, 0.12}});
}

// A tick step of 1, 2 or 5 times a power of ten giving at most about
// `length_mm / 22` labelled ticks over `range`: PLplot's own choice ignores
// how narrow the axis is drawn, and labels then overlap on thin strips.
double tick_step(double range, double length_mm) {
  const double max_ticks = std::max(1.0, std::floor(length_mm / 22.0));
  const double raw = range / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) return m * mag;
  return 10.0 * mag;
}

// Maps image cell corners (ix, iy) to arcsec on the sky, cube centre at 0.
struct SkyGrid {
  double x0, y0, step;
};

void sky_transform(PLFLT x, PLFLT y, PLFLT* tx, PLFLT* ty, PLPointer data) {
  const auto* g = static_cast<const SkyGrid*>(data);
  *tx = g->x0 + x * g->step;
  *ty = g->y0 + y * g->step;
}

// A map of the cube's spaxels with a colour bar. `values` is [iy][ix]; NaN
// cells are left blank (grey). Colours run from vmin to vmax; values outside
// get the end colours. `what` and `bar_label` are PLplot text (escapes allowed).
void draw_map(const QuicklookInput& in, const std::vector<double>& values, double vmin, double vmax,
              const std::string& what, const std::string& bar_label) {
  const std::int64_t nx = in.nx, ny = in.ny;
  const double s = in.spaxel_arcsec;
  const double hx = 0.5 * static_cast<double>(nx) * s, hy = 0.5 * static_cast<double>(ny) * s;

  // PLplot wants a column-major grid: z[ix][iy]. NaN becomes -inf, which lies
  // below zmin and so is not drawn.
  std::vector<PLFLT> z(static_cast<std::size_t>(nx * ny));
  std::vector<const PLFLT*> cols(static_cast<std::size_t>(nx));
  for (std::int64_t ix = 0; ix < nx; ++ix) {
    cols[static_cast<std::size_t>(ix)] = z.data() + ix * ny;
    for (std::int64_t iy = 0; iy < ny; ++iy) {
      const double v = values[static_cast<std::size_t>(iy * nx + ix)];
      z[static_cast<std::size_t>(ix * ny + iy)] = std::isfinite(v) ? v : -HUGE_VAL;
    }
  }

  // Square spaxels: the viewport keeps the map's aspect ratio, leaving room
  // on the right for the colour bar and on top for two title lines.
  plvpor(0.12, 0.80, 0.12, 0.86);
  plvpas(0.12, 0.80, 0.12, 0.86, static_cast<double>(ny) / static_cast<double>(nx));
  plwind(-hx, hx, -hy, hy);

  plcol0(kBlank);
  const PLFLT bx[] = {-hx, hx, hx, -hx}, by[] = {-hy, -hy, hy, hy};
  plfill(4, bx, by);

  SkyGrid grid{-hx, -hy, s};
  const double lo = -std::numeric_limits<double>::max(), hi = std::numeric_limits<double>::max();
  plimagefr(cols.data(), static_cast<PLINT>(nx), static_cast<PLINT>(ny), -hx, hx, -hy, hy, lo, hi, vmin, vmax,
            sky_transform, &grid);

  PLFLT vx0, vx1, vy0, vy1, px0, px1, py0, py1;
  plgvpd(&vx0, &vx1, &vy0, &vy1);  // viewport in normalised page coordinates
  plgspa(&px0, &px1, &py0, &py1);  // page in mm
  plcol0(kForeground);
  plbox("bcnst", tick_step(2 * hx, (vx1 - vx0) * (px1 - px0)), 0, "bcnstv",
        tick_step(2 * hy, (vy1 - vy0) * (py1 - py0)), 0);
  pllab("x [arcsec]", "y [arcsec]", "");
  plmtex("t", 3.2, 0.5, 0.5, escape_text(in.title).c_str());
  plmtex("t", 1.5, 0.5, 0.5, what.c_str());

  // The colour bar right of the map, as tall as the map.
  PLFLT bar_w = 0, bar_h = 0;
  const char* axis_opts[] = {"bcvmt"};
  const char* labels[] = {bar_label.c_str()};
  const PLINT label_opts[] = {PL_COLORBAR_LABEL_RIGHT};
  const PLFLT ticks[] = {0.0};
  const PLINT sub_ticks[] = {0};
  const PLINT n_values[] = {2};
  const PLFLT range[] = {vmin, vmax};
  const PLFLT* values_arr[] = {range};
  plcolorbar(&bar_w, &bar_h, PL_COLORBAR_IMAGE, PL_POSITION_RIGHT | PL_POSITION_OUTSIDE | PL_POSITION_VIEWPORT, 0.03,
             0.0, 0.04, 1.0, kBackground, kForeground, 1, 0.0, 0.0, 0, 0.0, 1, label_opts, labels, 1, axis_opts, ticks,
             sub_ticks, n_values, values_arr);
}

void draw_white(const std::string& path, const QuicklookInput& in, const std::vector<double>& white) {
  // log10 of the positive cells; the colour range spans at most 4 decades
  // below the brightest spaxel so that one bright nucleus does not push
  // everything else into the darkest colour.
  std::vector<double> logw(white.size(), std::nan(""));
  double vmax = -HUGE_VAL, vmin = HUGE_VAL;
  for (std::size_t i = 0; i < white.size(); ++i) {
    if (white[i] > 0 && std::isfinite(white[i])) {
      logw[i] = std::log10(white[i]);
      vmax = std::max(vmax, logw[i]);
      vmin = std::min(vmin, logw[i]);
    }
  }
  if (!(vmax > -HUGE_VAL)) {  // no light at all: an empty, grey map
    vmin = 0;
    vmax = 1;
  }
  vmin = std::max(vmin, vmax - 4.0);
  if (vmax - vmin < 1e-6) {
    vmin -= 0.5;
    vmax += 0.5;
  }
  Picture pic(path, quicklook_map_width, quicklook_map_height);
  cmap_sequential();
  std::string bar = "log#d10#u ";
  bar += escape_text(with_unit("integrated luminosity", integrated_unit(in.bunit)));
  std::string what = "white light (";
  what += format_number("%.0f", in.wave0);
  what += "-";
  what += format_number("%.0f", in.wave0 + static_cast<double>(in.nwave - 1) * in.dwave);
  what += " Å)";
  draw_map(in, logw, vmin, vmax, what, bar);
  pic.finish();
}

void draw_velocity(const std::string& path, const QuicklookInput& in) {
  const std::size_t n = static_cast<std::size_t>(in.nx * in.ny);
  std::vector<double> v(n);
  std::vector<double> mag;
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = in.velocity[i];
    if (std::isfinite(v[i])) mag.push_back(std::fabs(v[i]));
  }
  // Symmetric range from the 98th percentile of |v|: a few extreme spaxels
  // at the faint edge would otherwise wash out the rotation pattern.
  double vlim = 1.0;
  if (!mag.empty()) {
    const std::size_t k = std::min(mag.size() - 1, static_cast<std::size_t>(0.98 * static_cast<double>(mag.size())));
    std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(k), mag.end());
    if (mag[k] > 0) vlim = mag[k];
  }
  Picture pic(path, quicklook_map_width, quicklook_map_height);
  cmap_diverging();
  draw_map(in, v, -vlim, vlim, "line-of-sight velocity", "velocity [km/s]");
  pic.finish();
}

void draw_spectra(const std::string& path, const QuicklookInput& in, const std::vector<SpectrumPick>& picks) {
  const std::int64_t nw = in.nwave;
  std::vector<PLFLT> wave(static_cast<std::size_t>(nw));
  for (std::int64_t k = 0; k < nw; ++k)
    wave[static_cast<std::size_t>(k)] = in.wave0 + static_cast<double>(k) * in.dwave;

  std::vector<std::vector<PLFLT>> spec;
  double lo = HUGE_VAL, hi = -HUGE_VAL, min_peak = HUGE_VAL;
  for (const auto& p : picks) {
    const float* src = in.cube + (p.iy * in.nx + p.ix) * nw;
    std::vector<PLFLT> y(static_cast<std::size_t>(nw));
    double peak = -HUGE_VAL;
    for (std::int64_t k = 0; k < nw; ++k) {
      const double v = std::isfinite(src[k]) ? src[k] : 0.0;
      y[static_cast<std::size_t>(k)] = v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      peak = std::max(peak, v);
    }
    min_peak = std::min(min_peak, peak);
    spec.push_back(std::move(y));
  }

  // Spectra whose peaks differ by more than a factor 20 would leave the faint
  // ones flat on a linear axis, so then the axis is logarithmic, showing two
  // decades below the faintest peak.
  const bool logy = lo >= 0 && min_peak > 0 && hi / min_peak > 20.0;
  double ymin, ymax;
  if (logy) {
    const double floor = std::max(min_peak / 100.0, hi * 1e-12);
    for (auto& y : spec)
      for (auto& v : y) v = std::log10(std::max(v, floor));
    ymin = std::log10(floor);
    ymax = std::log10(hi) + 0.1;
  } else {
    ymin = lo >= 0 ? 0.0 : lo - 0.05 * (hi - lo);
    ymax = hi + 0.05 * (hi - std::min(lo, 0.0));
    if (!(ymax > ymin)) {
      ymin = std::min(lo, 0.0);
      ymax = ymin + 1.0;
    }
  }
  double wmin = wave.front(), wmax = wave.back();
  if (!(wmax > wmin)) {
    wmin -= 0.5;
    wmax += 0.5;
  }

  Picture pic(path, quicklook_spectra_width, quicklook_spectra_height);
  plvpor(0.12, 0.96, 0.14, 0.86);
  plwind(wmin, wmax, ymin, ymax);
  plcol0(kForeground);
  plbox("bcnst", 0.0, 0, logy ? "bcnstvl" : "bcnstv", 0.0, 0);
  pllab("wavelength [Å]", escape_text(with_unit("luminosity density", in.bunit)).c_str(), "");
  plmtex("t", 3.2, 0.5, 0.5, escape_text(in.title).c_str());
  plmtex("t", 1.5, 0.5, 0.5, logy ? "spaxel spectra (log scale)" : "spaxel spectra");

  std::vector<std::string> texts;
  std::vector<PLINT> opts, colors, styles, text_colors;
  std::vector<PLFLT> widths;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    const PLINT col = static_cast<PLINT>(kLine0 + static_cast<int>(i % 4));
    plcol0(col);
    plwidth(1.6);
    plline(static_cast<PLINT>(nw), wave.data(), spec[i].data());
    if (nw == 1) plpoin(1, wave.data(), spec[i].data(), 17);  // a line needs two points
    std::string t = escape_text(picks[i].role);
    t += "  (";
    t += std::to_string(picks[i].ix);
    t += ", ";
    t += std::to_string(picks[i].iy);
    t += ")";
    texts.push_back(std::move(t));
    opts.push_back(PL_LEGEND_LINE);
    colors.push_back(col);
    styles.push_back(1);
    widths.push_back(2.0);
    text_colors.push_back(kForeground);
  }
  plwidth(1.0);
  std::vector<const char*> text_ptrs;
  for (const auto& t : texts) text_ptrs.push_back(t.c_str());
  PLFLT lw = 0, lh = 0;
  pllegend(&lw, &lh, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
           PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE | PL_POSITION_VIEWPORT, 0.02, 0.03, 0.06,
           kBackground, kForeground, 1, 0, 0, static_cast<PLINT>(texts.size()), opts.data(), 1.0, 0.9, 2.0, 0.0,
           text_colors.data(), text_ptrs.data(), nullptr, nullptr, nullptr, nullptr, colors.data(), styles.data(),
           widths.data(), nullptr, nullptr, nullptr, nullptr);
  pic.finish();
}

// PLplot's global state is shared by every picture: one at a time.
std::mutex& plplot_mutex() {
  static std::mutex mu;
  return mu;
}

void require_device() {
  if (device_available()) return;
  std::string what = "PLplot device '";
  what += kDevice;
  what += "' is not available; install the PLplot cairo driver (Debian: plplot-driver-cairo)";
  fail(what);
}

void validate(const QuicklookInput& in) {
  auto bad = [](const std::string& what) {
    std::string msg = "invalid input: ";
    msg += what;
    fail(msg);
  };
  if (in.cube == nullptr) bad("cube is null");
  if (in.ny <= 0 || in.nx <= 0 || in.nwave <= 0) {
    std::string w = "cube shape must be positive, got (ny, nx, nwave) = (";
    w += std::to_string(in.ny);
    w += ", ";
    w += std::to_string(in.nx);
    w += ", ";
    w += std::to_string(in.nwave);
    w += ")";
    bad(w);
  }
  if (in.nx * in.ny > std::numeric_limits<PLINT>::max() / 2) bad("cube has too many spaxels to draw");
  if (!(in.spaxel_arcsec > 0) || !std::isfinite(in.spaxel_arcsec)) {
    std::string w = "spaxel_arcsec must be positive, got ";
    w += format_number("%g", in.spaxel_arcsec);
    bad(w);
  }
  if (!std::isfinite(in.wave0) || !std::isfinite(in.dwave) || (in.nwave > 1 && !(in.dwave > 0))) {
    std::string w = "wavelength grid must be finite and increasing, got wave0 = ";
    w += format_number("%g", in.wave0);
    w += ", dwave = ";
    w += format_number("%g", in.dwave);
    bad(w);
  }
}

}  // namespace

std::vector<std::string> write_quicklooks(const std::string& dir, const std::string& stem, const QuicklookInput& in) {
  validate(in);
  if (stem.empty()) fail("invalid input: stem is empty");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    std::string what = "cannot create folder ";
    what += dir;
    what += ": ";
    what += ec.message();
    fail(what);
  }

  const std::vector<double> white = white_light(in);
  const std::vector<SpectrumPick> picks = pick_spectrum_spaxels(white, in.ny, in.nx, in.spaxel_arcsec);
  const fs::path base(dir);
  std::vector<std::string> paths = {(base / (stem + "_white.png")).string(), (base / (stem + "_spectra.png")).string()};
  if (in.velocity) paths.push_back((base / (stem + "_velocity.png")).string());

  std::lock_guard<std::mutex> lock(plplot_mutex());
  require_device();
  draw_white(paths[0], in, white);
  draw_spectra(paths[1], in, picks);
  if (in.velocity) draw_velocity(paths[2], in);
  return paths;
}

void write_loss_curve(const std::string& path, const std::vector<double>& losses, const std::string& title) {
  std::vector<PLFLT> x, y;
  bool positive = true;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    if (!std::isfinite(losses[i])) continue;
    x.push_back(static_cast<double>(i));
    y.push_back(losses[i]);
    positive = positive && losses[i] > 0;
  }
  if (y.empty()) fail("invalid input: no finite loss to draw");
  double lo = *std::min_element(y.begin(), y.end()), hi = *std::max_element(y.begin(), y.end());
  // A loss falling by more than a factor 20 is drawn on a log axis.
  const bool logy = positive && hi / lo > 20.0;
  if (logy) {
    for (auto& v : y) v = std::log10(v);
    lo = std::log10(lo), hi = std::log10(hi);
  }
  const double pad = hi > lo ? 0.05 * (hi - lo) : std::max(std::abs(hi) * 0.05, 1e-12);
  std::lock_guard<std::mutex> lock(plplot_mutex());
  require_device();
  Picture pic(path, quicklook_spectra_width, quicklook_spectra_height);
  plvpor(0.12, 0.96, 0.14, 0.86);
  plwind(0, std::max(1.0, x.back()), lo - pad, hi + pad);
  plcol0(kForeground);
  plbox("bcnst", 0.0, 0, logy ? "bcnstvl" : "bcnstv", 0.0, 0);
  pllab("step", "loss", "");
  plmtex("t", 1.5, 0.5, 0.5, escape_text(title).c_str());
  plcol0(kLine0);
  plwidth(1.6);
  plline(static_cast<PLINT>(x.size()), x.data(), y.data());
  if (x.size() == 1) plpoin(1, x.data(), y.data(), 17);
  plwidth(1.0);
  pic.finish();
}

void write_residual_map(const std::string& path, const QuicklookInput& in, const std::vector<float>& observed) {
  validate(in);
  if (observed.size() != static_cast<std::size_t>(in.nx * in.ny * in.nwave))
    fail("invalid input: the observed cube has " + std::to_string(observed.size()) + " values, the model " +
         std::to_string(in.nx * in.ny * in.nwave));
  QuicklookInput obs = in;
  obs.cube = observed.data();
  const std::vector<double> model = white_light(in), data = white_light(obs);
  std::vector<double> resid(model.size());
  double lim = 0;
  for (std::size_t i = 0; i < model.size(); ++i) {
    resid[i] = model[i] - data[i];
    lim = std::max(lim, std::abs(resid[i]));
  }
  if (!(lim > 0)) lim = 1;
  std::lock_guard<std::mutex> lock(plplot_mutex());
  require_device();
  Picture pic(path, quicklook_map_width, quicklook_map_height);
  cmap_diverging();
  draw_map(in, resid, -lim, lim, "white light, model - observed",
           escape_text(with_unit("residual", integrated_unit(in.bunit))));
  pic.finish();
}

}  // namespace tessera::ifu
