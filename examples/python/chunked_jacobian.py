"""A Jacobian built in chunks, with its rows sharded over devices.

A residual of N parameters at each of R grid rows (K values per row), as in
an equilibrium or transport code. The Jacobian d residual / d parameters is
(R, K, N). The grid rows are sharded over the eight devices, and on each
device the rows are processed `chunk_size` at a time (ts.vmap's chunk_size)
so that the forward-mode intermediates of only one chunk are alive at once.

The sizes are chosen so that nothing divides: 1003 rows over 8 devices
(126 or 125 each), chunks of 64 and 100 rows (each device's last chunk is
shorter), 13 parameters in chunks of 5 for jacfwd and 8 outputs in chunks of
3 for jacrev. Tessera handles the remainders; the caller writes nothing for
them.

Every Jacobian is checked against the analytic one and against central
finite differences computed with NumPy, and the chunked forms against the
unchunked one (bitwise). The script exits with status 1 if a check fails.

    python examples/python/chunked_jacobian.py
"""

import os

# Eight simulated CPU devices (set before tessera is imported).
os.environ.setdefault("TESSERA_NUM_CPU_DEVICES", "8")

import sys
import time

import numpy as np

import tessera as ts
import tessera.numpy as tnp
from tessera.sharding import NamedSharding, PartitionSpec as P

ROWS, K, N = 1003, 8, 13  # grid rows, values per row, parameters

failures = []


def check(ok, what):
    """Prints the verdict of one check and remembers the failures."""
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def timed(f, *args):
    """f(*args) and its wall time in ms (waiting for every device)."""
    t0 = time.perf_counter()
    out = f(*args).block_until_ready()
    return out, (time.perf_counter() - t0) * 1e3


# ----------------------------------------------------------------------------
# The problem: grid nodes x (ROWS, K), frequencies f (N,), parameters p (N,).
rng = np.random.default_rng(0)
x_host = rng.uniform(-1.0, 1.0, size=(ROWS, K))
f_host = 0.5 * np.arange(1, N + 1, dtype=np.float64)
p_host = 0.2 * np.sin(1.3 * np.arange(N) + 0.5)


def residual_np(p, x):
    """The residuals in NumPy: x is (..., K), the result has x's shape."""
    basis = np.cos(x[..., None] * f_host)  # (..., K, N)
    return np.tanh(basis @ p) + 0.1 * x * np.sum(p * p)


def jacobian_np(p, x):
    """The analytic Jacobian d residual / d p: (..., K, N)."""
    basis = np.cos(x[..., None] * f_host)
    sech2 = 1.0 - np.tanh(basis @ p) ** 2
    return sech2[..., None] * basis + 0.2 * x[..., None] * p


def central_differences(p, x, h=1e-6):
    """d residual / d p by central finite differences, one parameter at a time."""
    cols = []
    for j in range(N):
        e = np.zeros(N)
        e[j] = h
        cols.append((residual_np(p + e, x) - residual_np(p - e, x)) / (2 * h))
    return np.stack(cols, axis=-1)


J_exact = jacobian_np(p_host, x_host)
J_fd = central_differences(p_host, x_host)

# ----------------------------------------------------------------------------
# On the devices: rows sharded over a 1-d mesh, the small arrays replicated.
mesh = ts.make_mesh((8,), ("rows",))
x = ts.device_put(x_host, NamedSharding(mesh, P("rows")))
p = ts.device_put(p_host, NamedSharding(mesh, P()))
f = ts.device_put(f_host, NamedSharding(mesh, P()))
print(f"Jacobian of {ROWS} x {K} residuals with respect to {N} parameters (float64)")
print(f"grid: {ts.typeof(x)}, rows per device: {[s.data.shape[0] for s in x.addressable_shards]}")


def residual(p, x):
    """The same residuals in Tessera; x is one row (K,) or the whole grid (ROWS, K)."""
    basis = tnp.cos(tnp.expand_dims(x, -1) * f)
    return tnp.tanh(basis @ p) + 0.1 * x * tnp.sum(p * p)


def row_jacobian(p, x_row):
    """d residual(p, x_row) / d p for one row: (K, N)."""
    return ts.jacfwd(residual)(p, x_row)


def compare(J, what, reference=None):
    """Checks J against the analytic Jacobian, the finite differences and a reference."""
    Jh = np.asarray(J)
    err_exact = np.abs(Jh - J_exact).max()
    err_fd = np.abs(Jh - J_fd).max()
    check(J.shape == (ROWS, K, N) and J.sharding.spec == P("rows"),
          f"{what}: {ts.typeof(J)}, rows sharded like the grid")
    check(err_exact < 1e-12, f"{what}: matches the analytic Jacobian (max error {err_exact:.1e})")
    check(err_fd < 1e-7, f"{what}: matches NumPy central differences (max error {err_fd:.1e})")
    if reference is not None:
        check(np.array_equal(Jh, reference), f"{what}: equals the unchunked Jacobian bitwise")


# 1. vmap over the rows of a per-row jacfwd. Without chunk_size every row of
#    a device is processed at once; with it, chunk_size rows at a time.
print("\nvmap(jacfwd(residual)) over the sharded rows")
J_whole, t = timed(ts.vmap(row_jacobian, in_axes=(None, 0)), p, x)
print(f"  unchunked: {t:.1f} ms")
compare(J_whole, "unchunked")
J_ref = np.asarray(J_whole)
for chunk in (64, 100):
    J, t = timed(ts.vmap(row_jacobian, in_axes=(None, 0), chunk_size=chunk), p, x)
    last = [s.data.shape[0] % chunk or chunk for s in x.addressable_shards]
    print(f"  chunk_size={chunk}: {t:.1f} ms (each device's last chunk: {sorted(set(last))} rows)")
    compare(J, f"chunk_size={chunk}", J_ref)

# The same under jit: traced once, then cached for these shapes and shardings.
jitted = ts.jit(lambda p, x: ts.vmap(row_jacobian, in_axes=(None, 0), chunk_size=64)(p, x))
J, t = timed(jitted, p, x)
print(f"  jit, chunk_size=64: first call {t:.1f} ms", end="")
J, t = timed(jitted, p, x)
print(f", second call {t:.1f} ms")
compare(J, "jit, chunk_size=64")

# 2. Reverse mode per row: jacrev pulls back 3 of the 8 output directions at
#    a time (3 + 3 + 2), and vmap walks 100 rows at a time.
print("\nvmap(jacrev(residual, chunk_size=3), chunk_size=100)")
J, t = timed(ts.vmap(lambda p, x_row: ts.jacrev(residual, chunk_size=3)(p, x_row), in_axes=(None, 0),
                     chunk_size=100), p, x)
print(f"  {t:.1f} ms")
compare(J, "jacrev")

# 3. Forward mode over the whole grid at once: jacfwd pushes 5 of the 13
#    parameter directions at a time (5 + 5 + 3) through the sharded residual.
print("\njacfwd(residual, chunk_size=5) of the whole grid")
J, t = timed(ts.jacfwd(residual, chunk_size=5), p, x)
print(f"  {t:.1f} ms")
compare(J, "jacfwd of the grid")

# ----------------------------------------------------------------------------
if failures:
    print(f"\n{len(failures)} check(s) failed:", *failures, sep="\n  ")
    sys.exit(1)
print("\nAll checks passed.")
