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

Gradient case (--grad-particles, 10^5 by default; --no-grad skips it): the
generated galaxy against the `tessera ifu` cube of a copy whose ages and
metallicities are multiplied by exp(--grad-perturb N(0,1)); `tessera ifu-grad
--loss nll --snr --grad-snr` and `tessera ifu` on the generated galaxy
alternate on every device count (--grad-rounds processes of --grad-repeat
calls each), giving the ratios of steady time and peak RSS (goals: 3x, 1.5x).
Then rubix_grad.py takes jax.value_and_grad of Rubix's sharded pipeline with
the same loss w.r.t. log10(age/yr) and metallicity (--no-rubix-grad skips
it); its gradients, chain-ruled to d/d(age in Gyr), are compared with
Tessera's per particle.

Fit case (--fit-particles, 10^4; --no-fit skips it): `tessera ifu-fit
--params age,metallicity --steps --fit-steps` with each of --fit-optimizers,
from perturbed ages and metallicities to the cube of the generated galaxy:
time, start and final loss, the loss at the truth, and how far the fitted
fields are from the true ones.

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


def perturb_galaxy(src, dst, sigma, seed, rubix_dst=None, rubix_src=None):
    """Copies galaxy src to dst with every age and metallicity multiplied by exp(sigma N(0, 1)).

    Ages are kept in [0.01, 13] Gyr and metallicities in [1e-4, 0.05] (BC03's
    range). With rubix_src/rubix_dst, the Rubix copy gets the same values, its
    ages as log10(age/yr) (as `tessera ifu-generate --rubix-output` writes them).
    Returns the median |log(perturbed / original)| of the ages and metallicities.
    """
    import shutil
    shutil.copyfile(src, dst)
    rng = np.random.default_rng(seed)
    with h5py.File(dst, "a") as f:
        age = f["particles/stars/age"][()].astype(np.float64)
        z = f["particles/stars/metallicity"][()].astype(np.float64)
        age_p = np.clip(age * np.exp(sigma * rng.standard_normal(age.size)), 0.01, 13.0).astype(np.float32)
        z_p = np.clip(z * np.exp(sigma * rng.standard_normal(z.size)), 1e-4, 0.05).astype(np.float32)
        f["particles/stars/age"][...] = age_p
        f["particles/stars/metallicity"][...] = z_p
    if rubix_dst:
        shutil.copyfile(rubix_src, rubix_dst)
        with h5py.File(rubix_dst, "a") as f:
            f["particles/stars/age"][...] = np.log10(age_p.astype(np.float64) * 1e9).astype(np.float32)
            f["particles/stars/metallicity"][...] = z_p
    with np.errstate(divide="ignore", invalid="ignore"):
        return (float(np.median(np.abs(np.log(age_p / age)))), float(np.median(np.abs(np.log(z_p / z)))))


def mem_available_mib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


def galaxy_fields(path, names=("age", "metallicity")):
    with h5py.File(path, "r") as f:
        return {k: f[f"particles/stars/{k}"][()].astype(np.float64) for k in names}


