"""tessera.shard_map: specs, pytrees, layouts, errors raised in bodies on some
devices or all, and how it composes with jit, grad, jvp and vmap."""

import dataclasses
import functools
import threading
from typing import NamedTuple

import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp
from tessera import lax
from tessera.sharding import NamedSharding
from conftest import host, mesh1d, mesh24, put

P = ts.P


# ----------------------------------------------------------- basic forms


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_matmul_with_psum(n):
    m = mesh1d(n)
    a, b = host((4, 2 * n), 1), host((2 * n, 3), 2)

    def body(al, bl):
        return lax.psum(al @ bl, "x")

    out = ts.shard_map(body, mesh=m, in_specs=(P(None, "x"), P("x")), out_specs=P())(
        put(a, m, P(None, "x")), put(b, m, P("x")))
    assert out.shape == (4, 3)
    assert out.sharding == NamedSharding(m, P())
    np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-5, atol=1e-5)


def test_body_sees_local_blocks_and_outputs_are_concatenated():
    m = mesh24()
    x = host((4, 8))
    seen = []

    def body(v):
        seen.append((v.shape, ts.typeof(v)))
        return 2.0 * v

    out = ts.shard_map(body, mesh=m, in_specs=P("x", "y"), out_specs=P("x", "y"))(put(x, m, P("x", "y")))
    assert len(seen) == 8
    assert {s for s, _ in seen} == {(2, 2)}
    assert all("{V:x,y}" in t for _, t in seen)
    assert out.sharding == NamedSharding(m, P("x", "y"))
    np.testing.assert_array_equal(np.asarray(out), 2 * x)


def test_positional_mesh_specs_like_the_older_api():
    m = mesh1d(4)
    x = host((8,))
    f = ts.shard_map(lambda v: v + 1.0, m, P("x"), P("x"))
    np.testing.assert_allclose(np.asarray(f(put(x, m, P("x")))), x + 1)


def test_decorator_forms():
    m = mesh1d(4)
    x = host((8,))

    @functools.partial(ts.shard_map, mesh=m, in_specs=P("x"), out_specs=P())
    def total(v):
        return lax.psum(tnp.sum(v), "x")

    @ts.shard_map(mesh=m, in_specs=(P("x"),), out_specs=P("x"))
    def double(v):
        return v * 2.0

    np.testing.assert_allclose(float(total(put(x, m, P("x")))), x.sum(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(double(put(x, m, P("x")))), 2 * x)


def test_inputs_resharded_to_in_specs_and_numpy_inputs():
    m = mesh24()
    x = host((4, 8), 3)
    f = ts.shard_map(lambda v: lax.psum(v, ("x", "y")), mesh=m, in_specs=P("x", "y"), out_specs=P())
    want = x.reshape(2, 2, 4, 2).sum((0, 2))
    for a in (put(x, m, P()), put(x, m, P("y")), ts.device_put(x), x):
        np.testing.assert_allclose(np.asarray(f(a)), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [1, 3, 10, 13])
def test_uneven_blocks_in_and_out(length):
    m = mesh1d(4)
    x = np.arange(length, dtype=np.float32)
    sizes = []

    def body(v):
        sizes.append(v.shape[0])
        return v * 3.0

    out = ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P("x"))(put(x, m, P("x")))
    assert sorted(sizes, reverse=True) == [-(-length // 4) if i < length % 4 or length % 4 == 0 else length // 4
                                           for i in range(4)]
    np.testing.assert_array_equal(np.asarray(out), 3 * x)


def test_several_outputs_and_out_spec_trees():
    m = mesh1d(4)
    x = host((8, 2))

    def body(v):
        return v + 1.0, (lax.psum(v, "x"), {"n": tnp.reshape(lax.axis_index("x"), (1,))})

    out = ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=(P("x"), (P(), {"n": P("x")})))(
        put(x, m, P("x")))
    a, (s, d) = out
    np.testing.assert_allclose(np.asarray(a), x + 1)
    np.testing.assert_allclose(np.asarray(s), x.reshape(4, 2, 2).sum(0), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(d["n"]), np.arange(4))
    # One spec for every output.
    both = ts.shard_map(lambda v: (v, 2.0 * v), mesh=m, in_specs=P("x"), out_specs=P("x"))(put(x, m, P("x")))
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(np.asarray(both[1]), 2 * x)


