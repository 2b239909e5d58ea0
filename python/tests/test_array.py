import numpy as np
import pytest

import tessera as ts
from conftest import specs_for
from tessera.sharding import NamedSharding

DTYPES = [np.bool_, np.uint8, np.int8, np.uint32, np.int32, np.uint64, np.int64, np.float32, np.float64]


def host(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    return (rng.random(shape) * 100).astype(dtype)


@pytest.mark.parametrize("shape", [(10, 7), (3, 5), (1, 9), (0, 4)])
def test_device_put_round_trip(mesh, shape):
    x = host(shape)
    for spec in specs_for(mesh, 2):
        s = NamedSharding(mesh, spec)
        a = ts.device_put(x, s)
        assert a.shape == shape
        assert a.dtype == np.float32
        assert a.ndim == 2 and a.size == x.size
        assert a.sharding == s
        np.testing.assert_array_equal(np.asarray(a), x)


def test_addressable_shards_follow_balanced_blocks():
    mesh = ts.make_mesh((4,), ("x",), devices=ts.devices()[:4])
    x = np.arange(10, dtype=np.int32)
    a = ts.device_put(x, NamedSharding(mesh, ts.P("x")))
    shards = a.addressable_shards
    assert [sh.device.id for sh in shards] == [0, 1, 2, 3]
    assert [(sh.index[0].start, sh.index[0].stop) for sh in shards] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    for sh in shards:
        np.testing.assert_array_equal(np.asarray(sh.data), x[sh.index])
        assert sh.replica_id == 0


def test_replicated_shards_have_replica_ids():
    mesh = ts.make_mesh((2,), ("x",), devices=ts.devices()[:2])
    a = ts.device_put(np.ones(3, np.float32), NamedSharding(mesh, ts.P()))
    assert [sh.replica_id for sh in a.addressable_shards] == [0, 1]


def test_more_shards_than_elements():
    mesh = ts.make_mesh((8,), ("x",))
    a = ts.device_put(np.arange(3.0), NamedSharding(mesh, ts.P("x")))
    sizes = [sh.data.shape[0] for sh in a.addressable_shards]
    assert sizes == [1, 1, 1, 0, 0, 0, 0, 0]
    np.testing.assert_array_equal(np.asarray(a), np.arange(3.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_dtypes_round_trip(dtype):
    x = host((4, 3), dtype)
    a = ts.device_put(x)
    assert a.dtype == np.dtype(dtype)
    back = np.asarray(a)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, x)


def test_device_put_lists_scalars_and_dtype():
    a = ts.device_put([[1.0, 2.0], [3.0, 4.0]])
    assert a.shape == (2, 2) and a.dtype == np.float64  # NumPy's dtype is kept
    b = ts.device_put([1, 2, 3], dtype=np.float32)
    assert b.dtype == np.float32
    c = ts.device_put(np.float32(3.5))
    assert c.shape == () and c.item() == 3.5
    d = ts.device_put(np.arange(6).reshape(2, 3)[:, ::2])  # not contiguous
    np.testing.assert_array_equal(np.asarray(d), [[0, 2], [3, 5]])


def test_unsupported_numpy_dtype():
    with pytest.raises(ts.DTypeError, match=r"^\[device_put\] NumPy dtype float16 has no Tessera equivalent"):
        ts.device_put(np.ones(3, np.float16))
    with pytest.raises(TypeError):  # DTypeError is a TypeError too
        ts.device_put(np.ones(3, np.complex64))


def test_device_put_reshards():
    mesh = ts.make_mesh((2, 4), ("x", "y"))
    x = host((10, 7))
    a = ts.device_put(x, NamedSharding(mesh, ts.P("x", "y")))
    b = ts.device_put(a, NamedSharding(mesh, ts.P(None, ("x", "y"))))
    assert b.sharding.spec == ts.P(None, ("x", "y"))
    np.testing.assert_array_equal(np.asarray(b), x)
    c = ts.reshard(a, ts.P("y"))
    np.testing.assert_array_equal(np.asarray(c), x)
    assert ts.typeof(a) == "f32[10@x,7@y]"
    assert a.typeof == "f32[10@x,7@y]"


def test_repr_like_jax():
    assert repr(ts.device_put(np.array([1.0, 2.0, 3.0], np.float32))) == "Array([1., 2., 3.], dtype=float32)"
    assert repr(ts.device_put(np.array([1, 2, 3], np.int32))) == "Array([1, 2, 3], dtype=int32)"
    assert repr(ts.device_put(np.float32(2.5))) == "Array(2.5, dtype=float32)"
    assert repr(ts.device_put(np.array([True, False]))) == "Array([ True, False], dtype=bool)"
    assert (repr(ts.device_put(np.arange(4, dtype=np.float32).reshape(2, 2)))
            == "Array([[0., 1.],\n       [2., 3.]], dtype=float32)")
    assert repr(ts.device_put(np.zeros((0, 3), np.float32))) == "Array([], shape=(0, 3), dtype=float32)"
    assert str(ts.device_put(np.array([1, 2], np.int32))) == "[1 2]"


def test_scalar_operators_are_weakly_typed(mesh):
    x = host((10, 7))
    a = ts.device_put(x, NamedSharding(mesh, specs_for(mesh, 2)[-1]))
    for y, ref in [
        (a + 1.0, x + np.float32(1)),
        (2.0 * a, np.float32(2) * x),
        (a - 3, x - np.float32(3)),
        (10.0 - a, np.float32(10) - x),
        (a / 4.0, x / np.float32(4)),
        (1.0 / (a + 1.0), np.float32(1) / (x + np.float32(1))),
        (a ** 2, x ** 2),
        (-a, -x),
        (abs(-a), x),
    ]:
        assert y.dtype == np.float32
        assert y.sharding == a.sharding
        np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-6)
    i = ts.device_put(np.arange(10, dtype=np.int32), NamedSharding(mesh, ts.P(mesh.axis_names[0])))
    assert (i + 1).dtype == np.int32
    assert (i * 2.5).dtype == np.float32
    assert (i // 3).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(i // 3), np.arange(10) // 3)
    np.testing.assert_array_equal(np.asarray(i % 3), np.arange(10) % 3)
    np.testing.assert_array_equal(np.asarray(7 - i), 7 - np.arange(10))


def test_array_operators(mesh):
    x, y = host((10, 7), seed=1), host((10, 7), seed=2)
    spec = specs_for(mesh, 2)[-1]
    a = ts.device_put(x, NamedSharding(mesh, spec))
    b = ts.device_put(y, NamedSharding(mesh, spec))
    np.testing.assert_allclose(np.asarray(a + b), x + y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(a * b - b), x * y - y, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(a / b), x / y, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(a < b), x < y)
    np.testing.assert_array_equal(np.asarray(a == a), np.ones_like(x, bool))
    np.testing.assert_array_equal(np.asarray((a < b) & (a > 10.0)), (x < y) & (x > 10))
    np.testing.assert_array_equal(np.asarray(~(a < b)), ~(x < y))
    # NumPy operands are placed on the Array's mesh, on either side.
    np.testing.assert_allclose(np.asarray(a + y), x + y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(y + a), x + y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(a @ y.T), x @ y.T, rtol=1e-4)


def test_promotion_between_arrays():
    a = ts.device_put(np.ones(3, np.float32))
    b = ts.device_put(np.ones(3, np.float64))
    assert (a + b).dtype == np.float64
    c = ts.device_put(np.ones(3, np.int32))
    assert (a + c).dtype == np.float32


def test_unhashable_and_conversions():
    a = ts.device_put(np.array([2.5], np.float32))
    with pytest.raises(TypeError):
        hash(a)
    assert float(a) == 2.5 and int(a) == 2 and bool(a)
    assert a.item() == 2.5
    assert a.tolist() == [2.5]
    with pytest.raises(TypeError):
        float(ts.device_put(np.ones(3)))
    assert len(ts.device_put(np.ones((4, 2)))) == 4
    assert [r.shape for r in ts.device_put(np.ones((3, 2)))] == [(2,)] * 3


def test_indexing(mesh):
    x = host((10, 7))
    a = ts.device_put(x, NamedSharding(mesh, specs_for(mesh, 2)[-1]))
    for key in [3, -1, slice(2, 8), slice(None, None, 2), slice(None, None, -1), (slice(1, 9, 3), 4),
                (Ellipsis, 2), (None, 3), None, (slice(None), None, slice(2, 5)), (2, slice(None)), ()]:
        np.testing.assert_array_equal(np.asarray(a[key]), x[key], err_msg=repr(key))
    np.testing.assert_array_equal(np.asarray(a[np.array([4, 0, 9])]), x[[4, 0, 9]])
    np.testing.assert_array_equal(np.asarray(a[:, np.array([6, 1])]), x[:, [6, 1]])
    with pytest.raises(IndexError):
        a[10]
    with pytest.raises(IndexError):
        a[1, 2, 3]


def test_methods():
    x = host((4, 6))
    a = ts.device_put(x)
    np.testing.assert_allclose(np.asarray(a.sum(axis=0)), x.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(a.mean()), x.mean(), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(a.max(axis=1, keepdims=True)), x.max(axis=1, keepdims=True))
    np.testing.assert_array_equal(np.asarray(a.reshape(3, 8)), x.reshape(3, 8))
    np.testing.assert_array_equal(np.asarray(a.reshape((-1,))), x.reshape(-1))
    np.testing.assert_array_equal(np.asarray(a.T), x.T)
    np.testing.assert_array_equal(np.asarray(a.transpose(1, 0)), x.T)
    assert a.astype(np.int32).dtype == np.int32
    assert a.astype("float64").dtype == np.float64
    assert a.block_until_ready() is a
    assert a.nbytes == x.nbytes and a.itemsize == 4
    assert a.devices() == {ts.devices()[0]}


def test_dlpack():
    x = host((3, 4))
    a = ts.device_put(x)
    np.testing.assert_array_equal(np.from_dlpack(a), x)


def test_numpy_array_left_operand_defers():
    x = host((3,))
    a = ts.device_put(x)
    r = x + a
    assert isinstance(r, ts.Array)
    np.testing.assert_allclose(np.asarray(r), 2 * x)
