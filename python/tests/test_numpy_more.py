"""pad, convolve, gradient, interp, median, searchsorted (tessera.numpy),
nn.sigmoid, lax.rsqrt, lax.with_sharding_constraint, ops.segment_sum:
against NumPy on every mesh of conftest, uneven sizes and more shards than
elements, under jit and grad."""

import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp
from conftest import specs_for
from tessera.sharding import NamedSharding


def host(shape, seed=0, lo=-2.0, hi=2.0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def layouts(mesh, x):
    """x placed with every spec of specs_for(mesh, x.ndim)."""
    for spec in specs_for(mesh, x.ndim):
        yield ts.device_put(x, NamedSharding(mesh, spec))


# ---------------------------------------------------------------------- pad

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shape", [(10, 7), (3, 1)])
def test_pad(mesh, dtype, shape):
    x = host(shape, dtype=np.float64).__mul__(10).astype(dtype)
    for pad_width, kw in [(((1, 2), (0, 3)), {}), (2, {"constant_values": 7}), ((1, 3), {}), ([[2]], {}),
                          (((0, 0), (1, 1)), {"mode": "constant", "constant_values": -1})]:
        ref = np.pad(x, pad_width, **kw)
        for a in layouts(mesh, x):
            got = tnp.pad(a, pad_width, **kw)
            assert got.shape == ref.shape and got.dtype == ref.dtype
            np.testing.assert_array_equal(np.asarray(got), ref)


def test_pad_errors():
    x = ts.device_put(np.ones((3, 2), np.float32))
    with pytest.raises(NotImplementedError, match=r"^\[pad\] mode='reflect' is not supported"):
        tnp.pad(x, 1, mode="reflect")
    with pytest.raises(ts.ShapeError, match=r"^\[pad\] expected 2 \(before, after\) pairs"):
        tnp.pad(x, ((1, 1), (1, 1), (1, 1)))
    with pytest.raises(ts.ShapeError, match=r"^\[pad\] widths must be >= 0"):
        tnp.pad(x, ((1, -1), (0, 0)))
    with pytest.raises(ValueError, match=r"^\[pad\] each pad_width entry"):
        tnp.pad(x, ((1, 2, 3), (0, 0)))
    with pytest.raises(NotImplementedError, match=r"^\[pad\] constant_values"):
        tnp.pad(x, 1, constant_values=(1, 2))


# ----------------------------------------------------------------- convolve

@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n,k", [(13, 3), (13, 4), (3, 5), (1, 1), (8, 8), (2, 6)])
def test_convolve(mesh, mode, n, k):
    a, v = host(n, 1), host(k, 2)
    ref = np.convolve(a.astype(np.float64), v.astype(np.float64), mode)
    for x in layouts(mesh, a):
        for kernel in (v, ts.device_put(v, NamedSharding(mesh, ts.P()))):
            got = tnp.convolve(x, kernel, mode=mode)
            assert got.shape == ref.shape and got.dtype == np.float32
            np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)


def test_convolve_dtypes():
    a, v = np.arange(7, dtype=np.float64), np.array([1.0, -2.0, 0.5])
    got = tnp.convolve(a, v)
    assert got.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), np.convolve(a, v))
    got = tnp.convolve(np.arange(5, dtype=np.int32), np.array([1, 2], np.int32))  # inexact, unlike NumPy
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.convolve(np.arange(5), [1, 2]))


def test_convolve_errors():
    x = ts.device_put(np.ones(5, np.float32))
    with pytest.raises(ValueError, match=r"^\[convolve\] mode must be 'full', 'same' or 'valid'"):
        tnp.convolve(x, np.ones(2, np.float32), mode="circular")
    with pytest.raises(ts.ShapeError, match=r"^\[convolve\] a and v must be 1-d"):
        tnp.convolve(np.ones((2, 3), np.float32), np.ones(2, np.float32))
    with pytest.raises(ts.ShapeError, match=r"^\[convolve\] a and v must not be empty"):
        tnp.convolve(x, np.ones(0, np.float32))


