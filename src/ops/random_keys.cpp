// Key arrays: threefry keys as u32 data of shape (*B, 2), so keys shard and
// travel through shard_map like any array (JAX's key_data). Every operation
// here works per key and locally: a device transforms the keys it holds,
// with the same kernels as the Key forms in random.cpp, so results are
// bitwise those of the Key forms whatever the layout. The key dim itself is
// never split: an input sharded along it is first gathered along it (a
// sharding constraint bound before the primitive, so jit records it too).
#include <cstdint>
#include <string>

#include "core/array_impl.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "ops/random.hpp"
#include "primitives/elementwise.hpp"
#include "primitives/random.hpp"

namespace tessera {
namespace {

using detail::msg;

/// ShapeError/DTypeError unless `keys` is a key array: u32, rank >= 1, last dim 2.
void check_keys(const Array& keys, const char* op) {
  detail::check_operand(keys, op, "keys");
  if (keys.dtype() != DType::u32)
    throw DTypeError(msg(op, "expected a key array of dtype u32 (from random::key_data), got " + detail::describe(keys)));
  if (keys.ndim() < 1 || keys.shape().back() != 2)
    throw ShapeError(msg(op, "expected a key array whose last dim has size 2 (k0, k1), got shape " +
                                 shape_str(keys.shape())));
}

/// `a` laid out as `s`: the value itself when it already is, else the
/// identity primitive that reshards it (communication recorded under `op`).
/// `op` is a string literal (the primitive keeps the pointer).
Array laid_out(const Array& a, const NamedSharding& s, const char* op) {
  if (a.sharding() == s) return a;
  return detail::bind1(detail::make_constraint(op, s), {a});
}

/// `keys` with its last (key) dim unsharded: the other dims keep their axes.
Array key_dim_whole(const Array& keys, const char* op) {
  const int r = keys.ndim();
  auto axes = detail::spec_axes(keys.sharding(), r);
  if (axes[r - 1].empty()) return keys;
  axes[r - 1].clear();
  return laid_out(keys, NamedSharding(keys.sharding().mesh(), detail::make_spec(axes)), op);
}

/// Eager key ops list themselves in explain() as moving nothing beyond the
/// gathers of the key dim. A result that is a traced value (jit's, or a
/// transformation's) was only recorded, not computed: under jit the
/// program's steps show what it moves instead. (Inside a shard_map body the
/// result is a local block; a body's records are dropped, its collectives
/// report for it.)
void record_local(const Array& out, const Mesh& mesh, const char* op) {
  if (!out.impl()->trace) detail::record_none(mesh, op);
}

}  // namespace

namespace random {

Array key_data(const Key& key, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  sharding.check_rank(1, "key_data");
  return detail::bind1(detail::make_key_data({detail::KeyWords{key.k0, key.k1}}, {2}, sharding), {});
}

Array key_data(std::span<const Key> keys, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  sharding.check_rank(2, "key_data");
  const Shape shape{static_cast<std::int64_t>(keys.size()), 2};
  detail::checked_nbytes(shape, DType::u32, "device_put");
  std::vector<detail::KeyWords> words;
  words.reserve(keys.size());
  for (const Key& k : keys) words.push_back(detail::KeyWords{k.k0, k.k1});
  return detail::bind1(detail::make_key_data(words, shape, sharding), {});
}

Key wrap_key_data(const Array& data) {
  const char* op = "wrap_key_data";
  // Reads the key to the host: concrete arrays only.
  detail::check_valid(data, op, "keys");
  check_keys(data, op);
  if (data.size() != 2)
    throw ShapeError(msg(op, "expected one key (shape (2,) or (1, ..., 1, 2)), got shape " + shape_str(data.shape()) +
                                 "; split or index the key array first"));
  const auto w = data.to_vector<std::uint32_t>();
  return Key{w[0], w[1]};
}

Array split(const Array& keys, int num, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "split";
  check_keys(keys, op);
  if (num < 0) throw ShapeError(msg(op, "num must be >= 0, got num=" + std::to_string(num)));
  const Array k = key_dim_whole(keys, op);
  Array out = detail::bind1(detail::make_split(num), {k});
  record_local(out, k.sharding().mesh(), op);
  return out;
}

Array fold_in(const Array& keys, std::uint32_t data, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "fold_in";
  check_keys(keys, op);
  const Array k = key_dim_whole(keys, op);
  Array out = detail::bind1(detail::make_fold_in(data), {k});
  record_local(out, k.sharding().mesh(), op);
  return out;
}

Array fold_in(const Array& keys, const Array& data, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "fold_in";
  check_keys(keys, op);
  detail::check_operand(data, op, "data");
  if (!detail::is_integer(data.dtype()) && data.dtype() != DType::bool_)
    throw DTypeError(msg(op, "expected integer data, got " + detail::describe(data)));
  detail::check_same_mesh(keys.sharding().mesh(), data.sharding().mesh(), op);
  const Array k = key_dim_whole(keys, op);
  Shape batch = k.shape();
  batch.pop_back();
  const bool scalar = data.ndim() == 0;
  if (!scalar && data.shape() != batch)
    throw ShapeError(msg(op, "expected data of shape () or " + shape_str(batch) + " (one value per key), got " +
                                 shape_str(data.shape())));
  // Per key, the data word where the key is: a scalar as it is (replicated),
  // else laid out like the keys' batch dims. Values wrap modulo 2^32.
  const Mesh& mesh = k.sharding().mesh();
  const NamedSharding ds = scalar ? NamedSharding(mesh, P()) : detail::key_batch_layout(k.sharding(), k.ndim(), 0);
  const Array d = detail::cast(laid_out(data, ds, op), DType::u32);
  Array out = detail::bind1(detail::make_fold_in(std::nullopt), {k, d});
  record_local(out, mesh, op);
  return out;
}

namespace {

/// The one key of `key` read to the host, for a draw on another mesh than
/// the key's. The words are read from a replicated copy through
/// Array::impl(), not through a host copy, so inside a shard_map body the
/// draws made next still count as varying wherever the key did.
detail::KeyWords one_key_on_host(const Array& key, const char* op) {
  if (key.impl()->trace)
    throw ShardingError(msg(op, "the key array " + detail::describe(key) + " is on " + key.sharding().mesh().str() +
                                    " but the draw is laid out on another mesh; under jit both must be on the "
                                    "program's mesh"));
  const Array whole = detail::reshard_for(key, NamedSharding(key.sharding().mesh(), P()), op);
  std::uint32_t w[2];  // from a GPU's memory too
  detail::read_buffer(whole.impl()->buffers[0], w, sizeof w, op);
  return detail::KeyWords{w[0], w[1]};
}

NamedSharding replicated_on(const Array& key) { return NamedSharding(key.sharding().mesh(), P()); }

/// A draw from a key array holding one key. The key is the sampler's
/// operand, replicated first, so the draw is traced (jit) and its values
/// vary wherever the key did (shard_map). `on_key_mesh`: the caller gave no
/// sharding (`sharding` is replicated_on(key)), so the draw lies wherever
/// the trace reads the key (inside a shard_map body, a captured key's copy).
Array sample(detail::Sampler kind, const Array& key, const Shape& shape, DType dtype, const NamedSharding& sharding,
             double lo, double hi, const char* op, bool on_key_mesh = false) {
  check_keys(key, op);
  if (key.size() != 2)
    throw ShapeError(msg(op, "expected a key array holding one key (shape (2,)), got shape " + shape_str(key.shape()) +
                                 "; draw per key inside shard_map or index the keys first"));
  detail::check_sample(shape, dtype, sharding, op);
  if (kind == detail::Sampler::Uniform) std::tie(lo, hi) = detail::uniform_bounds(dtype, lo, hi, op);
  if (!(key.sharding().mesh() == sharding.mesh()))
    return detail::bind1(detail::make_sampler(kind, shape, dtype, sharding, one_key_on_host(key, op), lo, hi), {});
  return detail::bind1(detail::make_sampler(kind, shape, dtype, sharding, std::nullopt, lo, hi, on_key_mesh),
                       {laid_out(key, replicated_on(key), op)});
}

}  // namespace

Array uniform(const Array& key, const Shape& shape, DType dtype, const NamedSharding& sharding, double lo, double hi, std::source_location loc) {
  detail::CallSite site(loc);
  return sample(detail::Sampler::Uniform, key, shape, dtype, sharding, lo, hi, "uniform");
}
Array uniform(const Array& key, const Shape& shape, DType dtype, double lo, double hi, std::source_location loc) {
  detail::CallSite site(loc);
  check_keys(key, "uniform");
  return sample(detail::Sampler::Uniform, key, shape, dtype, replicated_on(key), lo, hi, "uniform", true);
}
Array normal(const Array& key, const Shape& shape, DType dtype, const NamedSharding& sharding, std::source_location loc) {
  detail::CallSite site(loc);
  return sample(detail::Sampler::Normal, key, shape, dtype, sharding, 0.0, 1.0, "normal");
}
Array normal(const Array& key, const Shape& shape, DType dtype, std::source_location loc) {
  detail::CallSite site(loc);
  check_keys(key, "normal");
  return sample(detail::Sampler::Normal, key, shape, dtype, replicated_on(key), 0.0, 1.0, "normal", true);
}

}  // namespace random
}  // namespace tessera
