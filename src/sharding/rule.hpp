// Sharding rules as data (Shardy's factor rules): how a primitive's operand
// and result dims share iteration factors, what each factor's mesh axes mean
// for the computation, and the surface the propagation engine
// (sharding/propagate.hpp) reads from a primitive to choose its layouts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  /// Halo over everything before each block (a scan: halo_lo = size - 1,
  /// halo_hi = 0) that is not moved: the engine carries the totals of the
  /// parts before each block instead (Primitive::scan_totals, eval_scan).
  bool scan = false;
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

/// A rule for the text forms only: every operand and result dim its own
/// factor (primitives that lower themselves from a user function).
ShardingRule own_factor_rule(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out);

/// What propagation reads from an operation: its rule and the constraints
/// around it. primitives/primitive.hpp's Primitive is one.
class Partitionable {
 public:
  virtual ~Partitionable() = default;
  virtual std::string_view name() const = 0;
  /// Operand and result dims as factors.
  virtual ShardingRule rule(std::span<const AbstractArray> in) const = 0;
  /// A result sharding the caller asked for (out_sharding); the engine lays
  /// the result out so, whatever the rule prefers.
  virtual std::optional<PartitionSpec> out_spec() const { return std::nullopt; }
  /// Message for operands whose shardings conflict on Explicit axes.
  virtual std::string conflict_message(std::span<const AbstractArray> in) const;
  /// Whole-array work in flops-like units, for the cost model.
  virtual double work(std::span<const AbstractArray> in, const std::vector<TypeInfo>& out) const;
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
  /// Ops whose communication no factor rule says (slices and pads of
  /// sharded dims, reshapes across sharded dims, data-dependent gathers;
  /// halos and scans are Halo factors the engine runs) partition
  /// themselves, as XLA's SPMD partitioner has a handler per such op. They
  /// return true here, override layouts(), and implement eval_global (in
  /// spmd/lower_*.cpp): the concrete operands in, results laid out exactly
  /// as layouts() said. Their rule() describes them for the text forms only.
  virtual bool lowers_itself() const { return false; }
  /// The operand whose layout the primitive keeps (-1: none, the engine
  /// chooses): every factor of its dims takes the mesh axes that dim
  /// carries, every other factor none, whatever the cost model would
  /// prefer; the other operands are brought to it and the results are laid
  /// out by those factors (a stencil's or a scan's result keeps x's layout,
  /// and a scan's float bits its blocks). A result layout asked for
  /// (out_spec) is reached from there.
  virtual int keeps_layout_of() const { return -1; }
};

}  // namespace tessera::detail
