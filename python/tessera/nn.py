"""jax.nn's functions (those bound so far): ``sigmoid``."""

from tessera._core import nn as _nn

sigmoid = _nn.sigmoid

__all__ = ["sigmoid"]
