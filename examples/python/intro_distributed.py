"""An introduction to distributed arrays with Tessera.

Meshes of devices, arrays sharded over them with NamedSharding, a sharded
matmul, and shard_map with every collective: psum, pmean, pmax, pmin,
all_gather, psum_scatter, ppermute, all_to_all, axis_index, and a random
key folded with each device's index.

Eight CPU devices stand in for accelerators. Every result is checked
against NumPy; the script exits with status 1 if any check fails.

    python examples/python/intro_distributed.py
"""

import os

# Eight simulated CPU devices (set before tessera is imported).
os.environ.setdefault("TESSERA_NUM_CPU_DEVICES", "8")

import sys

import numpy as np

import tessera as ts
import tessera.numpy as tnp
from tessera import lax, random
from tessera.sharding import Mesh, NamedSharding, PartitionSpec as P

failures = []


def check(ok, what):
    """Prints the verdict of one check and remembers the failures."""
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def section(title):
    print(f"\n=== {title} ===")


# ----------------------------------------------------------------------------
section("Devices and a single-device array")
print(ts.devices())

# An array made without a sharding lives on device 0.
a = tnp.arange(8)
print("Array   ", a)
print("Sharding", a.sharding)
check(a.sharding.is_fully_replicated and len(a.sharding.device_set) == 1, "a new array lives on one device")

# ----------------------------------------------------------------------------
section("A 1-d mesh")
# A mesh is a grid of devices with named axes; here all eight on one axis "i".
mesh = Mesh(np.array(ts.devices()), axis_names=("i",))
print(mesh)

# P("i") splits the array's first dimension over mesh axis "i".
sharding = NamedSharding(mesh, P("i"))
a_sharded = ts.device_put(a, sharding)
print("Sharded array", a_sharded)
print("Devices      ", sorted(a_sharded.sharding.device_set, key=lambda d: d.id))
print("Sharding     ", a_sharded.sharding)
ts.visualize_array_sharding(a_sharded)
for shard in a_sharded.addressable_shards[:3]:
    print(f"  {shard.device}: index {shard.index}, data {np.asarray(shard.data)}")
print("  ...")

# Elementwise ops run where the data is: the result keeps the sharding.
out = tnp.tanh(a_sharded)
print("tanh:", out)
ts.visualize_array_sharding(out)
check(out.sharding == a_sharded.sharding, "tanh keeps the input's sharding")
check(np.allclose(np.asarray(out), np.tanh(np.arange(8, dtype=np.float32)), rtol=1e-6), "tanh matches NumPy")

# ----------------------------------------------------------------------------
section("A 2-d mesh and a sharded matmul")
# Four rows by two columns of devices: axis "i" runs down, axis "j" across.
mesh = Mesh(np.array(ts.devices()).reshape(4, 2), axis_names=("i", "j"))
print(mesh)

# y = x @ w + b with the batch of x split over "i" and the outputs over "j".
batch, d_in, d_out = 192, 64, 128
rng = np.random.default_rng(0)
x = rng.normal(size=(batch, d_in)).astype(np.float32)
w = rng.normal(size=(d_in, d_out)).astype(np.float32)
b = rng.normal(size=(d_out,)).astype(np.float32)
y_expected = x @ w + b

x_sharded = ts.device_put(x, NamedSharding(mesh, P("i", None)))
w_sharded = ts.device_put(w, NamedSharding(mesh, P(None, "j")))
b_sharded = ts.device_put(b, NamedSharding(mesh, P("j")))
print("x blocks:")
ts.visualize_array_sharding(x_sharded)
print("w blocks:")
ts.visualize_array_sharding(w_sharded)
print("b blocks:")
ts.visualize_array_sharding(b_sharded)

# Each device multiplies its rows of x by its columns of w: no communication.
y = tnp.dot(x_sharded, w_sharded) + b_sharded
print("Output shape", y.shape, "type", ts.typeof(y))
ts.visualize_array_sharding(y)
check(y.sharding.spec == P("i", "j"), "x @ w + b is sharded P('i', 'j')")
check(np.allclose(np.asarray(y), y_expected, rtol=1e-4, atol=1e-4), "x @ w + b matches NumPy")

# The same under jit, with the shardings of inputs and output given: NumPy
# inputs are placed as in_shardings says, the result comes out as out_shardings.
dense = ts.jit(
    lambda x, w, b: x @ w + b,
    in_shardings=(NamedSharding(mesh, P("i", None)), NamedSharding(mesh, P(None, "j")), NamedSharding(mesh, P("j"))),
    out_shardings=NamedSharding(mesh, P("i", "j")),
)
y_jit = dense(x, w, b)
print("jit output sharding:", y_jit.sharding)
print(dense.lower(x, w, b))
check(y_jit.sharding == NamedSharding(mesh, P("i", "j")), "jit returns the requested out_shardings")
check(np.allclose(np.asarray(y_jit), y_expected, rtol=1e-4, atol=1e-4), "jit x @ w + b matches NumPy")

# ----------------------------------------------------------------------------
section("shard_map: the same matmul written per device")
# shard_map runs the function once per device on that device's blocks;
# in_specs says how to cut the inputs, out_specs how to put the blocks back.
local_shapes = set()


