// `tessera ifu` and `tessera ifu-generate`: the IFU datacube pipeline
// (apps/ifu) from the command line.
//
// `tessera ifu` also runs as several processes (mpirun -np N): every process
// reads the same galaxy and templates, the particles are sharded over the
// devices of all of them, every process gathers the cube, and process 0
// alone prints, writes the FITS cube, the pictures and the JSON, then tells
// the others whether it could (so that all exit with the same code).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <span>
#include <sstream>

#include <tessera/tessera.hpp>

#include "commands.hpp"
#include "ifu_common.hpp"
#include "ifu/errors.hpp"
#include "ifu/fits.hpp"
#include "ifu/generate.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/plots.hpp"
#include "ifu/progress.hpp"

namespace ts = tessera;
namespace fs = std::filesystem;

namespace tessera::cli {

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

ifu::Config load(const std::string& path) {
  if (path.empty()) return ifu::parse_config(ifu::default_config_yaml(), "built-in default config");
  return ifu::load_config(path);
}

/// The BC03 templates: --ssp, $TESSERA_IFU_DATA, or ifu-data/ beside the
/// build's tools/ folder (where scripts/fetch-bc03.sh puts them).
std::string find_ssp(const std::string& given) {
  if (!given.empty()) return given;
  std::vector<fs::path> tried;
  if (const char* env = std::getenv("TESSERA_IFU_DATA")) tried.push_back(fs::path(env) / "BC03lr.h5");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path().parent_path() / "ifu-data" / "BC03lr.h5");
  for (const auto& p : tried)
    if (fs::exists(p)) return p.string();
  std::string text = "[ifu] the BC03 templates (BC03lr.h5) were not found";
  for (const auto& p : tried) text += (&p == &tried.front() ? " at " : ", ") + p.string();
  text += "; fetch them with `bash scripts/fetch-bc03.sh` (make demo does) or pass --ssp FILE";
  throw ifu::InputError(text);
}

/// Creates the folder a file is to be written in.
void make_parent(const std::string& file) {
  const fs::path dir = fs::path(file).parent_path();
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ifu::InputError("[ifu] cannot create the folder " + dir.string() + ": " + ec.message());
}