def compare_gradient(test, ref):
    """Per-particle agreement of two gradients of one field (test: Tessera's, ref: JAX's).

    Over the particles where both are finite and non-zero: the median, 99th
    percentile and max of |t - r| / |t|, the largest |t - r| relative to the
    field's RMS gradient (so that particles whose gradient nearly cancels do
    not dominate), and the correlation; plus how many are zero in one only.
    """
    t = np.asarray(test, np.float64)
    r = np.asarray(ref, np.float64)
    fin = np.isfinite(t) & np.isfinite(r)
    both = fin & (t != 0) & (r != 0)
    out = {"particles": int(t.size), "compared": int(both.sum()), "nonfinite": int(t.size - fin.sum()),
           "zero_in_both": int(np.count_nonzero(fin & (t == 0) & (r == 0))),
           "zero_in_one_only": int(np.count_nonzero(fin & ((t == 0) != (r == 0))))}
    if not both.any():
        return out
    tb, rb = t[both], r[both]
    rel = np.abs(tb - rb) / np.abs(tb)
    rms = float(np.sqrt(np.mean(tb * tb)))
    out.update({"median_rel_diff": float(np.median(rel)), "p99_rel_diff": float(np.percentile(rel, 99)),
                "max_rel_diff": float(rel.max()), "max_diff_vs_rms": float(np.abs(tb - rb).max() / rms),
                "p99_diff_vs_rms": float(np.percentile(np.abs(tb - rb), 99) / rms),
                "correlation": float(np.corrcoef(tb, rb)[0, 1]), "sign_differs": int(np.count_nonzero(
                    np.sign(tb) != np.sign(rb)))})
    # The worst 1%: are they particles whose gradient is small (a sum that cancels)?
    worst = rel >= np.percentile(rel, 99)
    out["median_abs_grad_of_worst_1pct_vs_rms"] = float(np.median(np.abs(tb[worst])) / rms)
    out["median_abs_grad_vs_rms"] = float(np.median(np.abs(tb)) / rms)
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

    def run_json_child(self, cmd, outputs, log, what, check, env=None, oom_hint=False):
        """Runs a child that writes its results as JSON (the last of `outputs`, which are removed first).

        check(res) returns a problem (text) or None; a KeyError, ValueError or TypeError in it counts as
        an unreadable JSON. Returns (res with wall_s, peak_rss_mib_wait4 and log added, None), or
        (None, the error)."""
        a = self.args
        js = outputs[-1]
        for f in outputs:
            if os.path.exists(f):
                os.remove(f)
        rc, wall, rss, to = run_child(cmd, log, a.timeout, env)
        if rc != 0 or to:
            err = child_error(what, rc, to, a.timeout, log)
            if oom_hint and rc == -signal.SIGKILL and not to:
                err += " (killed: out of memory?)"
            return None, err
        try:
            with open(js) as f:
                res = json.load(f)
            problem = check(res)
        except (OSError, ValueError, KeyError, TypeError) as e:
            return None, f"{what}: unreadable JSON {js}: {e}"
        if problem:
            return None, f"{what}: {problem}"
        res.update({"wall_s": wall, "peak_rss_mib_wait4": rss, "log": log})
        return res, None

    def tessera_cmd(self, *args):
        """The tessera program with `args`, reading the very templates Rubix reads."""
        return [self.args.tessera, *args] + (["--ssp", self.ssp] if self.ssp else [])

    @staticmethod
    def check_counts(res, n, n_dev, repeat=None):
        """What a timing JSON must say: its particles, devices and (with repeat) steady times."""
        problems = []
        if res.get("particles") != n:
            problems.append(f"particles {res.get('particles')}, expected {n}")
        if n_dev is not None and res.get("devices") != n_dev:
            problems.append(f"devices {res.get('devices')}, expected {n_dev}")
        if repeat is not None and len(res.get("steady_s", [])) != repeat - 1:
            problems.append(f"{len(res.get('steady_s', []))} steady times, expected {repeat - 1}")
        if repeat is not None:
            float(res["first_s"])
        return "its JSON says " + "; ".join(problems) if problems else None

    def run_tessera(self, n, n_dev, repeat, wdir, cfg, tag):
        cube = os.path.join(wdir, f"cube_{n_dev}.fits")
        js = os.path.join(wdir, f"tessera_{n_dev}_{tag}.json")
        cmd = self.tessera_cmd("ifu", "--config", cfg, "--input", os.path.join(wdir, "galaxy.h5"), "--output", cube,
                               "--devices", str(n_dev), "--repeat", str(repeat), "--json", js, "--no-plots",
                               "--quiet")
        res, err = self.run_json_child(cmd, [cube, js], os.path.join(wdir, f"tessera_{n_dev}_{tag}.log"),
                                       f"tessera ifu ({fmt_count(n)} particles, {fmt_devices(n_dev)})",
                                       lambda r: self.check_counts(r, n, n_dev, repeat))
        if res:
            res["cube"] = cube
        return res, err

    def run_rubix(self, n, n_dev, repeat, wdir, cfg, tag):
        a = self.args
        cube = os.path.join(wdir, f"rubix_cube_{n_dev}.npy")
        js = os.path.join(wdir, f"rubix_{n_dev}_{tag}.json")
        cmd = [a.rubix_python, os.path.join(HERE, "rubix_run.py"), "--config", cfg, "--devices", str(n_dev),
               "--repeat", str(repeat), "--out-cube", cube, "--json", js]
        what = f"rubix ({fmt_count(n)} particles, {fmt_devices(n_dev)})"
        res, err = self.run_json_child(cmd, [cube, js], os.path.join(wdir, f"rubix_{n_dev}_{tag}.log"), what,
                                       lambda r: self.check_counts(r, n, n_dev), env=self.env_rubix(n_dev))
        if res:
            res["cube"] = cube
            if not res.get("calls_identical", True):
                self.notes.append(f"{what}: the first and the last call's cubes differ")
        return res, err

    def run_tessera_grad(self, n, n_dev, repeat, wdir, cfg, tag):
        """`tessera ifu-grad --loss nll --snr S` of wdir/galaxy.h5 against wdir/observed.fits."""
        out = os.path.join(wdir, f"grad_{n_dev}.h5")
        js = os.path.join(wdir, f"grad_{n_dev}_{tag}.json")
        cmd = self.tessera_cmd("ifu-grad", "--config", cfg, "--input", os.path.join(wdir, "galaxy.h5"), "--observed",
                               os.path.join(wdir, "observed.fits"), "--loss", "nll", "--snr", str(self.args.grad_snr),
                               "--output", out, "--devices", str(n_dev), "--repeat", str(repeat), "--json", js,
                               "--quiet")
        def check(r):
            float(r["loss"])
            return self.check_counts(r, n, n_dev, repeat)
        res, err = self.run_json_child(cmd, [out, js], os.path.join(wdir, f"grad_{n_dev}_{tag}.log"),
                                       f"tessera ifu-grad ({fmt_count(n)} particles, {fmt_devices(n_dev)})", check)
        if res:
            res["gradient_file"] = out
        return res, err

    def run_rubix_grad(self, n, n_dev, repeat, wdir, cfg, tag):
        """rubix_grad.py: jax.value_and_grad of Rubix's sharded pipeline and the same nll loss."""
        a = self.args
        out = os.path.join(wdir, f"rubix_grad_{n_dev}.npz")
        js = os.path.join(wdir, f"rubix_grad_{n_dev}_{tag}.json")
        cmd = [a.rubix_python, os.path.join(HERE, "rubix_grad.py"), "--config", cfg, "--devices", str(n_dev),
               "--repeat", str(repeat), "--observed", os.path.join(wdir, "observed.npy"), "--snr", str(a.grad_snr),
               "--out-grad", out, "--json", js]
        res, err = self.run_json_child(
            cmd, [out, js], os.path.join(wdir, f"rubix_grad_{n_dev}_{tag}.log"),
            f"JAX value_and_grad through Rubix ({fmt_count(n)} particles, {fmt_devices(n_dev)})",
            lambda r: self.check_counts(r, n, n_dev), env=self.env_rubix(n_dev), oom_hint=True)
        if res:
            res["gradient_file"] = out
        return res, err

    def run_fit(self, n, n_dev, optimizer, wdir, cfg):
        """`tessera ifu-fit` of wdir/start.h5 to wdir/observed.fits; returns its JSON and the fitted file."""
        a = self.args
        out = os.path.join(wdir, f"fitted_{optimizer}.h5")
        js = os.path.join(wdir, f"fit_{optimizer}.json")
        cmd = self.tessera_cmd("ifu-fit", "--config", cfg, "--input", os.path.join(wdir, "start.h5"), "--observed",
                               os.path.join(wdir, "observed.fits"), "--loss", "nll", "--snr", str(a.grad_snr),
                               "--params", "age,metallicity", "--steps", str(a.fit_steps), "--optimizer", optimizer,
                               "--output", out, "--devices", str(n_dev), "--json", js, "--no-plots", "--quiet")
        if optimizer in a.fit_lr:
            cmd += ["--lr", str(a.fit_lr[optimizer])]

        def check(r):
            losses = [float(x) for x in r["losses"]]
            float(r["seconds"])
            return None if r.get("particles") == n and losses else \
                f"its JSON says {r.get('particles')} particles, {len(losses)} losses"
        res, err = self.run_json_child(
            cmd, [out, js], os.path.join(wdir, f"fit_{optimizer}.log"),
            f"tessera ifu-fit --optimizer {optimizer} ({fmt_count(n)} particles, {fmt_devices(n_dev)})", check)
        if res:
            res.update({"fitted": out, "command": " ".join(cmd)})
        return res, err

    def measure(self, n, n_dev, sides, rounds, wdir, cfg, k, runners=None):
        """Runs the given sides `rounds` times, alternating; returns one result row.

        runners maps a side to its run_* method (default: tessera and rubix)."""
        runners = runners or {"tessera": self.run_tessera, "rubix": self.run_rubix}
        row = {"particles": n, "workload": f"{fmt_count(n)} particles", "devices": n_dev}
        runs = {s: [] for s in sides}
        for rnd in range(rounds):
            order = list(sides) if (rnd + k) % 2 == 0 else list(reversed(sides))
            for side in order:
                repeat = sides[side]
                res, err = runners[side](n, n_dev, repeat, wdir, cfg, f"r{rnd}")
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


