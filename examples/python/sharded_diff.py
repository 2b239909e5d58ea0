"""tnp.diff of a large array, sharded along the difference axis and across it.

A first-order difference along axis 0, with a row of zeros prepended, of an
N x N float64 array (N = 4096 by default), on four layouts of eight CPU
devices: one device, rows split over the devices (along the difference
axis: each device needs the last row of its neighbour), columns split (across
it: no communication), and a 4 x 2 mesh (both). Each is a jit-compiled
function with its input and output shardings given; the table shows the
median time of a few calls, and every result must equal np.diff bitwise.
Sharding along the difference axis costs one boundary row per device
(ts.explain shows what moved: the "moved" column), so its time should stay
close to the others'.

    python examples/python/sharded_diff.py [--size N] [--repeats R]
"""

import os

# Eight simulated CPU devices (set before tessera is imported).
os.environ.setdefault("TESSERA_NUM_CPU_DEVICES", "8")

import argparse
import sys
import time

import numpy as np

import tessera as ts
import tessera.numpy as tnp
from tessera.sharding import NamedSharding, PartitionSpec as P


def fd_kernel(x):
    """First-order difference along axis 0, with zeros prepended (same shape out)."""
    # The prepended row is a NumPy constant: it is placed replicated on x's mesh.
    return tnp.diff(x, 1, axis=0, prepend=np.zeros((1, *x.shape[1:]), x.dtype))


def median_time(run, repeats):
    """Median wall time of run(), after a first call (which traces and compiles)."""
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="the array is size x size (default 4096)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per layout (default 5)")
    args = parser.parse_args()
    n = args.size

    x = np.random.default_rng(0).normal(size=(n, n))  # float64
    expected = np.diff(x, 1, axis=0, prepend=np.zeros((1, n)))
    print(f"diff along axis 0 of a {n} x {n} float64 array ({x.nbytes / 2**20:.0f} MiB) on "
          f"{ts.device_count()} CPU devices ({os.cpu_count()} hardware threads), median of {args.repeats} calls\n")

    # NumPy on one core, for reference.
    t_numpy = median_time(lambda: np.diff(x, 1, axis=0, prepend=np.zeros((1, n))), args.repeats)

    layouts = [
        ("1 device", ts.make_mesh((1,), ("x",), devices=ts.devices()[:1]), P()),
        ("8 along diff axis", ts.make_mesh((8,), ("x",)), P("x", None)),
        ("8 across diff axis", ts.make_mesh((8,), ("x",)), P(None, "x")),
        ("4 x 2 (both)", ts.make_mesh((4, 2), ("x", "y")), P("x", "y")),
    ]
    failures = []
    print(f"{'layout':<20} {'mesh':<22} {'sharding':<28} {'time':>10} {'moved':>10}  bitwise equal")
    print(f"{'NumPy':<20} {'-':<22} {'-':<28} {t_numpy * 1e3:>7.1f} ms")
    for name, mesh, spec in layouts:
        sharding = NamedSharding(mesh, spec)
        x_sharded = ts.device_put(x, sharding)
        fd = ts.jit(fd_kernel, in_shardings=sharding, out_shardings=sharding)
        y = fd(x_sharded)
        equal = y.sharding == sharding and np.array_equal(np.asarray(y), expected)
        # block_until_ready waits for every device to finish.
        t = median_time(lambda: fd(x_sharded).block_until_ready(), args.repeats)
        # What one call moves between devices: each block of rows needs the
        # last row of the block above it, nothing else.
        moved = ts.explain(fd, x_sharded).bytes_moved
        row_blocks = mesh.shape[spec[0]] if len(spec) > 0 and spec[0] is not None else 1
        halo_only = moved == (row_blocks - 1) * n * x.itemsize
        print(f"{name:<20} {str(mesh):<22} {str(spec):<28} {t * 1e3:>7.1f} ms {moved / 2**10:>7.1f} KiB"
              f"  {'yes' if equal else 'NO'}")
        if not equal:
            failures.append(f"{name}: not equal to np.diff (or not laid out as asked)")
        if not halo_only:
            failures.append(f"{name}: moved {moved} bytes, more than one boundary row per block of rows")

    if failures:
        print("", *failures, sep="\n")
        sys.exit(1)
    print("\nAll layouts equal np.diff bitwise and move one boundary row per block of rows at most.")


if __name__ == "__main__":
    main()
