"""tessera.lax collectives inside shard_map bodies, against NumPy, on 1-d
meshes of 1, 2, 4 and 8 devices and a 2x4 mesh."""

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp
from tessera import lax
from conftest import host, mesh1d, mesh24, put

P = ts.P


def smap(f, mesh, in_specs, out_specs, **kw):
    return ts.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **kw)


sizes = pytest.mark.parametrize("n", [1, 2, 4, 8])


# ------------------------------------------------------------- reductions


@sizes
@pytest.mark.parametrize("op,ref", [(lax.psum, np.sum), (lax.pmean, np.mean), (lax.pmax, np.max),
                                    (lax.pmin, np.min)])
def test_reductions_1d(n, op, ref):
    x = host((2 * n, 3), n)
    out = smap(lambda v: op(v, "x"), mesh1d(n), P("x"), P())(put(x, mesh1d(n), P("x")))
    assert out.shape == (2, 3)
    np.testing.assert_allclose(np.asarray(out), ref(x.reshape(n, 2, 3), axis=0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.uint8])
def test_psum_dtypes(dtype):
    m = mesh1d(4)
    x = (np.arange(8 * 2) % 7).astype(dtype).reshape(8, 2)
    out = smap(lambda v: lax.psum(v, "x"), m, P("x"), P())(put(x, m, P("x")))
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(out), x.reshape(4, 2, 2).sum(0).astype(dtype))


def test_psum_bool_counts_as_int32():
    m = mesh1d(4)
    x = np.array([True, False, True, True, False, True, True, True])
    out = smap(lambda v: lax.psum(v, "x"), m, P("x"), P())(put(x, m, P("x")))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), x.reshape(4, 2).sum(0))


def test_pmean_of_ints_is_float32():
    m = mesh1d(4)
    x = np.arange(8, dtype=np.int32)
    out = smap(lambda v: lax.pmean(v, "x"), m, P("x"), P())(put(x, m, P("x")))
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), x.reshape(4, 2).mean(0))


@pytest.mark.parametrize("axes,spec,ref", [
    ("x", P(None, "y"), lambda x: x.reshape(2, 2, 8).sum(0)),
    ("y", P("x"), lambda x: x.reshape(4, 4, 2).sum(1)),
    (("x", "y"), P(), lambda x: x.reshape(2, 2, 4, 2).sum((0, 2))),
    (["y", "x"], P(), lambda x: x.reshape(2, 2, 4, 2).sum((0, 2))),
])
def test_psum_2d_axes(axes, spec, ref):
    m = mesh24()
    x = host((4, 8), 3)
    out = smap(lambda v: lax.psum(v, axes), m, P("x", "y"), spec)(put(x, m, P("x", "y")))
    np.testing.assert_allclose(np.asarray(out), ref(x), rtol=1e-5, atol=1e-6)


def test_psum_of_python_numbers_is_the_group_size():
    m = mesh24()
    x = host((2, 4))

    def body(v):
        return v * lax.psum(1, "y") + lax.psum(1.5, ("x", "y"))

    out = smap(body, m, P("x", "y"), P("x", "y"))(put(x, m, P("x", "y")))
    np.testing.assert_allclose(np.asarray(out), x * 4 + 12.0)


def test_collectives_of_pytrees():
    m = mesh1d(4)
    a, b = host((8,), 1), host((4, 2), 2)

    def body(t):
        return lax.psum(t, "x")

    out = smap(body, m, P("x"), P())({"a": put(a, m, P("x")), "b": put(b, m, P("x"))})
    np.testing.assert_allclose(np.asarray(out["a"]), a.reshape(4, 2).sum(0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["b"]), b.reshape(4, 1, 2).sum(0), rtol=1e-6)


# ------------------------------------------------------------- all_gather


@sizes
def test_all_gather_stacks(n):
    m = mesh1d(n)
    x = host((2 * n, 3), n)
    out = smap(lambda v: lax.all_gather(v, "x"), m, P("x"), P())(put(x, m, P("x")))
    np.testing.assert_array_equal(np.asarray(out), x.reshape(n, 2, 3))
    out1 = smap(lambda v: lax.all_gather(v, "x", axis=1), m, P("x"), P())(put(x, m, P("x")))
    np.testing.assert_array_equal(np.asarray(out1), x.reshape(n, 2, 3).transpose(1, 0, 2))


@sizes
def test_all_gather_tiled(n):
    m = mesh1d(n)
    x = host((3, 2 * n), n)
    out = smap(lambda v: lax.all_gather(v, "x", axis=1, tiled=True), m, P(None, "x"), P())(put(x, m, P(None, "x")))
    np.testing.assert_array_equal(np.asarray(out), x)


@pytest.mark.parametrize("length", [1, 3, 10, 13])
def test_all_gather_tiled_uneven(length):
    m = mesh1d(4)
    x = np.arange(length, dtype=np.float32)
    out = smap(lambda v: lax.all_gather(v, "x", tiled=True), m, P("x"), P())(put(x, m, P("x")))
    np.testing.assert_array_equal(np.asarray(out), x)
    # The local sizes differ, the total does not.
    total = smap(lambda v: lax.psum(tnp.sum(v), "x"), m, P("x"), P())(put(x, m, P("x")))
    assert float(total) == x.sum()


