# Eight virtual CPU devices for meshes of 1, 2, 4 and 8; set before tessera
# starts its runtime (the first call that needs devices).
import os

os.environ.setdefault("TESSERA_NUM_CPU_DEVICES", "8")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tessera as ts  # noqa: E402


@pytest.fixture(params=[(1,), (2,), (4,), (2, 2), (2, 4)], ids=lambda s: "x".join(map(str, s)))
def mesh(request):
    shape = request.param
    names = ("x", "y")[: len(shape)]
    n = int(np.prod(shape))
    return ts.make_mesh(shape, names, devices=ts.devices()[:n])


def specs_for(mesh, ndim):
    """Partition specs worth trying for an array of rank ndim on mesh."""
    names = mesh.axis_names
    out = [ts.P()]
    if ndim >= 1:
        out.append(ts.P(names[0]))
        if len(names) == 2:
            out.append(ts.P(tuple(names)))
    if ndim >= 2 and len(names) == 2:
        out.append(ts.P(names[0], names[1]))
        out.append(ts.P(None, names[1]))
    return out


# Helpers of the shard_map and collective tests.
def mesh1d(n):
    """A 1-d mesh "x" of the first n devices."""
    return ts.make_mesh((n,), ("x",), devices=ts.devices()[:n])


def mesh24():
    """A 2x4 mesh ("x", "y") of all 8 devices."""
    return ts.make_mesh((2, 4), ("x", "y"))


def put(x, mesh, spec):
    return ts.device_put(x, ts.NamedSharding(mesh, spec))


def host(shape, seed=0, dtype=np.float32):
    """Uniform values in [-1, 1) of the given shape and dtype."""
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)
