// Quick-look pictures (PLplot PNGs) and the progress bar of the IFU app.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "ifu/plots.hpp"
#include "ifu/progress.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using tessera::ifu::format_bar;
using tessera::ifu::format_duration;
using tessera::ifu::Progress;
using tessera::ifu::QuicklookInput;
using tessera::testing::expect_error;

namespace {

// A fresh folder under the system temp folder, removed again at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    std::string name = "tessera_ifu_plots_";
    name += std::to_string(::getpid());
    name += "_";
    name += std::to_string(counter++);
    path = fs::temp_directory_path() / name;
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// An inclined exponential disk rotating with a tanh rotation curve. Each
// spaxel's spectrum is a power-law continuum with one emission line shifted by
// its velocity; spaxels beyond 1.6 disk scale lengths x 5 are dark and have
// no velocity.
struct SyntheticCube {
  std::int64_t ny, nx, nwave;
  std::vector<float> cube, velocity;
  SyntheticCube(std::int64_t ny_, std::int64_t nx_, std::int64_t nwave_) : ny(ny_), nx(nx_), nwave(nwave_) {
    cube.resize(static_cast<std::size_t>(ny * nx * nwave));
    velocity.resize(static_cast<std::size_t>(ny * nx));
    const double cx = 0.5 * static_cast<double>(nx - 1), cy = 0.5 * static_cast<double>(ny - 1);
    for (std::int64_t iy = 0; iy < ny; ++iy)
      for (std::int64_t ix = 0; ix < nx; ++ix) {
        const double dx = static_cast<double>(ix) - cx, dy = (static_cast<double>(iy) - cy) / 0.6;
        const double r = std::hypot(dx, dy);
        const bool lit = r < 8.0;
        const double v = 200.0 * std::tanh(r / 2.0) * (r > 0 ? dx / r : 0.0);
        velocity[static_cast<std::size_t>(iy * nx + ix)] = lit ? static_cast<float>(v) : NAN;
        for (std::int64_t k = 0; k < nwave; ++k) {
          const double w = wave0 + dwave * static_cast<double>(k);
          const double line = 6563.0 * (1.0 + v / 299792.458);
          const double f =
              std::exp(-r / 1.6) * std::pow(w / 5500.0, -1.0) * (1.0 + std::exp(-0.5 * std::pow((w - line) / 20.0, 2)));
          cube[static_cast<std::size_t>((iy * nx + ix) * nwave + k)] = lit ? static_cast<float>(1e5 * f) : 0.0f;
        }
      }
  }
  static constexpr double wave0 = 4700.0, dwave = 25.0;
  QuicklookInput input(bool with_velocity = true) const {
    QuicklookInput in;
    in.cube = cube.data();
    in.ny = ny;
    in.nx = nx;
    in.nwave = nwave;
    in.wave0 = wave0;
    in.dwave = dwave;
    in.spaxel_arcsec = 0.2;
    in.velocity = with_velocity ? velocity.data() : nullptr;
    in.title = "test cube, z = 0.1";
    in.bunit = "L_sun/Å";
    return in;
  }
};

struct PngInfo {
  bool is_png = false;
  std::uint32_t width = 0, height = 0;
  int bit_depth = 0;
  std::uintmax_t bytes = 0;
};

// Reads the signature and the IHDR chunk, which a PNG must start with.
PngInfo read_png_header(const std::string& path) {
  PngInfo info;
  std::ifstream f(path, std::ios::binary);
  unsigned char h[26] = {};
  f.read(reinterpret_cast<char*>(h), sizeof h);
  if (!f) return info;
  static const unsigned char magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  info.is_png = std::equal(magic, magic + 8, h) && std::equal(h + 12, h + 16, "IHDR");
  auto be32 = [&](int o) {
    return (std::uint32_t{h[o]} << 24) | (std::uint32_t{h[o + 1]} << 16) | (std::uint32_t{h[o + 2]} << 8) | h[o + 3];
  };
  info.width = be32(16);
  info.height = be32(20);
  info.bit_depth = h[24];
  info.bytes = fs::file_size(path);
  return info;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Points file descriptor `fd` at `target` until destroyed.
class Redirect {
 public:
  Redirect(int fd, int target) : fd_(fd), saved_(::dup(fd)) { ::dup2(target, fd); }
  ~Redirect() { restore(); }
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }

 private:
  int fd_, saved_;
};

// Everything written to stdout and stderr (at the descriptor level, so C
// libraries' output counts too) while `f` runs.
template <class F>
std::string capture_output(F&& f) {
  TempDir tmp;
  const std::string file = (tmp.path / "out.txt").string();
  const int fd = ::open(file.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  std::fflush(stdout);
  std::fflush(stderr);
  {
    Redirect out(1, fd), err(2, fd);
    f();
    std::fflush(stdout);
    std::fflush(stderr);
  }
  ::close(fd);
  return slurp(file);
}

// A pseudo-terminal: the slave side stands in for stderr, a thread drains the
// master side (a full terminal buffer would block the writer).
class PseudoTerminal {
 public:
  PseudoTerminal() {
    master_ = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || ::grantpt(master_) != 0 || ::unlockpt(master_) != 0) return;
    slave_ = ::open(::ptsname(master_), O_RDWR | O_NOCTTY);
    reader_ = std::thread([this] {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(master_, buf, sizeof buf);
        if (n <= 0) break;  // EIO once the slave side is closed
        text_.append(buf, static_cast<std::size_t>(n));
      }
    });
  }
  bool ok() const { return slave_ >= 0; }
  int slave() const { return slave_; }
  // Closes the slave side and returns everything the master side received.
  std::string close_and_read() {
    if (slave_ >= 0) ::close(slave_);
    slave_ = -1;
    if (reader_.joinable()) reader_.join();
    return text_;
  }
  ~PseudoTerminal() {
    close_and_read();
    if (master_ >= 0) ::close(master_);
  }

