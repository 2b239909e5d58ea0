import numpy as np
import pytest

import tessera as ts
from tessera.sharding import Mesh, NamedSharding, PartitionSpec


def test_devices():
    devs = ts.devices()
    assert len(devs) == 8 == ts.device_count()
    assert [d.id for d in devs] == list(range(8))
    assert repr(devs[3]) == "CpuDevice(id=3)"
    assert devs[0].platform == "cpu"
    assert devs[0] == ts.devices()[0] and devs[0] != devs[1]
    assert len({devs[0], ts.devices()[0], devs[1]}) == 2


def test_make_mesh():
    mesh = ts.make_mesh((2, 4), ("x", "y"))
    assert mesh.axis_names == ("x", "y")
    assert mesh.shape == {"x": 2, "y": 4}
    assert list(mesh.shape) == ["x", "y"]
    assert mesh.size == 8
    assert mesh.devices.shape == (2, 4)
    assert [d.id for d in mesh.devices.ravel()] == list(range(8))
    assert repr(mesh) == "Mesh('x': 2, 'y': 4)"
    assert mesh == ts.make_mesh((2, 4), ("x", "y"))


def test_mesh_from_device_array():
    devs = np.array(ts.devices()[:4]).reshape(2, 2)
    mesh = Mesh(devs, ("a", "b"))
    assert mesh.shape == {"a": 2, "b": 2}
    one = Mesh(ts.devices()[:1], "x")
    assert one.size == 1


def test_explicit_axes():
    mesh = ts.make_mesh((8,), ("X",), axis_types=(ts.AxisType.Explicit,))
    assert mesh.axis_types == (ts.AxisType.Explicit,)
    assert "Explicit" in repr(mesh)


def test_partition_spec():
    p = PartitionSpec("x", None, ("x2", "y"))
    assert repr(p) == "PartitionSpec('x', None, ('x2', 'y'))"
    assert len(p) == 3
    assert p[0] == "x" and p[1] is None and p[2] == ("x2", "y")
    assert list(p) == ["x", None, ("x2", "y")]
    assert ts.P("x") == ts.P("x", None)
    assert ts.P("x") != ts.P("y")
    assert hash(ts.P("x")) == hash(ts.P("x", None))
    assert repr(ts.P()) == "PartitionSpec()"


def test_named_sharding_repr_and_eq():
    mesh = ts.make_mesh((2, 4), ("x", "y"))
    s = NamedSharding(mesh, ts.P("x", "y"))
    assert repr(s) == "NamedSharding(mesh=Mesh('x': 2, 'y': 4), spec=PartitionSpec('x', 'y'))"
    assert s.mesh == mesh and s.spec == ts.P("x", "y")
    assert s == NamedSharding(mesh, ts.P("x", "y"))
    assert s != NamedSharding(mesh, ts.P("y", "x"))
    assert not s.is_fully_replicated
    assert NamedSharding(mesh, ts.P()).is_fully_replicated
    assert len(s.device_set) == 8


def test_devices_indices_map_uneven():
    mesh = ts.make_mesh((4,), ("x",), devices=ts.devices()[:4])
    s = NamedSharding(mesh, ts.P("x"))
    m = s.devices_indices_map((10,))
    # Balanced blocks: sizes 3, 3, 2, 2.
    got = [(m[d][0].start, m[d][0].stop) for d in mesh.devices]
    assert got == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert s.shard_shape((10, 5)) == (3, 5)


def test_sharding_errors():
    mesh = ts.make_mesh((2, 4), ("x", "y"))
    with pytest.raises(ts.ShardingError) as e:
        NamedSharding(mesh, ts.P("x", "x"))
    assert str(e.value).startswith("[")
    assert isinstance(e.value, ValueError)  # the builtin, through ShardingError
    with pytest.raises(ts.ShardingError, match="z"):
        NamedSharding(mesh, ts.P("z"))
    with pytest.raises(ts.ShardingError):
        ts.make_mesh((3, 3), ("x", "y"))


def test_partition_spec_bad_entry():
    with pytest.raises(TypeError):
        ts.P(3)


def test_devices_by_platform():
    assert ts.devices("cpu") == ts.devices() == ts.devices(backend=None)
    # This process runs on the CPU devices (and this machine may have no
    # GPU, or the module no CUDA): the reason, never an empty list.
    with pytest.raises(ts.DeviceError, match=r"^\[devices\] .*(no CUDA GPU|this process runs on the CPU devices)"):
        ts.devices("cuda")
    with pytest.raises(ts.DeviceError, match=r"^\[devices\] .*expected a platform"):
        ts.devices("tpu")