def test_pytree_arguments_and_spec_trees():
    m = mesh24()
    w, b, x = host((4, 8), 1), host((8,), 2), host((6, 4), 3)

    def body(params, xs, scale):
        assert scale == 0.5
        return lax.psum(xs @ params["w"], "x") * scale + params["b"]

    f = ts.shard_map(body, mesh=m, in_specs=({"w": P("x", "y"), "b": P("y")}, P(None, "x"), P()),
                     out_specs=P(None, "y"))
    out = f({"w": put(w, m, P()), "b": put(b, m, P())}, put(x, m, P()), 0.5)
    np.testing.assert_allclose(np.asarray(out), (x @ w) * 0.5 + b, rtol=1e-5, atol=1e-5)
    # One spec for a whole argument: every array in it.
    g = ts.shard_map(lambda t: (t[0] + t[1][0], t[1][1]), mesh=m, in_specs=(P("x"),), out_specs=P("x"))
    r0, r1 = g((put(w, m, P()), [put(w, m, P()), put(x, m, P())]))
    np.testing.assert_allclose(np.asarray(r0), 2 * w)
    np.testing.assert_allclose(np.asarray(r1), x)


class Pair(NamedTuple):
    a: object
    b: object


@dataclasses.dataclass
class Block:
    w: object
    b: object


@dataclasses.dataclass
class Tagged:
    x: object
    tag: str = "plain"  # static: no PartitionSpec, reaches the body as it is


def mesh_axes_spec(kind):
    # A 1-d mesh of 4 devices, or the 2x4 mesh with its arrays split over both axes.
    m, axes = (mesh1d(4), ("x",)) if kind == "1d" else (mesh24(), ("x", "y"))
    return m, axes, P(*axes)


def block_sum(v, m):
    # The sum of v's blocks when split P("x") (1-d mesh) or P("x", "y") (2x4 mesh).
    nx, ny = (m.shape["x"], m.shape.get("y", 1))
    return v.reshape(nx, v.shape[0] // nx, ny, v.shape[1] // ny).sum((0, 2))


@pytest.mark.parametrize("kind", ["1d", "2x4"])
def test_namedtuple_arguments_and_results(kind):
    m, axes, spec = mesh_axes_spec(kind)
    x, y = host((8, 4), 1), host((8, 4), 2)
    seen = []

    def body(p):
        seen.append(type(p))
        return Pair(p.a + p.b, lax.psum(p.a * p.b, axes))

    # Specs with the argument's and the result's structure.
    f = ts.shard_map(body, mesh=m, in_specs=(Pair(spec, spec),), out_specs=Pair(spec, P()))
    out = f(Pair(put(x, m, spec), y))
    assert type(out) is Pair and set(seen) == {Pair}
    np.testing.assert_allclose(np.asarray(out.a), x + y, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out.b), block_sum(x * y, m), rtol=1e-5, atol=1e-6)
    assert out.b.sharding == NamedSharding(m, P())

    # One PartitionSpec for every array of the argument and of the result.
    g = ts.shard_map(lambda p: Pair(p.b, 2.0 * p.a), mesh=m, in_specs=spec, out_specs=spec)
    out = g(Pair(put(x, m, P()), put(y, m, spec)))
    assert type(out) is Pair
    np.testing.assert_allclose(np.asarray(out.a), y)
    np.testing.assert_allclose(np.asarray(out.b), 2 * x)
    assert out.a.sharding == NamedSharding(m, spec)


@pytest.mark.parametrize("kind", ["1d", "2x4"])
def test_dataclass_arguments_and_results(kind):
    m, axes, spec = mesh_axes_spec(kind)
    w, b = host((8, 4), 3), host((8, 4), 4)
    tags = []

    def body(blk, t):
        assert type(blk) is Block and type(t) is Tagged
        tags.append(t.tag)
        return Block(blk.w * t.x, lax.psum(blk.b, axes))

    # Specs with the arguments' and the result's structure (a static field's spec is not used).
    f = ts.shard_map(body, mesh=m, in_specs=(Block(spec, spec), Tagged(P())), out_specs=Block(spec, P()))
    out = f(Block(put(w, m, spec), put(b, m, P())), Tagged(np.array(3.0, np.float32), tag="scaled"))
    assert type(out) is Block and set(tags) == {"scaled"}
    np.testing.assert_allclose(np.asarray(out.w), 3 * w, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out.b), block_sum(b, m), rtol=1e-5, atol=1e-6)

    # One PartitionSpec for each argument, and for every array of the result.
    g = ts.shard_map(lambda blk, t: Block(blk.w * t.x, blk.b + 1.0), mesh=m, in_specs=(spec, P()), out_specs=spec)
    out = g(Block(w, put(b, m, spec)), Tagged(put(np.float32(2.0), m, P())))
    assert type(out) is Block
    np.testing.assert_allclose(np.asarray(out.w), 2 * w, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out.b), b + 1, rtol=1e-6)


