// The `tessera` command-line program.
//
//   tessera [--num-devices N] devices   list the devices, their processes and where their count came from,
//                                       and the GPUs with their memory (or why there are none)
//   tessera [--num-devices N] demo      meshes, shardings, reshards, timed against memcpy
//   tessera ifu [--config C] [--input G] [--output cube.fits] [--devices N]
//                                       the IFU datacube pipeline (apps/ifu)
//   tessera ifu-generate --output G     a seeded disk galaxy in Rubix's HDF5 format
//
// Every command also runs as several processes of one program
// (`mpirun -np 2 tessera demo`): each process brings its own devices (N per
// process), the meshes span them all, and process 0 prints.
//
// Errors from the library (tessera::Error) are printed and exit with code 1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <tessera/tessera.hpp>

#include "commands.hpp"
#include "runtime/gpus.hpp"

namespace ts = tessera;

namespace tessera::cli {

std::string device_count_source(const Context& ctx) {
  const auto setting = ts::config::num_cpu_devices_setting();
  const char* env = setting ? setting->c_str() : nullptr;
  // The count is per process: with several, say so and how many there are.
  const int procs = ts::process_count();
  const std::string each = procs > 1 ? " in each of " + std::to_string(procs) + " processes" : "";
  if (ctx.num_devices) {
    std::string s = "--num-devices " + std::to_string(*ctx.num_devices) + each;
    if (env) s += std::string(" (overrides TESSERA_NUM_CPU_DEVICES=") + env + ")";
    return s;
  }
  if (env) return std::string("TESSERA_NUM_CPU_DEVICES=") + env + each;
  if (procs > 1)
    return std::to_string(ts::local_device_count()) + each + " (the hardware threads shared among the processes" +
           " of a host); set TESSERA_NUM_CPU_DEVICES or --num-devices to change it";
  return "the number of hardware threads (" + std::to_string(std::thread::hardware_concurrency()) +
         "); set TESSERA_NUM_CPU_DEVICES or --num-devices to change it";
}

std::pair<int, int> mesh_shape_for(int n) {
  int a = 1;
  for (int d = 2; d * d <= n; ++d)
    if (n % d == 0) a = d;
  if (a == 1) return {n, 1};
  return {a, n / a};
}

namespace {

std::string gib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// The GPUs this process sees (or why there are none), with memory, and the
// devices they give.
void print_gpus(bool on_gpus) {
  // Checked even without GPUs, so a bad setting shows up here first.
  const int per_gpu = ts::config::devices_per_gpu();
  std::string why;
  const int n = ts::detail::cuda_device_count(&why);
  if (n == 0) {
    std::cout << "GPUs: none: " << why << "\n";
    return;
  }
  std::cout << "GPUs: " << n << " (CUDA runtime " << ts::detail::cuda_runtime_version() << "), " << per_gpu
            << " device" << (per_gpu == 1 ? "" : "s") << " each (TESSERA_DEVICES_PER_GPU): " << n * per_gpu
            << " device" << (n * per_gpu == 1 ? "" : "s") << "\n";
  for (const ts::detail::GpuInfo& g : ts::detail::cuda_gpus(/*free_memory=*/true)) {
    std::cout << "  GPU " << g.index << "  " << g.name << "  sm_" << g.cc_major << g.cc_minor << "  "
              << (g.pci_bus_id == "emulated" ? std::string("host memory") : gib(g.total_bytes) + " total");
    if (g.free_known) std::cout << ", " << gib(g.free_bytes) << " free";
    if (!g.pci_bus_id.empty()) std::cout << "  pci " << g.pci_bus_id;
    std::cout << "\n";
  }
  if (!on_gpus) std::cout << "  (not used by this process: TESSERA_PLATFORM=cuda runs on them)\n";
}

}  // namespace

int cmd_devices(const Context& ctx) {
  std::vector<ts::Device> devs;
  try {
    devs = ts::devices();
  } catch (const ts::DeviceError&) {
    // A platform the runtime cannot start on (TESSERA_PLATFORM=cuda): show
    // the GPUs, then the error.
    print_gpus(false);
    throw;
  }
  // Under mpirun every process knows every device (and which process owns
  // it), so process 0 alone prints the whole list.
  if (ts::process_index() != 0) return 0;
  const bool on_gpus = !devs.empty() && devs[0].kind() == "cuda";
  std::cout << devs.size() << " device" << (devs.size() == 1 ? "" : "s") << " (count from "
            << (on_gpus ? std::string("the GPUs and TESSERA_DEVICES_PER_GPU") : device_count_source(ctx)) << ")\n";
  std::cout << "processes: " << ts::process_count() << " (backend " << ts::distributed::backend()
            << "); this is process " << ts::process_index() << ", with " << ts::local_device_count() << " local device"
            << (ts::local_device_count() == 1 ? "" : "s") << "\n";
  std::size_t width = 0;
  for (const auto& d : devs) width = std::max(width, d.str().size());
  for (const auto& d : devs) {
    std::string s = d.str();
    s.resize(width, ' ');
    std::cout << "  " << s << "  kind=" << d.kind() << "  process=" << d.process_index()
              << (d.is_local() ? "  local" : "") << "\n";
  }
  print_gpus(on_gpus);
  const auto setting = ts::config::platform_setting();
  std::cout << "platform: " << (on_gpus ? "cuda" : "cpu")
            << (setting ? " (TESSERA_PLATFORM)" : ctx.platform ? " (--platform)" : " (the default; --platform or TESSERA_PLATFORM=cpu|cuda chooses)")
            << "\n";
  return 0;
}

}  // namespace tessera::cli

