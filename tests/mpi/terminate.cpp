// A process that dies while another waits for it in a collective: the
// waiting process must raise CollectiveError naming it as soon as the
// failure notice arrives, not after the collective timeout, and not hang.
// Run by run_terminate.cmake under mpirun -np 2, two devices per process:
//
//   terminate throw   process 1 throws an exception nothing catches, between
//                     two collectives (std::terminate's notice)
//   terminate exit    process 1 calls std::exit(3) (the exit notice)
//   terminate body    process 1's shard_map bodies throw, so its devices
//                     never reach the psum (the program's abort notice); the
//                     error then escapes main on process 1
//
// In every case process 0 enters a psum over all four devices and must get
// a CollectiveError naming process 1 within kPrompt seconds of a 30 s
// collective timeout. It prints "process 0 caught CollectiveError after
// T s: MESSAGE" and then "process 0: OK" when that held, and exits 0; the
// exit code of the whole launch is process 1's failure.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <tessera/tessera.hpp>
#include <thread>
#include <vector>

namespace ts = tessera;

namespace {

constexpr double kTimeout = 30;  // the collective timeout
constexpr double kPrompt = 10;   // the notice must beat the timeout by far

// Process 0's side: waits in the psum that process 1 never joins.
int wait_for_the_failure(const std::function<ts::Array()>& collective) {
  const auto start = std::chrono::steady_clock::now();
  try {
    const ts::Array r = collective();
    std::printf("process 0: the psum completed without process 1 (%g)\n", r.item<double>());
    return 5;
  } catch (const ts::CollectiveError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string what = e.what();
    std::printf("process 0 caught CollectiveError after %.2f s: %s\n", s, what.c_str());
    if (what.find("process 1") == std::string::npos) {
      std::printf("process 0: FAIL: the message does not name process 1\n");
      return 6;
    }
    if (s >= kPrompt) {
      std::printf("process 0: FAIL: it took %.2f s (timeout %g s): the failure notice did not end the wait\n", s,
                  kTimeout);
      return 7;
    }
    std::printf("process 0: OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("process 0: FAIL: expected a CollectiveError, got: %s\n", e.what());
    return 8;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line: process 0's report must be out before the launcher stops
  // it (after process 1's abnormal end), not left in a buffer.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "throw" && mode != "exit" && mode != "body") {
    std::fprintf(stderr, "usage: terminate throw|exit|body (under mpirun -np 2)\n");
    return 2;
  }
  if (ts::process_count() != 2 || ts::device_count() != 4) {
    std::fprintf(stderr, "terminate: needs 2 processes of 2 devices, got %d processes and %d devices\n",
                 ts::process_count(), ts::device_count());
    return 2;
  }
  ts::config::set_collective_timeout(kTimeout);
  const ts::Mesh mesh = ts::make_mesh({4}, {"x"});
  const std::vector<double> host{1, 2, 3, 4, 5, 6, 7, 8};
  const ts::Array a = ts::device_put(host, {8}, ts::NamedSharding(mesh, ts::P("x")));
  auto total = ts::shard_map([](ts::Array x) { return ts::psum(ts::sum(x), "x"); }, mesh, {ts::P("x")}, ts::P());

  // Both processes meet once, so the failure below comes after a working
  // collective, with everything started.
  const double first = total(a).item<double>();
  if (first != 36) {
    std::fprintf(stderr, "process %d: the first psum gave %g, want 36\n", ts::process_index(), first);
    return 3;
  }

  const int me = ts::process_index();
  if (mode == "body") {
    // The bodies of process 1's devices (axis indices 2 and 3) throw before
    // the psum that process 0's devices wait in.
    auto failing = ts::shard_map(
        [](ts::Array x) {
          const int i = ts::axis_index("x").item<int>();
          if (i >= 2) throw std::runtime_error("deliberate failure in the body on axis index " + std::to_string(i));
          return ts::psum(ts::sum(x), "x");
        },
        mesh, {ts::P("x")}, ts::P());
    if (me == 0) return wait_for_the_failure([&] { return failing(a); });
    failing(a);  // raises on this process too, and nothing catches it
    return 0;
  }
  if (me == 0) return wait_for_the_failure([&] { return total(a); });
  // Let process 0 get into the psum first.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (mode == "exit") std::exit(3);
  throw std::runtime_error("deliberate failure on process 1 between collectives");
}
