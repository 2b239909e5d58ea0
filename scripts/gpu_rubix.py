#!/usr/bin/env python3
"""Rubix 0.0.5 on JAX's default device against `tessera ifu`'s cube of the same galaxy.

    python3 scripts/gpu_rubix.py --config CFG.yml --tessera-cube CUBE.fits
        [--tessera-json T.json] [--tessera-log T.txt] [--expect-platform gpu]
        [--repeat 2] [--tolerance 1e-5] --out-cube rubix.npy --json result.json

scripts/gpu-check.sh --full runs it on the GPU machine. CFG.yml is
bench/ifu/config.yml with its output_path filled in, as bench_ifu.py writes it;
that folder holds rubix_galaxy.h5, written by `tessera ifu-generate
--rubix-output` beside the galaxy `tessera ifu` read. Rubix runs as
bench/ifu/rubix_run.py runs it (prepare_data, then run_sharded --repeat times,
each call blocked on; run_sharded re-jits on every call, so a later call
includes that work as a user pays it), except that JAX keeps its default
platform, the GPU where it has one, instead of N virtual CPU devices. The
cubes are compared by bench_ifu.py's compare_cubes, so the numbers mean what
they mean in `make bench-ifu`. --expect-platform refuses to time a platform
other than the one meant (a JAX that fell back to its CPU, say).

Prints one line per stage as it goes (a run cut short by a time limit or by
running out of memory still says how far it got), then the summary; writes
the JSON after every stage. Exits 0 when Rubix ran and the cubes agree within
--tolerance (and both read the same SSP templates), 1 when they do not, 2 when
Rubix could not start (a missing package, the wrong platform, no galaxy file),
3 when Rubix itself failed while it ran (out of GPU memory, say).
"""
import argparse
import json
import logging
import os
import sys
import time
import traceback
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "ifu"))

import rubix_run  # noqa: E402  (refuse_network, sha256, peak_rss_mib)


def say(text):
    print(f"gpu_rubix: {text}", flush=True)


