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

}  // namespace tessera::cli
