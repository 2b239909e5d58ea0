// The examples as one program of several processes (mpirun -np N): every
// process makes the same Tessera calls in the same order, its arrays hold the
// blocks of its own devices, and values that span processes are read with
// ts::process_allgather. These helpers keep the printing and the verdicts of
// such a program the same as with one process: process 0 prints, and a
// check passes only when it passed on every process.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <streambuf>

#include <tessera/tessera.hpp>

namespace examples {

/// `os` on process 0 and a stream that drops what is written on the others,
/// so that every process runs the printing code too (it may read arrays,
/// which must happen on every process) while one copy of the text appears.
inline std::ostream& on_process0(std::ostream& os) {
  struct Drop : std::streambuf {
    int overflow(int c) override { return traits_type::not_eof(c); }
    std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  };
  static Drop drop;
  static std::ostream dropped(&drop);
  return tessera::process_index() == 0 ? os : dropped;
}

/// True when `ok` on every process. A collective: every process calls it, in
/// the same order, so that each prints and counts the same verdict.
inline bool on_every_process(bool ok) {
  if (tessera::process_count() == 1) return ok;
  const std::uint8_t mine = ok ? 1 : 0;
  for (std::uint8_t v : tessera::process_allgather(std::span<const std::uint8_t>(&mine, 1)))
    if (v == 0) return false;
  return true;
}

/// The largest of every process's `n` (failure counts, so that every process
/// exits with the same code). A collective.
inline int max_over_processes(int n) {
  if (tessera::process_count() == 1) return n;
  int most = n;
  for (int v : tessera::process_allgather(std::span<const int>(&n, 1))) most = v > most ? v : most;
  return most;
}

/// The first device of this process: a one-device reference mesh must be
/// built on a device that this process holds (devices()[0] is process 0's).
inline tessera::Device first_local_device() { return tessera::local_devices().front(); }

}  // namespace examples
