// Native fused loops: jit's fused elementwise groups compiled to one
// register-resident loop per group.
//
// A group's loop is generated as C++ source: the text of
// kernels/scalar_math.hpp (the per-element functions the eager kernels call),
// then one function whose loop body calls them member by member, keeping
// every intermediate in registers. The system's C++ compiler builds it into
// a shared object at run time, which is loaded with dlopen and cached: in
// memory per process, and on disk (TESSERA_KERNEL_CACHE, else
// $XDG_CACHE_HOME/tessera/kernels, else ~/.cache/tessera/kernels) under a
// hash of the source, the compiler and the CPU, so a later process loads it
// without compiling. This is MLX's choice for its CPU backend, taken for
// the same reasons: the compiler is already on every machine that builds
// Tessera, it vectorises for the CPU it runs on (-march=native), and
// nothing as large as LLVM's ORC JIT joins the dependencies. The cost is
// a compile of a few hundred milliseconds the first time a group is seen.
//
// Bits: the generated loop calls the same functions as the eager kernels,
// compiled with the same rules (-ffp-contract=off, no fast-math), so each
// element gets the eager bits. The polynomial kernels set a flag for an
// element beyond their range; a tile with such an element is recomputed
// by the tile loop (per-op kernels, the slow paths for those elements).
//
// When no compiler is found or it fails, nothing changes but speed: jit
// runs the tile loop (backend/cpu/compiled.hpp), as it does for groups
// with a member that has no element expression.
//
// TESSERA_NATIVE_KERNELS: `auto` (default) compiles groups whose largest
// block has at least native_min_elements() elements, where the loop's
// speed outweighs a compile; `always` every group; `off` none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/elementwise_op.hpp"
#include "tessera/dtype.hpp"

