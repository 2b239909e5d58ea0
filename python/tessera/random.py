"""jax.random's keys and samplers: threefry-2x32, bitwise JAX's values (with
``jax_threefry_partitionable``, JAX's default).

A key is a key array: a uint32 Array whose last dim holds the key's two
words, as ``jax.random.PRNGKey`` gives (``key`` gives the same: Tessera has
no typed key arrays). ``key_data`` is therefore the identity. Keys shard,
reshard, pass through shard_map in_specs, jit and vmap like any array; a
value drawn depends only on the key and its global index, so it is the same
for every mesh and sharding. Samplers take ``out_sharding=`` (a
NamedSharding); without one the result is replicated on the key's mesh
(inside a shard_map body: local). ``key(seed)`` lives on device 0: move it
with ``device_put`` or pass keys into shard_map bodies as arguments.
"""

import numpy as _np

from tessera._core import Array as _Array
from tessera._core import device_put as _device_put
from tessera._core import random as _random

__all__ = ["PRNGKey", "fold_in", "key", "key_data", "normal", "split", "uniform", "wrap_key_data"]


def key(seed):
    """A key from an int seed: uint32[2] ``(seed >> 32, seed & 0xffffffff)``;
    negative seeds as their 64-bit two's complement (JAX with x64)."""
    return _random.key(seed)


PRNGKey = key


def split(key, num=2):
    """``num`` new keys from each: shape (*B, 2) -> (*B, num, 2); one key (2,) -> (num, 2)."""
    return _random.split(key, num)


def fold_in(key, data):
    """Each key folded with ``data``: an int (modulo 2^32) or an integer Array
    (a scalar, e.g. ``lax.axis_index`` in a body, or one value per key)."""
    return _random.fold_in(key, data)


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0, *, out_sharding=None):
    """Uniform floats in [minval, maxval) (float32 by default, or float64)."""
    return _random.uniform(key, shape, dtype, float(minval), float(maxval), out_sharding=out_sharding)


def normal(key, shape=(), dtype=None, *, out_sharding=None):
    """Standard normal floats (float32 by default, or float64)."""
    return _random.normal(key, shape, dtype, out_sharding=out_sharding)


def key_data(keys):
    """The uint32 words of the keys: the key array itself (keys are raw here)."""
    return keys


def wrap_key_data(key_bits):
    """Keys from their uint32 words, shape (*B, 2): an Array as it is, a NumPy
    array placed on device 0."""
    if isinstance(key_bits, _Array):
        return key_bits
    return _device_put(_np.asarray(key_bits, dtype=_np.uint32))