def test_all_gather_2d():
    m = mesh24()
    x = host((4, 8), 5)
    out = smap(lambda v: lax.all_gather(v, "y", axis=1, tiled=True), m, P("x", "y"), P("x"))(put(x, m, P("x", "y")))
    np.testing.assert_array_equal(np.asarray(out), x)
    both = smap(lambda v: lax.all_gather(v, ("x", "y")), m, P("x", "y"), P())(put(x, m, P("x", "y")))
    want = np.stack([x[i * 2:(i + 1) * 2, j * 2:(j + 1) * 2] for i in range(2) for j in range(4)])
    np.testing.assert_array_equal(np.asarray(both), want)


# ----------------------------------------------------------- psum_scatter


@sizes
def test_psum_scatter_tiled(n):
    m = mesh1d(n)
    x = host((2 * n, 3), n)

    def body(v):  # every device holds all of x, scaled by its index + 1
        return lax.psum_scatter(v * (lax.axis_index("x") + 1).astype(np.float32), "x", tiled=True)

    out = smap(body, m, P(), P("x"))(put(x, m, P()))
    np.testing.assert_allclose(np.asarray(out), x * (n * (n + 1) / 2), rtol=1e-5, atol=1e-6)


@sizes
def test_psum_scatter_untiled(n):
    m = mesh1d(n)
    x = host((n * n, 3), n)
    out = smap(lambda v: lax.psum_scatter(v, "x"), m, P("x"), P("x"))(put(x, m, P("x")))
    assert out.shape == (3 * n,)
    np.testing.assert_allclose(np.asarray(out), x.reshape(n, n, 3).sum(0).reshape(-1), rtol=1e-5, atol=1e-6)


def test_psum_scatter_untiled_needs_the_group_size():
    m = mesh1d(4)
    with pytest.raises(ts.ShapeError, match=r"^\[psum_scatter\] without tiled"):
        smap(lambda v: lax.psum_scatter(v, "x"), m, P("x"), P("x"))(put(host((12,)), m, P("x")))


# --------------------------------------------------------------- ppermute


@sizes
def test_ppermute_ring(n):
    m = mesh1d(n)
    x = host((2 * n, 3), n)
    perm = [(i, (i + 1) % n) for i in range(n)]
    out = smap(lambda v: lax.ppermute(v, "x", perm), m, P("x"), P("x"))(put(x, m, P("x")))
    np.testing.assert_array_equal(np.asarray(out), np.roll(x.reshape(n, 2, 3), 1, axis=0).reshape(2 * n, 3))


def test_ppermute_partial_gives_zeros():
    m = mesh1d(4)
    x = np.arange(1, 9, dtype=np.float32)
    out = smap(lambda v: lax.ppermute(v, "x", [[0, 2], [3, 1]]), m, P("x"), P("x"))(put(x, m, P("x")))
    np.testing.assert_array_equal(np.asarray(out), [0, 0, 7, 8, 1, 2, 0, 0])


def test_ppermute_over_y_on_2d():
    m = mesh24()
    x = host((2, 8), 1)
    out = smap(lambda v: lax.ppermute(v, "y", [(j, 3 - j) for j in range(4)]), m, P("x", "y"), P("x", "y"))(
        put(x, m, P("x", "y")))
    np.testing.assert_array_equal(np.asarray(out), x.reshape(2, 4, 2)[:, ::-1].reshape(2, 8))


def test_ppermute_errors():
    m = mesh1d(4)
    with pytest.raises(ts.ShardingError, match=r"^\[ppermute\] pair \(0, 4\) is out of range"):
        smap(lambda v: lax.ppermute(v, "x", [(0, 4)]), m, P("x"), P("x"))(put(host((4,)), m, P("x")))
    with pytest.raises(ts.ShardingError, match=r"^\[ppermute\] each device may send once"):
        smap(lambda v: lax.ppermute(v, "x", [(0, 1), (0, 2)]), m, P("x"), P("x"))(put(host((4,)), m, P("x")))


# ------------------------------------------------------------- all_to_all


@sizes
def test_all_to_all_tiled_moves_the_sharded_dim(n):
    m = mesh1d(n)
    x = host((n, 2 * n), n)
    f = smap(lambda v: lax.all_to_all(v, "x", 1, 0, tiled=True), m, P("x"), P(None, "x"))
    np.testing.assert_array_equal(np.asarray(f(put(x, m, P("x")))), x)


@sizes
def test_all_to_all_untiled(n):
    m = mesh1d(n)
    x = host((n * n, 3), n)
    out = smap(lambda v: lax.all_to_all(v, "x", 0, 0), m, P("x"), P("x"))(put(x, m, P("x")))
    np.testing.assert_array_equal(np.asarray(out), x.reshape(n, n, 3).transpose(1, 0, 2).reshape(n * n, 3))


# ------------------------------------------------- axis_index, axis_size


