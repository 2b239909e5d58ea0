// `tessera demo`: a guided tour for a new user. Builds a 2-d mesh over the CPU
// devices, places arrays of awkward sizes with several shardings, reshards
// between layouts, shows each plan and what it moved, times the moves against
// a memcpy of the same bytes, and checks every result against the source;
// then runs the scenarios of examples/, manual mode (shard_map) last.
//
// Under mpirun (several processes, one program) the mesh spans every
// process's devices. Every process runs the whole tour, since every Tessera
// call must be made by all of them; process 0 prints; layouts are printed
// from the sharding, which knows every process's blocks; values are checked
// after ts::process_allgather; and a check passes when it passed on every
// process, so all of them exit with the same code.
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <tessera/tessera.hpp>

#include "bench_util.hpp"
#include "chunked_jacobian/chunked_jacobian.hpp"
#include "collectives_tour/collectives_tour.hpp"
#include "commands.hpp"
#include "common/processes.hpp"
#include "finite_difference/finite_difference.hpp"
#include "mlp_layer/mlp_layer.hpp"

namespace ts = tessera;
namespace tb = tessera::bench;

namespace tessera::cli {

namespace {

// Where the tour prints: std::cout on process 0, nowhere on the others.
std::ostream& out() { return examples::on_process0(std::cout); }

void heading(const std::string& s) { out() << "\n" << s << "\n" << std::string(s.size(), '=') << "\n"; }

void subheading(const std::string& s) { out() << "\n-- " << s << " --\n"; }

// Indents every line of `text`.
std::string indent(const std::string& text, const std::string& pad = "    ") {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) out += pad + line + "\n";
  return out;
}

// "P('x', None)" instead of "PartitionSpec('x', None)".
std::string spec_short(const ts::PartitionSpec& p) {
  std::string s = p.str();
  const std::string pre = "PartitionSpec";
  if (s.rfind(pre, 0) != 0) return s;
  // Built piece by piece: GCC 12 warns (-Wrestrict) falsely on replace().
  std::string out = "P";
  out.append(s, pre.size(), std::string::npos);
  return out;
}

// "CPU 3", or "GPU 3" for a CUDA device (as JAX prints devices in tables).
std::string device_name(const ts::Device& d) { return (d.kind() == "cuda" ? "GPU " : "CPU ") + std::to_string(d.id()); }

// "CPU 0: 5x2, CPU 1: 5x2, ..." (block shape per device, in mesh order).
// From the sharding, which knows the blocks of every process's devices
// (addressable_shards() lists only this process's).
std::string block_shapes(const ts::Array& a) {
  std::string s;
  const ts::Mesh& mesh = a.sharding().mesh();
  for (int pos = 0; pos < mesh.size(); ++pos) {
    if (!s.empty()) s += ", ";
    s += device_name(mesh.devices()[pos]) + ": ";
    const std::vector<ts::Slice> index = a.sharding().shard_index(a.shape(), pos);
    for (std::size_t d = 0; d < index.size(); ++d) {
      if (d) s += 'x';
      s += std::to_string(index[d].size());
    }
  }
  return s;
}

void show_array(const ts::Array& a, bool draw) {
  out() << "    type:     " << ts::typeof(a) << "\n"
        << "    sharding: " << a.sharding().str() << "\n"
        << "    blocks:   " << block_shapes(a) << "\n";
  if (draw) {
    std::ostringstream os;
    ts::visualize_sharding(a, os);
    out() << indent(os.str());
  }
}

std::string ratio_str(double r) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(r < 0.1 ? 3 : 2) << r << "x";
  return os.str();
}

std::string gbps_str(double bytes, double seconds) {
  std::ostringstream os;
  const double g = tb::gbps(bytes, seconds);
  os << std::fixed << std::setprecision(g < 0.1 ? 4 : 2) << g << " GB/s";
  return os.str();
}

struct Check {
  int done = 0;
  int failed = 0;
  // Counts one check; a check passes when it passed on every process (a
  // collective), so every process prints and counts the same verdict.
  bool count(bool ok) {
    ok = examples::on_every_process(ok);
    ++done;
    if (!ok) ++failed;
    return ok;
  }
};