def run_observed(bench, n, n_dev, wdir, cfg, galaxy, name):
    """`tessera ifu` (noise off in the bench config) of galaxy: wdir/observed.fits and .npy (ny, nx, nwave)."""
    a = bench.args
    cube = os.path.join(wdir, "observed.fits")
    if os.path.exists(cube):
        os.remove(cube)
    cmd = [a.tessera, "ifu", "--config", cfg, "--input", galaxy, "--output", cube, "--devices", str(n_dev),
           "--no-plots", "--quiet"]
    if bench.ssp:
        cmd += ["--ssp", bench.ssp]
    log = os.path.join(wdir, "observed.log")
    rc, _, _, to = run_child(cmd, log, a.timeout)
    if rc != 0 or to:
        return child_error(f"tessera ifu ({name}, {fmt_count(n)} particles: the observed cube)", rc, to, a.timeout,
                           log)
    try:
        np.save(os.path.join(wdir, "observed.npy"), read_fits_cube(cube)[0])
    except (OSError, ValueError) as e:
        return f"observed cube {cube}: {e}"
    return None


def gradient_case(bench, template, devices, work):
    """value_and_grad of the nll loss w.r.t. every particle field against the forward pipeline, and JAX's.

    The model is the generated galaxy; the observed cube is `tessera ifu` of the
    same galaxy with its ages and metallicities perturbed (--grad-perturb).
    For every device count, `tessera ifu` and `tessera ifu-grad` alternate
    (--grad-rounds processes each, --grad-repeat calls per process); then, on
    --rubix-grad-devices, jax.value_and_grad of Rubix's sharded pipeline
    (rubix_grad.py), whose gradients are compared with Tessera's per particle.
    """
    a = bench.args
    n = a.grad_particles
    wdir = os.path.join(work, f"grad_n{n}")
    os.makedirs(wdir, exist_ok=True)
    cfg = os.path.join(wdir, "config.yml")
    write_config(template, os.path.join(wdir, "rubix"), cfg)
    out = {"particles": n, "snr": a.grad_snr, "perturb_sigma": a.grad_perturb, "rows": []}
    gen, err = bench.generate(n, wdir, cfg)
    if not err:
        problems, _ = check_galaxies(gen["tessera_file"], gen["rubix_file"], n, deep=False)
        if problems:
            err = "; ".join(problems)
    if err:
        bench.errors.append(err)
        out["error"] = err
        print(f"  {err}", flush=True)
        return out
    perturbed = os.path.join(wdir, "perturbed.h5")
    out["perturbation_median_abs_log"] = perturb_galaxy(gen["tessera_file"], perturbed, a.grad_perturb, a.seed + 2)
    err = run_observed(bench, n, devices[-1], wdir, cfg, perturbed, "gradient case")
    if err:
        bench.errors.append(err)
        out["error"] = err
        print(f"  {err}", flush=True)
        return out
    print(f"  gradient case: {fmt_count(n)} particles; observed cube of the galaxy with ages and metallicities "
          f"perturbed by exp({a.grad_perturb:g} N(0,1)); nll loss, var = (|observed| / {a.grad_snr:g})^2", flush=True)
    runners = {"forward": bench.run_tessera, "gradient": bench.run_tessera_grad}
    grad_files = {}
    for k, d in enumerate(devices):
        row = bench.measure(n, d, {"forward": a.grad_repeat, "gradient": a.grad_repeat}, a.grad_rounds, wdir, cfg, k,
                            runners)
        row["workload"] = f"{fmt_count(n)} particles, value_and_grad"
        f, g = row.get("forward_steady_s"), row.get("gradient_steady_s")
        row["time_ratio"] = g / f if f and g else None
        f, g = row.get("forward_peak_rss_mib"), row.get("gradient_peak_rss_mib")
        row["rss_ratio"] = g / f if f and g else None
        row["time_goal_met"] = row["time_ratio"] is not None and row["time_ratio"] <= a.grad_time_goal
        row["rss_goal_met"] = row["rss_ratio"] is not None and row["rss_ratio"] <= a.grad_rss_goal
        if row.get("gradient_runs"):
            row["loss"] = row["gradient_runs"][-1]["loss"]
            grad_files[d] = row["gradient_runs"][-1]["gradient_file"]
        out["rows"].append(row)
        if row["time_ratio"] is not None and row["rss_ratio"] is not None:
            print(f"  {fmt_devices(d)}: gradient / forward: time {row['time_ratio']:.2f}x (goal <= "
                  f"{a.grad_time_goal:g}x: {'met' if row['time_goal_met'] else 'MISSED'}), peak memory "
                  f"{row['rss_ratio']:.2f}x (goal <= {a.grad_rss_goal:g}x: "
                  f"{'met' if row['rss_goal_met'] else 'MISSED'})", flush=True)
    # Tessera's gradients on every device count: bitwise the same?
    fields = ("age", "metallicity", "mass", "velocity", "coords")
    if len(grad_files) > 1:
        ref_d = min(grad_files)
        ref = galaxy_fields(grad_files[ref_d], fields)
        for d in sorted(grad_files)[1:]:
            other = galaxy_fields(grad_files[d], fields)
            same = {k: bool(np.array_equal(ref[k], other[k], equal_nan=True)) for k in fields}
            out.setdefault("cross_device", []).append({"devices": d, "reference_devices": ref_d, "bitwise": same})
    if a.no_rubix or a.no_rubix_grad:
        return out
    d = a.rubix_grad_devices or devices[-1]
    # JAX's reverse mode through Rubix's lax.scan over the particles keeps every
    # step's residuals: about 0.13 MiB per particle (13.3 GiB at 10^5).
    need_mib = 1500 + 0.135 * n
    avail_mib = mem_available_mib()
    if avail_mib is not None and need_mib > avail_mib:
        err = (f"JAX value_and_grad through Rubix ({fmt_count(n)} particles) skipped: it needs about "
               f"{fmt_mib(need_mib)} (0.13 MiB per particle for the residuals of Rubix's scan over the particles), "
               f"{fmt_mib(avail_mib)} are available; try --grad-particles {int((avail_mib - 1500) / 0.135) // 1000 * 1000}")
        bench.notes.append(f"gradient case: {err}")
        out["rubix_error"] = err
        print(f"  {err}", flush=True)
        return out
    res, err = bench.run_rubix_grad(n, d, a.rubix_grad_repeat, wdir, cfg, "r0")
    if err:
        bench.notes.append(f"gradient case: {err}")
        out["rubix_error"] = err
        print(f"  {err}", flush=True)
        return out
    steady = statistics.median(res["steady_s"]) if res["steady_s"] else None
    print(f"  {fmt_count(n)} particles, {fmt_devices(d)}: JAX value_and_grad through Rubix first call "
          f"{fmt_time(res['first_s'])}, steady {fmt_time(steady)}, peak RSS {fmt_mib(res['peak_rss_mib_wait4'])}",
          flush=True)
    rubix = {"devices": d, "run": res, "first_s": res["first_s"], "steady_s": steady,
             "peak_rss_mib": res["peak_rss_mib_wait4"], "loss": res["loss"]}
    trow = next((r for r in out["rows"] if r["devices"] == d), None)
    if trow and trow.get("gradient_steady_s") and steady:
        rubix["speedup_steady"] = steady / trow["gradient_steady_s"]
        rubix["speedup_first"] = res["first_s"] / trow["gradient_first_s"]
    tfile = grad_files.get(d) or (grad_files and grad_files[max(grad_files)])
    if tfile:
        try:
            t = galaxy_fields(tfile)
            ages = galaxy_fields(gen["tessera_file"])["age"]
            r = np.load(res["gradient_file"])
            # Rubix reads log10(age/yr): d/d(age in Gyr) = d/dlog10(age/yr) / (age ln 10).
            r_age = r["grad_log_age"].astype(np.float64) / (ages * np.log(10.0))
            rubix["compare"] = {"age": compare_gradient(t["age"], r_age),
                                "metallicity": compare_gradient(t["metallicity"], r["grad_metallicity"])}
            tl = trow["loss"] if trow else None
            rubix["tessera_loss"] = tl
            rubix["loss_rel_diff"] = abs(res["loss"] - tl) / abs(tl) if tl else None
        except (OSError, ValueError, KeyError) as e:
            bench.notes.append(f"gradient comparison: {e}")
    out["rubix"] = rubix
    return out