def test_namedtuple_and_dataclass_spec_mismatches():
    m = mesh1d(4)
    a = put(host((8,)), m, P("x"))
    # A NamedTuple's spec tree is that NamedTuple (or one PartitionSpec), not a plain tuple.
    f = ts.shard_map(lambda p: p.a, mesh=m, in_specs=((P("x"), P("x")),), out_specs=P("x"))
    with pytest.raises(ts.ShapeError, match=r"^\[shard_map\] tree structure mismatch: in_specs entry 0 is "
                                            r"\(PartitionSpec\('x',\), PartitionSpec\('x',\)\) but the argument "
                                            r"there is a Pair of 2"):
        f(Pair(a, a))
    g = ts.shard_map(lambda v: Pair(v, v), mesh=m, in_specs=P("x"), out_specs=Block(P("x"), P("x")))
    with pytest.raises(ts.ShapeError, match=r"^\[shard_map\] tree structure mismatch: out_specs is "
                                            r"Block\(w=P, b=P\) but the body returned Pair\(P, P\)"):
        g(a)
    h = ts.shard_map(lambda blk: blk.w, mesh=m, in_specs=(Block(P("x"), (P("x"),)),), out_specs=P("x"))
    with pytest.raises(ts.ShapeError, match=r"^\[shard_map\] tree structure mismatch: in_specs entry 0\.b is a "
                                            r"tuple but the argument there is an array"):
        h(Block(a, a))


def test_captured_replicated_arrays():
    m = mesh1d(4)
    c = put(np.float32([1, 2]), m, P())
    out = ts.shard_map(lambda v: v * c, mesh=m, in_specs=P("x"), out_specs=P("x"))(put(np.ones((4, 2), np.float32), m, P("x")))
    np.testing.assert_array_equal(np.asarray(out), np.tile([1, 2], (4, 1)))


def test_jit_and_grad_inside_the_body():
    m = mesh1d(4)
    x = host((8,))

    @ts.jit
    def local(v):
        return tnp.sin(v) * 2.0

    def body(v):
        g = ts.grad(lambda u: tnp.sum(u * u))(v)
        return local(v) + g

    out = ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P("x"))(put(x, m, P("x")))
    np.testing.assert_allclose(np.asarray(out), 2 * np.sin(x) + 2 * x, rtol=1e-5, atol=1e-6)


def test_vmap_inside_the_body_with_a_collective():
    m = mesh1d(4)
    x = host((4, 3))  # each device: a (1, 3) block, mapped over its 3 columns
    out = ts.shard_map(lambda v: ts.vmap(lambda c: lax.psum(c, "x"), in_axes=1)(v), mesh=m, in_specs=P("x"),
                       out_specs=P())(put(x, m, P("x")))
    np.testing.assert_allclose(np.asarray(out), x.sum(0).reshape(3, 1), rtol=1e-6)


# -------------------------------------------------------- transformations


def test_vmap_of_shard_map():
    m = mesh1d(4)
    xs = host((3, 8))
    f = ts.shard_map(lambda v: lax.psum(tnp.sum(v), "x"), mesh=m, in_specs=P("x"), out_specs=P())
    out = ts.vmap(f)(put(xs, m, P(None, "x")))
    np.testing.assert_allclose(np.asarray(out), xs.sum(1), rtol=1e-5)


def test_jvp_of_shard_map():
    m = mesh1d(4)
    x, t = host((8,), 1), host((8,), 2)
    f = ts.shard_map(lambda v: lax.psum(v * v, "x"), mesh=m, in_specs=P("x"), out_specs=P())
    y, ty = ts.jvp(f, (put(x, m, P("x")),), (put(t, m, P("x")),))
    np.testing.assert_allclose(np.asarray(y), (x * x).reshape(4, 2).sum(0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ty), (2 * x * t).reshape(4, 2).sum(0), rtol=1e-5)


def test_jit_of_shard_map():
    m = mesh1d(8)
    x = host((16, 3))
    a = put(x, m, P("x"))
    f = ts.shard_map(lambda v: lax.psum(v * 2.0, "x"), mesh=m, in_specs=P("x"), out_specs=P())
    jf = ts.jit(f)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(jf(a)), np.asarray(f(a)), rtol=1e-6)
    assert jf.cache_size() == 1
    assert "shard_map" in jf.lower(a)