// Reshards `a` to `to`, printing the plan, the bytes, the time against a
// memcpy of the same bytes, and whether the result equals `expect`.
template <class T>
ts::Array demo_reshard(const std::string& title, const std::string& why, const ts::Array& a,
                       const ts::PartitionSpec& to, const std::vector<T>& expect, int reps, bool draw, Check& check) {
  subheading(title);
  out() << indent(why, "  ");
  const ts::NamedSharding target(a.sharding().mesh(), to);
  const ts::ReshardPlan plan = ts::plan_reshard(a, target);
  const std::int64_t local = std::accumulate(plan.bytes_local.begin(), plan.bytes_local.end(), std::int64_t{0});
  const std::int64_t written = plan.bytes_moved() + local;

  // One untimed run (it also fills the allocators' caches), the timed runs,
  // then the result kept for checking.
  const std::vector<double> times = tb::time_reps(1, reps, [&] { ts::reshard(a, target).block_until_ready(); });
  ts::Array b = ts::reshard(a, target);
  b.block_until_ready();
  out() << "    from:   " << spec_short(a.sharding().spec()) << "  " << ts::typeof(a) << "\n"
        << "    to:     " << spec_short(to) << "  " << ts::typeof(b) << "\n";
  out() << "    plan:   " << plan.str() << "\n";
  out() << "    bytes:  " << tb::format_bytes(written) << " written (" << tb::format_bytes(plan.bytes_moved())
        << " between devices + " << tb::format_bytes(local) << " local copies)\n";
  const double t = tb::median(times);
  if (written == 0) {
    out() << "    time:   " << tb::format_seconds(t) << " (median of " << reps
          << "); nothing to copy: every device already holds its target block\n";
  } else {
    const double m = tb::memcpy_seconds(written, reps);
    const auto bytes = static_cast<double>(written);
    out() << "    time:   " << tb::format_seconds(t) << " (median of " << reps << ", " << gbps_str(bytes, t) << ")\n"
          << "    memcpy: " << tb::format_seconds(m) << " for the same " << tb::format_bytes(written)
          << " on one thread (" << gbps_str(bytes, m) << ")\n"
          << "    speed:  " << ratio_str(m / t) << " of memcpy (memcpy time / reshard time)\n";
  }
  if (draw) {
    std::ostringstream os;
    ts::visualize_sharding(b, os);
    out() << "    result layout:\n" << indent(os.str(), "      ");
  }
  // b spans the processes: every process gathers it.
  const bool ok = check.count(ts::process_allgather<T>(b) == expect && b.sharding() == target);
  out() << "    check:  result equals the source data ... " << (ok ? "ok" : "MISMATCH") << "\n";
  return b;
}

}  // namespace

