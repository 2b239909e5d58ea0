import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp
from tessera.sharding import NamedSharding


def test_hierarchy():
    for cls in [ts.ShapeError, ts.DTypeError, ts.ShardingError, ts.CollectiveError, ts.ValueError, ts.DeviceError]:
        assert issubclass(cls, ts.Error)
        assert cls.__module__ == "tessera"
    assert issubclass(ts.ShapeError, ValueError)
    assert issubclass(ts.ShardingError, ValueError)
    assert issubclass(ts.ValueError, ValueError)
    assert issubclass(ts.DTypeError, TypeError)
    assert issubclass(ts.CollectiveError, RuntimeError)
    assert issubclass(ts.DeviceError, RuntimeError)
    assert ts.ValueError is not ValueError


def test_matmul_message_is_the_cpp_one():
    a = ts.device_put(np.ones((8, 16), np.float32))
    b = ts.device_put(np.ones((12, 4), np.float32))
    with pytest.raises(ts.ShapeError) as e:
        tnp.matmul(a, b)
    assert str(e.value) == "[matmul] contracting dims differ: lhs (8, 16) vs rhs (12, 4)"


def test_broadcast_error():
    with pytest.raises(ts.ShapeError, match=r"^\[add\]"):
        ts.device_put(np.ones(3)) + ts.device_put(np.ones(4))


def test_reshape_error():
    with pytest.raises(ts.ShapeError, match=r"^\[reshape\]"):
        tnp.reshape(ts.device_put(np.ones(6)), (4, 2))


def test_int_scalar_overflow_is_dtype_error():
    i8 = ts.device_put(np.ones(3, np.int8))
    with pytest.raises(ts.DTypeError):
        i8 + 1000


def test_explicit_mode_needs_out_sharding():
    mesh = ts.make_mesh((2,), ("X",), axis_types=(ts.AxisType.Explicit,), devices=ts.devices()[:2])
    a = ts.device_put(np.ones((4, 4), np.float32), NamedSharding(mesh, ts.P("X")))
    b = ts.device_put(np.ones((4, 4), np.float32), NamedSharding(mesh, ts.P(None, "X")))
    with pytest.raises(ts.ShardingError) as e:
        a + b
    assert str(e.value) == ("[add] incompatible shardings for broadcasting: f32[4@X,4], f32[4,4@X]; "
                            "reshard an operand or pass out_sharding")


def test_device_count_fixed_after_start():
    ts.devices()
    with pytest.raises(ts.DeviceError):
        ts.config.set_num_cpu_devices(3)


def test_bitwise_ops_on_ints_not_bound():
    i = ts.device_put(np.ones(3, np.int32))
    with pytest.raises(TypeError, match="bool arrays only"):
        i & i


def test_unsupported_operand_type():
    a = ts.device_put(np.ones(3))
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError):
        a + [1, 2, 3]  # as JAX: lists are not operands


def test_traced_errors_name_the_python_line():
    x = ts.device_put(np.ones((3, 4), np.float32))

    def layer(v):
        return tnp.matmul(v, v)  # (3, 4) @ (3, 4): contracting dims differ

    line = layer.__code__.co_firstlineno + 1
    batch = ts.device_put(np.ones((2, 3, 4), np.float32))
    calls = [lambda: ts.jit(layer)(x), lambda: ts.grad(lambda v: tnp.sum(layer(v)))(x),
             lambda: ts.vmap(layer)(batch), lambda: ts.jit(ts.grad(lambda v: tnp.sum(layer(v))))(x)]
    for call in calls:
        with pytest.raises(ts.ShapeError) as e:
            call()
        assert str(e.value).startswith("[matmul]"), str(e.value)
        assert str(e.value).endswith(f"(traced at {__file__}:{line} in layer)"), str(e.value)
    # Eagerly the traceback has the line; the message stays the C++ one.
    with pytest.raises(ts.ShapeError) as e:
        layer(x)
    assert "traced at" not in str(e.value)
