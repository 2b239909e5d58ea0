import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp
from conftest import specs_for
from tessera.sharding import NamedSharding


def host(shape, seed=0, lo=0.1, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


@pytest.mark.parametrize("name", ["sin", "cos", "exp", "log", "tanh", "sqrt", "abs", "negative", "floor", "ceil",
                                  "log1p", "expm1", "sign", "square"])
def test_unary(mesh, name):
    x = host((10, 7))
    for spec in specs_for(mesh, 2):
        a = ts.device_put(x, NamedSharding(mesh, spec))
        y = getattr(tnp, name)(a)
        assert y.shape == x.shape and y.dtype == np.float32
        assert y.sharding == a.sharding  # elementwise keeps the layout
        np.testing.assert_allclose(np.asarray(y), getattr(np, name)(x), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                                  "greater", "less_equal", "equal"])
def test_binary(mesh, name):
    x, y = host((10, 7), 1), host((10, 7), 2)
    s = NamedSharding(mesh, specs_for(mesh, 2)[-1])
    a, b = ts.device_put(x, s), ts.device_put(y, s)
    ref = getattr(np, name)(x, y)
    got = getattr(tnp, name)(a, b)
    assert got.dtype == ref.dtype
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(getattr(tnp, name)(a, 2.0)), getattr(np, name)(x, np.float32(2)), rtol=1e-5)


def test_broadcasting():
    x, y = host((4, 1, 3)), host((5, 1))
    a, b = ts.device_put(x), ts.device_put(y)
    np.testing.assert_allclose(np.asarray(a + b), x + y, rtol=1e-6)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1), -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(mesh, name, axis, keepdims):
    x = host((10, 7), lo=0.5, hi=1.5)
    for spec in specs_for(mesh, 2):
        a = ts.device_put(x, NamedSharding(mesh, spec))
        got = getattr(tnp, name)(a, axis=axis, keepdims=keepdims)
        ref = getattr(np, name)(x, axis=axis, keepdims=keepdims)
        assert got.shape == ref.shape
        assert got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5)


def test_reduction_dtypes():
    i = ts.device_put(np.arange(10, dtype=np.int8))
    assert tnp.sum(i).dtype == np.int32
    assert tnp.mean(i).dtype == np.float32
    b = ts.device_put(np.array([True, False, True]))
    assert tnp.sum(b).item() == 2
    assert bool(tnp.any(b)) and not bool(tnp.all(b))
    assert tnp.argmax(ts.device_put(np.array([1.0, 5.0, 2.0]))).item() == 1


def test_matmul_sharded(mesh):
    x, w = host((10, 6), 1), host((6, 5), 2)
    names = mesh.axis_names
    a = ts.device_put(x, NamedSharding(mesh, ts.P(names[0])))
    b = ts.device_put(w, NamedSharding(mesh, ts.P()))
    y = tnp.matmul(a, b)
    assert y.shape == (10, 5)
    np.testing.assert_allclose(np.asarray(y), x @ w, rtol=1e-5)
    # Contracting dim sharded on both sides: partial sums and an all-reduce.
    a2 = ts.device_put(x, NamedSharding(mesh, ts.P(None, names[0])))
    b2 = ts.device_put(w, NamedSharding(mesh, ts.P(names[0])))
    np.testing.assert_allclose(np.asarray(a2 @ b2), x @ w, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(tnp.dot(a, b)), x @ w, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(tnp.einsum("ij,jk->ik", a, b)), x @ w, rtol=1e-5)