def fit_case(bench, template, n_dev, work):
    """`tessera ifu-fit --params age,metallicity` from perturbed ages and metallicities, per optimiser."""
    a = bench.args
    n = a.fit_particles
    wdir = os.path.join(work, f"fit_n{n}")
    os.makedirs(wdir, exist_ok=True)
    cfg = os.path.join(wdir, "config.yml")
    write_config(template, os.path.join(wdir, "rubix"), cfg)
    out = {"particles": n, "devices": n_dev, "steps": a.fit_steps, "snr": a.grad_snr, "perturb_sigma": a.grad_perturb,
           "runs": []}
    gen, err = bench.generate(n, wdir, cfg)
    err = err or run_observed(bench, n, n_dev, wdir, cfg, os.path.join(wdir, "galaxy.h5"), "fit case")
    if err:
        bench.errors.append(err)
        out["error"] = err
        print(f"  {err}", flush=True)
        return out
    start = os.path.join(wdir, "start.h5")
    perturb_galaxy(gen["tessera_file"], start, a.grad_perturb, a.seed + 3)
    truth = galaxy_fields(gen["tessera_file"])
    begin = galaxy_fields(start)

    def off(fields):
        return {k: float(np.median(np.abs(np.log(fields[k] / truth[k])))) for k in ("age", "metallicity")}

    out["start_median_abs_log_error"] = off(begin)
    # The loss at the truth (the observed galaxy itself): the lowest a fit can reach.
    res, err = bench.run_tessera_grad(n, n_dev, 1, wdir, cfg, "truth")
    if not err:
        out["loss_at_truth"] = res["loss"]
    print(f"  fit case: {fmt_count(n)} particles, {fmt_devices(n_dev)}, {a.fit_steps} steps of age and "
          f"metallicity from values perturbed by exp({a.grad_perturb:g} N(0,1)) to the cube of the true galaxy"
          + (f" (loss at the truth {out['loss_at_truth']:.7g})" if "loss_at_truth" in out else ""), flush=True)
    for opt in a.fit_optimizers:
        res, err = bench.run_fit(n, n_dev, opt, wdir, cfg)
        if err:
            bench.errors.append(err)
            out["runs"].append({"optimizer": opt, "error": err})
            print(f"  {err}", flush=True)
            continue
        fitted = galaxy_fields(res["fitted"])
        run = {"optimizer": opt, "seconds": res["seconds"], "wall_s": res["wall_s"],
               "peak_rss_mib": res["peak_rss_mib_wait4"], "steps": res.get("steps"), "start_loss": res["losses"][0],
               "final_loss": res["losses"][-1], "min_loss": min(res["losses"]), "losses": res["losses"],
               "median_abs_log_error": off(fitted), "command": res["command"]}
        if "loss_at_truth" in out:
            lt = out["loss_at_truth"]
            gap0 = run["start_loss"] - lt
            run["excess_loss_fraction_left"] = (run["final_loss"] - lt) / gap0 if gap0 else None
        out["runs"].append(run)
        print(f"  ifu-fit {opt}: {run['steps']} steps in {fmt_time(run['seconds'])} (process {fmt_time(res['wall_s'])}, "
              f"peak RSS {fmt_mib(run['peak_rss_mib'])}): loss {run['start_loss']:.7g} -> {run['final_loss']:.7g}",
              flush=True)
    return out


