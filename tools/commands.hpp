// Subcommands of the `tessera` command-line program.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace tessera::cli {

/// Options given before the subcommand.
struct Context {
  /// --num-devices N (already applied with ts::config::set_num_cpu_devices).
  std::optional<int> num_devices;
  /// --platform cpu|cuda (already chosen before the runtime started).
  std::optional<std::string> platform;
};

/// Where the device count comes from: "--num-devices", the environment
/// variable, or the hardware thread count.
std::string device_count_source(const Context& ctx);

/// A 2-d mesh shape (x, y) for n devices, as square as possible with x <= y;
/// (n, 1) when n has no divisor between 2 and sqrt(n).
std::pair<int, int> mesh_shape_for(int n);

int cmd_devices(const Context& ctx);

struct DemoOptions {
  /// Size of the large (timed) array, f64.
  std::int64_t rows = 4097;
  std::int64_t cols = 4096;
  /// Timed repetitions of each large reshard (median reported).
  int reps = 3;
  /// Skip the large array.
  bool small_only = false;
};

int cmd_demo(const Context& ctx, const DemoOptions& opt);

struct IfuOptions {
  std::string config;  // empty: the built-in default config
  std::string input;   // empty: <output_path>/rubix_galaxy.h5 if it exists, else a generated disk
  std::string output;  // FITS cube path (default ifu_cube.fits)
  std::string ssp;     // BC03lr.h5 (default: $TESSERA_IFU_DATA or the build's ifu-data/)
  std::string plots;   // folder of the PNG quick-looks (default: the cube's folder)
  std::string json;    // timings and memory as JSON
  bool no_plots = false;
  bool quiet = false;
  std::int64_t chunk = 32768;
  std::int64_t particles = 100000;  // of the generated disk
  std::uint64_t seed = 1;
  int repeat = 1;
};
int cmd_ifu(const Context& ctx, const IfuOptions& opt);

struct IfuGenerateOptions {
  std::int64_t particles = 100000;
  std::uint64_t seed = 1;
  std::string config;        // the rotation and spaxel edges particles are nudged off
  std::string output;        // Rubix-format HDF5
  std::string rubix_output;  // the same with log10(age/yr) ages, for Rubix 0.0.5
  bool no_nudge = false;
};
int cmd_ifu_generate(const IfuGenerateOptions& opt);

/// What ifu-grad and ifu-fit both take.
struct IfuFitCommon {
  std::string config;    // empty: the built-in default config
  std::string input;     // galaxy (required)
  std::string observed;  // observed cube, FITS (required)
  std::string variance;  // variance cube, FITS (nll)
  double snr = 0;        // without a variance cube: sigma = |observed| / snr (nll)
  std::string loss = "nll";
  std::string output;
  std::string ssp;
  std::int64_t chunk = 32768;
  bool quiet = false;
};
struct IfuGradOptions : IfuFitCommon {
  double velocity_offset = 0;  // km/s
  double mass_scale = 1;
  int repeat = 1;    // value_and_grad this many times (timings)
  std::string json;  // timings and peak memory as JSON
};
int cmd_ifu_grad(const Context& ctx, const IfuGradOptions& opt);

struct IfuFitOptions : IfuFitCommon {
  std::string params = "age,metallicity";
  std::string optimizer = "adam";
  int steps = 100;
  double lr = 0.05;
  std::string plots;  // folder of the loss and residual PNGs (default: the output's folder)
  bool no_plots = false;
  std::string json;
};
int cmd_ifu_fit(const Context& ctx, const IfuFitOptions& opt);

}  // namespace tessera::cli
