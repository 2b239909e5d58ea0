"""tessera.random: JAX's values bitwise (reference values recorded from JAX
0.10.2 with jax_threefry_partitionable, its default, as in the C++ tests
tests/ops/test_random.cpp), layout independence, statistics, errors, and keys
inside shard_map bodies, jit and vmap."""

import numpy as np
import pytest

import tessera as ts
from tessera import lax, random
from tessera.sharding import NamedSharding

P = ts.P


def mesh24():
    return ts.make_mesh((2, 4), ("x", "y"))


def words(k):
    return np.asarray(k).astype(np.uint32).tolist()


# ------------------------------------------------------------------ keys


def test_key_from_seed_like_jax():
    k = random.key(0x123456789ABCDEF0)
    assert k.dtype == np.uint32 and k.shape == (2,)
    assert words(k) == [0x12345678, 0x9ABCDEF0]
    assert words(random.key(42)) == [0, 42]
    assert words(random.PRNGKey(42)) == [0, 42]
    assert words(random.key(2**64 - 1)) == [0xFFFFFFFF, 0xFFFFFFFF]
    assert words(random.key(-1)) == [0xFFFFFFFF, 0xFFFFFFFF]  # JAX with x64


def test_split_and_fold_in_match_jax():
    k = random.key(42)
    s = random.split(k, 3)
    assert s.shape == (3, 2)
    assert words(s) == [[0x6D3E048F, 0x1022172D], [0x03D7B32D, 0xADD083F4], [0x92FB20EA, 0x0F38D913]]
    assert words(random.fold_in(k, 3)) == [0xBAD56946, 0x354BA891]
    assert words(random.fold_in(random.key(0), 0)) == [0x6B200159, 0x99BA4EFE]
    assert random.split(k).shape == (2, 2)


def test_split_is_a_prefix_and_matches_fold_in():
    k = random.key(1234)
    many, three = np.asarray(random.split(k, 64)), np.asarray(random.split(k, 3))
    np.testing.assert_array_equal(many[:3], three)
    for i in range(3):
        np.testing.assert_array_equal(three[i], np.asarray(random.fold_in(k, i)))
    assert len({tuple(r) for r in many}) == 64
    assert random.split(k, 0).shape == (0, 2)


def test_key_arrays_split_and_fold_in_per_key():
    keys = random.split(random.key(7), 5)
    sp = random.split(keys, 3)
    assert sp.shape == (5, 3, 2)
    for i in range(5):
        np.testing.assert_array_equal(np.asarray(sp)[i], np.asarray(random.split(keys[i], 3)))
    data = ts.device_put(np.array([-4, -1, 2, 5, 8], np.int32))
    folded = np.asarray(random.fold_in(keys, data))
    for i, d in enumerate([-4, -1, 2, 5, 8]):
        np.testing.assert_array_equal(folded[i], np.asarray(random.fold_in(keys[i], d)))  # modulo 2^32
    np.testing.assert_array_equal(np.asarray(random.fold_in(keys[0], -1)),
                                  np.asarray(random.fold_in(keys[0], 2**32 - 1)))


def test_key_data_and_wrap_key_data():
    k = random.key(9)
    assert random.key_data(k) is k
    w = random.wrap_key_data(np.array([0, 9], np.uint32))
    assert isinstance(w, ts.Array) and words(w) == [0, 9]
    np.testing.assert_array_equal(np.asarray(random.normal(w, (3,))), np.asarray(random.normal(k, (3,))))


# -------------------------------------------------------------- samplers

UNIFORM_F32 = [0x3EFA3824, 0x3F2E0730, 0x3F1DC3F8, 0x3F0F9EC0, 0x3EE6BAE4,
               0x3F15FB4E, 0x3D9935B0, 0x3F466F24, 0x3F32EEFE, 0x3F5191FA]
UNIFORM_F64 = [0x3FDB4F8123C40884, 0x3F8EBD996D6E8400, 0x3FE25F641D41E71A, 0x3FE75AAD28C6A974,
               0x3FE60275DC7869DA, 0x3FE49B2352C6244A, 0x3FE4A0D8A116C40E, 0x3FE2FA0AA5EA37EE,
               0x3FCE4CC8B3C73BB0, 0x3FD0D25122E4B62C]


