// Random primitives: the samplers (uniform, normal), key_data, and split and
// fold_in on key arrays (u32 arrays of shape (*B, 2)).
//
// A sampler draws with a host Key (a parameter: params() prints its words,
// so the program text and cache tell keys apart) or with a key array holding
// one key (an operand, replicated by the front end first). Either way it has
// no operand that fixes its result layout, so it fixes it itself
// (layouts(): the sharding asked for) and every device draws its own block
// from the block's global box.
//
// split and fold_in transform keys locally: the front end brings the key
// dim whole first (and the data of fold_in to the keys' batch layout), and
// the results keep the keys' batch layout. They fix their layouts too, so
// the key array's layout decides, never a cost model.
#pragma once

#include <optional>

#include "primitives/primitive.hpp"
#include "tessera/ops.hpp"

namespace tessera::detail {

enum class Sampler { Uniform, Normal };

/// A sampler over `shape` laid out as `sharding`. With `key` it has no
/// operands; without, its one operand is a replicated key array of one key.
/// lo and hi (uniform) are already values of `dtype`.
PrimitivePtr make_sampler(Sampler kind, const Shape& shape, DType dtype, const NamedSharding& sharding,
                          std::optional<Key> key, double lo = 0.0, double hi = 1.0);
/// `keys` as a key array of `shape` ((2,) or (n, 2)) laid out as `sharding`.
PrimitivePtr make_key_data(std::vector<Key> keys, const Shape& shape, const NamedSharding& sharding);
/// Keys (*B, 2) with the key dim whole -> (*B, num, 2).
PrimitivePtr make_split(int num);
/// Keys (*B, 2) with the key dim whole, folded with `data` (a parameter), or
/// without it with a u32 operand of shape () or B laid out like the keys' batch.
PrimitivePtr make_fold_in(std::optional<std::uint32_t> data);

}  // namespace tessera::detail
