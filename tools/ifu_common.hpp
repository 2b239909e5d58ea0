// What the IFU commands (ifu.cpp, ifu_fit.cpp) share.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "ifu/config.hpp"

namespace tessera::cli {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0);

/// This process's peak resident memory so far.
double peak_rss_mib();

/// The config at `path`, or the built-in default config for "".
ifu::Config load(const std::string& path);

/// The BC03 templates: `given`, $TESSERA_IFU_DATA, or ifu-data/ beside the
/// build's tools/ folder (where scripts/fetch-bc03.sh puts them).
std::string find_ssp(const std::string& given);

/// Creates the folder a file is to be written in.
void make_parent(const std::string& file);

/// Process 0 runs `write` (prints, writes files); under mpirun every
/// process then learns whether it could, so that all exit alike: 0, or 1 on
/// the others while process 0 rethrows its error.
int finish_on_root(const std::function<void()>& write);

}  // namespace tessera::cli
