import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import tessera as ts
import tessera.numpy as tnp
from tessera.sharding import NamedSharding


def host(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def test_jit_matches_eager_and_caches(mesh):
    x = host((10, 7))
    a = ts.device_put(x, NamedSharding(mesh, ts.P(mesh.axis_names[0])))

    def f(v):
        return tnp.sum(2.0 * tnp.sin(v) + 1.0, axis=1)

    jf = ts.jit(f)
    y = jf(a)
    np.testing.assert_allclose(np.asarray(y), np.asarray(f(a)), rtol=1e-5, atol=1e-6)
    assert y.sharding.mesh == mesh
    jf(a)
    assert jf.cache_size() == 1
    jf(ts.device_put(host((3, 7)), NamedSharding(mesh, ts.P())))
    assert jf.cache_size() == 2
    text = jf.lower(a)
    assert "f32[10" in text


def test_jit_pytrees_and_statics():
    a, b = ts.device_put(host((4,), 1)), ts.device_put(host((4,), 2))
    calls = []

    def f(pair, d, scale):
        calls.append(1)
        return {"sum": (pair[0] + pair[1]) * scale, "diff": pair[0] - d["w"]}, None

    jf = ts.jit(f)
    out, nothing = jf((a, b), {"w": b}, 3.0)
    assert nothing is None
    np.testing.assert_allclose(np.asarray(out["sum"]), (np.asarray(a) + np.asarray(b)) * 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["diff"]), np.asarray(a) - np.asarray(b), rtol=1e-6)
    jf((a, b), {"w": b}, 3.0)
    assert len(calls) == 1  # cached: traced once
    jf((a, b), {"w": b}, 4.0)  # another static value: traced again
    assert len(calls) == 2


def test_jit_static_argnums_and_out_shardings():
    mesh = ts.make_mesh((2,), ("x",), devices=ts.devices()[:2])
    a = ts.device_put(host((6, 4)), NamedSharding(mesh, ts.P("x")))
    rep = NamedSharding(mesh, ts.P())
    jf = ts.jit(lambda v, n: v * n, static_argnums=(1,), out_shardings=rep)
    y = jf(a, 3)
    assert y.sharding == rep
    np.testing.assert_allclose(np.asarray(y), np.asarray(a) * 3, rtol=1e-6)


def test_jit_errors_keep_their_type():
    jf = ts.jit(lambda v, w: tnp.matmul(v, w))
    with pytest.raises(ts.ShapeError, match=r"^\[matmul\] contracting dims differ"):
        jf(ts.device_put(host((8, 16))), ts.device_put(host((12, 4))))

    def bad(v):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        ts.jit(bad)(ts.device_put(host(3)))


def test_traced_values_have_no_data():
    seen = []

    def f(v):
        seen.append(repr(v))
        with pytest.raises(ts.Error):
            np.asarray(v)
        return v + 1.0

    ts.jit(f)(ts.device_put(host((3,))))
    assert seen[0].startswith("Traced<f32[3]")


def test_grad_and_value_and_grad(mesh):
    x = host((10, 3))
    w = host((3,), 5)
    a = ts.device_put(x, NamedSharding(mesh, ts.P(mesh.axis_names[0])))
    wa = ts.device_put(w, NamedSharding(mesh, ts.P()))

    def loss(w, x):
        return tnp.mean(tnp.square(tnp.matmul(x, w)))

    g = ts.grad(loss)(wa, a)
    ref = 2 * x.T @ (x @ w) / x.shape[0]
    assert g.shape == (3,) and g.sharding == wa.sharding
    np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-4, atol=1e-6)
    v, g2 = ts.value_and_grad(loss)(wa, a)
    np.testing.assert_allclose(v.item(), np.mean((x @ w) ** 2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g2), ref, rtol=1e-4, atol=1e-6)
    gw, gx = ts.grad(loss, argnums=(0, 1))(wa, a)
    assert gx.shape == (10, 3) and gx.sharding == a.sharding
    np.testing.assert_allclose(np.asarray(gx), 2 * np.outer(x @ w, w) / x.shape[0], rtol=1e-4, atol=1e-6)
    # Through jit.
    gj = ts.jit(ts.grad(loss))(wa, a)
    np.testing.assert_allclose(np.asarray(gj), ref, rtol=1e-4, atol=1e-6)


