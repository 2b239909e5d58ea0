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

#include "core/reduce_op.hpp"
#include "tessera/array.hpp"

namespace tessera::detail {

/// An array as the rules see it: no data.
struct AbstractArray {
  Shape shape;
  DType dtype = DType::f32;
  NamedSharding sharding;
};

/// "f32[8@x,4]".
std::string type_str(const AbstractArray& a);

/// Result shape and dtype (the sharding comes from the rule).
struct TypeInfo {
  Shape shape;
  DType dtype = DType::f32;
};

/// What a factor's mesh axes mean for the computation (Shardy's factor
/// kinds). A factor is one iteration dimension shared by operand and result
/// dims of the same size.
enum class FactorKind {
  PassThrough,      // sharded alike everywhere it appears; no communication
  Reduction,        // in operands only: sharding it leaves partial results, summed over its axes
  NeedReplication,  // must be whole on every device
  Permutation,      // data moves along it (flip, roll): replicated here
  Halo,             // sharded with neighbours' edges (stencils)
};

struct Factor {
  std::int64_t size = 0;
  FactorKind kind = FactorKind::PassThrough;
  std::int64_t halo_lo = 0, halo_hi = 0;  // Halo: elements needed before / after each block
};

/// Operand and result dims mapped to factors; -1 marks a dim outside every
/// factor (a size-1 dim broadcast against a larger one), which is never
/// sharded.
struct ShardingRule {
  std::vector<Factor> factors;
  std::vector<std::vector<int>> operands;
  std::vector<std::vector<int>> results;
  /// "([i,j],[j])->([i,j]) {i=8,j=4}", with " reduction={k}" and the like
  /// for factors that are not pass-through.
  std::string str() const;
};

/// The elementwise rule over `operands` broadcast to `out` (right-aligned;
/// a size-1 dim against a larger one maps to no factor).
ShardingRule elementwise_rule(const std::vector<Shape>& operands, const Shape& out, int num_results = 1);

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

class Primitive : public std::enable_shared_from_this<Primitive> {
 public:
  virtual ~Primitive() = default;
  virtual std::string_view name() const = 0;
  /// Result shapes and dtypes; raises the op's ShapeError/DTypeError.
  virtual std::vector<TypeInfo> infer(std::span<const AbstractArray> in) const = 0;
  /// Operand and result dims as factors.
  virtual ShardingRule rule(std::span<const AbstractArray> in) const = 0;
  /// A result sharding the caller asked for (out_sharding); the engine lays
  /// the result out so, whatever the rule prefers.
  virtual std::optional<PartitionSpec> out_spec() const { return std::nullopt; }
  /// Message for operands whose shardings conflict on Explicit axes.
  virtual std::string conflict_message(std::span<const AbstractArray> in) const;
  /// Per-device kernel over local blocks (mesh-agnostic).
  virtual void eval_cpu(const LocalArgs& in, LocalOuts& out) const = 0;
  /// Whole-array work in flops-like units, for the cost model.
  virtual double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const;
  /// True when eval_tile works: results are elementwise in operands of the
  /// result's shape, so a chain can run tile by tile.
  virtual bool fusable() const { return false; }
  /// out[0..n) = f(in[k][0..n)) for contiguous tiles of operands and result.
  virtual void eval_tile(std::span<const void* const> in, void* out, std::int64_t n) const;
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
  /// True when every factor keeps the mesh axes its operand dims carry (the
  /// assignment Explicit axes get), whatever the cost model would prefer:
  /// operands are used where they lie, and out_spec is reached from there.
  /// Reductions: gathering a sharded reduced dim instead of combining
  /// partials would make a float result's bits depend on a cost decision.
  virtual bool keeps_operand_layouts() const { return false; }

  /// Result layouts the primitive fixes itself instead of the engine
  /// choosing them from the rule (std::nullopt: the engine chooses). Used by
  /// creation ops (no operands; the layout is a parameter) and by every
  /// primitive that lowers itself. Operands are then used as they are.
  virtual std::optional<std::vector<NamedSharding>> layouts(std::span<const AbstractArray> in,
                                                            const std::vector<TypeInfo>& out) const;
  /// Ops whose communication is more than "bring the operands to a layout,
  /// run the kernel, combine partial results" (halo exchanges, slices and
  /// pads of sharded dims, reshapes across sharded dims, scans carrying
  /// totals between devices, data-dependent gathers) partition themselves,
  /// as XLA's SPMD partitioner has a handler per such op. They return true
  /// here, override layouts(), and implement eval_global: the concrete
  /// operands in, results laid out exactly as layouts() said. Their rule()
  /// describes them for the text forms only.
  virtual bool lowers_itself() const { return false; }
  /// For a primitive that lowers itself: its eval_global may run as each
  /// device's share inside a compiled program's one task per device (member
  /// mode, comm/member.hpp). False for one that starts SPMD programs of its
  /// own (shard_map), which then runs between the program's tasks.
  virtual bool runs_per_member() const { return true; }
  virtual std::vector<Array> eval_global(const std::vector<Array>& in, const std::vector<TypeInfo>& out,
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
                                       const std::vector<AbstractArray>& types,
                                       const std::vector<bool>& linear) const;
};

using PrimitivePtr = std::shared_ptr<const Primitive>;

/// Applies `prim` to `args` in the innermost trace (src/transforms/trace.cpp).
std::vector<Array> bind(PrimitivePtr prim, std::vector<Array> args);
/// bind() for single-result primitives.
Array bind1(PrimitivePtr prim, std::vector<Array> args);

}  // namespace tessera::detail
