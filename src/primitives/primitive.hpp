// The Primitive: the one surface every op presents to the traces.
//
// A front end (src/ops/) checks its arguments, builds a Primitive and binds
// it. Whatever trace is innermost then decides what binding means: run it
// now (eager), record it (jit), evaluate it per device (shard_map bodies).
// All of them read the same four things from the primitive:
//   - infer: result shapes and dtypes from the operands' abstract values;
//   - rule: how operand dims and result dims share factors (sharding rule as
//     data; src/sharding/propagate.hpp turns it into the communication);
//   - eval_cpu: the per-device kernel, which sees local blocks only;
//   - params: printable parameters (IR text and the jit cache key).
// Fusable primitives (elementwise) also evaluate on contiguous tiles so a
// compiled program can run a chain of them in one pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/elementwise_op.hpp"
#include "core/reduce_op.hpp"
#include "sharding/rule.hpp"
#include "tessera/array.hpp"

namespace tessera::detail {

/// Where global-view code runs: the whole mesh, or one member of a compiled
/// program (spmd/member.hpp, the layer above, which passes it down).
class ExecContext;

/// One block of one array on one device.
struct LocalIn {
  const void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;
  std::vector<Slice> box;  // global indices of the block
};
struct LocalOut {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;
  std::vector<Slice> box;
};
using LocalArgs = std::vector<LocalIn>;
using LocalOuts = std::vector<LocalOut>;

/// A reduction fed its operand's block tile by tile in row-major order (the
/// end of a fused loop); finish() writes its result block.
class TileSink {
 public:
  virtual ~TileSink() = default;
  virtual void feed(const void* tile, std::int64_t n) = 0;
  virtual void finish() = 0;
};

class Primitive : public Partitionable, public std::enable_shared_from_this<Primitive> {
 public:
  /// Result shapes and dtypes; raises the op's ShapeError/DTypeError.
  virtual std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const = 0;
  /// Per-device kernel over local blocks (mesh-agnostic).
  virtual void eval_cpu(const LocalArgs& in, LocalOuts& out) const = 0;
  /// The same on a CUDA device (backend/cuda/eval_<family>.cpp): the blocks
  /// are in the GPU's memory, and kernels go onto the calling thread's
  /// stream (eval_kernel waits for it). The default raises DeviceError
  /// "[op] has no CUDA kernel yet": nothing falls back to the host.
  virtual void eval_cuda(const LocalArgs& in, LocalOuts& out) const;
  /// Stencils whose kernels read an operand's rows from several buffers
  /// return true: the engine (spmd/engine.cpp) then leaves each device's
  /// own block in place, gathers only the rows of its halo before and after
  /// it (one halo dim per operand), and calls eval_halo. False: eval_cpu
  /// gets each widened block in one buffer, the own rows copied into it.
  virtual bool reads_halo_pieces() const { return false; }
  /// eval_cpu of a primitive that reads_halo_pieces: in[i].box is operand
  /// i's widened block; where pieces[i] is not empty, in[i].data is null and
  /// pieces[i] holds that block in row order along its halo dim (the rows
  /// before the own block, the own block, the rows after it; empty ones
  /// left out). They cover the box; the own block may reach past it.
  virtual void eval_halo(const LocalArgs&, const std::vector<LocalArgs>&, LocalOuts&) const {
    throw Error("[" + std::string(name()) + "] internal: eval_halo called on a primitive that reads no halo pieces");
  }
  /// A scan (its rule has a Halo factor marked `scan`) along a sharded dim
  /// runs in two per-block passes (spmd/engine.cpp). scan_totals: the
  /// totals of the operands' blocks along the scanned dim, into `totals`
  /// (the result block's shape with that dim 1, the result's dtype).
  virtual void scan_totals(const LocalArgs&, LocalOut&) const {
    throw Error("[" + std::string(name()) + "] internal: scan_totals called on a primitive that does not scan");
  }
  /// eval_scan: eval_cpu with every line starting from the sum, in part
  /// order, of `before`: the totals of the parts before this block along
  /// the scanned dim (one row per part there; none for the first part).
  virtual void eval_scan(const LocalArgs&, const LocalIn&, LocalOuts&) const {
    throw Error("[" + std::string(name()) + "] internal: eval_scan called on a primitive that does not scan");
  }
  /// eval_halo, scan_totals and eval_scan on a CUDA device: the blocks and
  /// pieces in the GPU's memory, kernels on the calling thread's stream
  /// (the engine waits for it). The defaults raise "[op] has no CUDA kernel
  /// yet".
  virtual void eval_halo_cuda(const LocalArgs&, const std::vector<LocalArgs>&, LocalOuts&) const { no_cuda_kernel(); }
  virtual void scan_totals_cuda(const LocalArgs&, LocalOut&) const { no_cuda_kernel(); }
  virtual void eval_scan_cuda(const LocalArgs&, const LocalIn&, LocalOuts&) const { no_cuda_kernel(); }
  /// True when eval_tile works: results are elementwise in operands of the
  /// result's shape, so a chain can run tile by tile.
  virtual bool fusable() const { return false; }
  /// out[0..n) = f(in[k][0..n)) for contiguous tiles of operands and result.
  virtual void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const;
  /// What eval_tile computes per element, for fused loops a backend
  /// generates; nullopt where the primitive has no such description (its
  /// group then runs eval_tile's tile loop).
  virtual std::optional<ElementExpr> element_expr() const { return std::nullopt; }
  /// True when the single result is the single operand itself, laid out as
  /// out_spec() says: no kernel runs, only the reshard.
  virtual bool identity() const { return false; }
  /// "op=add" style text; part of the IR and of the jit cache key.
  virtual std::string params() const { return ""; }
  /// True for single-operand primitives that can take their operand as a
  /// stream (reductions): a fused loop may end in them, feeding the
  /// operand's tiles instead of writing it to memory.
  virtual bool sinkable() const { return false; }
  /// The stream consumer for one device's blocks (sinkable() only). It must
  /// give bitwise what eval_cpu gives.
  virtual std::unique_ptr<TileSink> sink(const LocalIn& in, const LocalOut& out) const;
  /// How partial results over sharded reduction factors combine (a sum for
  /// dot products, a max for max-reductions).
  virtual ReduceOp partial_op() const { return ReduceOp::Sum; }

