// The trace stack. Every bind() goes to the innermost trace; with none
// pushed, primitives run eagerly. Only src/transforms/ knows which traces
// exist.
#pragma once

#include <vector>

#include "core/array_impl.hpp"
#include "primitives/primitive.hpp"
#include "sharding/propagate.hpp"
#include "spmd/engine.hpp"

namespace tessera::detail {

class Trace;
/// The innermost trace of this thread, or nullptr (eager).
Trace* current_trace();

class Trace {
 public:
  Trace() : parent_(current_trace()) {}
  virtual ~Trace() = default;
  /// Applies `prim` to `args` (some may belong to this trace).
  virtual std::vector<Array> process(const PrimitivePtr& prim, const std::vector<Array>& args) = 0;
  /// The trace that was innermost when this one was made. A transformation
  /// (vmap, jvp) applies its rules there: the rules' ops see the values
  /// inside its tracers, which belong to the parent (or are concrete).
  Trace* parent() const { return parent_; }
  /// True when `a` is one of this trace's values.
  bool owns(const Array& a) const { return a.valid() && a.impl()->trace == this; }

 private:
  Trace* parent_;
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

/// A value of trace `t` with the given type, carrying `payload`.
/// (`value`: its number in the trace, for traces that number their values.)
Array make_tracer(const Trace* t, Shape shape, DType dtype, NamedSharding sharding,
                  std::shared_ptr<const void> payload, const char* traced_by, int value = -1);

/// The payload of a value of a transformation's trace.
template <class P>
const P& payload_of(const Array& a) {
  return *static_cast<const P*>(a.impl()->payload.get());
}

/// True while jit traces a function on this thread (the innermost trace
/// is jit's).
bool tracing_jit();


}  // namespace tessera::detail
