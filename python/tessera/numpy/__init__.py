"""jax.numpy's names over Tessera's ops (the functions bound so far).

Functions take tessera Arrays, Python scalars (weakly typed: ``2.0 * x``
keeps x's dtype) and NumPy arrays (placed replicated on the other operand's
mesh). Creation functions take ``device=`` (a NamedSharding or a Device;
default: device 0) and default to float32 / int32 as JAX does.
"""

import numpy as _np

from tessera._core import Array as ndarray
from tessera._core import numpy_ops as _ops

_names = [n for n in dir(_ops) if not n.startswith("_")]
globals().update({n: getattr(_ops, n) for n in _names})

bool_ = _np.bool_
uint8 = _np.uint8
int8 = _np.int8
uint32 = _np.uint32
int32 = _np.int32
uint64 = _np.uint64
int64 = _np.int64
float32 = _np.float32
float64 = _np.float64
dtype = _np.dtype

pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan

__all__ = sorted(_names + ["ndarray", "bool_", "uint8", "int8", "uint32", "int32", "uint64", "int64", "float32",
                           "float64", "dtype", "pi", "e", "inf", "nan"])
del _names