def test_shard_map_inside_a_jitted_function():
    m = mesh1d(4)
    x = host((8,))

    @ts.jit
    def g(v):
        s = ts.shard_map(lambda u: lax.psum(tnp.sum(u * u), "x"), mesh=m, in_specs=P("x"), out_specs=P())(v)
        return tnp.sqrt(s) + 1.0

    np.testing.assert_allclose(float(g(put(x, m, P("x")))), np.sqrt((x * x).sum()) + 1, rtol=1e-5)


def test_grad_of_shard_map():
    m = mesh1d(4)
    x = host((8,))
    a = put(x, m, P("x"))
    f = ts.shard_map(lambda u: lax.psum(tnp.sum(u * u * u), "x"), mesh=m, in_specs=P("x"), out_specs=P())
    np.testing.assert_allclose(np.asarray(ts.grad(f)(a)), 3 * x * x, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ts.jit(ts.grad(f))(a)), 3 * x * x, rtol=1e-5)


def test_an_error_in_a_jitted_body_comes_out_as_raised():
    m = mesh1d(8)
    a = put(host((16,)), m, P("x"))
    calls = []

    def body(v):
        calls.append(1)
        if len(calls) > 8 and int(lax.axis_index("x")) == 3:  # not while tracing: when the program runs
            raise ValueError("late")
        return lax.psum(v, "x")

    jf = ts.jit(ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P()))
    for _ in range(2):
        with pytest.raises(ValueError, match="late"):
            jf(a)


def test_errors_in_the_body_under_jit_tracing_come_out_as_raised():
    m = mesh1d(4)

    def body(v):
        raise LookupError("from the body")

    f = ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P())
    with pytest.raises(LookupError, match="from the body"):
        ts.jit(f)(put(host((8,)), m, P("x")))


# ------------------------------------------------------ errors in bodies


def body_raising_on(devices, exc=ValueError):
    def body(v):
        i = int(lax.axis_index("x"))
        if i in devices:
            raise exc(f"device {i} failed")
        return lax.psum(v, "x")  # the others wait here until the failure wakes them
    return body


@pytest.mark.parametrize("n,bad", [(8, {3}), (4, {3}), (8, {0}), (8, {7})])
def test_exception_on_one_device_is_raised_as_is(n, bad):
    m = mesh1d(n)
    f = ts.shard_map(body_raising_on(bad), mesh=m, in_specs=P("x"), out_specs=P())
    with pytest.raises(ValueError, match=f"^device {min(bad)} failed$") as info:
        f(put(host((2 * n,)), m, P("x")))
    assert type(info.value) is ValueError
    assert info.traceback[-1].name == "body"  # the traceback reaches into the body


def test_exception_on_every_device():
    m = mesh1d(8)
    f = ts.shard_map(body_raising_on(set(range(8)), KeyError), mesh=m, in_specs=P("x"), out_specs=P())
    with pytest.raises(KeyError, match="device 0 failed"):
        f(put(host((16,)), m, P("x")))


def test_exception_in_a_2d_body_before_any_collective():
    m = mesh24()

    def body(v):
        if int(lax.axis_index(("x", "y"))) == 5:
            raise ZeroDivisionError("five")
        return lax.all_gather(v, ("x", "y"), tiled=True)

    with pytest.raises(ZeroDivisionError, match="five"):
        ts.shard_map(body, mesh=m, in_specs=P(("x", "y")), out_specs=P())(put(host((16,)), m, P(("x", "y"))))


def test_tessera_errors_inside_bodies_keep_their_class_and_message():
    m = mesh1d(4)
    with pytest.raises(ts.ShapeError, match=r"^\[matmul\]"):
        ts.shard_map(lambda v: v @ v, mesh=m, in_specs=P("x"), out_specs=P("x"))(put(host((8, 3)), m, P("x")))


def test_repeated_failures_leave_the_devices_usable():
    m = mesh1d(8)
    f = ts.shard_map(body_raising_on({3}), mesh=m, in_specs=P("x"), out_specs=P())
    a = put(host((16,)), m, P("x"))
    for _ in range(5):
        with pytest.raises(ValueError):
            f(a)
    ok = ts.shard_map(lambda v: lax.psum(v, "x"), mesh=m, in_specs=P("x"), out_specs=P())(a)
    np.testing.assert_allclose(np.asarray(ok), np.asarray(a).reshape(8, 2).sum(0), rtol=1e-5)


