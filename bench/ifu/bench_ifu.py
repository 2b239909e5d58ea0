#!/usr/bin/env python3
"""Tessera's IFU pipeline and Rubix 0.0.5 side by side: times, memory, and cube agreement.

    python bench_ifu.py --build build/default [--devices 1,2] [--repeat 5] [--rounds 1]
                        [--particles 100000] [--large 1000000,10000000] [--rubix-large]
                        [--seed 20240601] [--tolerance 1e-5] [--out DIR] [--work DIR]

Main case (--particles, 10^5 by default): `tessera ifu-generate` writes one
seeded galaxy twice, once for Tessera and once in the form Rubix 0.0.5 reads
(see the notes printed below the table). Then for every device count N, each
round runs `tessera ifu --devices N --repeat R` and rubix_run.py on N JAX CPU
devices (R calls of run_sharded), each in its own process, swapping which side
goes first every round and every N so that drift hits both alike. The first
call (everything included) and the median of the later calls are reported,
with the peak RSS of each process, measured by the parent (wait4) for both
sides alike. Tessera's cube is then compared with Rubix's cube for the same N,
element by element.

Dusty case (--dusty-particles, 2 x 10^4 by default; --no-dusty skips it): Rubix's
calc_dusty_ifu on one device against `tessera ifu` with `pipeline:
calc_dusty_ifu`, on the generated galaxy plus --dusty-gas gas cells written
into both files as /particles/gas (add_gas). Rubix 0.0.5 multiplies the dust
column by the proton mass, so physical gas masses give A_V ~ 1e-17 and a cube
equal to the dust-free one; the gas masses are therefore --dusty-gas-mass per
cell (1e29 Msun: 1e24 times physical), which makes A_V of order 1 in both
programs, so that the comparison tests the dust. One device only: Rubix
computes A_V per shard from that shard's gas.

Large cases (--large): Tessera alone on the largest N; Rubix too, up to
--rubix-max-particles, with --rubix-large (it takes minutes per call).

Writes <out>/ifu.json (everything, samples included) and ifu.md (the table);
<out> defaults to <build>/bench-results. Exits 1 if a run failed or a cube
differs from Rubix's by more than --tolerance (relative, per element).
"""
import argparse
import datetime
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PLACEHOLDER = '"@RUBIX_GALAXY_DIR@"'
RUBIX_DATASETS = ("galaxy/center", "galaxy/halfmassrad_stars", "galaxy/redshift", "particles/stars/coords",
                  "particles/stars/velocity", "particles/stars/mass", "particles/stars/age",
                  "particles/stars/metallicity")
LOG_AGE_MAX = np.log10(2e10)  # the last age of BC03lr.h5's log10(age/yr) axis