 private:
  int master_ = -1, slave_ = -1;
  std::thread reader_;
  std::string text_;
};

}  // namespace

// ---------------------------------------------------------------- pictures

TEST(IfuPlots, WritesThreePngsOfTheExpectedSize) {
  TempDir tmp;
  const SyntheticCube c(24, 30, 80);
  const auto paths = tessera::ifu::write_quicklooks(tmp.path.string(), "gal", c.input());
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0], (tmp.path / "gal_white.png").string());
  EXPECT_EQ(paths[1], (tmp.path / "gal_spectra.png").string());
  EXPECT_EQ(paths[2], (tmp.path / "gal_velocity.png").string());
  const int widths[] = {tessera::ifu::quicklook_map_width, tessera::ifu::quicklook_spectra_width,
                        tessera::ifu::quicklook_map_width};
  const int heights[] = {tessera::ifu::quicklook_map_height, tessera::ifu::quicklook_spectra_height,
                         tessera::ifu::quicklook_map_height};
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(paths[i]);
    ASSERT_TRUE(fs::is_regular_file(paths[i]));
    const PngInfo info = read_png_header(paths[i]);
    EXPECT_TRUE(info.is_png);
    EXPECT_EQ(info.width, static_cast<std::uint32_t>(widths[i]));
    EXPECT_EQ(info.height, static_cast<std::uint32_t>(heights[i]));
    EXPECT_EQ(info.bit_depth, 8);
    // Axes, text and a filled map compress to some ten kB; a blank page to ~2 kB.
    EXPECT_GT(info.bytes, 8000u);
    EXPECT_LT(info.bytes, 2000000u);
  }
  EXPECT_NE(slurp(paths[0]), slurp(paths[2]));
}

TEST(IfuPlots, WithoutVelocityWritesTwoFiles) {
  TempDir tmp;
  const SyntheticCube c(10, 12, 30);
  const auto paths = tessera::ifu::write_quicklooks(tmp.path.string(), "novel", c.input(false));
  ASSERT_EQ(paths.size(), 2u);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"novel_white.png", "novel_spectra.png"}));
  for (const auto& p : paths) EXPECT_TRUE(read_png_header(p).is_png);
}

TEST(IfuPlots, PicturesFollowTheData) {
  // The same call twice gives the same bytes; a different cube, different bytes.
  TempDir tmp;
  const SyntheticCube a(16, 16, 40);
  SyntheticCube b(16, 16, 40);
  for (auto& v : b.velocity) v = -v;
  for (std::size_t i = 0; i < b.cube.size(); i += 7) b.cube[i] *= 3.0f;
  const auto pa = tessera::ifu::write_quicklooks((tmp.path / "a").string(), "x", a.input());
  const auto pa2 = tessera::ifu::write_quicklooks((tmp.path / "a2").string(), "x", a.input());
  const auto pb = tessera::ifu::write_quicklooks((tmp.path / "b").string(), "x", b.input());
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(slurp(pa[i]), slurp(pa2[i])) << pa[i];
    EXPECT_NE(slurp(pa[i]), slurp(pb[i])) << pa[i];
  }
}