@pytest.mark.parametrize("sharding", [None, "x,y", "y"])
def test_uniform_matches_jax_bitwise(sharding):
    k = random.key(42)
    kw = {}
    if sharding:
        kw["out_sharding"] = NamedSharding(mesh24(), P(*sharding.split(",")))
    a = random.uniform(k, (2, 5), **kw)
    assert a.dtype == np.float32
    assert np.asarray(a).view(np.uint32).ravel().tolist() == UNIFORM_F32
    b = random.uniform(k, (2, 5), np.float64, **kw)
    assert np.asarray(b).view(np.uint64).ravel().tolist() == UNIFORM_F64
    if sharding:
        assert a.sharding == kw["out_sharding"]


def ulps(a, b):
    ia = a.view(np.int32 if a.dtype == np.float32 else np.int64).astype(np.int64)
    ib = b.view(np.int32 if b.dtype == np.float32 else np.int64).astype(np.int64)
    return np.abs(ia - ib)  # same signs here


def test_normal_matches_jax_within_two_ulp():
    # jax.random.normal(PRNGKey(3), (5,), dtype), as bits.
    f32 = np.array([0xBFB91EF3, 0x3FC50A70, 0x3EC3D7DC, 0x3FFC3FF5, 0xBF16715F], np.uint32).view(np.float32)
    f64 = np.array([0x3FF1AD9055C790F4, 0xBFBE1907DB03B214, 0xBFE6C0A11A82CEE1, 0xBFEA735929882A96,
                    0xBFDE67509EAB6790], np.uint64).view(np.float64)
    k = random.key(3)
    assert ulps(np.asarray(random.normal(k, (5,))), f32).max() <= 2
    assert ulps(np.asarray(random.normal(k, (5,), np.float64)), f64).max() <= 2
    # jax.random.normal(PRNGKey(42), (6,), dtype), printed as decimals.
    n64 = [-0.18471174528191162, -2.169824560397754, 0.18693555179382582, 0.6122653570510959,
           0.4896249504757018, 0.36900430470828355]
    n32 = [-0.02830461598932743, 0.4671318531036377, 0.2957029640674591, 0.15354591608047485,
           -0.12403281778097153, 0.21692314743995667]
    sh = NamedSharding(mesh24(), P("y"))
    assert ulps(np.asarray(random.normal(random.key(42), (6,), np.float64, out_sharding=sh)),
                np.array(n64)).max() <= 2
    assert ulps(np.asarray(random.normal(random.key(42), (6,), out_sharding=sh)),
                np.array(n32, np.float32)).max() <= 2


@pytest.mark.parametrize("spec", [P(), P("x"), P("y", "x"), P(None, ("x", "y"))])
def test_same_values_on_every_layout(spec):
    k = random.key(5)
    ref_u = np.asarray(random.uniform(k, (13, 5), np.float64, -2.0, 3.0))
    ref_n = np.asarray(random.normal(k, (13, 5)))
    s = NamedSharding(mesh24(), spec)
    u = random.uniform(k, (13, 5), np.float64, -2.0, 3.0, out_sharding=s)
    n = random.normal(k, (13, 5), out_sharding=s)
    assert u.sharding == s and n.sharding == s
    np.testing.assert_array_equal(np.asarray(u), ref_u)
    np.testing.assert_array_equal(np.asarray(n), ref_n)


def test_sampler_shapes_and_defaults():
    k = random.key(0)
    assert random.uniform(k).shape == ()
    assert random.normal(k, 4).shape == (4,)
    assert random.normal(k, (0, 3)).shape == (0, 3)
    km = ts.device_put(k, NamedSharding(mesh24(), P()))
    r = random.normal(km, (4,))
    assert r.sharding == NamedSharding(mesh24(), P())  # replicated on the key's mesh


def test_statistics():
    k = random.key(2024)
    u = np.asarray(random.uniform(k, (200_000,), minval=-1.0, maxval=3.0))
    assert u.min() >= -1.0 and u.max() < 3.0
    assert abs(u.mean() - 1.0) < 0.02 and abs(u.var() - 16 / 12) < 0.02
    z = np.asarray(random.normal(random.fold_in(k, 1), (200_000,), np.float64))
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    assert abs(((z - z.mean()) ** 3).mean()) < 0.03
    a, b = (np.asarray(random.normal(s, (1000,))) for s in random.split(k))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.1