def test_python_threads_run_while_the_devices_do():
    # The calling thread releases the GIL, so other Python threads run too.
    m = mesh1d(4)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        def body(v):
            for _ in range(3):
                v = lax.psum(v, "x") * 0.25
            return v
        ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P())(put(host((8,)), m, P("x")))
    finally:
        stop.set()
        t.join()
    assert ticks


# ------------------------------------------------------------ spec errors


def test_wrong_number_of_in_specs():
    m = mesh1d(4)
    a = put(host((8,)), m, P("x"))
    f = ts.shard_map(lambda u, v: u + v, mesh=m, in_specs=(P("x"), P("x")), out_specs=P("x"))
    with pytest.raises(ts.ShardingError, match=r"^\[shard_map\] expected 2 arguments \(one per in_spec\), got 3"):
        f(a, a, a)
    with pytest.raises(ts.ShardingError, match=r"expected 2 arguments"):
        f(a)


def test_spec_tree_mismatch():
    m = mesh1d(4)
    a = put(host((8,)), m, P("x"))
    f = ts.shard_map(lambda t: t[0], mesh=m, in_specs=((P("x"), P("x")),), out_specs=P("x"))
    with pytest.raises(ts.ShapeError, match=r"^\[shard_map\] tree structure mismatch: in_specs entry 0"):
        f((a, a, a))
    g = ts.shard_map(lambda v: (v, v), mesh=m, in_specs=P("x"), out_specs=(P("x"), (P("x"),)))
    with pytest.raises(ts.ShapeError, match=r"^\[shard_map\] tree structure mismatch: out_specs"):
        g(a)
    with pytest.raises(ts.ShardingError, match=r"^\[shard_map\] the body returned 2 outputs but there are 3"):
        ts.shard_map(lambda v: (v, v), mesh=m, in_specs=P("x"), out_specs=(P("x"),) * 3)(a)


def test_bad_specs():
    m = mesh1d(4)
    a = put(host((8,)), m, P("x"))
    with pytest.raises(ts.ShardingError, match=r"^\[shard_map\]"):
        ts.shard_map(lambda v: v, mesh=m, in_specs=P("z"), out_specs=P())(a)
    with pytest.raises(ts.ShardingError, match=r"^\[shard_map\]"):
        ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs=P("z"))(a)
    with pytest.raises(TypeError, match="in_specs"):
        ts.shard_map(lambda v: v, mesh=m, in_specs="x", out_specs=P())(a)
    with pytest.raises(TypeError, match="out_specs"):
        ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs="x")(a)
    with pytest.raises(TypeError, match="mesh is required"):
        ts.shard_map(lambda v: v, in_specs=P("x"), out_specs=P())
    with pytest.raises(TypeError, match="must return Arrays"):
        ts.shard_map(lambda v: 3, mesh=m, in_specs=P("x"), out_specs=P())(a)


def test_check_vma_and_check_rep():
    m = mesh1d(4)
    a = put(np.arange(8, dtype=np.float32), m, P("x"))
    with pytest.raises(ts.ShardingError, match=r"^\[shard_map\] out_specs PartitionSpec\(\) for output 0 claims it "
                                               r"is replicated over mesh axis 'x'"):
        ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs=P())(a)
    for kw in ({"check_vma": False}, {"check_rep": False}):
        out = ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs=P(), **kw)(a)
        np.testing.assert_array_equal(np.asarray(out), [0, 1])  # the block of the device at x=0


def test_axis_names_must_name_every_axis():
    m = mesh24()
    f = ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs=P("x"), axis_names={"x", "y"})
    np.testing.assert_array_equal(np.asarray(f(put(np.ones(4, np.float32), m, P("x")))), np.ones(4))
    with pytest.raises(NotImplementedError, match="axis_names"):
        ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
    with pytest.raises(NotImplementedError, match="auto"):
        ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs=P("x"), auto=frozenset({"y"}))


def test_shard_map_inside_a_body_raises():
    m = mesh1d(2)
    inner = ts.shard_map(lambda v: v, mesh=m, in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(ts.ShardingError, match=r"^\[shard_map\] cannot be called inside a shard_map body"):
        ts.shard_map(lambda v: inner(v), mesh=m, in_specs=P("x"), out_specs=P("x"))(put(host((4,)), m, P("x")))


def test_errors_of_ops_in_a_body_name_its_line():
    m = mesh1d(2)

    def body(v):
        return v @ v  # the line named

    with pytest.raises(ts.ShapeError) as e:
        ts.shard_map(body, mesh=m, in_specs=P("x"), out_specs=P("x"))(put(host((4, 3)), m, P("x")))
    assert "(traced at " + __file__ in str(e.value) and "in body)" in str(e.value)