namespace tessera::cpu {

/// A fused group as its loop sees it: members in order, each reading
/// external inputs (tiles of memory) or earlier members' values.
struct NativeGroup {
  struct Arg {
    int member = -1;  // >= 0: the value of this earlier member
    int input = -1;   // else: external input number `input`
  };
  struct Member {
    detail::ElementExpr expr;
    std::vector<Arg> args;
    int output = -1;  // >= 0: the loop writes this member's value to output number `output`
  };
  std::vector<Member> members;
  std::vector<DType> inputs;  // the external inputs' dtypes
  int num_outputs = 0;
};

/// A compiled loop and the scalar operands of its group. fn computes n
/// elements of a tile from in[k] (input k's tile) into out[k]; it returns
/// nonzero when some element was beyond a polynomial's range, and the
/// caller then recomputes the tile with the tile loop.
struct NativeKernel {
  using Fn = unsigned (*)(const void* const* in, void* const* out, const double* f, const std::int64_t* i,
                          std::int64_t n);
  Fn fn = nullptr;
  std::vector<double> f;         // scalar operands of float dtype, in the order the source reads them
  std::vector<std::int64_t> i;   // of integer and bool dtypes
  std::string key;               // the hash naming it in the disk cache
};

enum class NativeMode { Off, Auto, Always };

/// The mode: set_native_mode's, else TESSERA_NATIVE_KERNELS's, else Auto.
NativeMode native_mode();
/// A value of TESSERA_NATIVE_KERNELS (nullptr or "": Auto); another value
/// raises an Error naming the variable.
NativeMode parse_native_mode(const char* value);
void set_native_mode(NativeMode mode);
/// Auto mode compiles a group whose largest block has at least this many elements.
std::int64_t native_min_elements();

/// Which compiler a loop's source is for: the host's C++ compiler (a shared
/// object with the CPU loop), or NVRTC (a CUDA kernel, one element per
/// thread). Both are the same member expressions over the same prelude
/// (kernels/portable.hpp, kernels/scalar_math.hpp), written for the target.
enum class NativeTarget { Cpu, Cuda };

/// A CUDA loop's operands come by value in one struct of 8-byte words:
/// input pointers, output pointers, float scalars (double), integer scalars
/// (long long), each array at least one long. The caller packs the words in
/// this order (backend/cuda/fused.hpp). Kernel parameters may take 32764
/// bytes on the GPUs the backend builds for (CUDA 12.1+, Volta+); a group
/// needing more is not fused on GPUs.
struct CudaArgsLayout {
  std::size_t in = 1, out = 1, f = 1, i = 1, words = 4;
};
inline CudaArgsLayout cuda_args_layout(std::size_t in, std::size_t out, std::size_t f, std::size_t i) {
  CudaArgsLayout l;
  l.in = in > 0 ? in : 1;
  l.out = out > 0 ? out : 1;
  l.f = f > 0 ? f : 1;
  l.i = i > 0 ? i : 1;
  l.words = l.in + l.out + l.f + l.i;
  return l;
}
inline constexpr std::size_t kCudaMaxArgBytes = 32000;

/// The shape of a CUDA loop's steps. `step`: elements per step, a grid
/// stride apart (0: the generator's choice, gpu_step). `split`: a
/// loop with a polynomial (sin, exp, ...) is two kernels, the polynomials
/// alone (`tessera_fused`) and the fix-up (`tessera_fused_fix`) that runs
/// only where an element was beyond a polynomial's range; else one kernel
/// with both. The same values every way; only the speed differs.
///
/// The kernels: `tessera_fused(args, n, slot)`, and with the split
/// `tessera_fused_fix(args, n, slot, force)`. `slot` (0 to
/// kCudaFixSlots - 1) is the mark the pair shares, one per stream that
/// launches them at the same time (backend/cuda/fused.hpp).
struct CudaLoopShape {
  int step = 0;
  bool split = true;
};
inline constexpr int kCudaFixSlots = 256;
/// Tessera device `device_id`'s slot, the same for the process's life (one
/// per device: a device's stream orders its launches). Raises DeviceError
/// naming `op` for a device beyond the kCudaFixSlots-th.
int cuda_fix_slot(int device_id, const char* op);
/// For benchmarks comparing shapes in one run: sources generated from then
/// on take `shape` (their kernels are cached apart, the source differing).
/// A step outside 0..32 raises ValueError.
void set_cuda_loop_shape(CudaLoopShape shape);
CudaLoopShape cuda_loop_shape();

/// The source of g's loop, or "" when some member has no element
/// expression this generator knows (or, for CUDA, more operands than its
/// struct holds).
/// With `f`/`i`: the group's float and integer scalar operands, in the
/// order the source reads them.
/// A CUDA source takes `shape`, else cuda_loop_shape().
std::string native_source(const NativeGroup& g, NativeTarget target = NativeTarget::Cpu,
                          std::vector<double>* f = nullptr, std::vector<std::int64_t>* i = nullptr,
                          const CudaLoopShape* shape = nullptr);

/// The disk cache of compiled loops (TESSERA_KERNEL_CACHE, else
/// $XDG_CACHE_HOME/tessera/kernels, else ~/.cache/tessera/kernels), made on
/// first use; the GPU's fused kernels are kept there too.
const std::string& kernel_cache_dir();

/// g's compiled loop: from the in-memory cache, the disk cache or the
/// compiler (under one lock, so concurrent callers compile it once);
/// nullptr when native_source is "" or the compiler is missing or fails.
std::shared_ptr<const NativeKernel> native_kernel(const NativeGroup& g);

/// Counters for tests and benchmarks.
struct NativeStats {
  std::int64_t compiled = 0;     // sources compiled by this process
  std::int64_t loaded = 0;       // shared objects loaded from the disk cache
  std::int64_t failed = 0;       // compiles that failed (or found no compiler)
  std::int64_t reused = 0;       // kernels found in the in-memory cache
  std::int64_t tiles_redone = 0; // tiles recomputed by the tile loop (an element beyond a polynomial's range)
  std::string last_error;        // the first lines of the last failure's log
};
NativeStats native_stats();
void note_tile_redone();
/// Forgets the in-memory cache (tests: the next request goes to disk).
void forget_native_kernels();

}  // namespace tessera::cpu
