"""SPMD with Tessera: automatic, explicit and manual sharding.

The same computation three ways:

  automatic  jit sees sharded inputs and decides how to split the work;
  explicit   the mesh's axes are Explicit, so shardings are part of the
             types (ts.typeof shows f32[32@X]) and propagate at trace time;
  manual     shard_map: the function sees one device's block and says
             where to communicate (lax.psum).

It ends with a small neural network (dense + relu, dense + tanh) written
all three ways; every result is checked against NumPy and the script exits
with status 1 if any check fails.

    python examples/python/spmd_tutorial.py
"""

import os

# Eight simulated CPU devices (set before tessera is imported).
os.environ.setdefault("TESSERA_NUM_CPU_DEVICES", "8")

import sys

import numpy as np

import tessera as ts
import tessera.numpy as tnp
from tessera import lax
from tessera.sharding import AxisType, NamedSharding, PartitionSpec as P

failures = []


def check(ok, what):
    """Prints the verdict of one check and remembers the failures."""
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def section(title):
    print(f"\n=== {title} ===")


print(ts.devices())

# ----------------------------------------------------------------------------
section("Data sharding")
# A new array lives on a single device.
arr = tnp.arange(32.0).reshape(4, 8)
print(arr.sharding)
ts.visualize_array_sharding(arr)

# A 2 x 4 mesh of the eight devices; P("x", "y") splits rows over "x" and
# columns over "y", so each device holds a 2 x 2 block.
mesh = ts.make_mesh((2, 4), ("x", "y"))
sharding = NamedSharding(mesh, P("x", "y"))
print(sharding)
arr_sharded = ts.device_put(arr, sharding)
print(arr_sharded)
ts.visualize_array_sharding(arr_sharded)
check(arr_sharded.addressable_shards[0].data.shape == (2, 2), "each device holds a (2, 2) block")
check(np.array_equal(np.asarray(arr_sharded), np.arange(32.0).reshape(4, 8)), "sharding does not change the values")

# ----------------------------------------------------------------------------
section("1. Automatic parallelism with jit")


# Elementwise work is done where the data is; the result is sharded like x.
@ts.jit
def f_elementwise(x):
    return 2 * tnp.sin(x) + 1


result = f_elementwise(arr_sharded)
print("shardings match:", result.sharding == arr_sharded.sharding)
check(result.sharding == arr_sharded.sharding, "an elementwise function keeps the sharding")
check(np.allclose(np.asarray(result), 2 * np.sin(np.arange(32.0).reshape(4, 8)) + 1, rtol=1e-6),
      "2 sin(x) + 1 matches NumPy")


# Summing over the rows adds the blocks of the two devices of each column of
# the mesh; the result is split over "y" and replicated over "x".
@ts.jit
def f_contract(x):
    return x.sum(axis=0)


result = f_contract(arr_sharded)
ts.visualize_array_sharding(result)
print(result)
check(result.sharding.spec == P("y"), "the column sums are split over 'y', replicated over 'x'")
check(np.array_equal(np.asarray(result), np.arange(32.0).reshape(4, 8).sum(axis=0)), "x.sum(axis=0) matches NumPy")

# ----------------------------------------------------------------------------
section("2. Explicit sharding: shardings in types")
some_array = tnp.asarray(np.arange(8, dtype=np.int32))
print(f"type of some_array: {ts.typeof(some_array)}")


# The type is known while jit traces the function (the print runs once, at
# tracing time).
@ts.jit
def foo(x):
    print(f"type of x during tracing: {ts.typeof(x)}")
    return x + x


print(repr(foo(some_array)))

# On a mesh whose axes are Explicit, the type names the mesh axis each
# dimension is split over.
explicit_mesh = ts.make_mesh((2, 4), ("X", "Y"), axis_types=(AxisType.Explicit, AxisType.Explicit))
print(explicit_mesh)
replicated_array = ts.device_put(np.arange(8, dtype=np.int32).reshape(4, 2), NamedSharding(explicit_mesh, P()))
sharded_array = ts.device_put(np.arange(8, dtype=np.int32).reshape(4, 2), NamedSharding(explicit_mesh, P("X", None)))
print(f"replicated_array type: {ts.typeof(replicated_array)}")
print(f"sharded_array type: {ts.typeof(sharded_array)}")
check(ts.typeof(sharded_array) == "i32[4@X,2]", "the type of an array split over X reads i32[4@X,2]")

# Shardings propagate through ops, and can be read at trace time.
arg0 = ts.device_put(np.arange(4, dtype=np.int32).reshape(4, 1), NamedSharding(explicit_mesh, P("X", None)))
arg1 = ts.device_put(np.arange(8, dtype=np.int32).reshape(1, 8), NamedSharding(explicit_mesh, P(None, "Y")))
traced_types = {}


@ts.jit
def add_arrays(x, y):
    ans = x + y
    print(f"x sharding: {ts.typeof(x)}")
    print(f"y sharding: {ts.typeof(y)}")
    print(f"ans sharding: {ts.typeof(ans)}")
    traced_types["ans"] = ts.typeof(ans)
    return ans


ans = add_arrays(arg0, arg1)
check(traced_types["ans"] == "i32[4@X,8@Y]", "the sum of [4@X,1] and [1,8@Y] is typed [4@X,8@Y] while tracing")
check(ans.sharding.spec == P("X", "Y"), "and is laid out that way")
check(np.array_equal(np.asarray(ans), np.arange(4).reshape(4, 1) + np.arange(8).reshape(1, 8)), "x + y matches NumPy")

# ----------------------------------------------------------------------------
section("3. Manual parallelism with shard_map")
mesh1d = ts.make_mesh((8,), ("x",))