TEST(IfuPlots, CreatesNestedFolderAndPrintsNothing) {
  TempDir tmp;
  const SyntheticCube c(8, 9, 20);
  const fs::path dir = tmp.path / "deeper" / "still";
  std::vector<std::string> paths;
  const std::string printed =
      capture_output([&] { paths = tessera::ifu::write_quicklooks(dir.string(), "q", c.input()); });
  EXPECT_EQ(printed, "");
  ASSERT_EQ(paths.size(), 3u);
  for (const auto& p : paths) EXPECT_TRUE(read_png_header(p).is_png) << p;
}

TEST(IfuPlots, TinyCubesWork) {
  // One spaxel and one wavelength, and a 1 x n strip: degenerate grids for PLplot.
  TempDir tmp;
  for (auto [ny, nx, nw] : {std::array<std::int64_t, 3>{1, 1, 1}, {1, 7, 5}, {3, 1, 2}}) {
    const SyntheticCube c(ny, nx, nw);
    const auto paths = tessera::ifu::write_quicklooks(tmp.path.string(), "tiny", c.input());
    ASSERT_EQ(paths.size(), 3u);
    for (const auto& p : paths) EXPECT_TRUE(read_png_header(p).is_png) << p;
  }
}

TEST(IfuPlots, EmptyAndNanCubesWork) {
  TempDir tmp;
  SyntheticCube c(6, 6, 10);
  std::fill(c.cube.begin(), c.cube.end(), 0.0f);
  std::fill(c.velocity.begin(), c.velocity.end(), NAN);
  EXPECT_EQ(tessera::ifu::write_quicklooks(tmp.path.string(), "dark", c.input()).size(), 3u);
  std::fill(c.cube.begin(), c.cube.end(), NAN);
  EXPECT_EQ(tessera::ifu::write_quicklooks(tmp.path.string(), "nan", c.input()).size(), 3u);
}

TEST(IfuPlots, ConcurrentCallsAllSucceed) {
  TempDir tmp;
  const SyntheticCube c(12, 12, 30);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      const auto paths = tessera::ifu::write_quicklooks((tmp.path / std::to_string(t)).string(), "c", c.input());
      bool all = paths.size() == 3;
      for (const auto& p : paths) all = all && read_png_header(p).is_png;
      if (all) ++ok;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 3);
}

TEST(IfuPlots, UnwritableFolderIsAnError) {
  TempDir tmp;
  const SyntheticCube c(6, 6, 10);
  // A folder below a regular file cannot be created (even as root).
  const fs::path file = tmp.path / "plain_file";
  std::ofstream(file) << "x";
  expect_error<tessera::ifu::InputError>(
      [&] { tessera::ifu::write_quicklooks((file / "sub").string(), "s", c.input()); }, "[ifu plots]",
      {"cannot create folder", "plain_file"});
  // An output name taken by a folder cannot be opened for writing.
  fs::create_directories(tmp.path / "s_white.png");
  expect_error<tessera::ifu::InputError>([&] { tessera::ifu::write_quicklooks(tmp.path.string(), "s", c.input()); },
                                         "[ifu plots]", {"cannot write", "s_white.png"});
  // The library still works afterwards.
  EXPECT_EQ(tessera::ifu::write_quicklooks(tmp.path.string(), "t", c.input()).size(), 3u);
}

TEST(IfuPlots, BadInputIsAnError) {
  TempDir tmp;
  const SyntheticCube c(6, 6, 10);
  QuicklookInput in = c.input();
  in.cube = nullptr;
  expect_error<tessera::ifu::InputError>([&] { tessera::ifu::write_quicklooks(tmp.path.string(), "b", in); },
                                         "[ifu plots]", {"cube is null"});
  in = c.input();
  in.nx = 0;
  expect_error<tessera::ifu::InputError>([&] { tessera::ifu::write_quicklooks(tmp.path.string(), "b", in); },
                                         "[ifu plots]", {"shape", "(6, 0, 10)"});
  in = c.input();
  in.spaxel_arcsec = 0;
  expect_error<tessera::ifu::InputError>([&] { tessera::ifu::write_quicklooks(tmp.path.string(), "b", in); },
                                         "[ifu plots]", {"spaxel_arcsec", "positive"});
  in = c.input();
  in.dwave = -1;
  expect_error<tessera::ifu::InputError>([&] { tessera::ifu::write_quicklooks(tmp.path.string(), "b", in); },
                                         "[ifu plots]", {"wavelength", "increasing"});
  expect_error<tessera::ifu::InputError>([&] { tessera::ifu::write_quicklooks(tmp.path.string(), "", c.input()); },
                                         "[ifu plots]", {"stem"});
  EXPECT_TRUE(fs::is_empty(tmp.path));
}

