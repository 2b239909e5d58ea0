#!/usr/bin/env python3
"""The nll loss of Rubix 0.0.5's IFU cube and its gradient w.r.t. the stars' ages and metallicities, in JAX.

    python rubix_grad.py --config CFG.yml --devices N --repeat R --observed obs.npy --snr S \
                         --out-grad grad.npz --json result.json

Rubix 0.0.5 has no gradient of its own beyond jax.grad of a squared error
(RubixPipeline.gradient), so this takes jax.value_and_grad of the function a
Rubix user would write: the stars' ages and metallicities in, a fresh copy of
prepare_data()'s RubixData with them, run_sharded's shard_map'd function (its
stages on each of the N JAX CPU devices and the psum of the partial cubes:
taken from run_sharded, which cannot itself be traced), and the loss of the cube
against the observed one,

    nll = 0.5 sum_w ((model - observed)^2 / var + log(2 pi var)),  var = (|observed| / snr)^2,

over the elements of positive variance (as `tessera ifu-grad --loss nll
--snr S` computes it). The whole value_and_grad is jitted once; the first
call (trace, compile, run) and R-1 steady calls are timed, each blocked on.

The ages are what Rubix reads from its galaxy file: log10(age/yr) (see
bench_ifu.py), so the gradient written is d loss / d log10(age/yr); the
caller converts it. (run_sharded's shard_map has check_rep=False; JAX still
transposes the psum of the partial cubes right: on 2000 particles, 1 and 2
devices give the same gradients to 1e-6, float32 summation order.)

--x64 is a check, not Rubix as its users run it: JAX in float64 with the
particles and the observed cube cast to float64.

Writes grad.npz (loss, d/dlog10(age/yr), d/dmetallicity, the ages and
metallicities, float32 as JAX computes) and the times as JSON.
"""
import argparse
import json
import logging
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from rubix_run import peak_rss_mib, refuse_network, set_device_count  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="Rubix user config (YAML); its output_path holds rubix_galaxy.h5")
    ap.add_argument("--devices", type=int, required=True, help="JAX CPU devices (mesh size)")
    ap.add_argument("--repeat", type=int, default=3, help="calls of the jitted value_and_grad: first + repeat-1 steady")
    ap.add_argument("--observed", required=True, help="observed cube (ny, nx, nwave) as .npy")
    ap.add_argument("--snr", type=float, required=True, help="var = (|observed| / snr)^2")
    ap.add_argument("--out-grad", required=True, help="where to write the loss and gradients (.npz)")
    ap.add_argument("--json", required=True, help="where to write the times (JSON)")
    ap.add_argument("--x64", action="store_true", help="a check, not Rubix as users run it: JAX in float64, "
                    "the particles and the observed cube cast to float64 (the templates stay float32 values)")
    args = ap.parse_args()
    if args.devices < 1 or args.repeat < 1 or not args.snr > 0:
        ap.error("--devices and --repeat must be at least 1, --snr positive")

    set_device_count(args.devices)
    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")
    refuse_network()

    t_import = time.perf_counter()
    import jax
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import rubix
    import yaml
    from rubix.core.pipeline import RubixPipeline
    import_s = time.perf_counter() - t_import
    if len(jax.devices()) != args.devices:
        raise SystemExit(f"rubix_grad.py: asked JAX for {args.devices} CPU devices, got {len(jax.devices())}")
    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    galaxy = os.path.join(cfg["output_path"], "rubix_galaxy.h5")
    if not os.path.isfile(galaxy):
        raise SystemExit(f"rubix_grad.py: {galaxy} does not exist (output_path of {args.config})")

    t0 = time.perf_counter()
    pipe = RubixPipeline(args.config)
    data = pipe.prepare_data()
    jax.block_until_ready(data.stars.coords)
    prepare_s = time.perf_counter() - t0
    n = int(data.stars.coords.shape[0])
    if n % args.devices:
        raise SystemExit(f"rubix_grad.py: {n} particles do not split evenly over {args.devices} devices "
                         f"(run_sharded would pad them)")

    dtype = jnp.float64 if args.x64 else jnp.float32
    if args.x64:
        data = jax.tree_util.tree_map(
            lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x, data)
    obs = jnp.asarray(np.load(args.observed), dtype=dtype)
    var = (jnp.abs(obs) / args.snr) ** 2
    keep = var > 0
    var_safe = jnp.where(keep, var, 1.0)
    log_term = jnp.where(keep, jnp.log(2 * jnp.pi * var_safe), 0.0)

    # run_sharded assembles its stages (building the telescope's arrays, which
    # cannot happen under jit) and then calls shard_map on its per-shard
    # function. That shard_map'd function is taken from one run_sharded call
    # that stops there (shard_map is wrapped for the call; nothing runs).
    import rubix.core.pipeline as rubix_pipeline
    captured = {}
    shard_map = rubix_pipeline.shard_map

    def capture(f, **kwargs):
        captured["sharded"] = shard_map(f, **kwargs)
        return lambda x: None

    rubix_pipeline.shard_map = capture
    try:
        pipe.run_sharded(jax.tree_util.tree_map(lambda x: x, data))
    finally:
        rubix_pipeline.shard_map = shard_map
    sharded = captured["sharded"]

    def loss(age, metallicity):
        # Rubix's stages set fields of the RubixData they are given, so every
        # call works on a fresh copy of the pytree.
        d = jax.tree_util.tree_map(lambda x: x, data)
        d.stars.age = age
        d.stars.metallicity = metallicity
        cube = sharded(d)
        r = cube - obs
        return 0.5 * jnp.sum(jnp.where(keep, r * r / var_safe + log_term, 0.0))

    value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    age0, z0 = data.stars.age, data.stars.metallicity
    times = []
    out = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = jax.block_until_ready(value_and_grad(age0, z0))
        times.append(time.perf_counter() - t0)
    value, (g_age, g_z) = out
    np.savez(args.out_grad, loss=np.float64(value), grad_log_age=np.asarray(g_age),
             grad_metallicity=np.asarray(g_z), log_age=np.asarray(age0), metallicity=np.asarray(z0))
    result = {
        "side": "rubix", "rubix": rubix.__version__, "jax": jax.__version__, "particles": n,
        "devices": len(jax.devices()), "repeat": args.repeat, "import_s": import_s, "prepare_s": prepare_s,
        "loss": float(value), "x64": args.x64, "first_s": times[0], "steady_s": times[1:], "peak_rss_mib": peak_rss_mib(),
    }
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