def load_compare_helpers():
    """machine_description, cpu_busy and fmt_time come from the JAX comparison, so both report alike."""
    path = os.path.join(HERE, "..", "compare", "compare.py")
    spec = importlib.util.spec_from_file_location("tessera_bench_compare", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


helpers = load_compare_helpers()
fmt_time = helpers.fmt_time


def fmt_count(n):
    k = int(round(np.log10(n))) if n > 0 else 0
    return f"10^{k}" if 10 ** k == n else f"{n:,}"


def fmt_devices(d):
    return f"{d} device" + ("s" if d != 1 else "")


def fmt_mib(m):
    if m is None:
        return "–"
    return f"{m / 1024:.2f} GiB" if m >= 1024 else f"{m:.0f} MiB"


def fmt_err(cmp, tol):
    if cmp is None:
        return "–"
    if cmp.get("error"):
        return "error"
    text = f"{cmp['max_rel_err']:.1e}"
    if cmp["count_above_tol"]:
        text += f" ({cmp['count_above_tol']} > {tol:g})"
    return text


def tail(path, lines=8):
    try:
        with open(path, errors="replace") as f:
            text = [l.rstrip() for l in f.read().strip().splitlines() if not l.startswith("$ ")]
        return " | ".join(text[-lines:])
    except OSError:
        return ""


def run_child(cmd, log_path, timeout, env=None):
    """Runs cmd with its output in log_path; returns (exit code, wall seconds, peak RSS MiB, timed out).

    The child is reaped with wait4, whose rusage is that process's own (and its
    waited-for children's), so every run's peak RSS is measured separately.
    """
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        timed_out = False
        try:
            while True:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - t0 > timeout:
                    timed_out = True
                    os.killpg(p.pid, signal.SIGKILL)
                    _, status, ru = os.wait4(p.pid, 0)
                    break
                time.sleep(0.05)
        except BaseException:
            # Interrupted: take the child's process group down with us.
            try:
                os.killpg(p.pid, signal.SIGKILL)
                os.wait4(p.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            raise
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return p.returncode, wall, ru.ru_maxrss / 1024.0, timed_out


def child_error(what, rc, timed_out, timeout, log_path):
    if timed_out:
        return f"{what}: timed out after {timeout} s (log: {log_path})"
    return f"{what}: exit {rc}: {tail(log_path)} (log: {log_path})"


def write_config(template_text, galaxy_dir, path):
    with open(path, "w") as f:
        f.write(template_text.replace(PLACEHOLDER, json.dumps(os.path.abspath(galaxy_dir))))


def check_galaxies(tessera_file, rubix_file, n, deep):
    """Checks the two generated files; returns a list of problems (empty: fine) and a list of notes."""
    problems, notes = [], []
    for path in (tessera_file, rubix_file):
        if not os.path.isfile(path):
            problems.append(f"{path} was not written")
    if problems:
        return problems, notes
    with h5py.File(rubix_file, "r") as r, h5py.File(tessera_file, "r") as t:
        for ds in RUBIX_DATASETS:
            if ds not in r:
                problems.append(f"{rubix_file} lacks /{ds}, which Rubix 0.0.5 reads (utils.load_galaxy_data)")
            elif "unit" not in r[ds].attrs:
                problems.append(f"{rubix_file}: /{ds} has no 'unit' attribute, which Rubix 0.0.5 reads")
        if problems:
            return problems, notes
        got = r["particles/stars/coords"].shape
        if got != (n, 3):
            problems.append(f"{rubix_file}: /particles/stars/coords has shape {got}, expected ({n}, 3)")
            return problems, notes
        if not deep:
            return problems, notes
        log_age = r["particles/stars/age"][()]
        if log_age.min() < 0 or log_age.max() > LOG_AGE_MAX:
            notes.append(f"the Rubix galaxy's log-ages span [{log_age.min():.4g}, {log_age.max():.4g}], outside "
                         f"BC03's axis [0, {LOG_AGE_MAX:.5f}]: those particles give no flux in either program")
        for ds in RUBIX_DATASETS:
            if ds == "particles/stars/age" or ds not in t:
                continue
            if not np.array_equal(t[ds][()], r[ds][()]):
                problems.append(f"/{ds} differs between {tessera_file} and {rubix_file}")
        if "particles/stars/age" in t:
            age = t["particles/stars/age"][()].astype(np.float64)
            with np.errstate(divide="ignore"):
                expect = np.log10(age * 1e9)
            dev = float(np.max(np.abs(expect - log_age))) if age.size else 0.0
            if not dev <= 1e-5:
                notes.append(f"the Rubix galaxy's ages are not log10 of Tessera's ages in yr "
                             f"(max deviation {dev:.3g})")
    return problems, notes


def euler_matrix(alpha, beta, gamma):
    """Rubix's rotation R = Rz(gamma) Ry(beta) Rx(alpha) (degrees); positions are rows, new = old @ R."""
    a, b, g = np.radians([alpha, beta, gamma])
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(g), -np.sin(g), 0], [np.sin(g), np.cos(g), 0], [0, 0, 1]])
    return rz @ ry @ rx


def add_gas(files, cells, mass_per_cell, seed, cfg_path, margin=1e-4):
    """Writes the same gas disk into every galaxy file as /particles/gas, in Rubix's fields and units.

    An exponential disk (scale length 2 kpc, height 0.15 kpc) around the galaxy's center, rotating,
    with GFM_Metals of 10 columns (hydrogen 0.74 at column 0, oxygen at column 4 for 12 + log(O/H)
    falling from 8.9 by 0.1 dex per kpc: both sides of Remy-Ruyer's broken fit). Cells within
    `margin` kpc of a spaxel edge after the config's rotation are moved 2 * margin away from it, as
    `tessera ifu-generate` moves the stars, so float32 rounding bins them alike in both programs.
    Returns the number of cells moved.
    """
    import yaml
    from astropy.cosmology import Planck15
    with open(cfg_path) as f:
        cfg = yaml.safe_load(f)
    with h5py.File(files[0], "r") as f:
        center = f["galaxy/center"][()].astype(np.float64)
    rot = cfg["galaxy"]["rotation"]
    R = euler_matrix(rot["alpha"], rot["beta"], rot["gamma"])
    # MUSE: a 5" field of 0.2" spaxels (the bench's telescope).
    kpc_arcsec = Planck15.kpc_proper_per_arcmin(cfg["galaxy"]["dist_z"]).value / 60.0
    aperture = 5.0 * kpc_arcsec
    edges = -aperture / 2 + aperture / 25 * np.arange(26)
    rng = np.random.default_rng(seed)
    r = rng.gamma(2.0, 2.0, cells)
    phi = rng.uniform(0, 2 * np.pi, cells)
    z = rng.choice([-1.0, 1.0], cells) * rng.exponential(0.15, cells)
    pos = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)
    v = 220.0 * (1 - np.exp(-r))
    vel = np.stack([-v * np.sin(phi), v * np.cos(phi), np.zeros(cells)], axis=1) + rng.normal(0, 10, (cells, 3))
    p = pos @ R
    moved = 0
    for axis in (0, 1):
        k = np.argmin(np.abs(p[:, axis, None] - edges[None, :]), axis=1)
        e = edges[k]
        near = np.abs(p[:, axis] - e) < margin
        p[near, axis] = e[near] + np.where(p[near, axis] < e[near], -2 * margin, 2 * margin)
        moved += int(near.sum())
    coords = (p @ R.T + center).astype(np.float32)
    log_oh = 8.9 - 0.1 * r + 0.05 * (rng.uniform(size=cells) - 0.5)
    h = 0.74
    o = 16 * h * 10 ** (log_oh - 12)
    metals = np.stack([np.full(cells, h), np.full(cells, 0.25), 0.1 * o, 0.03 * o, o, 0.2 * o, 0.06 * o, 0.06 * o,
                       0.1 * o, 1.8 * o], axis=1).astype(np.float32)
    fields = {
        "coords": (coords, "kpc"),
        "velocity": ((vel + np.array([120.0, -40.0, 15.0])).astype(np.float32), "km/s"),
        "mass": (np.full(cells, mass_per_cell, np.float32), "Msun"),
        "metallicity": (metals[:, 9].copy(), ""),
        "metals": (metals, ""),
        "density": ((1e7 * np.exp(-r / 1.6)).astype(np.float32), "Msun/kpc^3"),
        "internal_energy": (np.full(cells, 1e12, np.float32), "erg/g"),
        "sfr": ((1e-4 * np.exp(-r / 1.6)).astype(np.float32), "Msun/yr"),
        "electron_abundance": (np.full(cells, 1.1, np.float32), ""),
    }
    for path in files:
        with h5py.File(path, "a") as f:
            if "particles/gas" in f:
                del f["particles/gas"]
            g = f.create_group("particles/gas")
            for name, (data, unit) in fields.items():
                g.create_dataset(name, data=data).attrs["unit"] = unit
    return moved