TEST(IfuPlots, WhiteLightSumsTimesDwave) {
  const float cube[] = {1, 2, 3, /**/ 0, NAN, 4, /**/ -1, 1, 0, /**/ 0.5f, 0.5f, 0.5f};
  QuicklookInput in;
  in.cube = cube;
  in.ny = 2;
  in.nx = 2;
  in.nwave = 3;
  in.dwave = 2.5;
  const auto w = tessera::ifu::white_light(in);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_DOUBLE_EQ(w[0], 15.0);
  EXPECT_DOUBLE_EQ(w[1], 10.0);  // NaN counts as 0
  EXPECT_DOUBLE_EQ(w[2], 0.0);
  EXPECT_DOUBLE_EQ(w[3], 3.75);
}

TEST(IfuPlots, PicksBrightestCentreAndRings) {
  // A disk centred on the cube centre plus a bright knot off-centre.
  const std::int64_t ny = 21, nx = 25;
  std::vector<double> w(static_cast<std::size_t>(ny * nx));
  for (std::int64_t iy = 0; iy < ny; ++iy)
    for (std::int64_t ix = 0; ix < nx; ++ix)
      w[static_cast<std::size_t>(iy * nx + ix)] = std::exp(-std::hypot(ix - 12.0, iy - 10.0) / 2.5);
  w[static_cast<std::size_t>(4 * nx + 18)] = 5.0;
  const auto picks = tessera::ifu::pick_spectrum_spaxels(w, ny, nx, 0.2);
  ASSERT_EQ(picks.size(), 4u);
  EXPECT_EQ(picks[0].ix, 18);
  EXPECT_EQ(picks[0].iy, 4);
  EXPECT_EQ(picks[0].role, "brightest");
  EXPECT_EQ(picks[1].ix, 12);
  EXPECT_EQ(picks[1].iy, 10);
  EXPECT_EQ(picks[1].role, "centre");
  // The half-light radius around the centre, by brute force: the smallest
  // radius whose disk holds half the light.
  double total = 0;
  for (double v : w) total += v;
  double r_half = 1e9;
  for (std::int64_t iy = 0; iy < ny; ++iy)
    for (std::int64_t ix = 0; ix < nx; ++ix) {
      const double r = std::hypot(ix - 12.0, iy - 10.0);
      double inside = 0;
      for (std::int64_t jy = 0; jy < ny; ++jy)
        for (std::int64_t jx = 0; jx < nx; ++jx)
          if (std::hypot(jx - 12.0, jy - 10.0) <= r) inside += w[static_cast<std::size_t>(jy * nx + jx)];
      if (inside >= 0.5 * total) r_half = std::min(r_half, r);
    }
  ASSERT_GT(r_half, 2.0);
  ASSERT_LT(r_half, 8.0);
  // The ring picks lie at one and two half-light radii, labelled in arcsec.
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  double last_r = 0;
  for (std::size_t i = 0; i < picks.size(); ++i) {
    EXPECT_TRUE(seen.insert({picks[i].ix, picks[i].iy}).second) << "duplicate pick " << i;
    if (i < 2) continue;
    const double r = std::hypot(picks[i].ix - 12.0, picks[i].iy - 10.0);
    EXPECT_NEAR(r, r_half * static_cast<double>(i - 1), 0.75) << i;
    EXPECT_GT(r, last_r);
    last_r = r;
    char arcsec[32];
    std::snprintf(arcsec, sizeof arcsec, "r = %.1f\"", r * 0.2);
    EXPECT_EQ(picks[i].role, arcsec);
  }
}

TEST(IfuPlots, PicksWithoutLight) {
  const std::vector<double> dark(12, 0.0);
  const auto picks = tessera::ifu::pick_spectrum_spaxels(dark, 3, 4, 0.5);
  ASSERT_EQ(picks.size(), 2u);  // brightest (the first spaxel) and the centre; no rings
  EXPECT_EQ(picks[0].ix, 0);
  EXPECT_EQ(picks[0].iy, 0);
  EXPECT_EQ(picks[1].ix, 2);
  EXPECT_EQ(picks[1].iy, 1);
  const std::vector<double> one = {7.0};
  const auto p1 = tessera::ifu::pick_spectrum_spaxels(one, 1, 1, 0.5);
  ASSERT_EQ(p1.size(), 1u);
  EXPECT_EQ(p1[0].role, "brightest, centre");
}

// ---------------------------------------------------------------- progress