@sizes
def test_axis_index_and_size(n):
    m = mesh1d(n)

    def body(v):
        assert lax.axis_size("x") == n
        return tnp.reshape(lax.axis_index("x"), (1,)) + 0 * v[:1].astype(np.int32)

    out = smap(body, m, P("x"), P("x"))(put(np.zeros(n, np.float32), m, P("x")))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), np.arange(n))


def test_axis_index_2d_and_tuples():
    m = mesh24()

    def body(v):
        sizes = (lax.axis_size("x"), lax.axis_size("y"), lax.axis_size(("x", "y")))
        assert sizes == (2, 4, 8)
        idx = tnp.stack([lax.axis_index("x"), lax.axis_index("y"), lax.axis_index(("x", "y"))])
        return tnp.reshape(idx, (1, 3))

    out = np.asarray(smap(body, m, P(), P(("x", "y")))(put(np.zeros(1, np.float32), m, P())))
    np.testing.assert_array_equal(out[:, 0], np.repeat([0, 1], 4))
    np.testing.assert_array_equal(out[:, 1], np.tile(np.arange(4), 2))
    np.testing.assert_array_equal(out[:, 2], np.arange(8))


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("call", [
    lambda a: lax.psum(a, "x"), lambda a: lax.pmean(a, "x"), lambda a: lax.pmax(a, "x"),
    lambda a: lax.pmin(a, "x"), lambda a: lax.all_gather(a, "x"), lambda a: lax.psum_scatter(a, "x"),
    lambda a: lax.ppermute(a, "x", [(0, 1)]), lambda a: lax.all_to_all(a, "x", 0, 0),
    lambda a: lax.axis_index("x"), lambda a: lax.axis_size("x"),
], ids=["psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute", "all_to_all", "axis_index",
        "axis_size"])
def test_outside_a_body_is_a_collective_error(call):
    a = ts.device_put(np.ones(4, np.float32))
    with pytest.raises(ts.CollectiveError, match=r"^\[\w+\] collectives are valid only inside shard_map bodies"):
        call(a)


def test_bad_axis_names():
    m = mesh1d(4)
    a = put(host((8,)), m, P("x"))
    with pytest.raises(ts.ShardingError, match=r"^\[psum\] no axis named 'z' in"):
        smap(lambda v: lax.psum(v, "z"), m, P("x"), P())(a)
    with pytest.raises(ts.ShardingError, match=r"^\[axis_index\] no axis named 'z'"):
        smap(lambda v: lax.axis_index("z") + v, m, P("x"), P("x"))(a)
    with pytest.raises(ts.ShardingError, match=r"^\[all_gather\] axis 'x' is named twice"):
        smap(lambda v: lax.all_gather(v, ("x", "x")), m, P("x"), P())(a)
    with pytest.raises(TypeError, match="axis_name"):
        smap(lambda v: lax.psum(v, 3), m, P("x"), P())(a)


def test_axis_index_groups_not_supported():
    m = mesh1d(2)
    with pytest.raises(NotImplementedError, match="axis_index_groups"):
        smap(lambda v: lax.psum(v, "x", axis_index_groups=[[0], [1]]), m, P("x"), P())(put(host((2,)), m, P("x")))


def test_mismatched_collectives_raise_instead_of_hanging():
    m = mesh1d(4)

    def body(v):
        if int(lax.axis_index("x")) == 0:
            return lax.all_gather(v, "x", tiled=True)
        return lax.psum(v, "x")

    with pytest.raises(ts.CollectiveError):
        smap(body, m, P("x"), P(), check_vma=False)(put(host((8,)), m, P("x")))
    # The devices are free again.
    out = smap(lambda v: lax.psum(v, "x"), m, P("x"), P())(put(np.ones(8, np.float32), m, P("x")))
    np.testing.assert_array_equal(np.asarray(out), [4, 4])


def test_a_collective_some_devices_skip_times_out():
    m = mesh1d(4)
    old = ts.config.collective_timeout()
    ts.config.set_collective_timeout(0.5)
    try:
        def body(v):
            if int(lax.axis_index("x")) == 2:
                return v
            return lax.psum(v, "x")

        with pytest.raises(ts.CollectiveError, match=r"psum"):
            smap(body, m, P("x"), P("x"), check_vma=False)(put(host((8,)), m, P("x")))
    finally:
        ts.config.set_collective_timeout(old)


# ------------------------------------------- NamedTuples and dataclasses

class Pair(NamedTuple):
    a: object
    b: object


@dataclasses.dataclass
class Stats:
    total: object
    label: str = "sums"


def test_collectives_keep_namedtuples_and_dataclasses():
    m = mesh1d(4)
    x = host((8, 3), 7)

    def body(v):
        p = lax.psum(Pair(v, 2.0 * v), "x")
        s = lax.pmax(Stats(v), "x")
        assert type(p) is Pair and type(s) is Stats and s.label == "sums"
        return p.a, p.b, s.total

    a, b, mx = smap(body, m, P("x"), (P(), P(), P()))(put(x, m, P("x")))
    np.testing.assert_allclose(np.asarray(a), x.reshape(4, 2, 3).sum(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(b), 2 * x.reshape(4, 2, 3).sum(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(mx), x.reshape(4, 2, 3).max(0))