def dusty_config_text(template):
    """The bench config as calc_dusty_ifu: Rubix loads, rotates and filters the gas only when listed."""
    text = template.replace("name: calc_ifu ", "name: calc_dusty_ifu ", 1)
    text = text.replace('particle_type: ["stars"]', 'particle_type: ["stars", "gas"]', 1)
    if "calc_dusty_ifu" not in text or '"gas"' not in text:
        raise ValueError("the config template must hold 'name: calc_ifu ' and 'particle_type: [\"stars\"]'")
    return text


def read_fits_cube(path):
    """Tessera's FITS cube as (ny, nx, nwave) float32, the layout of Rubix's cube."""
    from astropy.io import fits
    with fits.open(path, memmap=False) as hdul:
        data = hdul[0].data
        where = "primary HDU"
        if data is None:
            for i, h in enumerate(hdul[1:], 1):
                if getattr(h, "data", None) is not None and getattr(h.data, "ndim", 0) == 3:
                    data, where = h.data, f"HDU {i} (the primary HDU is empty)"
                    break
        if data is None:
            raise ValueError(f"{path} holds no 3-d image")
        if data.ndim != 3:
            raise ValueError(f"{path}: {where} has shape {data.shape}, expected (nwave, ny, nx)")
        cube = np.moveaxis(np.asarray(data, dtype=np.float32), 0, -1)
    return np.ascontiguousarray(cube), where