int finish_on_root(const std::function<void()>& write) {
  const bool root = ts::process_index() == 0;
  std::exception_ptr failure;
  if (root) {
    try {
      write();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (ts::process_count() > 1) {
    const std::uint8_t ok = failure ? 0 : 1;
    const std::vector<std::uint8_t> all = ts::process_allgather(std::span<const std::uint8_t>(&ok, 1));
    // Process 0 reports its own error; the others only exit with 1.
    if (!root && all[0] == 0) return 1;
  }
  if (failure) std::rethrow_exception(failure);
  return 0;
}

int cmd_ifu(const Context& ctx, const IfuOptions& o) {
  const auto t_start = Clock::now();
  const ifu::Config cfg = load(o.config);
  const auto devs = ts::devices();
  const int procs = ts::process_count();
  const bool root = ts::process_index() == 0;  // prints and writes
  const bool say = !o.quiet && root;
  const ts::Mesh mesh = ts::make_mesh({static_cast<int>(devs.size())}, {"data"});

  // The galaxy: --input, the config's output_path/rubix_galaxy.h5, or the
  // generated default disk.
  ifu::GalaxyData galaxy;
  std::string source;
  std::string input = o.input;
  if (input.empty() && !cfg.output_path.empty() && fs::exists(fs::path(cfg.output_path) / "rubix_galaxy.h5"))
    input = (fs::path(cfg.output_path) / "rubix_galaxy.h5").string();
  if (!input.empty()) {
    galaxy = ifu::read_galaxy(input);
    source = input;
  } else {
    ifu::DiskOptions d;
    d.particles = o.particles;
    d.seed = o.seed;
    galaxy = ifu::generate_disk(d);
    source = "a generated exponential disk (seed " + std::to_string(o.seed) + ")";
  }
  const std::string ssp_path = find_ssp(o.ssp);
  const ifu::SspGrid ssp = ifu::read_ssp_h5(ssp_path);
  const double load_s = seconds_since(t_start);
  if (say) {
    std::cout << "tessera ifu: " << galaxy.n << " star particles from " << source << "\n"
              << "  config: " << cfg.source << " (" << cfg.telescope << ", z = " << cfg.dist_z << ")\n"
              << "  templates: " << ssp_path << "\n"
              << "  mesh: " << devs.size() << (devs[0].kind() == "cuda" ? " CUDA" : " CPU") << " device"
              << (devs.size() == 1 ? "" : "s") << " (count from "
              << device_count_source(ctx) << "), particles sharded over \"data\", " << o.chunk
              << " per device per step\n";
  }

  ifu::Progress* bar = nullptr;
  ifu::PipelineOptions popt;
  popt.chunk = o.chunk;
  popt.on_progress = [&bar](std::int64_t n) {
    if (bar) bar->advance(n);
  };
  const ifu::Pipeline pipe(cfg, ssp, mesh, popt);

  // The particles go to the devices once; the host copy is then freed, so
  // the process holds them once.
  const auto t_put = Clock::now();
  const ifu::Particles particles = pipe.put(galaxy);
  const double put_s = seconds_since(t_put);
  const std::int64_t num_particles = galaxy.n;
  galaxy = ifu::GalaxyData{};
  // The progress bar counts the particles of this process's devices (the
  // device threads of the others report to their own process).
  std::int64_t local_particles = 0;
  for (const ts::Shard& sh : particles.mass.addressable_shards())
    if (sh.replica_id == 0) local_particles += sh.index[0].size();

  std::vector<double> runs;
  ifu::Cube cube;
  std::vector<float> host;
  const int total_runs = std::max(1, o.repeat);
  for (int r = 0; r < total_runs; ++r) {
    ifu::Progress progress(r == 0 ? "ifu" : "ifu (repeat)", local_particles, say);
    bar = &progress;
    const auto t1 = Clock::now();
    cube = pipe.run(particles);
    // The cube is sharded over wavelength across the processes: every
    // process gathers it (a collective), as the one process did.
    host = ts::process_allgather<float>(cube.data);
    runs.push_back(seconds_since(t1));
    progress.finish();
    bar = nullptr;
  }
  const auto& shape = cube.data.shape();
  const std::int64_t ny = shape[0], nx = shape[1], nwave = shape[2];
  const double spaxel = ts::ifu::telescope(cfg.telescope).spatial_res_arcsec;

  // The velocity map for the pictures: gathered on every process too.
  std::vector<float> vmap;
  if (!o.no_plots) vmap = ts::process_allgather<float>(cube.velocity_map);
  const double first = runs.front();
  const std::vector<double> steady(runs.begin() + 1, runs.end());

  // The FITS cube, the pictures, the summary and the JSON (process 0).
  auto write_outputs = [&] {
    // FITS cube.
    std::string out_path = o.output.empty() ? "ifu_cube.fits" : o.output;
    make_parent(out_path);
    ifu::CubeWcs wcs;
    wcs.spaxel_arcsec = spaxel;
    wcs.wave0 = pipe.wave0();
    wcs.dwave = pipe.dwave();
    wcs.cards = {{"TELESCOP", cfg.telescope, "instrument whose grids the cube uses"},
                 {"REDSHIFT", std::to_string(cfg.dist_z), "galaxy.dist_z of the config"},
                 {"NPART", std::to_string(num_particles), "star particles read"},
                 {"NAPER", std::to_string(cube.in_aperture), "star particles inside the aperture"},
                 {"KPCARCS", std::to_string(pipe.geometry().kpc_per_arcsec), "kpc per arcsec at REDSHIFT"},
                 {"CREATOR", std::string("tessera ") + ts::kVersion + " ifu", "software"}};
    ifu::write_cube_fits(out_path, host.data(), ny, nx, nwave, wcs);

    // Quick-look pictures.
    std::vector<std::string> pictures;
    if (!o.no_plots) {
      const std::string dir = o.plots.empty() ? fs::path(out_path).parent_path().string() : o.plots;
      ifu::QuicklookInput q;
      q.cube = host.data();
      q.ny = ny, q.nx = nx, q.nwave = nwave;
      q.wave0 = pipe.wave0();
      q.dwave = pipe.dwave();
      q.spaxel_arcsec = spaxel;
      q.velocity = vmap.data();
      std::ostringstream title;
      title << cfg.telescope << ", z = " << cfg.dist_z << ", " << num_particles << " particles";
      q.title = title.str();
      q.bunit = "Lsun/Å";
      pictures = ifu::write_quicklooks(dir.empty() ? "." : dir, fs::path(out_path).stem().string(), q);
    }

    const double rss = peak_rss_mib();  // of this process
    if (say) {
      std::cout << "  cube: " << ny << " x " << nx << " spaxels x " << nwave << " wavelengths ("
                << pipe.wave0() << " .. " << pipe.wave0() + pipe.dwave() * static_cast<double>(nwave - 1) << " A), "
                << cube.in_aperture << " particles inside the aperture\n";
      std::cout << std::fixed << std::setprecision(3) << "  time: read " << load_s << " s, put on devices " << put_s
                << " s, pipeline " << first << " s";
      if (!steady.empty()) {
        std::vector<double> s = steady;
        std::sort(s.begin(), s.end());
        std::cout << " (then median " << s[s.size() / 2] << " s over " << s.size() << " more)";
      }
      const char* whose = procs > 1 ? " (process 0)" : "";
      std::cout << "; peak memory " << std::setprecision(0) << rss << " MiB" << whose << "\n" << std::defaultfloat;
      std::cout << "  peak device memory " << [] {
        std::int64_t m = 0;
        for (const auto& d : ts::local_devices()) m = std::max(m, ts::memory_stats(d).peak_bytes_in_use);
        return m >> 20;
      }() << " MiB (the most any one device of this process held)\n";
      std::cout << "  wrote " << out_path << "\n";
      for (const auto& p : pictures) std::cout << "  wrote " << p << "\n";
    }
    if (!o.json.empty()) {
      std::ofstream js(o.json);
      if (!js) throw ifu::InputError("[ifu] cannot write " + o.json);
      js << std::setprecision(9) << "{\"particles\": " << num_particles << ", \"devices\": " << devs.size()
         << ", \"processes\": " << procs << ", \"in_aperture\": " << cube.in_aperture << ", \"read_s\": " << load_s
         << ", \"put_s\": " << put_s << ", \"first_s\": " << first << ", \"steady_s\": [";
      for (std::size_t i = 0; i < steady.size(); ++i) js << (i ? ", " : "") << steady[i];
      js << "], \"peak_rss_mib\": " << rss << ", \"cube_shape\": [" << ny << ", " << nx << ", " << nwave
         << "], \"chunk\": " << o.chunk << ", \"output\": \"" << json_escape(out_path) << "\"}\n";
    }
  };

  // Process 0 writes the outputs and prints; the others wait to hear whether
  // it could.
  return finish_on_root(write_outputs);
}

int cmd_ifu_generate(const IfuGenerateOptions& o) {
  ifu::DiskOptions d;
  d.particles = o.particles;
  d.seed = o.seed;
  ifu::GalaxyData g = ifu::generate_disk(d);
  std::int64_t moved = 0;
  if (!o.no_nudge) moved = ifu::nudge_off_edges(g, load(o.config));
  make_parent(o.output);
  ifu::write_galaxy_h5(o.output, g);
  std::cout << "wrote " << o.output << ": " << g.n << " star particles (seed " << o.seed << ")";
  if (!o.no_nudge) std::cout << ", " << moved << " moved off spaxel edges";
  std::cout << "\n";
  if (!o.rubix_output.empty()) {
    make_parent(o.rubix_output);
    ifu::write_galaxy_h5(o.rubix_output, ifu::with_rubix_ages(g));
    std::cout << "wrote " << o.rubix_output << ": the same with ages as log10(age/yr) for Rubix 0.0.5\n";
  }
  return 0;
}

}  // namespace tessera::cli