def test_convolve_jit_grad(mesh):
    a, v = host(11, 3), host(3, 4)
    x = ts.device_put(a, NamedSharding(mesh, specs_for(mesh, 1)[-1]))
    f = ts.jit(lambda x: tnp.convolve(x, v))
    np.testing.assert_allclose(np.asarray(f(x)), np.convolve(a, v), rtol=1e-5, atol=1e-5)
    g = ts.grad(lambda x: tnp.sum(tnp.square(tnp.convolve(x, v))))(x)
    c = np.convolve(a.astype(np.float64), v)
    np.testing.assert_allclose(np.asarray(g), 2 * np.correlate(c, v, "valid"), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- gradient

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_gradient(mesh, dtype):
    f = (host((10, 7), 5, dtype=np.float64) * 10).astype(dtype)
    out_dtype = np.float32 if dtype == np.int32 else dtype
    for a in layouts(mesh, f):
        for args, kw in [((), {}), ((2.0,), {}), ((0.5, 3), {}), ((), {"axis": 1}), ((2.0,), {"axis": -2}),
                         ((), {"axis": (1, 0)}), ((0.5, 2.0), {"axis": (0, 1)})]:
            ref = np.gradient(f.astype(np.float64), *args, **kw)
            got = tnp.gradient(a, *args, **kw)
            if isinstance(ref, (list, tuple)):  # NumPy 2 gives a tuple, JAX a list
                assert isinstance(got, list) and len(got) == len(ref)
            else:
                got, ref = [got], [ref]
            for g, r in zip(got, ref):
                assert g.dtype == out_dtype and g.shape == r.shape
                assert g.sharding == a.sharding
                np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-4)


def test_gradient_small_1d(mesh):
    f = np.array([1.0, 4.0, 2.0], np.float32)  # fewer elements than devices on the larger meshes
    for a in layouts(mesh, f):
        got = tnp.gradient(a)
        assert isinstance(got, ts.Array)
        np.testing.assert_allclose(np.asarray(got), np.gradient(f))


def test_gradient_errors():
    with pytest.raises(ts.ShapeError, match=r"^\[gradient\] f is too small"):
        tnp.gradient(np.ones(1, np.float32))
    with pytest.raises(ts.ShapeError, match=r"^\[gradient\] f must be at least 1-d"):
        tnp.gradient(np.float32(1))
    with pytest.raises(ts.DTypeError, match=r"^\[gradient\] f must be numeric, got bool"):
        tnp.gradient(np.ones(3, bool))
    with pytest.raises(TypeError, match=r"^\[gradient\] expected no spacing, one, or one per axis \(2\), got 3"):
        tnp.gradient(np.ones((3, 3), np.float32), 1.0, 2.0, 3.0)
    with pytest.raises(NotImplementedError, match=r"^\[gradient\] spacings must be scalars"):
        tnp.gradient(np.ones(3, np.float32), np.array([0.0, 1.0, 3.0]))
    with pytest.raises(NotImplementedError, match=r"^\[gradient\] edge_order=2"):
        tnp.gradient(np.ones(3, np.float32), edge_order=2)


def test_gradient_jit_grad(mesh):
    f = host(9, 6)
    a = ts.device_put(f, NamedSharding(mesh, specs_for(mesh, 1)[-1]))
    np.testing.assert_allclose(np.asarray(ts.jit(lambda x: tnp.gradient(x, 0.5))(a)), np.gradient(f, 0.5),
                               rtol=1e-5, atol=1e-5)
    w = host(9, 7)
    g = ts.grad(lambda x: tnp.sum(tnp.gradient(x) * w))(a)
    eps = 1e-3  # linear: the finite difference is exact up to rounding
    fd = [(np.sum(np.gradient(f + eps * np.eye(9, dtype=np.float32)[i]) * w) - np.sum(np.gradient(f) * w)) / eps
          for i in range(9)]
    np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------- interp

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 17])
def test_interp(mesh, dtype, n):
    xp = np.array([-1.0, -0.25, 0.0, 0.5, 1.5], dtype)
    fp = np.array([2.0, -1.0, 0.5, 3.0, 1.0], dtype)
    x = host(n, 8, lo=-2.5, hi=2.5, dtype=dtype)
    ref = np.interp(x, xp, fp)
    for a in layouts(mesh, x):
        got = tnp.interp(a, xp, fp)
        assert got.dtype == dtype and got.shape == ref.shape
        assert got.sharding == a.sharding
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-6)