def compare_cubes(test, ref, tol):
    """Elementwise agreement of test with ref (both (ny, nx, nwave)).

    Relative error |t - r| / |r| over the elements with r != 0 (the goal is
    <= tol for every element); the absolute error over the elements where r is
    exactly 0; and, as context, the error relative to the brightest element of
    the same spaxel's spectrum, and the relative difference of the total flux.
    """
    if test.shape != ref.shape:
        return {"error": f"shape {list(test.shape)} differs from Rubix's {list(ref.shape)}"}
    t = test.astype(np.float64)
    r = ref.astype(np.float64)
    finite = np.isfinite(t)
    out = {"shape": list(ref.shape), "elements": int(r.size), "nonfinite": int(r.size - finite.sum())}
    diff = np.abs(t - r)
    diff[~finite] = np.inf
    nz = r != 0
    out["zero_elements"] = int(r.size - nz.sum())
    out["max_abs_err_at_zero"] = float(diff[~nz].max()) if out["zero_elements"] else 0.0
    rel = np.zeros_like(r)
    rel[nz] = diff[nz] / np.abs(r[nz])
    worst = np.unravel_index(int(np.argmax(rel)), r.shape)
    out["max_rel_err"] = float(rel[worst])
    out["worst"] = {"index_iy_ix_wave": [int(i) for i in worst], "tessera": float(t[worst]),
                    "rubix": float(r[worst])}
    out["count_above_tol"] = int(np.count_nonzero(rel > tol))
    out["mean_rel_err"] = float(rel[nz].mean()) if nz.any() else 0.0
    peak = np.abs(r).max(axis=2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        vs_peak = np.where(peak > 0, diff / peak, np.where(diff > 0, np.inf, 0.0))
    out["max_err_vs_spectrum_peak"] = float(vs_peak.max())
    out["count_above_tol_vs_spectrum_peak"] = int(np.count_nonzero(vs_peak > tol))
    tot_r = r.sum()
    out["total_flux_rel_diff"] = float(abs(t.sum() - tot_r) / abs(tot_r)) if tot_r else None
    out["negative_rubix_elements"] = int(np.count_nonzero(r < 0))
    out["passed"] = bool(out["nonfinite"] == 0 and out["count_above_tol"] == 0 and out["max_abs_err_at_zero"] == 0)
    return out


class Bench:
    def __init__(self, args):
        self.args = args
        self.errors = []
        self.notes = []
        self.ssp = None

    def env_rubix(self, n_dev):
        env = dict(os.environ)
        flags = [f for f in env.get("XLA_FLAGS", "").split()
                 if not f.startswith("--xla_force_host_platform_device_count")]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n_dev}"])
        env["JAX_PLATFORMS"] = "cpu"
        env["PYTHONWARNINGS"] = "ignore"
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        return env

    def generate(self, n, wdir, cfg):
        a = self.args
        tfile = os.path.join(wdir, "galaxy.h5")
        rdir = os.path.join(wdir, "rubix")
        rfile = os.path.join(rdir, "rubix_galaxy.h5")
        os.makedirs(rdir, exist_ok=True)
        for f in (tfile, rfile):
            if os.path.exists(f):
                os.remove(f)
        cmd = [a.tessera, "ifu-generate", "--particles", str(n), "--seed", str(a.seed), "--config", cfg,
               "--output", tfile, "--rubix-output", rfile]
        log = os.path.join(wdir, "generate.log")
        rc, wall, rss, to = run_child(cmd, log, a.timeout)
        if rc != 0 or to:
            return None, child_error(f"tessera ifu-generate ({fmt_count(n)} particles)", rc, to, a.timeout, log)
        return {"tessera_file": tfile, "rubix_file": rfile, "seconds": wall, "peak_rss_mib": rss}, None

    def run_tessera(self, n, n_dev, repeat, wdir, cfg, tag):
        a = self.args
        cube = os.path.join(wdir, f"cube_{n_dev}.fits")
        js = os.path.join(wdir, f"tessera_{n_dev}_{tag}.json")
        for f in (cube, js):
            if os.path.exists(f):
                os.remove(f)
        cmd = [a.tessera, "ifu", "--config", cfg, "--input", os.path.join(wdir, "galaxy.h5"), "--output", cube,
               "--devices", str(n_dev), "--repeat", str(repeat), "--json", js, "--no-plots", "--quiet"]
        if self.ssp:
            cmd += ["--ssp", self.ssp]  # the very file Rubix reads
        log = os.path.join(wdir, f"tessera_{n_dev}_{tag}.log")
        rc, wall, rss, to = run_child(cmd, log, a.timeout)
        what = f"tessera ifu ({fmt_count(n)} particles, {fmt_devices(n_dev)})"
        if rc != 0 or to:
            return None, child_error(what, rc, to, a.timeout, log)
        try:
            with open(js) as f:
                res = json.load(f)
            problems = []
            if res.get("particles") != n:
                problems.append(f"particles {res.get('particles')}, expected {n}")
            if res.get("devices") != n_dev:
                problems.append(f"devices {res.get('devices')}, expected {n_dev}")
            if len(res.get("steady_s", [])) != repeat - 1:
                problems.append(f"{len(res.get('steady_s', []))} steady times, expected {repeat - 1}")
            if problems:
                return None, f"{what}: its JSON says " + "; ".join(problems)
            float(res["first_s"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            return None, f"{what}: unreadable JSON {js}: {e}"
        res.update({"wall_s": wall, "peak_rss_mib_wait4": rss, "cube": cube, "log": log})
        return res, None

    def run_rubix(self, n, n_dev, repeat, wdir, cfg, tag):
        a = self.args
        cube = os.path.join(wdir, f"rubix_cube_{n_dev}.npy")
        js = os.path.join(wdir, f"rubix_{n_dev}_{tag}.json")
        for f in (cube, js):
            if os.path.exists(f):
                os.remove(f)
        cmd = [a.rubix_python, os.path.join(HERE, "rubix_run.py"), "--config", cfg, "--devices", str(n_dev),
               "--repeat", str(repeat), "--out-cube", cube, "--json", js]
        log = os.path.join(wdir, f"rubix_{n_dev}_{tag}.log")
        rc, wall, rss, to = run_child(cmd, log, a.timeout, self.env_rubix(n_dev))
        what = f"rubix ({fmt_count(n)} particles, {fmt_devices(n_dev)})"
        if rc != 0 or to:
            return None, child_error(what, rc, to, a.timeout, log)
        try:
            with open(js) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            return None, f"{what}: unreadable JSON {js}: {e}"
        if res.get("particles") != n or res.get("devices") != n_dev:
            return None, f"{what}: ran {res.get('particles')} particles on {res.get('devices')} devices"
        if not res.get("calls_identical", True):
            self.notes.append(f"{what}: the first and the last call's cubes differ")
        res.update({"wall_s": wall, "peak_rss_mib_wait4": rss, "cube": cube, "log": log})
        return res, None

    def measure(self, n, n_dev, sides, rounds, wdir, cfg, k):
        """Runs the given sides `rounds` times, alternating; returns one result row."""
        row = {"particles": n, "workload": f"{fmt_count(n)} particles", "devices": n_dev}
        runs = {s: [] for s in sides}
        for rnd in range(rounds):
            order = list(sides) if (rnd + k) % 2 == 0 else list(reversed(sides))
            for side in order:
                repeat = sides[side]
                if side == "tessera":
                    res, err = self.run_tessera(n, n_dev, repeat, wdir, cfg, f"r{rnd}")
                else:
                    res, err = self.run_rubix(n, n_dev, repeat, wdir, cfg, f"r{rnd}")
                if err:
                    self.errors.append(err)
                    row[f"{side}_error"] = err
                    print(f"  {err}", flush=True)
                else:
                    runs[side].append(res)
                    steady = statistics.median(res["steady_s"]) if res["steady_s"] else None
                    print(f"  {fmt_count(n)} particles, {fmt_devices(n_dev)}, round {rnd + 1}: "
                          f"{side} first call {fmt_time(res['first_s'])}, steady {fmt_time(steady)}, "
                          f"peak RSS {fmt_mib(res['peak_rss_mib_wait4'])}", flush=True)
        for side in sides:
            rs = runs[side]
            row[f"{side}_repeat"] = sides[side]
            row[f"{side}_runs"] = rs
            row[f"{side}_first_samples"] = [r["first_s"] for r in rs]
            row[f"{side}_steady_samples"] = [s for r in rs for s in r["steady_s"]]
            row[f"{side}_first_s"] = statistics.median(row[f"{side}_first_samples"]) if rs else None
            row[f"{side}_steady_s"] = (statistics.median(row[f"{side}_steady_samples"])
                                       if row[f"{side}_steady_samples"] else None)
            row[f"{side}_peak_rss_mib"] = max((r["peak_rss_mib_wait4"] for r in rs), default=None)
        if "tessera" in sides and "rubix" in sides:
            t, r = row["tessera_steady_s"], row["rubix_steady_s"]
            row["speedup_steady"] = r / t if t and r else None
            t, r = row["tessera_first_s"], row["rubix_first_s"]
            row["speedup_first"] = r / t if t and r else None
            if runs["tessera"] and runs["rubix"]:
                row["comparison"] = self.compare(runs["tessera"][-1], runs["rubix"][-1], n, n_dev)
        return row

    def compare(self, tres, rres, n, n_dev):
        a = self.args
        try:
            test, where = read_fits_cube(tres["cube"])
            ref = np.load(rres["cube"])
        except (OSError, ValueError) as e:
            err = f"cube comparison ({fmt_count(n)} particles, {fmt_devices(n_dev)}): {e}"
            self.errors.append(err)
            return {"error": err}
        cmp = compare_cubes(test, ref, a.tolerance)
        cmp["tessera_cube_hdu"] = where
        shape = tres.get("cube_shape")
        if shape is not None and list(shape) != list(test.shape):
            self.notes.append(f"tessera ({fmt_count(n)}, {fmt_devices(n_dev)}) reports cube_shape {shape}, "
                              f"its FITS cube is {list(test.shape)} as (ny, nx, nwave)")
        if cmp.get("error"):
            cmp["error"] = f"cube comparison ({fmt_count(n)} particles, {fmt_devices(n_dev)}): {cmp['error']}"
            self.errors.append(cmp["error"])
        elif not cmp["passed"]:
            w = cmp["worst"]
            self.errors.append(
                f"cube ({fmt_count(n)} particles, {fmt_devices(n_dev)}): max relative error {cmp['max_rel_err']:.3g} > "
                f"{a.tolerance:g} on {cmp['count_above_tol']} of {cmp['elements']} elements (worst at "
                f"[iy, ix, wave] = {w['index_iy_ix_wave']}: tessera {w['tessera']:.7g}, rubix {w['rubix']:.7g})"
                + (f"; {cmp['nonfinite']} non-finite" if cmp["nonfinite"] else "")
                + (f"; max abs error where rubix is 0: {cmp['max_abs_err_at_zero']:.3g}"
                   if cmp["max_abs_err_at_zero"] else ""))
        return cmp

    def cross_device(self, rows, side, loader):
        """The same side's cubes at different device counts: float32 summation order only."""
        out = []
        cubes = {}
        for row in rows:
            rs = row.get(f"{side}_runs") or []
            if rs:
                try:
                    cubes[row["devices"]] = loader(rs[-1]["cube"])
                except (OSError, ValueError):
                    pass
        devs = sorted(cubes)
        for d in devs[1:]:
            cmp = compare_cubes(cubes[d], cubes[devs[0]], self.args.tolerance)
            out.append({"side": side, "devices": d, "reference_devices": devs[0], **cmp})
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--tessera", default=None, help="the tessera program (default <build>/tools/tessera)")
    ap.add_argument("--rubix-python", default=sys.executable, help="python of the Rubix venv (default: this one)")
    ap.add_argument("--config", default=os.path.join(HERE, "config.yml"),
                    help="config template with output_path \"@RUBIX_GALAXY_DIR@\"")
    ap.add_argument("--particles", type=int, default=100_000, help="main case, run by both sides")
    ap.add_argument("--devices", default="1,2", help="comma-separated device counts for the main case")
    ap.add_argument("--repeat", type=int, default=5, help="pipeline calls per process (first + repeat-1 steady)")
    ap.add_argument("--rubix-repeat", type=int, default=None, help="run_sharded calls per Rubix process "
                    "(default: --repeat)")
    ap.add_argument("--rounds", type=int, default=1, help="processes per side and device count, alternating")
    ap.add_argument("--large", default="1000000,10000000", help="comma-separated sizes on the largest N "
                    "(empty: none)")
    ap.add_argument("--large-repeat", type=int, default=3, help="Tessera calls per process for --large")
    ap.add_argument("--rubix-large", action="store_true", help="also run Rubix on --large sizes up to "
                    "--rubix-max-particles (minutes per call)")
    ap.add_argument("--rubix-max-particles", type=int, default=1_000_000)
    ap.add_argument("--rubix-large-repeat", type=int, default=2, help="run_sharded calls per process for --large")
    ap.add_argument("--no-rubix", action="store_true", help="Tessera only (no timings or cubes from Rubix)")
    ap.add_argument("--dusty-particles", type=int, default=20_000, help="stars of the dusty case (calc_dusty_ifu)")
    ap.add_argument("--dusty-gas", type=int, default=4000, help="gas cells of the dusty case")
    ap.add_argument("--dusty-gas-mass", type=float, default=1e29,
                    help="Msun per gas cell (1e24 x physical, so that Rubix's A_V is of order 1)")
    ap.add_argument("--dusty-repeat", type=int, default=2, help="pipeline calls per process in the dusty case")
    ap.add_argument("--no-dusty", action="store_true", help="skip the dusty case")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--tolerance", type=float, default=1e-5, help="max relative error per cube element")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per process")
    ap.add_argument("--work", default=None, help="galaxies, cubes and logs (default <build>/bench-work/ifu)")
    ap.add_argument("--out", default=None, help="directory for ifu.json / ifu.md (default <build>/bench-results)")
    ap.add_argument("--keep-galaxies", action="store_true", help="keep the generated galaxy files")
    args = ap.parse_args()

    try:
        devices = sorted({int(d) for d in args.devices.split(",") if d.strip()})
        large = [int(float(s)) for s in args.large.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--devices and --large take comma-separated integers, got {args.devices!r} and {args.large!r}")
    if not devices or min(devices) < 1:
        ap.error(f"--devices needs counts >= 1, got {args.devices!r}")
    for name in ("repeat", "large_repeat", "rubix_large_repeat", "rounds", "particles"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if any(n < 1 for n in large):
        ap.error(f"--large sizes must be at least 1, got {args.large!r}")
    args.rubix_repeat = args.rubix_repeat or args.repeat
    args.tessera = args.tessera or os.path.join(args.build, "tools", "tessera")
    if not os.access(args.tessera, os.X_OK):
        print(f"bench_ifu.py: {args.tessera} not found; build it with "
              f"cmake --build {args.build} --target tessera_cli", file=sys.stderr)
        return 2
    args.tessera = os.path.abspath(args.tessera)
    try:
        with open(args.config) as f:
            template = f.read()
    except OSError as e:
        print(f"bench_ifu.py: cannot read the config template: {e}", file=sys.stderr)
        return 2
    if PLACEHOLDER not in template:
        print(f"bench_ifu.py: {args.config} must set output_path: {PLACEHOLDER} (the folder of the Rubix galaxy "
              f"file is filled in per galaxy size)", file=sys.stderr)
        return 2
    work = os.path.abspath(args.work or os.path.join(args.build, "bench-work", "ifu"))
    out_dir = args.out or os.path.join(args.build, "bench-results")
    os.makedirs(work, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)

    bench = Bench(args)
    nmax = devices[-1]
    info = None
    if not args.no_rubix:
        log = os.path.join(work, "rubix_info.log")
        rc, _, _, to = run_child([args.rubix_python, os.path.join(HERE, "rubix_run.py"), "--info", "--devices",
                                  str(nmax)], log, 300, bench.env_rubix(nmax))
        try:
            with open(log) as f:
                info = next(json.loads(l) for l in f if l.startswith("{"))
        except (OSError, StopIteration, ValueError):
            info = None
        if rc != 0 or to or info is None or info.get("devices") != nmax:
            print(f"bench_ifu.py: Rubix does not start on {nmax} JAX CPU devices: {tail(log)} (log: {log})",
                  file=sys.stderr)
            return 1

    if info and info.get("ssp_sha256"):
        bench.ssp = info["ssp_template"]
        bench.notes.append(f"SSP templates: both programs read {info['ssp_template']} (sha256 {info['ssp_sha256']})")
    busy_before = helpers.cpu_busy()
    started = time.time()
    against = f"Rubix {info['rubix']} (JAX {info['versions']['jax']}, CPU)" if info else "nothing (--no-rubix)"
    print(f"Tessera ifu vs {against}: {fmt_count(args.particles)} particles on "
          f"{', '.join(map(str, devices))} device(s), {args.rounds} round(s), alternating; "
          f"Tessera {args.repeat} calls, Rubix {args.rubix_repeat} calls per process", flush=True)
    if busy_before is not None and busy_before > 0.1:
        print(f"  warning: other programs keep {busy_before:.0%} of the CPUs busy before the run; "
              f"times will be noisy (both sides alike, thanks to the alternation)", flush=True)

    sizes = [(args.particles, devices, True)]
    sizes += [(n, [nmax], False) for n in large if n != args.particles]
    rows, generation, cross = [], {}, []
    for n, devs, main_case in sizes:
        with_rubix = not args.no_rubix and (main_case or (args.rubix_large and n <= args.rubix_max_particles))
        wdir = os.path.join(work, f"n{n}")
        os.makedirs(wdir, exist_ok=True)
        cfg = os.path.join(wdir, "config.yml")
        write_config(template, os.path.join(wdir, "rubix"), cfg)
        gen, err = bench.generate(n, wdir, cfg)
        if not err:
            problems, gnotes = check_galaxies(gen["tessera_file"], gen["rubix_file"], n, deep=with_rubix)
            bench.notes += [f"{fmt_count(n)} particles: {x}" for x in gnotes]
            if problems:
                err = f"tessera ifu-generate ({fmt_count(n)} particles): " + "; ".join(problems)
        if err:
            bench.errors.append(err)
            print(f"  {err}", flush=True)
            rows += [{"particles": n, "workload": f"{fmt_count(n)} particles", "devices": d, "tessera_error": err}
                     for d in devs]
            continue
        generation[n] = gen
        print(f"  generated {fmt_count(n)} particles in {gen['seconds']:.1f} s", flush=True)
        size_rows = []
        for k, d in enumerate(devs):
            sides = {"tessera": args.repeat if main_case else args.large_repeat}
            if with_rubix:
                sides["rubix"] = args.rubix_repeat if main_case else args.rubix_large_repeat
            size_rows.append(bench.measure(n, d, sides, args.rounds if main_case else 1, wdir, cfg, k))
        rows += size_rows
        if len(devs) > 1:
            cross += bench.cross_device(size_rows, "tessera", lambda p: read_fits_cube(p)[0])
            if with_rubix:
                cross += bench.cross_device(size_rows, "rubix", np.load)
        if not args.keep_galaxies:
            for f in (gen["tessera_file"], gen["rubix_file"]):
                if os.path.exists(f):
                    os.remove(f)
    if not args.no_dusty:
        n = args.dusty_particles
        wdir = os.path.join(work, f"dusty_n{n}")
        os.makedirs(wdir, exist_ok=True)
        cfg = os.path.join(wdir, "config.yml")
        write_config(dusty_config_text(template), os.path.join(wdir, "rubix"), cfg)
        gen, err = bench.generate(n, wdir, cfg)
        if not err:
            moved = add_gas([gen["tessera_file"], gen["rubix_file"]], args.dusty_gas, args.dusty_gas_mass,
                            args.seed + 1, cfg)
            bench.notes.append(f"dusty case: {fmt_count(n)} stars and {args.dusty_gas} gas cells of "
                               f"{args.dusty_gas_mass:g} Msun ({moved} moved off spaxel edges), calc_dusty_ifu, "
                               f"1 device (Rubix's A_V is per shard)")
            sides = {"tessera": args.dusty_repeat}
            if not args.no_rubix:
                sides["rubix"] = args.dusty_repeat
            row = bench.measure(n, 1, sides, 1, wdir, cfg, 0)
            row["workload"] = f"{fmt_count(n)} particles, dusty"
            rows.append(row)
        else:
            bench.errors.append(err)
            print(f"  {err}", flush=True)
    elapsed = time.time() - started
    busy_after = helpers.cpu_busy()

    def cell(row, side, key, fmt):
        if row.get(f"{side}_error") and row.get(f"{side}_{key}") is None:
            return "error"
        return fmt(row.get(f"{side}_{key}"))

    def ratio(v):
        return "–" if v is None else f"{v:.0f}x" if v >= 100 else f"{v:.1f}x"

    header = ["workload", "N", "Tessera first", "Tessera steady", "Rubix first", "Rubix steady",
              "speed-up steady", "speed-up first", "Tessera RSS", "Rubix RSS", "max rel err"]
    lines = [[r["workload"], str(r["devices"]),
              cell(r, "tessera", "first_s", fmt_time), cell(r, "tessera", "steady_s", fmt_time),
              cell(r, "rubix", "first_s", fmt_time), cell(r, "rubix", "steady_s", fmt_time),
              ratio(r.get("speedup_steady")), ratio(r.get("speedup_first")),
              cell(r, "tessera", "peak_rss_mib", fmt_mib), cell(r, "rubix", "peak_rss_mib", fmt_mib),
              fmt_err(r.get("comparison"), args.tolerance)] for r in rows]
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
    print()
    print("  ".join(h.ljust(widths[i]) for i, h in enumerate(header)))
    for l in lines:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(l)))

    notes = [
        f"first: the first pipeline call of a fresh process (Tessera: everything included; Rubix: "
        f"run_sharded's trace, compile and run, after prepare_data). steady: median of the later calls "
        f"(Tessera {args.repeat - 1} per process at the main size, {args.large_repeat - 1} at the large ones; Rubix "
        f"{args.rubix_repeat - 1}: run_sharded re-jits on every call, so its steady calls include that, as a "
        f"user pays it). speed-up: Rubix time over Tessera time. RSS: peak resident memory of each process "
        f"(wait4), Rubix's including Python and JAX.",
        f"max rel err: max over cube elements of |tessera - rubix| / |rubix| (elements where Rubix is exactly 0 "
        f"must match exactly), same N on both sides, goal <= {args.tolerance:g}; the count of elements above it "
        f"in parentheses.",
        "galaxy: `tessera ifu-generate --seed " + str(args.seed) + "`; the copy Rubix reads holds log10(age/yr) "
        "as its ages, because Rubix 0.0.5 looks ages up in Gyr on BC03's log10(age/yr) axis; both programs "
        "therefore look up the same template ages.",
    ]
    for c in cross:
        if c.get("error"):
            continue
        notes.append(f"{c['side']} alone, {c['devices']} vs {fmt_devices(c['reference_devices'])} (same program, so "
                     f"only the summation order differs): max rel err {c['max_rel_err']:.2g}, {c['count_above_tol']} elements above "
                     f"{args.tolerance:g}")
        if c["side"] == "rubix" and c["count_above_tol"]:
            notes.append("so Rubix's own cube changes by more than the per-element goal with the device count "
                         "alone; such elements are typically near a zero crossing of a spectrum (the cubic "
                         "interpolation makes some templates negative), where cancellation leaves float32 "
                         "summation order to decide the leading digits")
    for r in rows:
        c = r.get("comparison")
        if c and not c.get("error"):
            notes.append(f"{r['workload']}, N={r['devices']}: max error relative to the spaxel's spectrum peak "
                         f"{c['max_err_vs_spectrum_peak']:.2g} ({c['count_above_tol_vs_spectrum_peak']} elements "
                         f"above {args.tolerance:g}), total flux differs by {c['total_flux_rel_diff']:.2g}"
                         + (f", {c['negative_rubix_elements']} negative Rubix elements"
                            if c["negative_rubix_elements"] else ""))
    for n, g in generation.items():
        notes.append(f"generating {fmt_count(n)} particles (both files): {g['seconds']:.1f} s")
    notes += bench.notes
    notes += [f"error: {e}" for e in bench.errors]
    for note in notes:
        print("  " + note)
    if busy_before is not None and busy_after is not None:
        print(f"CPU busy with other programs: {busy_before:.0%} before, {busy_after:.0%} after the run")

    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(c.replace("|", "\\|") for c in l) + " |" for l in lines]
    md_path = os.path.join(out_dir, "ifu.md")
    with open(md_path, "w") as f:
        f.write("\n".join(md) + "\n\n" + "\n".join(f"- {x}" for x in notes) + "\n")
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "args": vars(args), "devices": devices, "seed": args.seed,
        "tolerance": args.tolerance, "rubix": info, "tessera": args.tessera, "config_template": template,
        "machine": helpers.machine_description(), "elapsed_seconds": elapsed,
        "cpu_busy_before": busy_before, "cpu_busy_after": busy_after, "loadavg_after": os.getloadavg(),
        "generation": {str(n): g for n, g in generation.items()}, "results": rows, "cross_device": cross,
        "notes": notes, "errors": bench.errors, "passed": not bench.errors,
    }
    json_path = os.path.join(out_dir, "ifu.json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {json_path} and {md_path} ({elapsed:.0f} s)")
    return 1 if bench.errors else 0


if __name__ == "__main__":
    sys.exit(main())