def matmul_block(x, w, b):
    local_shapes.add((x.shape, w.shape, b.shape))
    return tnp.dot(x, w) + b


matmul_sharded = ts.shard_map(
    matmul_block,
    mesh=mesh,
    in_specs=(P("i", None), P(None, "j"), P("j")),
    out_specs=P("i", "j"),
)
# NumPy inputs are cut according to in_specs: no device_put needed.
y_sm = matmul_sharded(x, w, b)
for xs, ws, bs in sorted(local_shapes):
    print(f"Local x shape {xs}, local w shape {ws}, local b shape {bs}")
print("Output shape", y_sm.shape)
ts.visualize_array_sharding(y_sm)
check(local_shapes == {((48, 64), (64, 64), (64,))}, "each device sees a (48, 64) block of x and (64, 64) of w")
check(np.allclose(np.asarray(y_sm), y_expected, rtol=1e-4, atol=1e-4), "shard_map x @ w + b matches NumPy")

# ----------------------------------------------------------------------------
section("psum, pmax, pmin: reductions over devices")


# Each device reduces its own block, then the collectives combine the eight
# partial results; every device ends with the same numbers (out_specs P()).
def block_stats(xb):
    total = lax.psum(tnp.sum(xb), ("i", "j"))
    largest = lax.pmax(tnp.max(xb), ("i", "j"))
    smallest = lax.pmin(tnp.min(xb), ("i", "j"))
    return total, largest, smallest


stats = ts.shard_map(block_stats, mesh=mesh, in_specs=P("i", "j"), out_specs=P())
total, largest, smallest = stats(x_sharded @ w_sharded)
xw = x @ w
print(f"sum {float(total):.3f}, max {float(largest):.3f}, min {float(smallest):.3f}")
check(np.isclose(float(total), xw.sum(dtype=np.float64), rtol=1e-4, atol=1e-2), "psum of the block sums is the total")
check(np.isclose(float(largest), xw.max(), rtol=1e-5) and np.isclose(float(smallest), xw.min(), rtol=1e-5),
      "pmax / pmin of the block extremes are the global ones")

# ----------------------------------------------------------------------------
section("pmean: normalizing rows split over devices")


# Each row of x @ w is split over the two devices of axis "j"; the row's mean
# and variance need both halves. The blocks have equal widths, so the mean
# over "j" of the block means is the row's mean.
def normalize_rows(xb):
    mean = lax.pmean(tnp.mean(xb, axis=1, keepdims=True), "j")
    var = lax.pmean(tnp.mean((xb - mean) ** 2, axis=1, keepdims=True), "j")
    return (xb - mean) / tnp.sqrt(var)


normalized = ts.shard_map(normalize_rows, mesh=mesh, in_specs=P("i", "j"), out_specs=P("i", "j"))(y)
out = np.asarray(normalized)
print("shape", out.shape, "row means ~", float(np.abs(out.mean(axis=1)).max()),
      "row stds ~", float(out.std(axis=1).mean()))
expected = (y_expected - y_expected.mean(axis=1, keepdims=True)) / y_expected.std(axis=1, keepdims=True)
check(np.allclose(out, expected, rtol=1e-3, atol=1e-3), "rows normalized with pmean match NumPy")

# ----------------------------------------------------------------------------
section("all_gather: collecting the weights every device needs")
gathered_shapes = set()


# Both x and w are split by rows over "i"; to multiply, each device gathers
# the whole of w from the four devices along "i".
def matmul_with_weight_gather(xb, wb):
    w_full = lax.all_gather(wb, "i", axis=0, tiled=True)
    gathered_shapes.add((wb.shape, w_full.shape))
    return tnp.dot(xb, w_full)


y_ag = ts.shard_map(matmul_with_weight_gather, mesh=mesh, in_specs=(P("i", None), P("i", None)),
                    out_specs=P("i", None))(x, w)
for before, after in sorted(gathered_shapes):
    print(f"w block {before} -> gathered {after}")
check(gathered_shapes == {((16, 128), (64, 128))}, "all_gather turns (16, 128) blocks into the full (64, 128) w")
check(np.allclose(np.asarray(y_ag), x @ w, rtol=1e-4, atol=1e-4), "x @ all_gather(w) matches NumPy")

# ----------------------------------------------------------------------------
section("psum_scatter: each device keeps one part of a sum")
# Four rows, one per device along "i". psum_scatter sums the rows and leaves
# device k the k-th column of the sum.
x_small = np.array([[3, 1, 4, 1],
                    [5, 9, 2, 6],
                    [5, 3, 5, 8],
                    [9, 7, 1, 2]], dtype=np.int32)
column_sums = ts.shard_map(lambda xb: lax.psum_scatter(xb, "i", scatter_dimension=1, tiled=True),
                           mesh=mesh, in_specs=P("i", None), out_specs=P("i", None))(x_small)
print("Output", column_sums.tolist())
check(np.array_equal(np.asarray(column_sums), x_small.sum(axis=0)[:, None]), "psum_scatter gives the column sums")