def test_deterministic():
    k = random.key(11)
    np.testing.assert_array_equal(np.asarray(random.normal(k, (7,))), np.asarray(random.normal(k, (7,))))
    assert not np.array_equal(np.asarray(random.normal(k, (7,))), np.asarray(random.normal(random.key(12), (7,))))


# ----------------------------------------------------------------- errors


def test_errors():
    k = random.key(0)
    with pytest.raises(ts.DTypeError, match=r"^\[uniform\].*float"):
        random.uniform(k, (4,), np.int32)
    with pytest.raises(ts.DTypeError, match=r"^\[normal\].*float"):
        random.normal(k, (4,), np.int64)
    with pytest.raises(ts.Error, match=r"^\[uniform\].*lo < hi"):
        random.uniform(k, (4,), minval=1.0, maxval=1.0)
    with pytest.raises(ts.ShapeError, match=r"^\[split\].*num=-1"):
        random.split(k, -1)
    with pytest.raises(ts.DTypeError, match=r"^\[split\].*u32"):
        random.split(ts.device_put(np.zeros(2, np.float32)), 2)
    with pytest.raises(ts.ShapeError, match=r"^\[fold_in\].*size 2"):
        random.fold_in(ts.device_put(np.zeros(3, np.uint32)), 1)
    with pytest.raises(ts.ShapeError, match=r"^\[normal\].*one key"):
        random.normal(random.split(k, 3), (4,))
    with pytest.raises(ts.ShardingError, match=r"^\[uniform\].*rank 1"):
        random.uniform(k, (8,), out_sharding=NamedSharding(mesh24(), P("x", "y")))
    with pytest.raises(TypeError, match="seed must be an int"):
        random.key(1.5)
    with pytest.raises(OverflowError, match="64 bits"):
        random.key(2**64)


# ------------------------------------------------ shard_map, jit and vmap


def test_per_device_keys_through_shard_map():
    mesh = ts.make_mesh((8,), ("x",))
    keys = random.split(random.key(99), 8)

    def body(kl):
        mine = random.fold_in(kl[0], lax.axis_index("x"))
        second = random.split(mine, 2)[1]
        return random.normal(second, (3,), np.float64)

    f = ts.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    out = np.asarray(f(ts.device_put(keys, NamedSharding(mesh, P("x")))))
    want = np.concatenate([np.asarray(random.normal(random.split(random.fold_in(keys[i], i), 2)[1], (3,),
                                                    np.float64)) for i in range(8)])
    np.testing.assert_array_equal(out, want)
    # Draws vary over x: claiming they are replicated is caught.
    with pytest.raises(ts.ShardingError, match=r"'x'"):
        ts.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P())(ts.device_put(keys, NamedSharding(mesh, P("x"))))


def test_replicated_key_in_a_body_draws_the_same_everywhere():
    mesh = ts.make_mesh((4,), ("x",), devices=ts.devices()[:4])
    k = ts.device_put(random.key(3), NamedSharding(mesh, P()))
    f = ts.shard_map(lambda kl: random.uniform(kl, (2,)), mesh=mesh, in_specs=P(), out_specs=P())
    np.testing.assert_array_equal(np.asarray(f(k)), np.asarray(random.uniform(random.key(3), (2,))))


def test_under_jit():
    k = random.key(4)
    f = ts.jit(lambda key: random.normal(random.split(key)[1], (5,)) + random.uniform(key, (5,)))
    want = np.asarray(random.normal(random.split(k)[1], (5,))) + np.asarray(random.uniform(k, (5,)))
    np.testing.assert_allclose(np.asarray(f(k)), want, rtol=1e-6)


def test_under_vmap():
    keys = random.split(random.key(8), 4)
    out = np.asarray(ts.vmap(lambda key: random.normal(key, (3,)))(keys))
    assert out.shape == (4, 3)
    for i in range(4):
        np.testing.assert_array_equal(out[i], np.asarray(random.normal(keys[i], (3,))))