def test_interp_2d_queries(mesh):
    xp, fp = np.linspace(0, 1, 6).astype(np.float32), host(6, 9)
    x = host((5, 3), 10, lo=0, hi=1)
    for a in layouts(mesh, x):
        np.testing.assert_allclose(np.asarray(tnp.interp(a, xp, fp)), np.interp(x, xp, fp), rtol=1e-5, atol=1e-6)


def test_interp_errors():
    x = ts.device_put(np.ones(3, np.float32))
    with pytest.raises(ts.ShapeError, match=r"^\[interp\] xp and fp must be 1-d arrays of equal size"):
        tnp.interp(x, np.arange(3.0), np.arange(4.0))
    with pytest.raises(ts.ShapeError, match=r"^\[interp\] xp and fp must not be empty"):
        tnp.interp(x, np.ones(0), np.ones(0))
    with pytest.raises(NotImplementedError, match=r"^\[interp\] left and right are not supported"):
        tnp.interp(x, np.arange(3.0), np.arange(3.0), left=0.0)
    with pytest.raises(NotImplementedError, match=r"^\[interp\] period"):
        tnp.interp(x, np.arange(3.0), np.arange(3.0), period=1.0)


def test_interp_jit_grad(mesh):
    xp = np.array([0.0, 1.0, 3.0, 4.0], np.float32)
    fp = np.array([1.0, 3.0, -1.0, 0.0], np.float32)
    x = np.array([0.25, 0.5, 1.5, 2.5, 3.5, 3.75, 0.1], np.float32)  # no knots: the slope is defined
    a = ts.device_put(x, NamedSharding(mesh, specs_for(mesh, 1)[-1]))
    np.testing.assert_allclose(np.asarray(ts.jit(lambda q: tnp.interp(q, xp, fp))(a)), np.interp(x, xp, fp),
                               rtol=1e-6)
    # The C++ interp has no derivative rule yet: grad says so.
    with pytest.raises(ts.Error, match=r"^\[interp\] is not differentiable"):
        ts.grad(lambda q: tnp.sum(tnp.interp(q, xp, fp)))(a)


# ------------------------------------------------------------------- median

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_median(mesh, dtype, axis, keepdims):
    x = (host((10, 7), 11, dtype=np.float64) * 100).astype(dtype)
    ref = np.median(x, axis=axis, keepdims=keepdims)
    for a in layouts(mesh, x):
        got = tnp.median(a, axis=axis, keepdims=keepdims)
        assert got.shape == ref.shape
        assert got.dtype == (np.float32 if dtype == np.int32 else dtype)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6)


def test_median_small_and_nan(mesh):
    x = np.array([3.0, np.nan, 1.0], np.float32)
    for a in layouts(mesh, x):
        assert np.isnan(float(tnp.median(a)))
        np.testing.assert_equal(float(tnp.median(a[::2])), 2.0)


def test_median_errors_and_jit(mesh):
    with pytest.raises(ts.ShapeError, match=r"^\[median\]"):
        tnp.median(np.ones((2, 3), np.float32), axis=2)
    with pytest.raises(NotImplementedError, match=r"^\[median\] out"):
        tnp.median(np.ones(3, np.float32), out=np.ones(()))
    x = host((6, 5), 12)
    a = ts.device_put(x, NamedSharding(mesh, specs_for(mesh, 2)[-1]))
    np.testing.assert_allclose(np.asarray(ts.jit(lambda v: tnp.median(v, axis=0))(a)), np.median(x, axis=0))


