// The trace stack and eager evaluation of primitives.
#include "transforms/trace.hpp"

#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "transforms/shard_map.hpp"

namespace tessera::detail {

namespace {
thread_local Trace* t_trace = nullptr;
}  // namespace

TraceScope::TraceScope(Trace* t) : prev_(t_trace) { t_trace = t; }
TraceScope::~TraceScope() { t_trace = prev_; }
Trace* current_trace() { return t_trace; }

Array make_tracer(const Trace* t, Shape shape, DType dtype, NamedSharding sharding,
                  std::shared_ptr<const void> payload, const char* traced_by, int value) {
  auto impl = std::make_shared<ArrayImpl>(std::move(shape), dtype, std::move(sharding));
  impl->trace = t;
  impl->value = value;
  impl->payload = std::move(payload);
  impl->traced_by = traced_by;
  return Array(std::move(impl));
}

std::vector<Array> bind(PrimitivePtr prim, std::vector<Array> args) {
  // Inside a shard_map body every trace (the body's, and jit, vmap or
  // autodiff traces within it) sees a captured array as the body's copy.
  args = manual_inputs(std::move(args));
  if (Trace* t = t_trace) return t->process(prim, args);
  return eval_eager(ExecContext::whole(), *prim, args);
}

}  // namespace tessera::detail