def test_grad_pytrees_and_aux():
    p = {"w": ts.device_put(host((3,))), "b": ts.device_put(np.float32(0.5))}

    def loss(p):
        y = tnp.sum(p["w"] * p["w"]) + p["b"]
        return y, p["w"] * 2.0

    g, aux = ts.grad(loss, has_aux=True)(p)
    np.testing.assert_allclose(np.asarray(g["w"]), 2 * np.asarray(p["w"]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g["b"]), 1.0)
    np.testing.assert_allclose(np.asarray(aux), 2 * np.asarray(p["w"]), rtol=1e-6)


def test_grad_needs_a_float_scalar():
    with pytest.raises(ts.ShapeError, match=r"^\[grad\] the function must return a float scalar, got f32\[3\]"):
        ts.grad(lambda v: v * 2.0)(ts.device_put(host(3)))


def test_jvp_vjp():
    x = host((5,))
    a = ts.device_put(x)
    t = ts.device_put(np.ones(5, np.float32))
    y, dy = ts.jvp(tnp.sin, (a,), (t,))
    np.testing.assert_allclose(np.asarray(y), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(dy), np.cos(x), rtol=1e-5)
    y2, pullback = ts.vjp(lambda u, v: u * v, a, a)
    (ga, gb) = pullback(t)
    np.testing.assert_allclose(np.asarray(y2), x * x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ga), x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gb), x, rtol=1e-6)


def test_jacobians():
    x = host((4,))
    a = ts.device_put(x)
    for jac in (ts.jacfwd, ts.jacrev):
        j = jac(lambda v: tnp.sin(v) * 2.0)(a)
        assert j.shape == (4, 4)
        np.testing.assert_allclose(np.asarray(j), np.diag(2 * np.cos(x)), rtol=1e-5, atol=1e-7)
    j = ts.jacfwd(lambda v: v * 3.0, chunk_size=2)(a)
    np.testing.assert_allclose(np.asarray(j), 3 * np.eye(4), rtol=1e-6)


def test_vmap():
    x = host((6, 3))
    w = host((3,), 1)
    a, wa = ts.device_put(x), ts.device_put(w)
    f = ts.vmap(lambda row, w: tnp.sum(row * w), in_axes=(0, None))
    np.testing.assert_allclose(np.asarray(f(a, wa)), x @ w, rtol=1e-5)
    fc = ts.vmap(lambda row: row * 2.0, chunk_size=4)
    np.testing.assert_allclose(np.asarray(fc(a)), 2 * x, rtol=1e-6)
    ft = ts.vmap(lambda col: tnp.sum(col), in_axes=1)
    np.testing.assert_allclose(np.asarray(ft(a)), x.sum(axis=0), rtol=1e-5)


def test_wrapped_functions_are_collected():
    # A module-level jit/grad/vmap of a lambda is a reference cycle through the
    # module's globals; nanobind reports instances still alive at exit.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import numpy as np
        import tessera as ts
        import tessera.numpy as tnp
        a = ts.device_put(np.ones(3, np.float32))
        f = ts.jit(lambda v: v + 1.0)
        g = ts.grad(lambda v: tnp.sum(v * v))
        h = ts.vmap(lambda v: v * 2.0)
        j = ts.jacfwd(lambda v: v * 2.0)
        r = (f(a), g(a), h(a), j(a))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr, out.stderr


# ------------------------------------------------- NamedTuples and dataclasses

class Params(NamedTuple):
    w: object
    b: object


@dataclasses.dataclass
class Layer:
    w: object
    b: object
    name: str = "dense"


@dataclasses.dataclass(frozen=True)
class Frozen:
    scale: object