# ------------------------------------------------------------- searchsorted

@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_searchsorted(mesh, side, dtype):
    seq = np.array([-3, -1, -1, 0, 2, 2, 2, 5, 9], dtype)
    v = np.random.default_rng(13).integers(-5, 11, (4, 5)).astype(dtype)
    ref = np.searchsorted(seq, v, side=side)
    for a in layouts(mesh, v):
        for s in (seq, ts.device_put(seq, NamedSharding(mesh, specs_for(mesh, 1)[-1]))):
            got = tnp.searchsorted(s, a, side=side)
            assert got.dtype == np.int32 and got.shape == v.shape
            assert got.sharding == a.sharding
            np.testing.assert_array_equal(np.asarray(got), ref)
    assert int(tnp.searchsorted(seq, 2, side=side)) == np.searchsorted(seq, 2, side=side)


def test_searchsorted_errors_and_jit(mesh):
    with pytest.raises(ValueError, match=r"^\[searchsorted\] side must be 'left' or 'right', got 'middle'"):
        tnp.searchsorted(np.arange(3.0), np.ones(2), side="middle")
    with pytest.raises(ts.ShapeError, match=r"^\[searchsorted\] sorted_sequence must be 1-d"):
        tnp.searchsorted(np.ones((2, 2)), np.ones(2))
    with pytest.raises(NotImplementedError, match=r"^\[searchsorted\] sorter"):
        tnp.searchsorted(np.arange(3.0), np.ones(2), sorter=np.arange(3))
    seq, v = np.linspace(0, 1, 11), host(7, 14, lo=0, hi=1).astype(np.float64)
    a = ts.device_put(v, NamedSharding(mesh, specs_for(mesh, 1)[-1]))
    np.testing.assert_array_equal(np.asarray(ts.jit(lambda q: tnp.searchsorted(seq, q, side="right"))(a)),
                                  np.searchsorted(seq, v, side="right"))


# ------------------------------------------------------ nn.sigmoid, lax.rsqrt

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_rsqrt(mesh, dtype):
    x = host((10, 7), 15, lo=-6, hi=6, dtype=dtype)
    p = host((10, 7), 16, lo=0.1, hi=9, dtype=dtype)
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    for a, b in zip(layouts(mesh, x), layouts(mesh, p)):
        s = ts.nn.sigmoid(a)
        assert s.dtype == dtype and s.sharding == a.sharding
        np.testing.assert_allclose(np.asarray(s), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=rtol)
        r = ts.lax.rsqrt(b)
        assert r.dtype == dtype and r.sharding == b.sharding
        np.testing.assert_allclose(np.asarray(r), 1 / np.sqrt(p.astype(np.float64)), rtol=rtol * 2)


def test_sigmoid_rsqrt_jit_grad(mesh):
    x = host(9, 17, lo=-4, hi=4)
    a = ts.device_put(x, NamedSharding(mesh, specs_for(mesh, 1)[-1]))
    s = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(np.asarray(ts.jit(ts.nn.sigmoid)(a)), s, rtol=1e-6)
    g = ts.grad(lambda v: tnp.sum(ts.nn.sigmoid(v)))(a)
    assert g.sharding == a.sharding
    np.testing.assert_allclose(np.asarray(g), s * (1 - s), rtol=1e-5)
    p = ts.device_put(np.abs(x) + 0.5, NamedSharding(mesh, specs_for(mesh, 1)[-1]))
    g = ts.jit(ts.grad(lambda v: tnp.sum(ts.lax.rsqrt(v))))(p)
    np.testing.assert_allclose(np.asarray(g), -0.5 * (np.abs(x) + 0.5).astype(np.float64) ** -1.5, rtol=1e-5)


# ------------------------------------------------- lax.with_sharding_constraint