# ----------------------------------------------------------------------------
section("ppermute: passing blocks around a ring")
# Device k sends its block to device k + 1 (the last one to the first): the
# pattern of pipeline parallelism.
n_i = mesh.shape["i"]
ring = [(k, (k + 1) % n_i) for k in range(n_i)]
x_ring = np.arange(4, dtype=np.int32)
shifted = ts.shard_map(lambda xb: lax.ppermute(xb, "i", perm=ring), mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x_ring)
print("Before", x_ring.tolist())
print("After ", shifted.tolist())
check(np.array_equal(np.asarray(shifted), np.roll(x_ring, 1)), "ppermute around the ring is np.roll by one")

# ----------------------------------------------------------------------------
section("all_to_all: from split by rows to split by columns")
to_columns_shapes = set()


def rows_to_columns(xb):
    out = lax.all_to_all(xb, "i", split_axis=1, concat_axis=0, tiled=True)
    to_columns_shapes.add((xb.shape, out.shape))
    return out


m = np.arange(32, dtype=np.float32).reshape(4, 8)
m_cols = ts.shard_map(rows_to_columns, mesh=mesh, in_specs=P("i", None), out_specs=P(None, "i"))(m)
for before, after in sorted(to_columns_shapes):
    print(f"block {before} -> block {after}")
print("sharding", m_cols.sharding)
check(to_columns_shapes == {((1, 8), (4, 2))}, "all_to_all turns a (1, 8) row block into a (4, 2) column block")
check(np.array_equal(np.asarray(m_cols), m), "the values are unchanged, only the layout moved")

# ----------------------------------------------------------------------------
section("axis_index: which device am I?")
# A function of no arguments, run on every device; each returns its own
# position on the mesh, stacked over all devices by out_specs.
where_am_i = ts.shard_map(
    lambda: tnp.stack([lax.axis_index("i"), lax.axis_index("j")], axis=-1)[None, :],
    mesh=mesh, in_specs=(), out_specs=P(("i", "j")),
)
idx = np.asarray(where_am_i())
for d in range(idx.shape[0]):
    print(f"Device {d}: i-axis={idx[d, 0]}, j-axis={idx[d, 1]}")
check(np.array_equal(idx, np.array([[d // 2, d % 2] for d in range(8)])), "axis_index gives each device's mesh position")

# ----------------------------------------------------------------------------
section("random.fold_in: a different random stream per device")
# One key, passed to every device (in_specs P(): replicated). Folding the
# device's index along "i" into it gives each row of devices its own key;
# the two devices of a row (along "j") share it. The samples depend on the
# key only, so they can be reproduced outside shard_map.
key = random.key(0)


def fold_rng_over_axis(key, axis_name):
    """A key that differs along mesh axis `axis_name` (and is shared along the others)."""
    return random.fold_in(key, lax.axis_index(axis_name))


# The keys themselves: uint32 pairs, one row per device.
keys_fn = ts.shard_map(lambda k: fold_rng_over_axis(k, "i")[None, :], mesh=mesh, in_specs=P(),
                       out_specs=P(("i", "j")))
keys = np.asarray(keys_fn(key))
for d in range(keys.shape[0]):
    print(f"Device {d}: key={keys[d]}")
check(all(np.array_equal(keys[d], np.asarray(random.fold_in(key, d // 2))) for d in range(8)),
      "each device's key is fold_in(key, its index along 'i')")
# Tessera's keys are JAX's threefry keys, bit for bit: these are the values
# of jax.random.fold_in(jax.random.PRNGKey(0), i) for i = 0, 1, 2, 3.
jax_keys = np.array([[1797259609, 2579123966], [928981903, 3453687069],
                     [4146024105, 2718843009], [2467461003, 3840466878]], dtype=np.uint32)
check(np.array_equal(keys[::2], jax_keys), "the keys equal JAX's fold_in(PRNGKey(0), i)")


def sample_per_device(key):
    return random.uniform(fold_rng_over_axis(key, "i"), (1, 4))


sample_fn = ts.shard_map(sample_per_device, mesh=mesh, in_specs=P(), out_specs=P(("i", "j")))
samples = np.asarray(sample_fn(key))
for d in range(samples.shape[0]):
    print(f"Device {d}: {np.array2string(samples[d], precision=4)}")
same_along_j = all(np.array_equal(samples[2 * r], samples[2 * r + 1]) for r in range(4))
distinct_along_i = len({samples[2 * r].tobytes() for r in range(4)}) == 4
reproduced = np.stack([np.asarray(random.uniform(random.fold_in(key, d // 2), (1, 4)))[0] for d in range(8)])
check(same_along_j, "the two devices of a row draw the same numbers")
check(distinct_along_i, "the four rows of devices draw different numbers")
check(np.array_equal(samples, reproduced), "each device's numbers equal uniform(fold_in(key, i)) drawn outside")
check(bool(((samples >= 0) & (samples < 1)).all()), "uniform samples lie in [0, 1)")

# ----------------------------------------------------------------------------
if failures:
    print(f"\n{len(failures)} check(s) failed:", *failures, sep="\n  ")
    sys.exit(1)
print("\nAll checks passed.")
