// Several processes, one program: multi-process meshes (JAX's
// multi-controller mode, jax.distributed).
//
// Launched by mpirun, every process runs the same program on its own CPU
// devices (TESSERA_NUM_CPU_DEVICES per process); devices() lists every
// process's devices, ordered by process, and a mesh may span them all. An
// array then holds buffers only for this process's devices:
// addressable_shards() returns those, and to_vector() of an array that is
// not fully addressable raises unless every element is held here (a fully
// replicated array). Ops, shard_map and jit run unchanged: each process
// computes its devices' blocks, and whatever crosses processes goes over
// MPI (collectives within a process stay in shared memory; a reduction
// combines each process's devices first, then crosses processes).
//
//   mpirun -np 2 -x TESSERA_NUM_CPU_DEVICES=2 ./my_program
//
// Every process must make the same calls in the same order (the SPMD
// contract); a process that fails or exits while others wait for it in a
// collective makes them raise CollectiveError naming it, within the
// collective timeout (config::collective_timeout()).
#pragma once

#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "tessera/array.hpp"

namespace tessera {

namespace distributed {
/// Joins the processes launched together by mpirun (reads the MPI
/// environment) and starts the runtime with this process's devices. Without
/// mpirun (or with one process) there is one process, as before. Called
/// implicitly by the first call that needs devices; calling it again does
/// nothing. DeviceError when launched with several processes by a Tessera
/// built without MPI.
void initialize();
/// True once the runtime (and the process group) has started.
bool is_initialized();
/// "mpi" when the processes communicate over MPI, "none" for one process.
const char* backend();
}  // namespace distributed

/// True when this process holds every block of `array` (every device of its
/// mesh is local).
bool is_fully_addressable(const Array& array);

namespace detail {
/// Fills `out` (row-major, dtype `as`) with the global value of `array` on
/// every process; a collective over the processes.
void process_allgather_raw(const Array& array, void* out, DType as);
/// Concatenates (tiled) or stacks every process's `nbytes` bytes in process
/// order; every process must pass the same size.
std::vector<unsigned char> process_allgather_bytes(const void* data, std::size_t nbytes);
/// make_array_from_process_local_data, type-erased.
Array array_from_process_local(const NamedSharding& sharding, const void* data, DType dtype, const Shape& local_shape,
                               const std::optional<Shape>& global_shape);
}  // namespace detail

/// The global value of `array`, row-major and converted to T, on every
/// process (JAX's multihost_utils.process_allgather of a global array). A
/// collective: every process must call it. With one process it is
/// to_vector().
template <class T>
std::vector<T> process_allgather(const Array& array) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<unsigned char> tmp(static_cast<std::size_t>(array.size()));
    detail::process_allgather_raw(array, tmp.data(), DType::bool_);
    return std::vector<bool>(tmp.begin(), tmp.end());
  } else {
    std::vector<T> out(static_cast<std::size_t>(array.size()));
    detail::process_allgather_raw(array, out.data(), dtype_of<T>());
    return out;
  }
}

/// Every process's host data, concatenated in process order (JAX's
/// process_allgather of host-local data with tiled=True; stack it yourself
/// for tiled=False: the result is process_count() equal parts). Every
/// process must pass the same number of elements.
template <class T>
std::vector<T> process_allgather(std::span<const T> local) {
  static_assert(!std::is_same_v<T, bool>, "process_allgather of host data: use std::uint8_t for booleans");
  std::vector<unsigned char> all = detail::process_allgather_bytes(local.data(), local.size_bytes());
  std::vector<T> out(all.size() / sizeof(T));
  if (!all.empty()) std::memcpy(out.data(), all.data(), all.size());
  return out;
}

/// An array from the part of it each process holds (JAX's
/// make_array_from_process_local_data). `local_data` (row-major, shape
/// `local_shape`) is the box of the global array covered by this process's
/// devices under `sharding`; every process passes its own. `global_shape`
/// defaults to the local shape scaled by how many processes share each
/// sharded dim (even division). ShapeError when the local shape does not
/// match the process's box; ShardingError when this process's blocks do not
/// form one box (use make_array_from_callback then).
template <class T>
Array make_array_from_process_local_data(const NamedSharding& sharding, std::span<const T> local_data,
                                         const Shape& local_shape, std::optional<Shape> global_shape = std::nullopt) {
  static_assert(!std::is_same_v<T, bool>, "make_array_from_process_local_data: use std::uint8_t and astype for bool");
  const std::int64_t n = detail::checked_numel(local_shape, "make_array_from_process_local_data");
  if (static_cast<std::int64_t>(local_data.size()) != n)
    throw ShapeError("[make_array_from_process_local_data] local data has " + std::to_string(local_data.size()) +
                     " elements but local shape " + shape_str(local_shape) + " needs " + std::to_string(n));
  return detail::array_from_process_local(sharding, local_data.data(), dtype_of<T>(), local_shape, global_shape);
}
template <class T>
Array make_array_from_process_local_data(const NamedSharding& sharding, const std::vector<T>& local_data,
                                         const Shape& local_shape, std::optional<Shape> global_shape = std::nullopt) {
  return make_array_from_process_local_data(sharding, std::span<const T>(local_data.data(), local_data.size()),
                                            local_shape, std::move(global_shape));
}

}  // namespace tessera
