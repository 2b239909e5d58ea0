"""Tessera: SPMD computation on sharded arrays, with JAX's names.

    import tessera as ts
    import tessera.numpy as tnp
    from tessera.sharding import NamedSharding, PartitionSpec as P

    mesh = ts.make_mesh((2, 4), ("x", "y"))
    a = ts.device_put(np.ones((10, 7), np.float32), NamedSharding(mesh, P("x", "y")))
    y = tnp.sum(2.0 * tnp.sin(a) + 1.0, axis=1)

The number of CPU devices comes from TESSERA_NUM_CPU_DEVICES (set it before
the first call that needs devices) or ts.config.set_num_cpu_devices(n).
See docs/python.md.
"""

from tessera._core import (
    Array,
    AxisType,
    CollectiveError,
    CommRecord,
    DeviceError,
    DTypeError,
    Device,
    Error,
    Explanation,
    Mesh,
    NamedSharding,
    PartitionSpec,
    Shard,
    ShapeError,
    ShardingError,
    ValueError,
    __version__,
    config,
    device_count,
    device_put,
    devices,
    explain,
    format_bytes,
    grad,
    jacfwd,
    jacrev,
    jit,
    jvp,
    local_device_count,
    local_devices,
    make_mesh,
    plan_reshard,
    process_count,
    process_index,
    reshard,
    stop_gradient,
    typeof,
    value_and_grad,
    visualize_array_sharding,
    visualize_sharding_str,
    vjp,
    vmap,
)

from tessera import distributed, ifu, lax, nn, numpy, ops, random, sharding  # noqa: E402  (submodules, after the core)
from tessera._core import _shard_map  # noqa: E402

P = PartitionSpec


def shard_map(f=None, /, mesh=None, in_specs=None, out_specs=None, *, axis_names=None, check_vma=None,
              check_rep=None, auto=None):
    """f run once per device on its blocks of the arguments (JAX's shard_map).

    ``in_specs``: one PartitionSpec for every array of every argument, or a
    tuple with one entry per positional argument, each a PartitionSpec (for
    every array of the argument) or a pytree of them with the argument's
    structure. ``out_specs``: one PartitionSpec for every output, or a pytree
    with one per output array. ``check_vma`` (JAX's newer name) or
    ``check_rep`` (its older one), default True: outputs whose out_spec
    claims replication over an axis they vary over raise ShardingError.
    Without ``f``, returns a decorator. Bodies are manual over every mesh
    axis: ``axis_names`` (and the older ``auto``) may only name all of them.
    """
    if f is None:
        return lambda g: shard_map(g, mesh, in_specs, out_specs, axis_names=axis_names, check_vma=check_vma,
                                   check_rep=check_rep, auto=auto)
    if mesh is None:
        raise TypeError("shard_map: mesh is required (Tessera has no context mesh)")
    if in_specs is None or out_specs is None:
        raise TypeError("shard_map: in_specs and out_specs are required")
    if axis_names is not None and set(axis_names) != set(mesh.axis_names):
        raise NotImplementedError(
            f"shard_map: bodies are manual over every mesh axis; axis_names={set(axis_names)!r} leaves "
            f"{sorted(set(mesh.axis_names) - set(axis_names))!r} automatic, which is not supported")
    if auto:
        raise NotImplementedError(f"shard_map: bodies are manual over every mesh axis; auto={set(auto)!r} is not "
                                  "supported")
    check = True if check_vma is None and check_rep is None else bool(check_vma if check_vma is not None
                                                                       else check_rep)
    return _shard_map(f, mesh, in_specs, out_specs, check)

__all__ = [
    "Array", "AxisType", "CollectiveError", "CommRecord", "DeviceError", "DTypeError", "Device", "Error",
    "Explanation", "Mesh", "NamedSharding", "P", "PartitionSpec", "Shard", "ShapeError", "ShardingError",
    "ValueError", "config", "device_count", "device_put", "devices", "distributed", "explain", "format_bytes",
    "grad", "ifu", "jacfwd", "jacrev", "jit", "jvp", "lax", "local_device_count", "local_devices", "make_mesh", "nn",
    "numpy", "ops",
    "plan_reshard", "process_count", "process_index", "random", "reshard", "shard_map", "sharding",
    "stop_gradient", "typeof", "value_and_grad", "visualize_array_sharding", "visualize_sharding_str", "vjp",
    "vmap",
]
