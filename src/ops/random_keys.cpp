// Key arrays: threefry keys as u32 data of shape (*B, 2), so keys shard and
// travel through shard_map like any array (JAX's key_data). Every operation
// here works per key and locally: a device transforms the keys it holds,
// with the same threefry calls as the Key forms in random.cpp, so results
// are bitwise those of the Key forms whatever the layout. The key dim itself
// is never split: an input sharded along it is first gathered along it.
#include <cstdint>
#include <string>

#include "backend/cpu/threefry.hpp"
#include "ops/common.hpp"

namespace tessera {
namespace {

using detail::msg;

/// ShapeError/DTypeError unless `keys` is a key array: u32, rank >= 1, last dim 2.
void check_keys(const Array& keys, const char* op) {
  detail::check_valid(keys, op, "keys");
  if (keys.dtype() != DType::u32)
    throw DTypeError(msg(op, "expected a key array of dtype u32 (from random::key_data), got " + detail::describe(keys)));
  if (keys.ndim() < 1 || keys.shape().back() != 2)
    throw ShapeError(msg(op, "expected a key array whose last dim has size 2 (k0, k1), got shape " +
                                 shape_str(keys.shape())));
}

/// `keys` with its last (key) dim unsharded: the other dims keep their axes.
Array key_dim_whole(const Array& keys, const char* op) {
  const int r = keys.ndim();
  auto axes = detail::spec_axes(keys.sharding(), r);
  if (axes[r - 1].empty()) return keys;
  axes[r - 1].clear();
  return detail::reshard_for(keys, NamedSharding(keys.sharding().mesh(), detail::make_spec(axes)), op);
}

/// The spec of keys (*B, 2) for the batch dims B followed by `extra` unsharded dims.
PartitionSpec batch_spec(const Array& keys, int extra) {
  auto axes = detail::spec_axes(keys.sharding(), keys.ndim());
  axes.pop_back();
  for (int i = 0; i < extra; ++i) axes.emplace_back();
  return detail::make_spec(axes);
}

const std::uint32_t* key_words(const Array& keys, int pos) {
  return static_cast<const std::uint32_t*>(detail::local_data(keys, pos));
}

}  // namespace

namespace random {

Array key_data(const Key& key, const NamedSharding& sharding) {
  sharding.check_rank(1, "key_data");
  const std::vector<std::uint32_t> words = {key.k0, key.k1};
  return device_put(words, {2}, sharding);
}

Array key_data(std::span<const Key> keys, const NamedSharding& sharding) {
  sharding.check_rank(2, "key_data");
  std::vector<std::uint32_t> words;
  words.reserve(keys.size() * 2);
  for (const Key& k : keys) {
    words.push_back(k.k0);
    words.push_back(k.k1);
  }
  return device_put(words, {static_cast<std::int64_t>(keys.size()), 2}, sharding);
}

Key wrap_key_data(const Array& data) {
  const char* op = "wrap_key_data";
  check_keys(data, op);
  if (data.size() != 2)
    throw ShapeError(msg(op, "expected one key (shape (2,) or (1, ..., 1, 2)), got shape " + shape_str(data.shape()) +
                                 "; split or index the key array first"));
  const auto w = data.to_vector<std::uint32_t>();
  return Key{w[0], w[1]};
}

Array split(const Array& keys, int num) {
  const char* op = "split";
  check_keys(keys, op);
  if (num < 0) throw ShapeError(msg(op, "num must be >= 0, got num=" + std::to_string(num)));
  const Array k = key_dim_whole(keys, op);
  Shape shape = k.shape();
  shape.back() = num;
  shape.push_back(2);
  const NamedSharding out(k.sharding().mesh(), batch_spec(k, 2));
  detail::record_none(k.sharding().mesh(), op);
  return detail::make_array(shape, DType::u32, out, [&](int pos, detail::Buffer& b) {
    const std::uint32_t* in = key_words(k, pos);
    auto* o = static_cast<std::uint32_t*>(b.data());
    const std::int64_t n = detail::num_elements(detail::local_shape(k, pos)) / 2;
    for (std::int64_t j = 0; j < n; ++j)
      for (int i = 0; i < num; ++i) {
        const auto w = detail::threefry_at(in[2 * j], in[2 * j + 1], static_cast<std::uint64_t>(i));
        o[(j * num + i) * 2] = w[0];
        o[(j * num + i) * 2 + 1] = w[1];
      }
  });
}

namespace {
/// Keys k (key dim whole) each folded with word(pos, j), j the key's index
/// in the block at mesh position pos.
template <class Word>
Array fold_keys(const Array& k, Word&& word) {
  return detail::make_array(k.shape(), DType::u32, k.sharding(), [&](int pos, detail::Buffer& b) {
    const std::uint32_t* in = key_words(k, pos);
    auto* o = static_cast<std::uint32_t*>(b.data());
    const std::int64_t n = detail::num_elements(detail::local_shape(k, pos)) / 2;
    for (std::int64_t j = 0; j < n; ++j) {
      const auto w = detail::threefry2x32(in[2 * j], in[2 * j + 1], 0u, word(pos, j));
      o[2 * j] = w[0];
      o[2 * j + 1] = w[1];
    }
  });
}
}  // namespace

Array fold_in(const Array& keys, std::uint32_t data) {
  const char* op = "fold_in";
  check_keys(keys, op);
  const Array k = key_dim_whole(keys, op);
  detail::record_none(k.sharding().mesh(), op);
  return fold_keys(k, [data](int, std::int64_t) { return data; });
}

Array fold_in(const Array& keys, const Array& data) {
  const char* op = "fold_in";
  check_keys(keys, op);
  detail::check_valid(data, op, "data");
  if (!detail::is_integer(data.dtype()) && data.dtype() != DType::bool_)
    throw DTypeError(msg(op, "expected integer data, got " + detail::describe(data)));
  detail::check_same_mesh({&keys, &data}, op);
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
  const NamedSharding ds(mesh, scalar ? P() : batch_spec(k, 0));
  const Array d = detail::cast(detail::reshard_for(data, ds, op), DType::u32);
  detail::record_none(mesh, op);
  return fold_keys(k, [&](int pos, std::int64_t j) {
    return static_cast<const std::uint32_t*>(detail::local_data(d, pos))[scalar ? 0 : j];
  });
}

namespace {
/// The one key of `key` for a sampler named `op` (errors name that sampler).
/// The words are read from a replicated copy through Array::impl(), not
/// through a host copy, so inside a shard_map body the draws made next still
/// count as varying wherever the key did.
Key one_key(const Array& key, const char* op) {
  check_keys(key, op);
  if (key.size() != 2)
    throw ShapeError(msg(op, "expected a key array holding one key (shape (2,)), got shape " + shape_str(key.shape()) +
                                 "; draw per key inside shard_map or index the keys first"));
  const Array whole = detail::reshard_for(key, NamedSharding(key.sharding().mesh(), P()), op);
  const std::uint32_t* w = key_words(whole, 0);
  return Key{w[0], w[1]};
}
NamedSharding replicated_on(const Array& key) { return NamedSharding(key.sharding().mesh(), P()); }
}  // namespace

Array uniform(const Array& key, const Shape& shape, DType dtype, const NamedSharding& sharding, double lo, double hi) {
  return uniform(one_key(key, "uniform"), shape, dtype, sharding, lo, hi);
}
Array uniform(const Array& key, const Shape& shape, DType dtype, double lo, double hi) {
  const Key k = one_key(key, "uniform");
  return uniform(k, shape, dtype, replicated_on(key), lo, hi);
}
Array normal(const Array& key, const Shape& shape, DType dtype, const NamedSharding& sharding) {
  return normal(one_key(key, "normal"), shape, dtype, sharding);
}
Array normal(const Array& key, const Shape& shape, DType dtype) {
  const Key k = one_key(key, "normal");
  return normal(k, shape, dtype, replicated_on(key));
}

}  // namespace random
}  // namespace tessera
