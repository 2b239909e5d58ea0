#include "core/reduce_op.hpp"

#include "core/dispatch.hpp"

namespace tessera::detail {

const char* name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Any: return "any";
    case ReduceOp::All: return "all";
  }
  return "?";
}

void combine(ReduceOp op, DType t, void* acc, const void* in, std::int64_t count) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(acc);
    const T* b = static_cast<const T*>(in);
    with_op(op, [&](auto kind) {
      for (std::int64_t i = 0; i < count; ++i) a[i] = combine1<decltype(kind)::value, T>(a[i], b[i]);
    });
  });
}

}  // namespace tessera::detail