def gradient_tables(grad, args):
    """The gradient case as (header, lines, notes) for the printout and ifu.md."""
    if not grad or not grad.get("rows"):
        return [], [], ([f"gradient case: {grad['error']}"] if grad and grad.get("error") else [])

    def t(v):
        return "–" if v is None else fmt_time(v)

    def x(v):
        return "–" if v is None else f"{v:.2f}x"

    header = ["workload", "N", "forward first", "forward steady", "gradient first", "gradient steady",
              "time ratio", "forward RSS", "gradient RSS", "RSS ratio"]
    lines = []
    for r in grad["rows"]:
        lines.append([f"{fmt_count(r['particles'])}, Tessera", str(r["devices"]), t(r.get("forward_first_s")),
                      t(r.get("forward_steady_s")), t(r.get("gradient_first_s")), t(r.get("gradient_steady_s")),
                      x(r.get("time_ratio")), fmt_mib(r.get("forward_peak_rss_mib")),
                      fmt_mib(r.get("gradient_peak_rss_mib")), x(r.get("rss_ratio"))])
    rb = grad.get("rubix")
    if rb:
        lines.append([f"{fmt_count(grad['particles'])}, JAX through Rubix", str(rb["devices"]), "–", "–",
                      t(rb["first_s"]), t(rb["steady_s"]), "–", "–", fmt_mib(rb["peak_rss_mib"]), "–"])
    notes = [f"value_and_grad of the nll loss (var = (|observed| / {args.grad_snr:g})^2) w.r.t. every particle field "
             f"(`tessera ifu-grad`) against the forward pipeline (`tessera ifu`) on the same galaxy, alternating, "
             f"{args.grad_rounds} processes each of {args.grad_repeat} calls; steady: median of the later calls; RSS: "
             f"peak of the processes (wait4). Goals: time ratio <= {args.grad_time_goal:g}x, RSS ratio <= "
             f"{args.grad_rss_goal:g}x."]
    for r in grad["rows"]:
        if r.get("time_ratio") is not None and r.get("rss_ratio") is not None:
            notes.append(f"{fmt_devices(r['devices'])}: time goal {'met' if r['time_goal_met'] else 'missed'}, "
                         f"memory goal {'met' if r['rss_goal_met'] else 'missed'}")
    for c in grad.get("cross_device", []):
        same = [k for k, v in c["bitwise"].items() if v]
        notes.append(f"Tessera's gradients on {c['devices']} vs {fmt_devices(c['reference_devices'])}: bitwise equal "
                     f"for {', '.join(same) or 'no field'}"
                     + (f"; differ for {', '.join(k for k, v in c['bitwise'].items() if not v)}"
                        if len(same) < len(c["bitwise"]) else ""))
    if rb:
        notes.append(f"JAX through Rubix: jax.jit(jax.value_and_grad) of Rubix's sharded pipeline w.r.t. log10(age/yr) "
                     f"and metallicity with the same loss (rubix_grad.py), {args.rubix_grad_repeat} calls; first: trace, "
                     f"compile and run" + (f"; Tessera's gradient is {rb['speedup_steady']:.0f}x faster steady, "
                                           f"{rb['speedup_first']:.0f}x on the first call"
                                           if rb.get("speedup_steady") else ""))
        if rb.get("loss_rel_diff") is not None:
            notes.append(f"loss: Tessera {rb['tessera_loss']:.9g}, JAX {rb['loss']:.9g} (relative difference "
                         f"{rb['loss_rel_diff']:.2g})")
        for k, c in (rb.get("compare") or {}).items():
            if "median_rel_diff" not in c:
                continue
            notes.append(f"d loss / d {k}" + (" (in Gyr; JAX's chain-ruled from log10(age/yr))" if k == "age" else "")
                         + f" over the {c['compared']} particles where both are non-zero: relative "
                         f"difference median {c['median_rel_diff']:.2g}, 99th percentile {c['p99_rel_diff']:.2g}, "
                         f"max {c['max_rel_diff']:.2g}; max difference / RMS gradient {c['max_diff_vs_rms']:.2g}; "
                         f"correlation {c['correlation']:.12f}; {c['sign_differs']} signs differ; "
                         f"{c['zero_in_both']} zero in both (outside the field of view), {c['zero_in_one_only']} "
                         f"in one only")
    elif grad.get("rubix_error"):
        notes.append(f"JAX through Rubix: {grad['rubix_error']}")
    return header, lines, notes


