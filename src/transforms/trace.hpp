// The trace stack. Every bind() goes to the innermost trace; with none
// pushed, primitives run eagerly. Only src/transforms/ knows which traces
// exist.
#pragma once

#include <vector>

#include "primitives/primitive.hpp"
#include "sharding/propagate.hpp"

namespace tessera::detail {

class Trace {
 public:
  virtual ~Trace() = default;
  /// Applies `prim` to `args` (some may belong to this trace).
  virtual std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) = 0;
};

/// Pushes a trace for the current thread's scope (RAII).
class TraceScope {
 public:
  explicit TraceScope(Trace* t);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Trace* prev_;
};

/// The innermost trace of this thread, or nullptr (eager).
Trace* current_trace();

/// Abstract values of concrete or traced arrays.
std::vector<AbstractArray> abstract_of(const std::vector<Array>& args);

/// Eager evaluation: partition, move operands, run the kernel on every
/// device, combine partial results.
std::vector<Array> eval_eager(const Primitive& prim, const std::vector<Array>& args);

/// The same with the partition already chosen (jit's fallback per op).
std::vector<Array> eval_partitioned(const Primitive& prim, const std::vector<Array>& args,
                                    const std::vector<TypeInfo>& types, const Partition& part);

}  // namespace tessera::detail