  /// For a primitive that lowers itself: its eval_global may run as each
  /// device's share inside a compiled program's one task per device (member
  /// mode, spmd/member.hpp). False for one that starts SPMD programs of its
  /// own (shard_map), which then runs between the program's tasks. `ctx`
  /// says which (spmd/member.hpp): every exchange and kernel loop it runs
  /// takes it.
  virtual bool runs_per_member() const { return true; }
  /// True when eval_global also runs on CUDA devices (its lowering moves
  /// data with the memory-space-aware copies and runs kernels through
  /// eval_kernel). False: on GPUs it raises "[op] this op on CUDA devices:
  /// not implemented yet".
  virtual bool lowers_on_cuda() const { return false; }
  virtual std::vector<Array> eval_global(const ExecContext& ctx, const std::vector<Array>& in,
                                         const std::vector<TypeInfo>& out,
                                         const std::vector<NamedSharding>& layouts) const;

  // Transformation rules (src/transforms/batch.cpp, jvp.cpp). They are
  // written with ops, which bind to the trace outside the transformation,
  // so a rule works eagerly, under jit and inside other transformations.

  /// vmap: operand i holds `size` examples along dim bdims[i] (-1: one value
  /// shared by every example). Returns the results and sets out_bdims to
  /// their batch dims (-1: the same for every example). The default runs
  /// the primitive once per example and stacks the results: right for every
  /// primitive, and slow; primitives override it.
  virtual std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t size,
                                   std::vector<int>& out_bdims) const;
  /// Forward-mode derivative: the results at `primals`, and in tangents_out
  /// their tangents along `tangents`. An empty Array is a zero tangent (in
  /// and out). Integer and boolean values have zero tangents. The default
  /// raises "[op] is not differentiable".
  virtual std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                                 std::vector<Array>& tangents_out) const;
  /// For a primitive linear in the operands marked `linear`: their
  /// cotangents (empty: zero) from the results' cotangents `cts` (empty:
  /// zero). `in` holds the other operands (the linear ones are empty there);
  /// `types` has every operand's type.
  virtual std::vector<Array> transpose(const std::vector<Array>& cts, const std::vector<Array>& in,
                                       const std::vector<AbstractArray>& types, const std::vector<bool>& linear) const;

 private:
  // What the default eval_cuda raises.
  [[noreturn]] void no_cuda_kernel() const {
    throw DeviceError("[" + std::string(name()) + "] has no CUDA kernel yet: it runs on CPU devices only so far " +
                      "(see docs/gpu.md for what runs on GPUs)");
  }
};

// Declarations of a primitive's parts, each defined in its layer (MLX's
// shape): type and rule in primitives/<family>.cpp, a lowering in
// spmd/lower_<family>.cpp, its kernel in backend/<name>/eval_<family>.cpp,
// its transformation rules in transforms/rules/<family>.cpp.
#define TESSERA_DECLARE_INFER std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const override
#define TESSERA_DECLARE_RULE ShardingRule rule(std::span<const AbstractArray> in) const override
#define TESSERA_DECLARE_EVAL_GLOBAL                                                                \
  std::vector<Array> eval_global(const ExecContext& ctx, const std::vector<Array>& in,              \
                                 const std::vector<TypeInfo>& out, const std::vector<NamedSharding>& layouts) \
      const override
#define TESSERA_DECLARE_EVAL_CPU void eval_cpu(const LocalArgs& in, LocalOuts& out) const override
#define TESSERA_DECLARE_EVAL_CUDA void eval_cuda(const LocalArgs& in, LocalOuts& out) const override
#define TESSERA_DECLARE_EVAL_TILE \
  void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const override
#define TESSERA_DECLARE_BATCH                                                                              \
  std::vector<Array> batch(const std::vector<Array>& in, const std::vector<int>& bdims, std::int64_t size, \
                           std::vector<int>& out_bdims) const override
#define TESSERA_DECLARE_JVP                                                                     \
  std::vector<Array> jvp(const std::vector<Array>& primals, const std::vector<Array>& tangents, \
                         std::vector<Array>& tangents_out) const override
#define TESSERA_DECLARE_TRANSPOSE                                                                        \
  std::vector<Array> transpose(const std::vector<Array>& cts, const std::vector<Array>& in,              \
                               const std::vector<AbstractArray>& types, const std::vector<bool>& linear) \
      const override

using PrimitivePtr = std::shared_ptr<const Primitive>;

/// Runs `prim`'s kernel for the device whose worker calls it: eval_cpu on a
/// CPU device; eval_cuda on a CUDA device, then waits for its stream (so
/// the blocks it read may be freed, and its errors are raised here).
void eval_kernel(const Primitive& prim, const LocalArgs& in, LocalOuts& out);
/// True when the calling thread runs a CUDA device's work.
bool on_cuda_device();

/// Applies `prim` to `args` in the innermost trace (src/transforms/trace.cpp).
std::vector<Array> bind(PrimitivePtr prim, std::vector<Array> args);
/// bind() for single-result primitives.
Array bind1(PrimitivePtr prim, std::vector<Array> args);

}  // namespace tessera::detail