def device_peak_mib(device):
    """Peak bytes JAX's allocator held on the device (None where the platform keeps no statistics)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001  (some platforms raise instead of returning None)
        return None, None
    peak, limit = stats.get("peak_bytes_in_use"), stats.get("bytes_limit")
    return (peak / 2**20 if peak is not None else None), (limit / 2**20 if limit is not None else None)


def tessera_side(args):
    """Tessera's pipeline time and a device's peak memory, from its --json and its printed summary."""
    out = {"cube": args.tessera_cube}
    if args.tessera_json:
        try:
            with open(args.tessera_json) as f:
                t = json.load(f)
            out.update({k: t.get(k) for k in ("particles", "devices", "first_s", "steady_s", "peak_rss_mib")})
        except (OSError, ValueError) as e:
            out["json_error"] = str(e)
    if args.tessera_log:
        try:
            with open(args.tessera_log, errors="replace") as f:
                for line in f:
                    if line.strip().startswith(("peak device memory", "mesh:", "time:")):
                        out.setdefault("printed", []).append(line.strip())
                    elif line.strip().startswith("templates:"):
                        out["ssp_template"] = line.split(":", 1)[1].strip()
        except OSError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="Rubix user config (bench/ifu/config.yml, output_path filled in)")
    ap.add_argument("--tessera-cube", required=True, help="`tessera ifu`'s FITS cube of the same galaxy")
    ap.add_argument("--tessera-json", help="its --json (times)")
    ap.add_argument("--tessera-log", help="its printed summary (a device's peak memory)")
    ap.add_argument("--expect-platform", help="JAX's default device must be of this platform (gpu, cpu)")
    ap.add_argument("--repeat", type=int, default=2, help="calls of run_sharded: the first + repeat-1 later ones")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="max relative error per cube element")
    ap.add_argument("--out-cube", required=True, help="where to write Rubix's last cube (.npy)")
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--matmul-precision", default="highest",
                    help="JAX's jax_default_matmul_precision for Rubix (default highest: true float32; JAX's own "
                         "default lets a GPU's f32 dots and convolutions round their inputs to TF32)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")

    # As rubix_run.py: Rubix's log level is capped process-wide, downloads refused.
    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")
    rubix_run.refuse_network()
    res = {"side": "rubix", "config": args.config, "tessera": tessera_side(args), "tolerance": args.tolerance}
    started = False  # whether Rubix's own work (prepare_data, run_sharded) has begun

    def save():
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)

    try:
        t0 = time.perf_counter()
        import jax
        # JAX rounds f32 dot and convolution inputs to TF32 on NVIDIA GPUs by
        # default (on CPUs it computes in float32). Rubix rotates the
        # particles with a dot and convolves the spectra, so under TF32 a
        # particle near a spaxel edge can change spaxel and spectra move by
        # ~1e-3. Tessera computes in float32 on every device, and its cube is
        # compared with Rubix's CPU cube in `make bench-ifu`, so the GPU
        # comparison asks JAX for float32 too.
        jax.config.update("jax_default_matmul_precision", args.matmul_precision)
        res["matmul_precision"] = args.matmul_precision
        import numpy as np
        import rubix
        from rubix.core.pipeline import RubixPipeline
        from rubix.paths import TEMPLATE_PATH
        import bench_ifu  # after numpy and h5py are known to import: read_fits_cube, compare_cubes
        res["import_s"] = time.perf_counter() - t0
        devices = jax.devices()
        res.update({"rubix": rubix.__version__, "jax": jax.__version__, "jax_devices": [str(d) for d in devices],
                    "platform": devices[0].platform})
        say(f"rubix {rubix.__version__}, jax {jax.__version__}, jax.devices() = {devices}, "
            f"jax_default_matmul_precision = {args.matmul_precision}")
        if args.expect_platform and devices[0].platform != args.expect_platform:
            raise SystemExit(f"JAX's default device is {devices[0]} ({devices[0].platform}), "
                             f"expected a {args.expect_platform} device")

        cfg, _ = rubix_run.load_config(args.config)
        ssp = os.path.join(TEMPLATE_PATH, rubix.config["ssp"]["templates"][cfg["ssp"]["template"]["name"]]["file_name"])
        res["ssp_template"], res["ssp_sha256"] = ssp, rubix_run.sha256(ssp)
        # Both programs must read the same BC03 file (bench_ifu.py hands Tessera Rubix's).
        theirs = res["tessera"].get("ssp_template")
        if theirs and os.path.isfile(theirs):
            res["same_ssp_template"] = rubix_run.sha256(theirs) == res["ssp_sha256"]
            say(f"SSP templates: Rubix's {ssp}, Tessera's {theirs}: "
                + ("the same file (sha256)" if res["same_ssp_template"] else "DIFFERENT files"))

        started = True
        t0 = time.perf_counter()
        pipe = RubixPipeline(args.config)
        inputdata = pipe.prepare_data()
        jax.block_until_ready(inputdata.stars.coords)
        res["prepare_s"] = time.perf_counter() - t0
        res["particles"] = int(inputdata.stars.coords.shape[0])
        say(f"{res['particles']} particles read and put on {devices[0]} in {res['prepare_s']:.2f} s")
        save()

        res["calls_s"] = []
        cube = None
        for i in range(args.repeat):
            t0 = time.perf_counter()
            cube = jax.block_until_ready(pipe.run_sharded(inputdata))
            res["calls_s"].append(time.perf_counter() - t0)
            res["device_peak_mib"], res["device_limit_mib"] = device_peak_mib(devices[0])
            say(f"run_sharded call {i + 1}: {res['calls_s'][-1]:.2f} s"
                + (" (trace, compile and run)" if i == 0 else "")
                + (f"; peak device memory {res['device_peak_mib']:.0f} MiB" if res["device_peak_mib"] else ""))
            save()
        cube = np.asarray(cube)
        np.save(args.out_cube, cube)
        res["peak_rss_mib"] = rubix_run.peak_rss_mib()
    except SystemExit as e:
        res["error"] = str(e)
        started = False
    except Exception as e:  # noqa: BLE001  (an XLA out-of-memory error, say: recorded, not raised)
        res["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        traceback.print_exc()
    if res.get("error"):
        say(f"Rubix did not finish: {res['error']}")
        save()
        return 3 if started else 2

    try:
        test, _ = bench_ifu.read_fits_cube(args.tessera_cube)
        cmp = bench_ifu.compare_cubes(test, cube, args.tolerance)
    except (OSError, ValueError) as e:
        cmp = {"error": f"{args.tessera_cube}: {e}"}
    res["comparison"] = cmp
    t_first = res["tessera"].get("first_s")
    r_first, r_later = res["calls_s"][0], res["calls_s"][-1]
    if t_first:
        res["speedup_first"] = r_first / t_first
        res["speedup_later"] = r_later / t_first
    save()

    if cmp.get("error"):
        agree = f"cube comparison: {cmp['error']}"
    else:
        agree = (f"max relative difference {cmp['max_rel_err']:.2e} "
                 f"({cmp['count_above_tol']} of {cmp['elements']} elements > {args.tolerance:g})")
    tmem = next((p.split("(")[0].strip()
                 for p in res["tessera"].get("printed", []) if p.startswith("peak device memory")), None)
    t = (f"tessera {t_first:.3f} s on {res['tessera'].get('devices')} devices" + (f", {tmem}" if tmem else "")
         if t_first else "tessera: no time")
    speed = (f"; Rubix / Tessera: {res['speedup_later']:.1f}x (call {len(res['calls_s'])}), "
             f"{res['speedup_first']:.1f}x (first call), goal 10x" if t_first else "")
    mem = f", peak device memory {res['device_peak_mib']:.0f} MiB" if res.get("device_peak_mib") else ""
    if res.get("same_ssp_template") is False:
        agree += "; the two read different SSP templates"
    say(f"{res['particles']} particles on {res['platform']}: rubix first call {r_first:.2f} s, "
        f"call {len(res['calls_s'])} {r_later:.2f} s{mem}; {t}{speed}; {agree}")
    print(json.dumps(res, indent=1), flush=True)
    return 0 if cmp.get("passed") and res.get("same_ssp_template") is not False else 1


if __name__ == "__main__":
    sys.exit(main())
