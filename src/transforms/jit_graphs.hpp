// jit's graph replay on GPUs (transforms/jit.cpp, "graph replay"): counters
// and a switch, for tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::detail {

/// Since the process started, over every jit program and device: graphs
/// recorded, cached calls replayed from a kept graph, and recordings
/// refused (a device of a program then runs it op by op), with the last
/// refusal's reason.
struct JitGraphStats {
  std::int64_t recorded = 0, replayed = 0, refused = 0;
  std::string last_reason;
};
JitGraphStats jit_graph_stats();

/// Turns graph replay on or off for the calls that follow (TESSERA_CUDA_GRAPHS
/// sets it at the start: "0" is off): benchmarks compare both in one run.
void set_jit_graphs(bool on);

}  // namespace tessera::detail