def test_with_sharding_constraint(mesh):
    x = host((10, 7), 18)
    a = ts.device_put(x, NamedSharding(mesh, ts.P()))
    for spec in specs_for(mesh, 2):
        target = NamedSharding(mesh, spec)
        for s in (target, spec):
            got = ts.lax.with_sharding_constraint(a, s)
            assert got.sharding == target
            np.testing.assert_array_equal(np.asarray(got), x)
        f = ts.jit(lambda v: ts.lax.with_sharding_constraint(v * 2.0, spec))
        got = f(a)
        assert got.sharding == target
        np.testing.assert_array_equal(np.asarray(got), x * 2)
    pair = ts.lax.with_sharding_constraint((a, {"b": a}), NamedSharding(mesh, ts.P(mesh.axis_names[0])))
    assert pair[1]["b"].sharding.spec == ts.P(mesh.axis_names[0])


def test_with_sharding_constraint_errors():
    a = ts.device_put(np.ones((4, 4), np.float32))
    other = ts.make_mesh((2,), ("x",), devices=ts.devices()[:2])
    with pytest.raises(ts.ShardingError, match=r"^\[with_sharding_constraint\] the sharding is on"):
        ts.lax.with_sharding_constraint(a, NamedSharding(other, ts.P("x")))
    with pytest.raises(TypeError, match=r"^\[with_sharding_constraint\] shardings must be"):
        ts.lax.with_sharding_constraint(a, "x")
    with pytest.raises(ts.Error, match=r"^\[with_sharding_constraint\]"):
        ts.lax.with_sharding_constraint(a, ts.P("x", None, None))


# ------------------------------------------------------------ ops.segment_sum

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("n", [1, 3, 13])
def test_segment_sum(mesh, dtype, n):
    rng = np.random.default_rng(n)
    data = (rng.uniform(-5, 5, (n, 3)) * 4).astype(dtype)
    ids = rng.integers(-1, 6, n).astype(np.int32)  # -1 and 5 are out of range for 5 segments: dropped
    ref = np.zeros((5, 3), dtype)
    for i, s in enumerate(ids):
        if 0 <= s < 5:
            ref[s] += data[i]
    for a in layouts(mesh, data):
        got = ts.ops.segment_sum(a, ids, num_segments=5)
        assert got.dtype == dtype and got.shape == (5, 3)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
        got = ts.ops.segment_sum(a[:, 0], ts.device_put(ids, NamedSharding(mesh, specs_for(mesh, 1)[-1])), 5)
        np.testing.assert_allclose(np.asarray(got), ref[:, 0], rtol=1e-5, atol=1e-5)


def test_segment_sum_errors_jit_grad(mesh):
    with pytest.raises(NotImplementedError, match=r"^\[segment_sum\] num_segments is required"):
        ts.ops.segment_sum(np.ones(3, np.float32), np.zeros(3, np.int32))
    with pytest.raises(ts.ShapeError, match=r"^\[segment_sum\] segment_ids must have one entry per row"):
        ts.ops.segment_sum(np.ones(3, np.float32), np.zeros(4, np.int32), 2)
    with pytest.raises(ts.ShapeError, match=r"^\[segment_sum\] num_segments must be >= 0"):
        ts.ops.segment_sum(np.ones(3, np.float32), np.zeros(3, np.int32), -1)
    with pytest.raises(NotImplementedError, match=r"^\[segment_sum\] mode="):
        ts.ops.segment_sum(np.ones(3, np.float32), np.zeros(3, np.int32), 2, mode="clip")
    x = host(11, 19)
    ids = np.array([0, 2, 1, 1, 0, 3, 3, 2, 0, 1, 2], np.int32)
    a = ts.device_put(x, NamedSharding(mesh, specs_for(mesh, 1)[-1]))
    got = ts.jit(lambda v: ts.ops.segment_sum(v, ids, 4))(a)
    np.testing.assert_allclose(np.asarray(got), [x[ids == s].sum() for s in range(4)], rtol=1e-5)
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    g = ts.grad(lambda v: tnp.sum(ts.ops.segment_sum(v, ids, 4) * w))(a)
    np.testing.assert_allclose(np.asarray(g), w[ids], rtol=1e-6)