TEST(IfuProgress, FormatsDurations) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(3.9), "0:03");
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3599), "59:59");
  EXPECT_EQ(format_duration(3661), "1:01:01");
  EXPECT_EQ(format_duration(-1), "-:--");
  EXPECT_EQ(format_duration(NAN), "-:--");
  EXPECT_EQ(format_duration(INFINITY), "-:--");
}

TEST(IfuProgress, FormatsBars) {
  // 45% done after 3.2 s: 3.2 * 0.55 / 0.45 = 3.91 s to go, shown rounded up.
  EXPECT_EQ(format_bar("stage", 4500, 10000, 3.2, 10), "stage [####......]  45% 4500/10000 0:03 eta 0:04");
  EXPECT_EQ(format_bar("stage", 9999, 10000, 100, 10), "stage [#########.]  99% 9999/10000 1:40 eta 0:01");
  EXPECT_EQ(format_bar("stage", 0, 10000, 0.5, 4), "stage [....]   0% 0/10000 0:00 eta -:--");
  EXPECT_EQ(format_bar("s", 10, 10, 75, 5), "s [#####] 100% 10/10 1:15 eta 0:00");
  EXPECT_EQ(format_bar("s", 1, 3, 2, 3), "s [#..]  33% 1/3 0:02 eta 0:04");
  EXPECT_EQ(format_bar("", 5, 0, 1, 2), "[##] 100% 5/0 0:01 eta 0:00");  // no total: finished
  EXPECT_EQ(format_bar("s", 12, 10, 1, 2), "s [##] 100% 12/10 0:01 eta 0:00");
  EXPECT_EQ(format_bar("s", 1, 2, 1, 0), "s [.]  50% 1/2 0:01 eta 0:01");  // width at least 1
}

TEST(IfuProgress, WritesNothingToAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    Redirect err(2, fds[1]);
    Progress p("pipe", 100);
    EXPECT_FALSE(p.drawing());
    for (int i = 0; i < 100; ++i) p.advance(1);
    p.finish();
    EXPECT_EQ(p.done(), 100);
  }
  ::close(fds[1]);
  char buf[64];
  EXPECT_EQ(::read(fds[0], buf, sizeof buf), 0);  // end of file: nothing was written
  ::close(fds[0]);
}

TEST(IfuProgress, DrawsOnATerminal) {
  PseudoTerminal pty;
  ASSERT_TRUE(pty.ok());
  {
    Redirect err(2, pty.slave());
    Progress p("load", 10);
    EXPECT_TRUE(p.drawing());
    p.advance(4);
    p.advance(6);
    p.finish();
    p.finish();  // a second finish draws nothing more
  }
  const std::string out = pty.close_and_read();
  EXPECT_NE(out.find("\rload ["), std::string::npos) << out;
  EXPECT_NE(out.find("]  40% 4/10"), std::string::npos) << out;  // the first advance draws at once
  const std::size_t last = out.rfind("\rload [");
  ASSERT_NE(last, std::string::npos);
  const std::string final_line = out.substr(last);
  EXPECT_NE(final_line.find("] 100% 10/10 "), std::string::npos) << final_line;
  EXPECT_NE(final_line.find("eta 0:00"), std::string::npos) << final_line;
  EXPECT_EQ(final_line.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
}

TEST(IfuProgress, DisabledOrIdleDrawsNothingOnATerminal) {
  PseudoTerminal pty;
  ASSERT_TRUE(pty.ok());
  {
    Redirect err(2, pty.slave());
    Progress off("off", 10, false);
    EXPECT_FALSE(off.drawing());
    off.advance(10);
    Progress idle("idle", 10);  // never advanced: finish has nothing to complete
    EXPECT_TRUE(idle.drawing());
  }
  EXPECT_EQ(pty.close_and_read(), "");
}

TEST(IfuProgress, CountsFromManyThreads) {
  PseudoTerminal pty;  // drawing on, so the draw path runs concurrently too
  ASSERT_TRUE(pty.ok());
  constexpr int kThreads = 8, kSteps = 20000;
  std::int64_t final_done = 0;
  {
    Redirect err(2, pty.slave());
    Progress p("threads", std::int64_t{kThreads} * kSteps * 2);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < kSteps; ++i) p.advance(i % 2 == 0 ? 1 : 3);
      });
    for (auto& th : threads) th.join();
    final_done = p.done();
  }
  EXPECT_EQ(final_done, std::int64_t{kThreads} * kSteps * 2);
  const std::string out = pty.close_and_read();
  EXPECT_NE(out.find("100% 320000/320000"), std::string::npos);
  EXPECT_EQ(out.back(), '\n');
}