namespace {

int run(int argc, char** argv) {
  namespace cli = ts::cli;
  CLI::App app{std::string("tessera ") + ts::kVersion + ": sharded arrays on a mesh of devices"};
  app.set_version_flag("--version", std::string("tessera ") + ts::kVersion);
  app.require_subcommand(1);
  // Options of the top-level app are accepted after the subcommand too.
  app.fallthrough();

  cli::Context ctx;
  app.add_option("--num-devices", ctx.num_devices,
                 "number of virtual CPU devices (per process under mpirun; default: $TESSERA_NUM_CPU_DEVICES, "
                 "else hardware threads)");
  app.add_option("--platform", ctx.platform,
                 "cpu or cuda: the devices to run on (default: $TESSERA_PLATFORM, else cpu); with cuda, "
                 "--num-devices/--devices N gives each GPU N / (number of GPUs) devices")
      ->check(CLI::IsMember({"cpu", "cuda"}));

  CLI::App* devices =
      app.add_subcommand("devices", "list the devices, their processes and where their count came from, and the GPUs");
  CLI::App* demo = app.add_subcommand("demo", "meshes, shardings and reshards, timed against memcpy");
  cli::DemoOptions dopt;
  demo->add_option("--rows", dopt.rows, "rows of the large f64 array")->capture_default_str()->check(CLI::PositiveNumber);
  demo->add_option("--cols", dopt.cols, "columns of the large f64 array")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--reps", dopt.reps, "timed repetitions per large reshard (median shown)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  demo->add_flag("--small-only", dopt.small_only, "skip the large, timed array");

#ifdef TESSERA_HAVE_IFU
  CLI::App* ifu = app.add_subcommand("ifu", "star particles to a mock IFU datacube (FITS) and quick-look PNGs");
  cli::IfuOptions iopt;
  ifu->add_option("--config", iopt.config, "Rubix user config (YAML); default: MUSE at z = 0.1 with PSF and LSF");
  ifu->add_option("--input", iopt.input,
                  "galaxy: Rubix HDF5 (.h5), an IllustrisTNG subhalo cutout (HDF5) or .npz; default: the config's "
                  "output_path/rubix_galaxy.h5, else a generated disk");
  ifu->add_option("--output", iopt.output, "FITS cube to write")->capture_default_str();
  ifu->add_option("--devices", ctx.num_devices, "number of devices the particles are sharded over (as --num-devices)");
  ifu->add_option("--ssp", iopt.ssp, "BC03lr.h5 (default: $TESSERA_IFU_DATA or the build's ifu-data/)");
  ifu->add_option("--plots", iopt.plots, "folder for the PNG quick-looks (default: the cube's folder)");
  ifu->add_flag("--no-plots", iopt.no_plots, "write no pictures");
  ifu->add_option("--chunk", iopt.chunk, "particles per device per step (bounds memory)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  ifu->add_option("--particles", iopt.particles, "particles of the generated disk")->capture_default_str()->check(CLI::PositiveNumber);
  ifu->add_option("--seed", iopt.seed, "seed of the generated disk")->capture_default_str();
  ifu->add_option("--repeat", iopt.repeat, "run the pipeline this many times (timings)")->capture_default_str()->check(CLI::Range(1, 1000));
  ifu->add_option("--json", iopt.json, "write timings and peak memory as JSON");
  ifu->add_flag("--quiet", iopt.quiet, "print nothing but errors");

  CLI::App* gen = app.add_subcommand("ifu-generate", "write a seeded exponential-disk galaxy in Rubix's HDF5 format");
  cli::IfuGenerateOptions gopt;
  gen->add_option("--particles", gopt.particles, "star particles")->capture_default_str()->check(CLI::PositiveNumber);
  gen->add_option("--seed", gopt.seed, "random seed")->capture_default_str();
  gen->add_option("--config", gopt.config, "config whose rotation and spaxel edges particles are nudged off");
  gen->add_option("--output", gopt.output, "galaxy file to write (ages in Gyr)")->required();
  gen->add_option("--rubix-output", gopt.rubix_output, "also write the galaxy with log10(age/yr) ages, as Rubix 0.0.5 looks them up");
  gen->add_flag("--no-nudge", gopt.no_nudge, "keep particles that lie on spaxel edges where they are");

  // What ifu-grad and ifu-fit share.
  auto fit_common = [&](CLI::App* c, cli::IfuFitCommon& f) {
    c->add_option("--config", f.config, "Rubix user config (YAML); default: MUSE at z = 0.1 with PSF and LSF");
    c->add_option("--input", f.input, "galaxy: Rubix HDF5, IllustrisTNG cutout or .npz")->required();
    c->add_option("--observed", f.observed, "observed cube (FITS, as tessera ifu writes: the telescope's grid)")
        ->required();
    c->add_option("--variance", f.variance, "variance cube (FITS) for the nll loss");
    c->add_option("--snr", f.snr, "without --variance: sigma = |observed| / SNR for the nll loss");
    c->add_option("--loss", f.loss, "nll, cosine or mse")->capture_default_str();
    c->add_option("--devices", ctx.num_devices, "number of devices the particles are sharded over");
    c->add_option("--ssp", f.ssp, "BC03lr.h5 (default: $TESSERA_IFU_DATA or the build's ifu-data/)");
    c->add_option("--chunk", f.chunk, "particles per device per step (bounds memory)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    c->add_flag("--quiet", f.quiet, "print nothing but errors");
  };
  CLI::App* grad = app.add_subcommand("ifu-grad", "the loss of the model cube against an observed one, and its gradient "
                                                  "w.r.t. every particle field (HDF5 in the galaxy's layout)");
  cli::IfuGradOptions ropt;
  fit_common(grad, ropt);
  grad->add_option("--output", ropt.output, "gradient file to write (default ifu_grad.h5)");
  grad->add_option("--velocity-offset", ropt.velocity_offset, "line-of-sight velocity offset, km/s")->capture_default_str();
  grad->add_option("--mass-scale", ropt.mass_scale, "factor on every mass")->capture_default_str();
  grad->add_option("--repeat", ropt.repeat, "compute the gradient this many times (timings)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  grad->add_option("--json", ropt.json, "write timings and peak memory as JSON");
  CLI::App* fitc = app.add_subcommand("ifu-fit", "fit particle fields to an observed cube by gradient descent");
  cli::IfuFitOptions fopt;
  fit_common(fitc, fopt);
  fitc->add_option("--params", fopt.params, "fields to fit: age, metallicity, mass, velocity, velocity_offset, mass_scale")
      ->capture_default_str();
  fitc->add_option("--steps", fopt.steps, "optimiser steps")->capture_default_str()->check(CLI::NonNegativeNumber);
  fitc->add_option("--optimizer", fopt.optimizer, "adam or lbfgs")->capture_default_str();
  fitc->add_option("--lr", fopt.lr, "Adam's step (in the unconstrained parameters); L-BFGS's first step length")
      ->capture_default_str();
  fitc->add_option("--output", fopt.output, "fitted galaxy to write, Rubix's HDF5 layout (default fitted.h5)");
  fitc->add_option("--plots", fopt.plots, "folder for the loss and residual PNGs (default: the output's folder)");
  fitc->add_flag("--no-plots", fopt.no_plots, "write no pictures");
  fitc->add_option("--json", fopt.json, "write the losses and the time as JSON");
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Before anything that could start the runtime.
  if (ctx.platform == "cuda") {
    // A device count becomes devices per GPU (TESSERA_DEVICES_PER_GPU).
    const int gpus = ts::detail::cuda_device_count();
    if (ctx.num_devices && gpus > 0) {
      if (*ctx.num_devices % gpus != 0)
        throw ts::DeviceError("[devices] --platform cuda: expected a device count that is a multiple of the " +
                              std::to_string(gpus) + " GPUs, got " + std::to_string(*ctx.num_devices));
      setenv("TESSERA_DEVICES_PER_GPU", std::to_string(*ctx.num_devices / gpus).c_str(), 1);
    }
  } else if (ctx.num_devices) {
    ts::config::set_num_cpu_devices(*ctx.num_devices);
  }
  // Chooses the platform (or says why it cannot run here).
  if (ctx.platform) (void)ts::devices(*ctx.platform);

  if (devices->parsed()) return cli::cmd_devices(ctx);
  if (demo->parsed()) return cli::cmd_demo(ctx, dopt);
#ifdef TESSERA_HAVE_IFU
  if (ifu->parsed()) return cli::cmd_ifu(ctx, iopt);
  if (gen->parsed()) return cli::cmd_ifu_generate(gopt);
  if (grad->parsed()) return cli::cmd_ifu_grad(ctx, ropt);
  if (fitc->parsed()) return cli::cmd_ifu_fit(ctx, fopt);
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ts::Error& e) {
    std::cerr << "tessera: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tessera: internal error: " << e.what() << "\n";
    return 1;
  }
}