def fit_table(fit, args):
    if not fit or not fit.get("runs"):
        return [], [], ([f"fit case: {fit['error']}"] if fit and fit.get("error") else [])
    header = ["optimizer", "particles", "N", "steps", "time", "peak RSS", "start loss", "final loss",
              "age error start / end", "metallicity error start / end"]
    lines = []
    s0 = fit.get("start_median_abs_log_error", {})
    for r in fit["runs"]:
        if r.get("error"):
            lines.append([r["optimizer"], fmt_count(fit["particles"]), str(fit["devices"]), "error"] + ["–"] * 6)
            continue
        e = r["median_abs_log_error"]
        lines.append([r["optimizer"], fmt_count(fit["particles"]), str(fit["devices"]), str(r["steps"]),
                      fmt_time(r["seconds"]), fmt_mib(r["peak_rss_mib"]), f"{r['start_loss']:.7g}",
                      f"{r['final_loss']:.7g}", f"{s0.get('age', float('nan')):.3f} / {e['age']:.3f}",
                      f"{s0.get('metallicity', float('nan')):.3f} / {e['metallicity']:.3f}"])
    notes = [f"`tessera ifu-fit --params age,metallicity --steps {args.fit_steps} --loss nll --snr {args.grad_snr:g}` "
             f"from ages and metallicities perturbed by exp({args.grad_perturb:g} N(0,1)) to the cube of the true "
             f"galaxy; time: the fit's own clock (set-up excluded); errors: median |ln(fitted / true)|"]
    if "loss_at_truth" in fit:
        notes.append(f"loss at the true galaxy: {fit['loss_at_truth']:.7g} (the lowest reachable)")
        for r in fit["runs"]:
            if r.get("excess_loss_fraction_left") is not None:
                notes.append(f"{r['optimizer']}: {r['excess_loss_fraction_left']:.2%} of the starting excess loss left")
    return header, lines, notes


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
    ap.add_argument("--grad-particles", type=int, default=100_000, help="gradient case: particles")
    ap.add_argument("--grad-repeat", type=int, default=3, help="gradient case: calls per process (first + steady)")
    ap.add_argument("--grad-rounds", type=int, default=3, help="gradient case: processes per program and device "
                    "count, tessera ifu and ifu-grad alternating")
    ap.add_argument("--grad-snr", type=float, default=100.0, help="nll loss: var = (|observed| / snr)^2")
    ap.add_argument("--grad-perturb", type=float, default=0.15, help="ages and metallicities times "
                    "exp(sigma N(0,1)) in the gradient case's observed galaxy and the fit's start")
    ap.add_argument("--grad-time-goal", type=float, default=3.0, help="goal: gradient time / forward time")
    ap.add_argument("--grad-rss-goal", type=float, default=1.5, help="goal: gradient peak RSS / forward peak RSS")
    ap.add_argument("--no-grad", action="store_true", help="skip the gradient case (and JAX's gradient)")
    ap.add_argument("--no-rubix-grad", action="store_true", help="skip jax.value_and_grad through Rubix")
    ap.add_argument("--rubix-grad-devices", type=int, default=None, help="JAX devices for Rubix's gradient "
                    "(default: the largest --devices)")
    ap.add_argument("--rubix-grad-repeat", type=int, default=2, help="calls of JAX's jitted value_and_grad")
    ap.add_argument("--fit-particles", type=int, default=10_000, help="fit case: particles")
    ap.add_argument("--fit-steps", type=int, default=100, help="fit case: optimiser steps")
    ap.add_argument("--fit-optimizers", default="adam,lbfgs", help="fit case: comma-separated optimisers")
    ap.add_argument("--fit-lr", default="", help="fit case: --lr per optimiser, e.g. adam=0.05,lbfgs=0.1 "
                    "(default: ifu-fit's)")
    ap.add_argument("--no-fit", action="store_true", help="skip the fit case")
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
    for name in ("grad_particles", "grad_repeat", "grad_rounds", "rubix_grad_repeat", "fit_particles"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    args.fit_optimizers = [o.strip() for o in args.fit_optimizers.split(",") if o.strip()]
    try:
        args.fit_lr = {k.strip(): float(v) for k, v in (x.split("=") for x in args.fit_lr.split(",") if x.strip())}
    except ValueError:
        ap.error(f"--fit-lr takes optimizer=value pairs, got {args.fit_lr!r}")
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
    grad = fit = None
    if not args.no_grad:
        grad = gradient_case(bench, template, devices, work)
    if not args.no_fit:
        fit = fit_case(bench, template, nmax, work)
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
    md_text = "\n".join(md) + "\n\n" + "\n".join(f"- {x}" for x in notes) + "\n"
    for title, (h, ls, ns) in (("Gradients", gradient_tables(grad, args)), ("Fits", fit_table(fit, args))):
        if not ls:
            continue
        w = [max(len(x), *(len(l[i]) for l in ls)) for i, x in enumerate(h)]
        print()
        print("  ".join(x.ljust(w[i]) for i, x in enumerate(h)))
        for l in ls:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)))
        for x in ns:
            print("  " + x)
        md_text += (f"\n## {title}\n\n| " + " | ".join(h) + " |\n|" + "---|" * len(h) + "\n"
                    + "".join("| " + " | ".join(c.replace("|", "\\|") for c in l) + " |\n" for l in ls)
                    + "\n" + "".join(f"- {x}\n" for x in ns))
    md_path = os.path.join(out_dir, "ifu.md")
    with open(md_path, "w") as f:
        f.write(md_text)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "args": vars(args), "devices": devices, "seed": args.seed,
        "tolerance": args.tolerance, "rubix": info, "tessera": args.tessera, "config_template": template,
        "machine": helpers.machine_description(), "elapsed_seconds": elapsed,
        "cpu_busy_before": busy_before, "cpu_busy_after": busy_after, "loadavg_after": os.getloadavg(),
        "generation": {str(n): g for n, g in generation.items()}, "results": rows, "cross_device": cross,
        "gradient": grad, "fit": fit,
        "notes": notes, "errors": bench.errors, "passed": not bench.errors,
    }
    json_path = os.path.join(out_dir, "ifu.json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {json_path} and {md_path} ({elapsed:.0f} s)")
    return 1 if bench.errors else 0


if __name__ == "__main__":
    sys.exit(main())
