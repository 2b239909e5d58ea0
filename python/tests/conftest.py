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
