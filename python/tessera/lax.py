"""jax.lax's collectives, for shard_map bodies.

Each takes ``axis_name`` as a mesh axis name or a tuple of names (the
devices of all of them form the group). Outside a shard_map body they raise
``tessera.CollectiveError`` (``[psum] collectives are valid only inside
shard_map bodies``). ``x`` may be an Array or a pytree (tuple, list, dict)
of Arrays, as in JAX. While a collective waits for the other devices it
releases the GIL, so the other devices' bodies can reach it.
"""

import dataclasses as _dataclasses

import numpy as _np

from tessera._core import lax as _lax

__all__ = [
    "all_gather", "all_to_all", "axis_index", "axis_size", "pmax", "pmean", "pmin", "ppermute", "psum",
    "psum_scatter", "rsqrt", "with_sharding_constraint",
]


def _tree_map(f, x):
    # The pytree nodes of jit and shard_map: NamedTuples and dataclasses
    # keep their class.
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_tree_map(f, c) for c in x))
    if _dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _dataclasses.replace(x, **{fl.name: _tree_map(f, getattr(x, fl.name))
                                          for fl in _dataclasses.fields(x) if fl.init})
    if x is None or isinstance(x, str):  # static leaves pass through
        return x
    if isinstance(x, tuple):
        return tuple(_tree_map(f, c) for c in x)
    if isinstance(x, list):
        return [_tree_map(f, c) for c in x]
    if isinstance(x, dict):
        return {k: _tree_map(f, v) for k, v in x.items()}
    return f(x)


def _no_groups(op, axis_index_groups):
    if axis_index_groups is not None:
        raise NotImplementedError(f"{op}: axis_index_groups is not supported; name the mesh axes to reduce over")


def _names(axis_name):
    return (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)


def _is_constant(x):
    # Python and NumPy numbers: the same on every device (JAX's psum(1, "x")).
    return isinstance(x, (bool, int, float, _np.ndarray, _np.generic))


def psum(x, axis_name, *, axis_index_groups=None):
    """Sum over the devices of the named axes. A Python or NumPy number is the
    same on every device: its sum is the number times the group size."""
    _no_groups("psum", axis_index_groups)
    return _tree_map(lambda v: v * axis_size(axis_name) if _is_constant(v) else _lax.psum(v, axis_name), x)


def pmean(x, axis_name, *, axis_index_groups=None):
    _no_groups("pmean", axis_index_groups)
    return _tree_map(lambda v: _lax.pmean(v, axis_name), x)


def pmax(x, axis_name, *, axis_index_groups=None):
    _no_groups("pmax", axis_index_groups)
    return _tree_map(lambda v: _lax.pmax(v, axis_name), x)


def pmin(x, axis_name, *, axis_index_groups=None):
    _no_groups("pmin", axis_index_groups)
    return _tree_map(lambda v: _lax.pmin(v, axis_name), x)


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False):
    """Gathers x from the group's devices: stacked on a new dim at ``axis``, or
    concatenated along it with ``tiled=True`` (pieces may differ in size)."""
    _no_groups("all_gather", axis_index_groups)
    return _tree_map(lambda v: _lax.all_gather(v, axis_name, axis, tiled), x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """Sums over the group and leaves each device its part of ``scatter_dimension``."""
    _no_groups("psum_scatter", axis_index_groups)
    return _tree_map(lambda v: _lax.psum_scatter(v, axis_name, scatter_dimension, tiled), x)


def ppermute(x, axis_name, perm):
    """Sends x from axis index src to dst for each (src, dst) in perm; devices
    that receive nothing get zeros."""
    perm = [tuple(p) for p in perm]
    return _tree_map(lambda v: _lax.ppermute(v, axis_name, perm), x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    _no_groups("all_to_all", axis_index_groups)
    return _tree_map(lambda v: _lax.all_to_all(v, axis_name, split_axis, concat_axis, tiled), x)


def axis_index(axis_name):
    """This device's index along the axis (an int32 scalar Array); for a tuple
    of axes, the index in their row-major product, as JAX's."""
    names = _names(axis_name)
    index = _lax.axis_index(names[0])
    for name in names[1:]:
        index = index * _lax.axis_size(name) + _lax.axis_index(name)
    return index


def axis_size(axis_name):
    """The number of devices along the axis (the product for a tuple)."""
    size = 1
    for name in _names(axis_name):
        size *= _lax.axis_size(name)
    return size


def rsqrt(x):
    """1 / sqrt(x), elementwise (jax.lax.rsqrt); works anywhere, not only in bodies."""
    return _lax.rsqrt(x)


def with_sharding_constraint(x, shardings):
    """x (an Array or a pytree of them) moved to ``shardings``: a NamedSharding
    or a PartitionSpec on x's mesh, one for every array (JAX's
    jax.lax.with_sharding_constraint; under jit the program reshards there)."""
    return _tree_map(lambda v: _lax.with_sharding_constraint(v, shardings), x)