def test_shape_ops(mesh):
    x = host((10, 6))
    a = ts.device_put(x, NamedSharding(mesh, ts.P(mesh.axis_names[0])))
    np.testing.assert_array_equal(np.asarray(tnp.reshape(a, (6, 10))), x.reshape(6, 10))
    np.testing.assert_array_equal(np.asarray(tnp.reshape(a, (-1, 3))), x.reshape(-1, 3))
    np.testing.assert_array_equal(np.asarray(tnp.transpose(a)), x.T)
    np.testing.assert_array_equal(np.asarray(tnp.transpose(a, (1, 0))), x.T)
    np.testing.assert_array_equal(np.asarray(tnp.expand_dims(a, 1)), x[:, None])
    np.testing.assert_array_equal(np.asarray(tnp.squeeze(tnp.expand_dims(a, 0))), x)
    np.testing.assert_array_equal(np.asarray(tnp.concatenate([a, a], axis=0)), np.concatenate([x, x]))
    np.testing.assert_array_equal(np.asarray(tnp.stack([a, a], axis=1)), np.stack([x, x], axis=1))
    np.testing.assert_array_equal(np.asarray(tnp.flip(a, 0)), x[::-1])
    np.testing.assert_array_equal(np.asarray(tnp.roll(a, 3, 0)), np.roll(x, 3, 0))
    np.testing.assert_allclose(np.asarray(tnp.diff(a, axis=0)), np.diff(x, axis=0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tnp.cumsum(a, axis=0)), np.cumsum(x, axis=0), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(tnp.broadcast_to(a[0], (3, 6))), np.broadcast_to(x[0], (3, 6)))
    np.testing.assert_array_equal(np.asarray(tnp.take(a, np.array([9, 0]), axis=0)), x[[9, 0]])


def test_creation():
    z = tnp.zeros((3, 4))
    assert z.dtype == np.float32 and z.shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(z), np.zeros((3, 4)))
    o = tnp.ones(5, dtype=tnp.int64)
    assert o.dtype == np.int64 and o.shape == (5,)
    mesh = ts.make_mesh((4,), ("x",), devices=ts.devices()[:4])
    s = NamedSharding(mesh, ts.P("x"))
    f = tnp.full((10,), 2.5, device=s)
    assert f.sharding == s and f.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(f), np.full(10, 2.5))
    r = tnp.arange(10, device=s)
    assert r.dtype == np.int32 and r.sharding == s
    np.testing.assert_array_equal(np.asarray(r), np.arange(10))
    np.testing.assert_allclose(np.asarray(tnp.arange(1.0, 2.0, 0.25)), np.arange(1.0, 2.0, 0.25))
    np.testing.assert_array_equal(np.asarray(tnp.arange(2, 11, 3)), np.arange(2, 11, 3))
    np.testing.assert_allclose(np.asarray(tnp.linspace(0, 1, 5)), np.linspace(0, 1, 5), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(tnp.eye(3, 4, 1)), np.eye(3, 4, 1))
    np.testing.assert_array_equal(np.asarray(tnp.zeros_like(f)), np.zeros(10))
    assert tnp.zeros_like(f).sharding == s
    a = tnp.asarray([1, 2, 3], dtype=tnp.float32)
    assert a.dtype == np.float32
    assert tnp.asarray(a) is not None


def test_where_and_clip():
    x = host((10,), lo=-1, hi=1)
    a = ts.device_put(x)
    np.testing.assert_array_equal(np.asarray(tnp.where(a > 0, a, 0.0)), np.where(x > 0, x, 0))
    np.testing.assert_array_equal(np.asarray(tnp.where(a > 0, 1.0, a)), np.where(x > 0, 1, x))
    np.testing.assert_array_equal(np.asarray(tnp.where(a > 0, a, -a)), np.abs(x))
    np.testing.assert_allclose(np.asarray(tnp.clip(a, -0.5, 0.5)), np.clip(x, -0.5, 0.5))
    np.testing.assert_allclose(np.asarray(tnp.clip(a, max=0.0)), np.minimum(x, 0))


def test_python_scalars_only():
    r = tnp.add(1, 2)
    assert r.dtype == np.int32 and r.item() == 3
    assert tnp.multiply(2.0, 3.0).dtype == np.float32


def test_dtype_names():
    assert tnp.float32 is np.float32
    assert tnp.ndarray is ts.Array
    assert isinstance(tnp.zeros(2), tnp.ndarray)