def test_namedtuple_and_dataclass_pytrees():
    rng = np.random.default_rng(0)
    w_np, b_np, x_np = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3,), (5, 4)))
    w, b, x = (ts.device_put(a) for a in (w_np, b_np, x_np))

    def loss(p, x):
        return tnp.sum(tnp.tanh(x @ p.w + p.b))

    # grad keeps the parameters' container type.
    g = ts.grad(loss)(Params(w, b), x)
    assert type(g) is Params
    t = np.tanh(x_np @ w_np + b_np)
    np.testing.assert_allclose(np.asarray(g.b), (1 - t**2).sum(0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g.w), x_np.T @ (1 - t**2), rtol=1e-5)
    gd = ts.grad(loss)(Layer(w, b), x)
    assert type(gd) is Layer and gd.name == "dense"
    np.testing.assert_allclose(np.asarray(gd.w), np.asarray(g.w), rtol=1e-6)

    # jit takes and returns them; a dataclass's static field is part of the key.
    f = ts.jit(lambda layer, x: Params(x @ layer.w, layer.b * 2.0) if layer.name == "dense" else Params(x, x))
    out = f(Layer(w, b), x)
    assert type(out) is Params
    np.testing.assert_allclose(np.asarray(out.w), x_np @ w_np, rtol=1e-5)
    out2 = f(Layer(w, b, name="other"), x)
    np.testing.assert_array_equal(np.asarray(out2.w), x_np)
    assert f.cache_size() == 2
    r = ts.jit(lambda fr, x: Frozen(fr.scale * x))(Frozen(ts.device_put(np.float32(3.0))), x)
    assert type(r) is Frozen
    np.testing.assert_allclose(np.asarray(r.scale), 3 * x_np)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.scale = 1

    # vmap over a NamedTuple of batched arrays.
    v = ts.vmap(lambda p: p.w.sum() + p.b.sum())(Params(x, x))
    np.testing.assert_allclose(np.asarray(v), 2 * x_np.sum(1), rtol=1e-5)


def test_numpy_arguments_follow_the_arrays_mesh():
    # NumPy leaves go replicated onto the mesh of the call's Arrays, wherever
    # they come in the arguments (JAX's uncommitted arrays).
    m = ts.make_mesh((4,), ("x",), devices=ts.devices()[:4])
    x = host((8, 3))
    a = ts.device_put(x, NamedSharding(m, ts.P("x")))
    out = ts.jit(lambda u, v: u + v)(x, a)
    assert out.sharding.mesh == m
    np.testing.assert_allclose(np.asarray(out), 2 * x, rtol=1e-6)
    g = ts.grad(lambda u, v: tnp.sum(u * v))(x, a)
    np.testing.assert_allclose(np.asarray(g), x, rtol=1e-6)
    v = ts.vmap(lambda u, w: u * w)(x, a)
    np.testing.assert_allclose(np.asarray(v), x * x, rtol=1e-6)


def test_jit_keyword_arguments():
    x = host((6,))
    a = ts.device_put(x)

    def f(v, *, scale, bias=None):
        return v * scale + (0.0 if bias is None else bias)

    jf = ts.jit(f)
    np.testing.assert_allclose(np.asarray(jf(a, scale=ts.device_put(np.float32(2.0)), bias=a)), 3 * x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jf(a, scale=3.0)), 3 * x, rtol=1e-6)  # a number: static
    np.testing.assert_allclose(np.asarray(jf(a, scale=3.0)), 3 * x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jf(a, scale=4.0)), 4 * x, rtol=1e-6)
    assert jf.cache_size() == 3
    m = ts.make_mesh((2,), ("x",), devices=ts.devices()[:2])
    s = NamedSharding(m, ts.P("x"))
    per_arg = ts.jit(lambda u, w, *, scale: u * w * scale, in_shardings=[s, s])
    with pytest.raises(ts.ShardingError, match=r"^\[jit\] in_shardings has one entry per positional argument"):
        per_arg(a, a, scale=2.0)
    one = ts.jit(lambda u, *, w: u * w, in_shardings=s)
    r = one(x, w=x)
    assert r.sharding.spec == ts.P("x")
    np.testing.assert_allclose(np.asarray(r), x * x, rtol=1e-6)
