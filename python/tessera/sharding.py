"""Meshes and shardings, as jax.sharding."""

from tessera._core import AxisType, Mesh, NamedSharding, PartitionSpec

__all__ = ["AxisType", "Mesh", "NamedSharding", "PartitionSpec"]
