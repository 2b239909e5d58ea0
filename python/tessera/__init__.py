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
    DeviceError,
    DTypeError,
    Device,
    Error,
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
    grad,
    jacfwd,
    jacrev,
    jit,
    jvp,
    local_device_count,
    local_devices,
    make_mesh,
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

from tessera import ifu, numpy, sharding  # noqa: E402  (submodules, after the core)

P = PartitionSpec

__all__ = [
    "Array", "AxisType", "CollectiveError", "DeviceError", "DTypeError", "Device", "Error", "Mesh",
    "NamedSharding", "P", "PartitionSpec", "Shard", "ShapeError", "ShardingError", "ValueError", "config",
    "device_count", "device_put", "devices", "grad", "jacfwd", "jacrev", "jit", "jvp", "local_device_count",
    "local_devices", "make_mesh", "ifu", "numpy", "process_count", "process_index", "reshard", "sharding",
    "stop_gradient", "typeof", "value_and_grad", "visualize_array_sharding", "visualize_sharding_str", "vjp",
    "vmap",
]