# The same elementwise function, now applied block by block.
f_elementwise_sharded = ts.shard_map(f_elementwise, mesh=mesh1d, in_specs=P("x"), out_specs=P("x"))
arr = tnp.arange(32)
out = f_elementwise_sharded(arr)
print(repr(out))
check(np.allclose(np.asarray(out), 2 * np.sin(np.arange(32)) + 1, rtol=1e-5, atol=1e-6),
      "shard_map of 2 sin(x) + 1 matches NumPy")

# The function sees only its device's block.
print(f"global shape: {arr.shape}")
local_shapes = set()


def f(x):
    local_shapes.add(x.shape)
    return x * 2


y = ts.shard_map(f, mesh=mesh1d, in_specs=P("x"), out_specs=P("x"))(arr)
print(f"device local shapes: {sorted(local_shapes)}")
check(local_shapes == {(4,)}, "each device sees 4 of the 32 elements")


# So a sum inside the body sums one block only ...
def block_sum(x):
    return tnp.sum(x, keepdims=True)


sums = ts.shard_map(block_sum, mesh=mesh1d, in_specs=P("x"), out_specs=P("x"))(arr)
print(repr(sums))
check(np.array_equal(np.asarray(sums), np.arange(32).reshape(8, 4).sum(axis=1)), "one sum per block")


# ... and summing over devices is asked for with a collective. The result is
# the same on every device, so out_specs is P() (replicated).
def total_sum(x):
    return lax.psum(x.sum(), "x")


total = ts.shard_map(total_sum, mesh=mesh1d, in_specs=P("x"), out_specs=P())(arr)
print(repr(total))
check(int(total) == sum(range(32)), "psum of the block sums is the total")

# ----------------------------------------------------------------------------
section("A small neural network, three ways")
# y = tanh(relu(x @ w1 + b1) @ w2 + b2) for a batch of 4 examples of 32
# features. The features (the dimension x @ w1 contracts) are split over the
# devices, so the first matmul needs a sum over devices.
rng = np.random.default_rng(0)
x = rng.normal(size=(4, 32)).astype(np.float32)
w1 = (rng.normal(size=(32, 16)) / np.sqrt(32)).astype(np.float32)
b1 = rng.normal(size=(16,)).astype(np.float32)
w2 = (rng.normal(size=(16, 4)) / np.sqrt(16)).astype(np.float32)
b2 = rng.normal(size=(4,)).astype(np.float32)
expected = np.tanh(np.maximum(x @ w1 + b1, 0) @ w2 + b2)


def relu(v):
    return tnp.maximum(v, 0.0)


@ts.jit
def network(x, w1, b1, w2, b2):
    return tnp.tanh(relu(x @ w1 + b1) @ w2 + b2)


print("unsharded:", network(x, w1, b1, w2, b2))


def close(result, what):
    check(result.dtype == np.float32 and np.allclose(np.asarray(result), expected, rtol=1e-5, atol=1e-5), what)


# Automatic: shard the inputs, jit decides the rest.
x_sharded = ts.device_put(x, NamedSharding(mesh1d, P(None, "x")))
w1_sharded = ts.device_put(w1, NamedSharding(mesh1d, P("x", None)))
auto = network(x_sharded, w1_sharded, b1, w2, b2)
print("automatic:", auto, auto.sharding)
close(auto, "automatic: matches NumPy")

# Explicit: the same on an Explicit mesh; the types show every sharding.
explicit_1d = ts.make_mesh((8,), ("X",), axis_types=(AxisType.Explicit,))
replicated = NamedSharding(explicit_1d, P())
x_e = ts.device_put(x, NamedSharding(explicit_1d, P(None, "X")))
w1_e = ts.device_put(w1, NamedSharding(explicit_1d, P("X", None)))
b1_e, w2_e, b2_e = (ts.device_put(a, replicated) for a in (b1, w2, b2))


@ts.jit
def network_explicit(x, w1, b1, w2, b2):
    print(f"x: {ts.typeof(x)}  w1: {ts.typeof(w1)}  b1: {ts.typeof(b1)}")
    hidden = relu(x @ w1 + b1)
    print(f"hidden: {ts.typeof(hidden)}")
    out = tnp.tanh(hidden @ w2 + b2)
    print(f"out: {ts.typeof(out)}")
    return out


explicit = network_explicit(x_e, w1_e, b1_e, w2_e, b2_e)
close(explicit, "explicit: matches NumPy")


# Manual: each device multiplies its 4 features by its 4 rows of w1 and
# psum adds the partial products; the rest runs replicated.
def network_block(x, w1, b1, w2, b2):
    hidden = relu(lax.psum(x @ w1, "x") + b1)
    return tnp.tanh(hidden @ w2 + b2)


# Under jit, as a JAX program writes it: traced once, then one compiled call.
network_manual = ts.jit(ts.shard_map(network_block, mesh=mesh1d,
                                     in_specs=(P(None, "x"), P("x", None), P(), P(), P()), out_specs=P()))


manual = network_manual(x_sharded, w1_sharded, b1, w2, b2)
print("manual:", manual)
close(manual, "manual (shard_map + psum): matches NumPy")
check(np.allclose(np.asarray(auto), np.asarray(manual), rtol=1e-6, atol=1e-6)
      and np.allclose(np.asarray(explicit), np.asarray(manual), rtol=1e-6, atol=1e-6),
      "the three ways agree with each other")

# ----------------------------------------------------------------------------
if failures:
    print(f"\n{len(failures)} check(s) failed:", *failures, sep="\n  ")
    sys.exit(1)
print("\nAll checks passed.")
