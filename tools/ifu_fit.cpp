// `tessera ifu-grad` and `tessera ifu-fit`: the IFU pipeline's gradient
// against an observed cube, and fits of the galaxy to it (apps/ifu/fit.hpp).
// Under mpirun every process runs the same steps on its share of the
// particles; process 0 alone prints and writes.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <tessera/tessera.hpp>

#include "commands.hpp"
#include "ifu/errors.hpp"
#include "ifu/fit.hpp"
#include "ifu/fits.hpp"
#include "ifu/loss.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/plots.hpp"
#include "ifu/progress.hpp"
#include "ifu/ssp.hpp"
#include "ifu/telescope.hpp"
#include "ifu_common.hpp"

namespace ts = tessera;
namespace fs = std::filesystem;

namespace tessera::cli {

namespace {


/// What both commands set up: the config, galaxy, templates, pipeline,
/// particles and observation.
struct Problem {
  ifu::Config cfg;
  ifu::GalaxyData galaxy;  // host copy (its fields are replaced by fitted ones on output)
  std::optional<ifu::Pipeline> pipe;
  ifu::Particles particles;
  ifu::Observation obs;
};

Problem set_up(const IfuFitCommon& o, const char* name, bool say) {
  Problem p;
  p.cfg = load(o.config);
  if (o.input.empty()) throw ifu::InputError(std::string("[") + name + "] give the galaxy with --input FILE");
  if (o.observed.empty()) throw ifu::InputError(std::string("[") + name + "] give the observed cube with --observed FILE");
  p.galaxy = ifu::read_galaxy(o.input);
  const ifu::SspGrid ssp = ifu::read_ssp_h5(find_ssp(o.ssp));
  const auto devs = ts::devices();
  const ts::Mesh mesh = ts::make_mesh({static_cast<int>(devs.size())}, {"data"});
  ifu::PipelineOptions popt;
  popt.chunk = o.chunk;
  p.pipe.emplace(p.cfg, ssp, mesh, popt);
  p.particles = p.pipe->put(p.galaxy);
  p.obs = ifu::read_observation(*p.pipe, o.observed, o.variance, o.snr);
  if (say)
    std::cout << "tessera " << name << ": " << p.galaxy.n << " star particles from " << o.input << "\n"
              << "  observed: " << p.obs.source << ", loss " << o.loss << "\n"
              << "  config: " << p.cfg.source << " (" << p.cfg.telescope << ", z = " << p.cfg.dist_z << ")\n"
              << "  mesh: " << devs.size() << " device" << (devs.size() == 1 ? "" : "s") << ", " << o.chunk
              << " particles per device per step\n";
  return p;
}

}  // namespace

int cmd_ifu_grad(const Context&, const IfuGradOptions& o) {
  const bool root = ts::process_index() == 0, say = root && !o.quiet;
  const ifu::LossKind kind = ifu::parse_loss(o.loss);
  Problem p = set_up(o, "ifu-grad", say);
  ifu::Gradient g;
  std::vector<double> runs;
  for (int r = 0; r < std::max(1, o.repeat); ++r) {
    const auto t0 = Clock::now();
    g = p.pipe->value_and_grad(p.particles, p.obs, kind,
                               {.velocity_offset = o.velocity_offset, .mass_scale = o.mass_scale});
    g.age.block_until_ready();
    runs.push_back(seconds_since(t0));
  }
  const double secs = runs.front();
  const std::string out = o.output.empty() ? "ifu_grad.h5" : o.output;
  if (root) make_parent(out);
  ifu::write_gradient_h5(out, g, kind, p.galaxy, root);
  return finish_on_root([&] {
    if (!o.json.empty()) {
      std::ofstream js(o.json);
      if (!js) throw ifu::InputError("[ifu-grad] cannot write " + o.json);
      js << std::setprecision(12) << "{\"particles\": " << p.galaxy.n << ", \"devices\": " << ts::devices().size()
         << ", \"processes\": " << ts::process_count() << ", \"loss\": " << g.loss << ", \"first_s\": " << secs
         << ", \"steady_s\": [";
      for (std::size_t i = 1; i < runs.size(); ++i) js << (i > 1 ? ", " : "") << runs[i];
      js << "], \"peak_rss_mib\": " << peak_rss_mib() << ", \"chunk\": " << o.chunk << "}\n";
    }
    if (!say) return;
    std::cout << std::setprecision(9) << "  loss (" << o.loss << "): " << g.loss << "\n"
              << "  d loss / d velocity_offset: " << g.velocity_offset << " per km/s, d loss / d mass_scale: "
              << g.mass_scale << "\n"
              << std::setprecision(3) << std::fixed << "  time: " << secs << " s (forward and gradient)\n"
              << std::defaultfloat << "  wrote " << out << "\n";
  });
}

int cmd_ifu_fit(const Context&, const IfuFitOptions& o) {
  const bool root = ts::process_index() == 0, say = root && !o.quiet;
  ifu::FitOptions fo;
  fo.loss = ifu::parse_loss(o.loss);
  fo.params = ifu::parse_fit_params(o.params);
  fo.optimizer = o.optimizer;
  fo.steps = o.steps;
  fo.lr = o.lr;
  Problem p = set_up(o, "ifu-fit", say);
  if (say) {
    std::cout << "  fitting " << o.params << " with " << o.optimizer << " (" << o.steps << " steps, lr " << o.lr
              << ")\n";
  }
  // The bar, with the loss in its label; redrawn in place on a terminal,
  // else a line every tenth of the steps.
  const auto t0 = Clock::now();
  const bool tty = say && isatty(2);
  fo.on_step = [&](int step, double loss) {
    if (!say) return;
    std::ostringstream label;
    label << "fit, loss " << std::setprecision(6) << loss;
    if (tty) {
      std::cerr << "\r" << ifu::format_bar(label.str(), step, o.steps, seconds_since(t0), 30) << std::flush;
    } else if (step == 1 || step == o.steps || step % std::max(1, o.steps / 10) == 0) {
      std::cerr << ifu::format_bar(label.str(), step, o.steps, seconds_since(t0), 30) << "\n";
    }
  };
  const ifu::FitResult r = ifu::fit(*p.pipe, p.particles, p.obs, fo);
  if (tty) std::cerr << "\n";
  const double secs = seconds_since(t0);
  const ifu::GalaxyData fitted = ifu::to_galaxy(r.particles, p.galaxy);
  // The model and the observed cube on the host for the residual picture.
  std::vector<float> model, observed;
  if (!o.no_plots) {
    model = ts::process_allgather<float>(r.model);
    observed = ts::process_allgather<float>(p.obs.cube);
  }
  const std::string out = o.output.empty() ? "fitted.h5" : o.output;
  return finish_on_root([&] {
    make_parent(out);
    ifu::write_galaxy_h5(out, fitted);
    std::vector<std::string> pictures;
    if (!o.no_plots) {
      const fs::path dir = o.plots.empty() ? fs::path(out).parent_path() : fs::path(o.plots);
      fs::create_directories(dir.empty() ? fs::path(".") : dir);
      const std::string stem = fs::path(out).stem().string();
      const fs::path loss_png = (dir.empty() ? fs::path(".") : dir) / (stem + "_loss.png");
      const fs::path resid_png = (dir.empty() ? fs::path(".") : dir) / (stem + "_residual.png");
      ifu::write_loss_curve(loss_png.string(), r.losses, "ifu-fit: " + o.loss + " loss, " + o.optimizer);
      ifu::QuicklookInput q;
      const auto& geo = p.pipe->geometry();
      q.cube = model.data();
      q.ny = q.nx = geo.spaxels;
      q.nwave = static_cast<std::int64_t>(geo.wave.size());
      q.wave0 = p.pipe->wave0();
      q.dwave = p.pipe->dwave();
      q.spaxel_arcsec = ifu::telescope(p.cfg.telescope).spatial_res_arcsec;
      q.title = "fitted " + o.params;
      q.bunit = "Lsun/Å";
      ifu::write_residual_map(resid_png.string(), q, observed);
      pictures = {loss_png.string(), resid_png.string()};
    }
    if (!o.json.empty()) {
      std::ofstream js(o.json);
      if (!js) throw ifu::InputError("[ifu-fit] cannot write " + o.json);
      js << std::setprecision(12) << "{\"particles\": " << fitted.n << ", \"devices\": " << ts::devices().size()
         << ", \"steps\": " << r.losses.size() - 1 << ", \"seconds\": " << secs << ", \"losses\": [";
      for (std::size_t i = 0; i < r.losses.size(); ++i) js << (i ? ", " : "") << r.losses[i];
      js << "]}\n";
    }
    if (!say) return;
    std::cout << std::setprecision(9) << "  loss: " << r.losses.front() << " -> " << r.losses.back() << " after "
              << r.losses.size() - 1 << " steps" << std::setprecision(3) << std::fixed << " (" << secs << " s)\n"
              << std::defaultfloat << "  wrote " << out << "\n";
    for (const auto& pic : pictures) std::cout << "  wrote " << pic << "\n";
  });
}

}  // namespace tessera::cli
