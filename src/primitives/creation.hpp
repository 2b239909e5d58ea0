// Creation primitives: zeros, ones, full, scalar (one fill), arange,
// linspace, eye. They have no operands, so nothing tells the engine a mesh:
// each fixes its result layout itself (layouts() returns the sharding the
// caller asked for), and every device fills its own block from the block's
// global box. Nothing crosses devices.
#pragma once

#include "backend/cpu/creation.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// `value` points to one element already of dtype `dtype`; `text` prints it.
/// `name` is the front end's (zeros, ones, full, scalar).
PrimitivePtr make_fill(const char* name, const Shape& shape, DType dtype, const NamedSharding& sharding,
                       const void* value, std::string text);
PrimitivePtr make_arange(std::int64_t n, double start, double step, DType dtype, const NamedSharding& sharding);
PrimitivePtr make_linspace(const cpu::LinspaceParams& p, DType dtype, const NamedSharding& sharding);
/// `k` already clamped to [-n, m].
PrimitivePtr make_eye(std::int64_t n, std::int64_t m, std::int64_t k, DType dtype, const NamedSharding& sharding);

/// The rule of a primitive without operands: one pass-through factor per
/// result dim, "()->([i,j]) {i=13,j=7}".
ShardingRule creation_rule(const Shape& shape);

}  // namespace tessera::detail
