#!/usr/bin/env python3
"""The JAX half of `make bench-compare`: the twin of bench_compare_tessera.

    python jax_workloads.py --workload diff_rows[,diff_cols,...] [--reps 5] [--devices N]
    python jax_workloads.py --list | --info [--devices N]

    python jax_workloads.py --workload stel_n<N>_m<M>_<fwd|rev>[<chunk>] --devices N

Runs the named workloads with the same shapes, dtypes, device counts and
shardings as the Tessera runner and prints one JSON line per workload:
    {"side": "jax", "workload": ..., "layout": ..., "seconds": <median>,
     "samples": [...], "inner": <calls per sample>}
or {"side": "jax", "workload": ..., "error": "<JAX's exception text>"}.

Every function is jitted with in_shardings and out_shardings, except
chain_eager (the chain's jnp ops dispatched one by one) and trace_compile
(jit(...).lower(x).compile() of a fresh function, not run); every call ends
in block_until_ready() (dispatch: `inner` calls, then one block). One
untimed warm-up call (it compiles) precedes the samples; `inner` grows until a
sample takes >= 2 ms. Axis types are Auto on every mesh, as on the Tessera
side.

seed_<tanh|matmul2d|normalize|allgather_matmul>[_jit] (the "seeds" group, 8
devices): the small programs of the distributed-JAX introduction, eager (the
jnp function or the shard_map-wrapped function called without jax.jit, as
the tutorial does) or under jax.jit of it; every sample is at least 20 ms
and 200 calls (fewer where 200 would take over 0.5 s: the eager shard_map
rows take a tenth of a second and more a call), each call ending in
block_until_ready().

stel_* rows (the jac_stellarator family, any N, M and chunk; the name's N
must be --devices) take one warm-up call and `reps` single calls, and report
the process's peak RSS and its RSS before the inputs existed.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

WORKLOADS = (["diff_1dev", "diff_rows", "diff_cols", "sin", "sin_jit", "sum", "mlp_auto", "mlp_shard_map"]
             + [f"{c}_{s}" for s in ("4k", "64m")
                for c in ("psum", "psum_owned", "all_gather", "all_gather_owned", "psum_scatter", "ppermute",
                          "ppermute_owned", "all_to_all")]
             + ["dispatch", "uneven_diff", "chain_jit", "chain_eager", "trace_compile", "mlp_big_jit",
                "mlp_big_explicit", "jac_vmap", "jac_map", "mlp_grad"]
             + [f"stel_n{n}_m{m}_{form}" for n in (2, 8) for m in (4099, 100000)
                for form in ("fwd", "fwd16", "fwd64", "fwd128", "rev", "rev16", "rev64", "rev128")]
             + [f"seed_{w}{form}" for w in ("tanh", "matmul2d", "normalize", "allgather_matmul")
                for form in ("", "_jit")])

MIN_SAMPLE = 2e-3  # seconds per sample, at least
SEED_MIN_SAMPLE, SEED_MIN_INNER = 20e-3, 200  # the seeds take microseconds a call: many calls per sample
MAX_SAMPLE = 0.5  # min_inner gives way where its sample would take longer
STEL_NAME = re.compile(r"stel_n(\d+)_m(\d+)_(fwd|rev)(\d*)")
STEL_PARAMS = 512


def configure(n):
    """Sets the number of CPU devices before any backend starts."""
    import jax
    # f64 workloads need 64-bit types on (JAX silently makes f64 data f32 otherwise).
    jax.config.update("jax_enable_x64", True)
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except (AttributeError, KeyError, ValueError):  # older JAX: only the XLA flag
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    return jax


def time_calls(reps, call, min_sample=MIN_SAMPLE, min_inner=1):
    """One warm-up call, calibrated inner count, `reps` samples (seconds per call).

    inner grows until a sample takes >= min_sample, then to min_inner unless
    such a sample would take over MAX_SAMPLE."""
    call()
    inner = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        dt = time.perf_counter() - t0
        if dt >= min_sample or inner >= (1 << 20):
            if inner < min_inner:
                inner = max(inner, min(min_inner, int(MAX_SAMPLE * inner / max(dt, 1e-9))))
            break
        inner = inner * 16 if dt <= 0 else min(inner * 16, int(inner * 1.5 * min_sample / dt) + 1)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        samples.append((time.perf_counter() - t0) / inner)
    return samples, inner


class Runner:
    def __init__(self, jax, n, reps):
        import numpy as np
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        self.jax, self.np, self.jnp = jax, np, jnp
        self.Mesh, self.NamedSharding, self.P = Mesh, NamedSharding, P
        self.n, self.reps = n, reps
        self.devs = jax.devices()
        if len(self.devs) != n:
            raise RuntimeError(f"asked for {n} CPU devices, JAX has {len(self.devs)}")
        # shard_map moved from jax.experimental to jax (check_rep became check_vma).
        if hasattr(jax, "shard_map"):
            self._shard_map, self._check_kw = jax.shard_map, "check_vma"
        else:
            from jax.experimental.shard_map import shard_map
            self._shard_map, self._check_kw = shard_map, "check_rep"

    # ---------------------------------------------------------------- helpers
    def mesh(self, shape, names, devices=None):
        devs = self.np.array(devices if devices is not None else self.devs).reshape(shape)
        try:
            from jax.sharding import AxisType
            return self.Mesh(devs, names, axis_types=(AxisType.Auto,) * len(names))
        except (ImportError, TypeError):
            return self.Mesh(devs, names)

    def line(self):
        return self.mesh((self.n,), ("x",))

    def shard_map(self, f, mesh, in_specs, out_specs, check=True):
        return self._shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **{self._check_kw: check})

    def result(self, workload, layout, samples, inner, **extra):
        r = {"side": "jax", "workload": workload, "layout": layout, "seconds": statistics.median(samples),
             "samples": samples, "inner": inner}
        r.update(extra)
        return r

    def timed(self, workload, layout, f, *args, **extra):
        out = f(*args)
        extra.setdefault("dtype", str(out.dtype))
        extra.setdefault("in_dtype", str(args[0].dtype))
        extra.setdefault("shape", list(out.shape))
        samples, inner = time_calls(self.reps, lambda: f(*args).block_until_ready())
        return self.result(workload, layout, samples, inner, **extra)

    def run(self, w):
        if w.startswith("diff_"):
            return self.diff(w)
        if w in ("sin", "sum", "dispatch"):
            return getattr(self, w)()
        if w == "sin_jit":
            return self.sin("sin_jit")
        if w in ("mlp_auto", "mlp_shard_map"):
            return self.mlp(w)
        if w == "uneven_diff":
            return self.uneven()
        if w in ("chain_jit", "chain_eager"):
            return self.chain(w)
        if w == "trace_compile":
            return self.trace_compile()
        if w in ("mlp_big_jit", "mlp_big_explicit"):
            return self.mlp_big(w)
        if w in ("jac_vmap", "jac_map"):
            return self.jacobian(w)
        if w == "mlp_grad":
            return self.mlp_grad()
        if STEL_NAME.fullmatch(w):
            return self.stellarator(w)
        if w.startswith("seed_"):
            return self.seed(w)
        for suffix, nbytes in (("_4k", 4096), ("_64m", 64 << 20)):
            if w.endswith(suffix):
                return self.collective(w, w[: -len(suffix)], nbytes)
        raise ValueError(f"unknown workload '{w}'")

    # -------------------------------------------------------------- workloads
    def diff(self, w):
        jax, jnp, P = self.jax, self.jnp, self.P
        m = 4096
        host = (self.np.arange(m * m, dtype=self.np.int64) % 1000 * 0.5).astype(self.np.float64).reshape(m, m)
        if w == "diff_1dev":
            mesh, spec, layout = self.mesh((1,), ("x",), self.devs[:1]), P(), "1 device"
        elif w == "diff_rows":
            mesh, spec, layout = self.line(), P("x"), f"({self.n},1)"
        else:
            mesh, spec, layout = self.line(), P(None, "x"), f"(1,{self.n})"
        s = self.NamedSharding(mesh, spec)
        x = jax.device_put(host, s)
        f = jax.jit(lambda a: jnp.diff(a, n=1, axis=0, prepend=0.0), in_shardings=s, out_shardings=s)
        return self.timed(w, layout, f, x)

    def sin(self, name="sin"):
        # JAX jits both rows; Tessera's sin row is eager, its sin_jit row jitted.
        jax, jnp = self.jax, self.jnp
        s = self.NamedSharding(self.line(), self.P("x"))
        host = self.np.random.default_rng(0).uniform(-3, 3, size=1 << 24).astype(self.np.float32)
        x = jax.device_put(host, s)
        f = jax.jit(lambda a: 2 * jnp.sin(a) + 1, in_shardings=s, out_shardings=s)
        return self.timed(name, f"({self.n},)", f, x)

    def sum(self):
        jax, jnp, P = self.jax, self.jnp, self.P
        mesh = self.line()
        host = self.np.random.default_rng(2).uniform(size=(4096, 4096)).astype(self.np.float32)
        x = jax.device_put(host, self.NamedSharding(mesh, P("x")))
        f = jax.jit(lambda a: jnp.sum(a, axis=0), in_shardings=self.NamedSharding(mesh, P("x")),
                    out_shardings=self.NamedSharding(mesh, P()))
        return self.timed("sum", f"({self.n},1)", f, x)

    def mlp(self, w):
        jax, jnp, P, np = self.jax, self.jnp, self.P, self.np
        ms = (self.n // 2, 2) if self.n % 2 == 0 and self.n > 1 else (self.n, 1)
        mesh = self.mesh(ms, ("i", "j"))
        NS = lambda spec: self.NamedSharding(mesh, spec)  # noqa: E731
        rng = np.random.default_rng(1)
        xh = rng.standard_normal((8192, 1024), dtype=np.float32)
        wh = rng.standard_normal((1024, 1024), dtype=np.float32)
        bh = rng.uniform(size=1024).astype(np.float32)
        if w == "mlp_auto":
            specs, out = (P("i", None), P(None, "j"), P("j")), P("i", "j")
            body = lambda x, wt, b: jax.nn.sigmoid(x @ wt + b)  # noqa: E731
        else:
            # The tutorial's shard_map form: contracting dim over 'j', psum.
            specs, out = (P("i", "j"), P("j", None), P()), P("i", None)
            body = self.shard_map(lambda x, wt, b: jax.nn.sigmoid(jax.lax.psum(x @ wt, "j") + b),
                                  mesh, specs, out)
        ins = tuple(NS(s) for s in specs)
        f = jax.jit(body, in_shardings=ins, out_shardings=NS(out))
        args = [jax.device_put(h, s) for h, s in zip((xh, wh, bh), ins)]
        return self.timed(w, f"mesh ({ms[0]},{ms[1]})", f, *args)

    def collective(self, w, c, nbytes):
        # JAX gives every device its own result buffer, so a "_owned" twin of
        # a Tessera workload is the same JAX program.
        c = c[: -len("_owned")] if c.endswith("_owned") else c
        jax, P, lax = self.jax, self.P, self.jax.lax
        n = self.n
        per = nbytes // 4 // n * n
        mesh = self.line()
        perm = [(i, (i + 1) % n) for i in range(n)]
        bodies = {
            "psum": (lambda x: lax.psum(x, "x"), P()),
            "all_gather": (lambda x: lax.all_gather(x, "x", axis=0, tiled=True), P()),
            "psum_scatter": (lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True), P("x")),
            "ppermute": (lambda x: lax.ppermute(x, "x", perm), P("x")),
            "all_to_all": (lambda x: lax.all_to_all(x, "x", 0, 0, tiled=True), P("x")),
        }
        body, out = bodies[c]
        sm = self.shard_map(body, mesh, (P("x"),), out, check=False)
        f = jax.jit(sm, in_shardings=self.NamedSharding(mesh, P("x")), out_shardings=self.NamedSharding(mesh, out))
        host = self.np.random.default_rng(3).uniform(size=per * n).astype(self.np.float32)
        x = jax.device_put(host, self.NamedSharding(mesh, P("x")))
        size = f"{per * 4 / 1024:.1f} KiB" if per * 4 < (1 << 20) else f"{per * 4 / (1 << 20):.1f} MiB"
        return self.timed(w, f"({n},) {size}/device", f, x)

    def dispatch(self):
        jax = self.jax
        s = self.NamedSharding(self.line(), self.P("x"))
        x = jax.device_put(self.np.zeros(16, self.np.float32), s)
        f = jax.jit(lambda a: a + 1, in_shardings=s, out_shardings=s)
        inner = 2000

        def loop(g):
            y = None
            for _ in range(inner):
                y = g(x)
            y.block_until_ready()

        samples, calls = time_calls(self.reps, lambda: loop(f))
        eager, _ = time_calls(self.reps, lambda: loop(lambda a: a + 1))  # un-jitted, for reference
        return self.result("dispatch", f"({self.n},)", [t / inner for t in samples], calls * inner,
                           eager_seconds=statistics.median(eager) / inner)

    def uneven(self):
        """4097x4096 f64 rows over N: report what JAX does with it."""
        jax, jnp, P = self.jax, self.jnp, self.P
        m, k = 4097, 4096
        host = (self.np.arange(m * k, dtype=self.np.int64) % 1000 * 0.5).astype(self.np.float64).reshape(m, k)
        s = self.NamedSharding(self.line(), P("x"))
        layout = f"({self.n},1)"
        errors = {}
        x = None
        try:
            x = jax.device_put(host, s)
        except Exception as e:  # noqa: BLE001 - JAX's own error text is the result
            errors["device_put"] = f"{type(e).__name__}: {e}"
        f = jax.jit(lambda a: jnp.diff(a, n=1, axis=0, prepend=0.0), in_shardings=s, out_shardings=s)
        arg = x if x is not None else host
        try:
            f(arg).block_until_ready()
        except Exception as e:  # noqa: BLE001
            errors["jit"] = f"{type(e).__name__}: {e}"
        if errors.get("jit") is None:
            # JAX accepted it: time it like any other workload.
            return self.timed("uneven_diff", layout, f, arg, uneven_errors=errors)
        text = errors.get("device_put") or errors["jit"]
        return {"side": "jax", "workload": "uneven_diff", "layout": layout, "error": text, "errors": errors}

    # ------------------------------------------------------------ jit workloads
    def chain_fn(self, c=0.1):
        """The 20-op chain: 4 rounds of a = tanh(a * 0.9 + c) - v * 0.01 (5 ops each)."""
        jnp = self.jnp

        def chain(v):
            a = v
            for _ in range(4):
                a = jnp.tanh(a * 0.9 + c) - v * 0.01
            return a
        return chain

    def chain(self, w):
        jax = self.jax
        s = self.NamedSharding(self.line(), self.P("x"))
        host = self.np.random.default_rng(4).uniform(-3, 3, size=1 << 24).astype(self.np.float32)
        v = jax.device_put(host, s)
        if w == "chain_jit":
            f = jax.jit(self.chain_fn(), in_shardings=s, out_shardings=s)
        else:
            f = self.chain_fn()  # not jitted: every jnp op is dispatched on its own
        return self.timed(w, f"({self.n},)", f, v)

    def trace_compile(self):
        jax = self.jax
        s = self.NamedSharding(self.line(), self.P("x"))
        v = jax.device_put(self.np.random.default_rng(5).uniform(-3, 3, size=1024).astype(self.np.float32), s)
        count = [0]

        # A fresh closure per call, with its own constant: jit's tracing cache
        # is keyed on the function object and its lowering and compilation
        # caches on the traced program, so a new function misses all of them,
        # and the distinct constant makes the program text differ too (no
        # content-keyed cache could hit). jax.clear_caches() is not used: it
        # would also empty the caches of jnp's own jitted helpers, which stay
        # warm for a new user function, as Tessera's process state does.
        def once():
            count[0] += 1
            f = jax.jit(self.chain_fn(0.1 + 1e-6 * count[0]), in_shardings=s, out_shardings=s)
            f.lower(v).compile()

        samples, inner = time_calls(self.reps, once)
        return self.result("trace_compile", f"(1024,) over ({self.n},)", samples, inner, compiled=count[0])

    def mlp_big(self, w):
        import contextlib
        jax, P, np = self.jax, self.P, self.np
        explicit = w == "mlp_big_explicit"
        ctx = contextlib.nullcontext
        if explicit:
            # Explicit axes: the mesh is in context while tracing.
            from jax.sharding import AxisType
            mesh = self.Mesh(np.array(self.devs), ("x",), axis_types=(AxisType.Explicit,))
            set_mesh = getattr(jax, "set_mesh", None) or jax.sharding.use_mesh
            ctx = lambda: set_mesh(mesh)  # noqa: E731
        else:
            mesh = self.line()
        sx, rep = self.NamedSharding(mesh, P("x")), self.NamedSharding(mesh, P())
        rng = np.random.default_rng(6)
        x = jax.device_put(rng.standard_normal(16384, dtype=np.float32), sx)
        wt = jax.device_put(rng.standard_normal((16384, 512), dtype=np.float32), rep)
        b = jax.device_put(rng.uniform(size=512).astype(np.float32), rep)
        jf = jax.jit(lambda xa, wa, ba: jax.nn.sigmoid(xa @ wa + ba), in_shardings=(sx, rep, rep), out_shardings=rep)

        def f(*a):
            with ctx():
                return jf(*a)

        # What XLA's partitioner chose for the contracting dim: the result
        # type of every dot, slice and collective in the compiled module
        # ("f32[8192,512] dynamic-slice" on 2 devices: w sliced locally).
        with ctx():
            hlo = jf.lower(x, wt, b).compile().as_text()
        plan = []
        for l in hlo.splitlines():
            for op in ("dot", "dynamic-slice", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                       "collective-permute"):
                for form in (f" {op}(", f" {op}-start("):
                    if form in l and " = " in l:
                        plan.append(l.split(" = ", 1)[1].split("{")[0].split(" ")[0] + " " + form.strip(" ("))
        return self.timed(w, f"x ({self.n},), w b replicated", f, x, wt, b,
                          communication=sorted(set(plan)))

    # The plasma code's chunked Jacobian (examples/chunked_jacobian): a
    # residual of N = 24 parameters at each of M grid rows (K = 8 values per
    # row through a (K, L=32, N) quadrature), f64, rows sharded. jac_vmap:
    # jit(vmap(jacfwd)) over all rows at once; jac_map: jit(lax.map(jacfwd,
    # batch_size=128)), the memory-bounded form. M = 4096 divides by the
    # devices; M = 4099 (what Tessera runs too) does not, and JAX's error
    # for it is recorded.
    def jacobian(self, w):
        jax, P, np = self.jax, self.P, self.np
        jnp = jax.numpy
        M, K, N, L = 4096, 8, 24, 32
        mesh = self.line()
        rows, rep = self.NamedSharding(mesh, P("x")), self.NamedSharding(mesh, P())
        i = np.arange(M)[:, None]
        k = np.arange(K)[None, :]
        x = jax.device_put(np.cos(0.37 * i + 0.91 * k), rows)
        p = jax.device_put(0.2 * np.sin(1.3 * np.arange(N) + 0.5), rep)
        freq = jnp.arange(1, N + 1, dtype=jnp.float64) * 0.5
        nodes = jnp.linspace(0.5, 1.5, L, dtype=jnp.float64)

        def residual(q, xr):
            phase = (xr[:, None] * nodes[None, :])[:, :, None] * freq[None, None, :]
            basis = jnp.mean(jnp.cos(phase), axis=1)
            return jnp.tanh(basis @ q) + 0.1 * xr * jnp.sum(q * q)

        row_jac = jax.jacfwd(residual)
        if w == "jac_vmap":
            f = jax.jit(jax.vmap(row_jac, in_axes=(None, 0)), out_shardings=rows)
        else:
            f = jax.jit(lambda q, xs: jax.lax.map(lambda xr: row_jac(q, xr), xs, batch_size=128), out_shardings=rows)
        extra = {}
        try:
            xu = np.cos(0.37 * np.arange(4099)[:, None] + 0.91 * k)
            f(p, jax.device_put(xu, rows)).block_until_ready()
            extra["uneven"] = "ran with M = 4099"
        except Exception as e:  # noqa: BLE001 -- the error is the result
            extra["uneven_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        r = self.timed(w, f"rows ({self.n},), M={M}", f, p, x, **extra)
        r["peak_rss_mb"] = peak_rss_mb()
        return r

    # grad of a 3-layer MLP's mean squared error, batch sharded, under jit.
    def mlp_grad(self):
        jax, P, np = self.jax, self.P, self.np
        jnp = jax.numpy
        B, D, H = 8192, 256, 256
        mesh = self.line()
        rows, rep = self.NamedSharding(mesh, P("x")), self.NamedSharding(mesh, P())
        rng = np.random.default_rng(7)
        x = jax.device_put(rng.standard_normal((B, D), dtype=np.float32), rows)
        y = jax.device_put(rng.standard_normal((B, 1), dtype=np.float32), rows)
        params = tuple(jax.device_put(a, rep) for a in (
            (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32), np.zeros(H, np.float32),
            (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32), np.zeros(H, np.float32),
            (rng.standard_normal((H, 1)) / np.sqrt(H)).astype(np.float32)))

        def loss(ps, xa, ya):
            w1, b1, w2, b2, w3 = ps
            h = jnp.tanh(xa @ w1 + b1)
            h = jnp.tanh(h @ w2 + b2)
            return jnp.mean((h @ w3 - ya) ** 2)

        g = jax.jit(jax.grad(loss), out_shardings=(rep,) * 5)
        r = self.timed("mlp_grad", f"batch ({self.n},), {B}x{D}->{H}->{H}->1", lambda xa, ya: g(params, xa, ya)[0], x, y)
        r["flops"] = 6.0 * B * (D * H + H * H + H)
        r["peak_rss_mb"] = peak_rss_mb()
        return r

    # The stellarator-shaped Jacobian (DESC's equilibrium residual): r(x) =
    # 2*tanh(A x) + 1 with A (M, 512) f64, rows sharded, x (512) replicated,
    # the same values as the Tessera runner's. Forms: jit(jacfwd),
    # jit(jacrev), DESC's jacfwd_chunked (jvp over chunks of the (P, P)
    # identity with lax.map, then transposed to (M, P)) and its reverse twin
    # (vjp over chunks of the (M, M) identity). JAX cannot lay out M rows
    # over N devices unless N divides M; A then gets zero rows up to the next
    # multiple, whose Jacobian rows are zero (so the checksum is unchanged),
    # and the refusal is recorded.
    def stellarator(self, w):
        jax, jnp, np, P = self.jax, self.jnp, self.np, self.P
        n, m, mode, chunk = STEL_NAME.fullmatch(w).groups()
        n, m, chunk = int(n), int(m), int(chunk or 0)
        if n != self.n:
            raise ValueError(f"{w} is for {n} devices, the runner has {self.n}")
        p = STEL_PARAMS
        mesh = self.line()
        rows, rep = self.NamedSharding(mesh, P("x", None)), self.NamedSharding(mesh, P())
        extra = {}
        padded = -(-m // n) * n
        if padded != m:
            try:
                jax.device_put(np.zeros((m, 1)), rows)
            except Exception as e:  # noqa: BLE001 -- the refusal is the result
                extra["uneven_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            extra["padded_rows"] = padded

        def block(index):
            # Filled a slab at a time: a whole-shard temporary would add to the peak RSS.
            lo, hi, _ = index[0].indices(padded)
            out = np.zeros((hi - lo, p))
            for r0 in range(lo, min(hi, m), 4096):
                r1 = min(r0 + 4096, hi, m)
                v = (np.arange(r0 * p, r1 * p, dtype=np.int64) * 0.6180339887498949).reshape(r1 - r0, p)
                out[r0 - lo:r1 - lo] = 0.01 * (v - np.floor(v) - 0.5)
            return out

        x = jax.device_put(np.cos(0.37 * np.arange(p)), rep).block_until_ready()
        rss_start = rss_mb()  # the runtime started, A not yet made
        a = jax.make_array_from_callback((padded, p), rows, block)

        def res(am, v):
            return 2 * jnp.tanh(am @ v) + 1

        def jacobian(am, v):
            f = lambda u: res(am, u)  # noqa: E731
            if mode == "fwd" and not chunk:
                return jax.jacfwd(f)(v)
            if mode == "rev" and not chunk:
                return jax.jacrev(f)(v)
            if mode == "fwd":
                basis = jnp.eye(p, dtype=v.dtype)
                return jax.lax.map(lambda t: jax.jvp(f, (v,), (t,))[1], basis, batch_size=chunk).T
            y, pullback = jax.vjp(f, v)
            basis = jnp.eye(y.shape[0], dtype=y.dtype)
            return jax.lax.map(lambda c: pullback(c)[0], basis, batch_size=chunk)

        jf = jax.jit(jacobian, in_shardings=(rows, rep), out_shardings=rows)
        # One warm-up call (it compiles), whose result gives the checksum and
        # is dropped; then each timed call holds one Jacobian at a time.
        first = jf(a, x).block_until_ready()
        extra.update(dtype=str(first.dtype), shape=list(first.shape), checksum=float(jnp.sum(first)),
                     jacobian_device_mb=max(s.data.nbytes for s in first.addressable_shards) / (1 << 20))
        del first
        samples = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            jf(a, x).block_until_ready()
            samples.append(time.perf_counter() - t0)
        return self.result(w, f"A rows ({n},)", samples, 1, peak_rss_mb=peak_rss_mb(), rss_start_mb=rss_start,
                           jacobian_mb=m * p * 8 / (1 << 20), inputs_mb=(m * p + p) * 8 / (1 << 20), **extra)


    # The seeds: the small programs of the distributed-JAX introduction on 8
    # devices. Eager: the jnp function, or the shard_map-wrapped function,
    # called without jax.jit (as the tutorial does); _jit: jax.jit of it
    # (no in/out shardings: the arguments' own). Same shapes, dtypes and
    # layouts as the Tessera runner; values random normal.
    def seed(self, w):
        jax, jnp, P = self.jax, self.jnp, self.P
        lax = jax.lax
        if self.n != 8:
            raise ValueError(f"{w} is for 8 devices (--devices 8), the runner has {self.n}")
        jitted = w.endswith("_jit")
        base = w[: -len("_jit")] if jitted else w
        m1 = self.mesh((8,), ("i",))
        m2 = self.mesh((4, 2), ("i", "j"))

        def normal(k, shape, spec):
            v = jax.random.normal(jax.random.PRNGKey(k), shape, dtype=jnp.float32)
            return jax.device_put(v, self.NamedSharding(m2, spec))

        if base == "seed_tanh":
            f = jnp.tanh
            args = (jax.device_put(jnp.arange(8, dtype=jnp.int32), self.NamedSharding(m1, P("i"))),)
            layout = "(8,) P(i)"
        elif base == "seed_matmul2d":
            f = lambda x, wt, b: jnp.dot(x, wt) + b  # noqa: E731
            args = (normal(0, (192, 64), P("i", None)), normal(1, (64, 128), P(None, "j")), normal(2, (128,), P("j")))
            layout = "(4,2) x P(i,) w P(,j)"
        elif base == "seed_normalize":
            def norm(x):
                mean = lax.pmean(x, "j")
                std = jnp.sqrt(lax.pmean((x - mean) ** 2, "j"))
                return (x - mean) / std
            f = self.shard_map(norm, m2, (P("i", "j"),), P("i", "j"))
            args = (normal(3, (192, 64), P("i", "j")),)
            layout = "(4,2) x P(i,j)"
        elif base == "seed_allgather_matmul":
            f = self.shard_map(lambda x, wt: jnp.dot(x, lax.all_gather(wt, "i", axis=0, tiled=True)), m2,
                               (P("i", None), P("i", None)), P("i", None))
            args = (normal(0, (192, 64), P("i", None)), normal(4, (64, 128), P("i", None)))
            layout = "(4,2) x w P(i,)"
        else:
            raise ValueError(f"unknown workload '{w}'")
        if jitted:
            f = jax.jit(f)
        out = f(*args)
        samples, inner = time_calls(self.reps, lambda: f(*args).block_until_ready(), SEED_MIN_SAMPLE,
                                    SEED_MIN_INNER)
        return self.result(w, layout, samples, inner, dtype=str(out.dtype), shape=list(out.shape))


def peak_rss_mb():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb():
    """Current RSS in MiB (VmRSS; 0 where /proc is not there)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024.0
    except (OSError, StopIteration, ValueError):
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="", help="workload name(s), comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--devices", type=int, default=os.cpu_count())
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--info", action="store_true", help="print JAX's version and devices")
    args = ap.parse_args()
    if args.list:
        print("\n".join(WORKLOADS))
        return 0
    jax = configure(args.devices)
    if args.info:
        import jaxlib
        print(json.dumps({"side": "jax", "info": True, "jax": jax.__version__,
                          "jaxlib": getattr(jaxlib, "__version__", "?"),
                          "devices": [str(d) for d in jax.devices()], "python": sys.version.split()[0]}))
        return 0
    runner = Runner(jax, args.devices, args.reps)
    failed = 0
    for w in [w for w in args.workload.split(",") if w]:
        if w not in WORKLOADS and not STEL_NAME.fullmatch(w):
            print(f"jax_workloads: unknown workload '{w}' (--list shows them)", file=sys.stderr)
            return 2
        try:
            r = runner.run(w)
        except Exception as e:  # noqa: BLE001 - reported, the next workload still runs
            r = {"side": "jax", "workload": w, "error": f"{type(e).__name__}: {e}"}
            failed += 1
        r["devices"] = args.devices
        print(json.dumps(r), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
