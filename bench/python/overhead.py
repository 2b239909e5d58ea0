"""Call overhead of small ops from Python: Tessera's bindings or JAX.

    python overhead.py tessera     # in a venv where `pip install .` was run
    python overhead.py jax         # in a venv with jax

Prints one JSON object, seconds per call (median over 7 rounds of the mean
of many calls):
    eager_1dev       x + 1 on 16 float32 on one device
    eager_ndev       x + 1 on 16 float32 sharded over every device
    jit_cached_1dev  a cached jit call of x + 1 on 16 float32, one device
JAX dispatches asynchronously: each round ends with block_until_ready on
its last result, so its figures include the work, as Tessera's do.
"""
import json
import os
import sys
import time

lib = sys.argv[1]
n = int(os.environ.get("BENCH_DEVICES", os.cpu_count() or 1))
if lib == "jax":
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as xnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    def make_mesh(k):
        return jax.make_mesh((k,), ("x",), devices=jax.devices()[:k])
    put, jit, zeros = jax.device_put, jax.jit, xnp.zeros
elif lib == "tessera":
    os.environ["TESSERA_NUM_CPU_DEVICES"] = str(n)
    import tessera as jax  # noqa: the same names
    import tessera.numpy as xnp
    from tessera.sharding import NamedSharding, PartitionSpec as P

    def make_mesh(k):
        return jax.make_mesh((k,), ("x",), devices=jax.devices()[:k])
    put, jit, zeros = jax.device_put, jax.jit, xnp.zeros
else:
    sys.exit(f"usage: {sys.argv[0]} tessera|jax")

import numpy as np  # noqa: E402


def per_call(f, iters):
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(iters):
            y = f()
        y.block_until_ready()
        rounds.append((time.perf_counter() - t0) / iters)
    return sorted(rounds)[3]


one, every = make_mesh(1), make_mesh(n)
x1 = put(np.zeros(16, np.float32), NamedSharding(one, P()))
xn = put(np.zeros(16, np.float32), NamedSharding(every, P("x")))
tiny = jit(lambda v: v + 1.0)
tiny(x1).block_until_ready()
iters = 5000
out = {"lib": lib, "devices": n,
       "eager_1dev": per_call(lambda: x1 + 1.0, iters),
       "eager_ndev": per_call(lambda: xn + 1.0, iters),
       "jit_cached_1dev": per_call(lambda: tiny(x1), iters)}
print(json.dumps(out))