int cmd_demo(const Context& ctx, const DemoOptions& opt) {
  const double t_start = tb::now_seconds();
  const int n = ts::device_count();
  const auto [nx, ny] = mesh_shape_for(n);
  ts::Mesh mesh = ts::make_mesh({nx, ny}, {"x", "y"});
  Check check;

  const int procs = ts::process_count();
  heading("Tessera " + std::string(ts::kVersion) + " demo: sharded arrays on " + std::to_string(n) + " CPU device" +
          (n == 1 ? "" : "s") + (procs > 1 ? " in " + std::to_string(procs) + " processes" : ""));
  out() << "A CPU device is one worker thread with its own memory. A mesh arranges the devices in a grid\n"
           "with named axes; a PartitionSpec P(...) says which mesh axes split each array dimension;\n"
           "a NamedSharding is a mesh plus a spec. Arrays keep one block per device.\n";

  // ------------------------------------------------------------------ mesh
  heading("1. The mesh");
  out() << n << " devices (count from " << device_count_source(ctx) << "),\n"
        << "arranged as " << nx << " x " << ny << ": " << mesh.str() << "\n\n";
  {
    // Device ids in a grid: rows are 'x' coordinates, columns 'y' coordinates.
    const int w = static_cast<int>(device_name(mesh.devices()[n - 1]).size()) + 2;
    std::ostringstream os;
    os << "       ";
    for (int j = 0; j < ny; ++j) os << std::setw(w) << ("y=" + std::to_string(j));
    os << "\n";
    for (int i = 0; i < nx; ++i) {
      os << "  " << std::setw(5) << std::left << ("x=" + std::to_string(i)) << std::right;
      for (int j = 0; j < ny; ++j) os << std::setw(w) << device_name(mesh.devices()[i * ny + j]);
      os << "\n";
    }
    out() << os.str();
  }
  if (procs > 1) {
    // Global ids are ordered by process, so each process owns a run of them.
    std::ostringstream os;
    const std::vector<ts::Device> all = ts::devices();
    for (int p = 0; p < procs; ++p) {
      std::vector<int> ids;
      for (const ts::Device& d : all)
        if (d.process_index() == p) ids.push_back(d.id());
      os << (p == 0 ? "" : ", ") << "process " << p << ": CPU ";
      if (ids.empty())
        os << "none";
      else if (ids.size() == 1)
        os << ids.front();
      else
        os << ids.front() << "-" << ids.back();
    }
    out() << "  The mesh spans " << procs << " processes (" << os.str() << "). Each process runs this\n"
          << "  same program and holds the blocks of its own devices; what crosses processes goes over MPI.\n";
  }
  if (ny == 1 && n > 1)
    out() << "  (" << n << " has no divisor between 2 and its square root, so axis 'y' has size 1:\n"
          << "   specs that name only 'y' leave the array whole on every device.)\n";
  if (n == 1)
    out() << "  (One device: every sharding below is the whole array on CPU 0, and every reshard is a no-op.\n"
             "   Try `tessera --num-devices 8 demo`.)\n";

  // ------------------------------------------------------- small array
  heading("2. Placing a 10 x 7 f32 array");
  out() << "Sizes need not divide evenly: a dimension of n split into k parts gives blocks of n/k or n/k+1,\n"
           "the first n%k parts holding the extra element (some blocks may even be empty).\n"
           "Element (i, j) holds the value 7*i + j.\n";
  const ts::Shape small_shape{10, 7};
  std::vector<float> small_host(70);
  std::iota(small_host.begin(), small_host.end(), 0.0f);

  struct Placement {
    const char* what;
    ts::PartitionSpec spec;
  };
  const std::vector<Placement> placements = {
      {"rows split over 'x', columns over 'y'", ts::P("x", "y")},
      {"rows split over 'x', replicated over 'y'", ts::P("x")},
      {"columns split over 'y', replicated over 'x'", ts::P(ts::none, "y")},
      {"rows split over all devices ('x' major, 'y' minor)", ts::P({"x", "y"})},
      {"replicated: every device holds the whole array", ts::P()},
  };
  std::vector<ts::Array> small;
  for (const auto& p : placements) {
    subheading(spec_short(p.spec) + ": " + p.what);
    ts::Array a = ts::device_put(small_host, small_shape, ts::NamedSharding(mesh, p.spec));
    show_array(a, true);
    // process_allgather is to_vector() for an array that spans processes
    // (every process must call it); with one process it is to_vector().
    const bool ok = check.count(ts::process_allgather<float>(a) == small_host);
    out() << "    check:  " << (procs > 1 ? "process_allgather()" : "to_vector()") << " equals the host data ... "
          << (ok ? "ok" : "MISMATCH") << "\n";
    small.push_back(a);
  }

  // ---------------------------------------------------------- resharding
  heading("3. Resharding the 10 x 7 array");
  out() << "ts::reshard(array, spec) moves an array to a new layout on the same mesh. One planner decides,\n"
           "per destination block, which pieces come from which devices; each device then copies only\n"
           "what it lacks, straight from the devices that hold it. ts::plan_reshard shows the plan without\n"
           "running it. (Times for an array this small are dominated by the fixed cost of dispatching to\n"
           "the device threads; section 4 times real sizes.)\n";
  const int small_reps = 20;
  const ts::Array& s_rows = small[3];
  const ts::Array& s_blocks = small[0];
  demo_reshard("rows -> columns: P(('x','y')) -> P(None, ('x','y'))",
               "Each device holds a band of rows and needs a band of columns: it keeps the piece where the\n"
               "two cross and receives one piece from every other device.",
               s_rows, ts::P(ts::none, {"x", "y"}), small_host, small_reps, true, check);
  ts::Array s_rep = demo_reshard("sharded -> replicated: P('x','y') -> P()",
                                 "Every device needs the whole array: each copies the blocks it lacks from their holders.",
                                 s_blocks, ts::P(), small_host, small_reps, true, check);
  demo_reshard("replicated -> sharded: P() -> P('x','y')",
               "Every device already holds everything: each copies its own block out of its full copy;\n"
               "nothing crosses between devices.",
               s_rep, ts::P("x", "y"), small_host, small_reps, true, check);

  subheading("What an op moved: ts::explain");
  out() << "  ts::explain runs code and records the communication of every op inside it:\n";
  ts::Array tmp;
  const ts::Explanation ex = ts::explain([&] {
    tmp = ts::reshard(s_blocks, ts::P("y", "x"));
    tmp = ts::reshard(tmp, ts::P("x"));
  });
  out() << "    auto ex = ts::explain([&] { b = ts::reshard(a, P('y','x')); c = ts::reshard(b, P('x')); });\n"
        << indent(ex.str(), "    | ") << "    total: " << tb::format_bytes(ex.bytes_moved())
        << " moved between devices\n";

  subheading("Errors name the problem");
  try {
    (void)ts::reshard(s_blocks, ts::P("z"));
    out() << "    (no error?)\n";
  } catch (const ts::ShardingError& e) {
    out() << "    ts::reshard(a, P('z')) raised ts::ShardingError:\n      " << e.what() << "\n";
  }

  // ---------------------------------------------------------- large array
  if (!opt.small_only) {
    const ts::Shape big_shape{opt.rows, opt.cols};
    const std::int64_t big_bytes = opt.rows * opt.cols * static_cast<std::int64_t>(sizeof(double));
    heading("4. The same moves at scale: a " + std::to_string(opt.rows) + " x " + std::to_string(opt.cols) +
            " f64 array (" + tb::format_bytes(big_bytes) + ")");
    out() << "Each reshard runs once untimed, then " << opt.reps
          << " timed runs (median shown). The baseline is one std::memcpy\n"
             "of the same number of bytes on one thread, measured now. A ratio near or above 1x means the\n"
             "reshard copies at memory speed (devices copy in parallel, so it can beat one memcpy).\n";
    std::vector<double> big_host(static_cast<std::size_t>(opt.rows * opt.cols));
    std::iota(big_host.begin(), big_host.end(), 0.0);

    ts::Array b_rows = ts::device_put(big_host, big_shape, ts::NamedSharding(mesh, ts::P({"x", "y"})));
    subheading("placed: " + spec_short(b_rows.sharding().spec()));
    show_array(b_rows, false);
    demo_reshard<double>("rows -> columns: P(('x','y')) -> P(None, ('x','y'))",
                         "Every device sends a piece of its rows to every other device.", b_rows,
                         ts::P(ts::none, {"x", "y"}), big_host, opt.reps, false, check);
    b_rows = ts::Array();  // free it before the replicated copies

    ts::Array b_blocks = ts::device_put(big_host, big_shape, ts::NamedSharding(mesh, ts::P("x", "y")));
    subheading("placed: " + spec_short(b_blocks.sharding().spec()));
    show_array(b_blocks, false);
    ts::Array b_rep = demo_reshard<double>(
        "sharded -> replicated: P('x','y') -> P()",
        "Every device ends with the whole array, so " + std::to_string(n) + " x " +
            tb::format_bytes(big_bytes) + " are written in total.",
        b_blocks, ts::P(), big_host, opt.reps, false, check);
    b_blocks = ts::Array();
    demo_reshard<double>("replicated -> sharded: P() -> P('x','y')",
                         "Each device copies its block out of its own full copy; nothing crosses between devices.", b_rep,
                         ts::P("x", "y"), big_host, opt.reps, false, check);
  }

  // ------------------------------------------------------- the scenarios
  heading("5. Computing on sharded arrays: three scenarios from examples/");
  out() << "Global-view code on sharded arrays: each op picks the output layout and the communication.\n"
           "Each scenario also has a shard_map form: per-device code, the subject of section 6.\n";
  subheading("examples/finite_difference: diff along and across the sharded axis, and a hand-written halo exchange");
  const int fd_failures = examples::finite_difference(out(), opt.small_only ? 256 : 2048);
  check.done += 3;
  check.failed += fd_failures;
  subheading("examples/mlp_layer: sigmoid(x @ w + b), automatic, jit, explicit and manual mode");
  const int mlp_failures = examples::mlp_layer(out());
  check.done += 4;
  check.failed += mlp_failures;
  subheading("examples/chunked_jacobian: jacfwd per row, vmap over sharded rows in chunks on every device");
  const int jac_failures = examples::chunked_jacobian(out(), 4099, opt.small_only ? 12 : 24);
  check.done += 4;
  check.failed += jac_failures;

  // ---------------------------------------------------------- manual mode
  heading("6. Manual mode: shard_map and collectives");
  out() << "examples/collectives_tour: per-device code on local blocks, collectives across devices, and\n"
           "errors in place of hangs. Every step is checked against a plain host computation.\n";
  int tour_checks = 0;
  const int tour_failures = examples::collectives_tour(out(), &tour_checks);
  check.done += tour_checks;
  check.failed += tour_failures;

  // -------------------------------------------------------------- summary
  heading("Summary");
  // Every verdict was agreed between the processes, so every process counts
  // the same failures and exits with the same code.
  out() << check.done - check.failed << " of " << check.done << " checks ok";
  if (check.failed) out() << " -- " << check.failed << " FAILED";
  out() << " (" << std::fixed << std::setprecision(1) << tb::now_seconds() - t_start << " s)\n";
  out() << "More: `tessera devices`, `tessera --num-devices 8 demo`, TESSERA_NUM_CPU_DEVICES=N, bench_reshard,\n"
        << "      `mpirun -np 2 tessera demo` (several processes; README.md, docs/distributed.md).\n";
  return check.failed ? 1 : 0;
}

}  // namespace tessera::cli
