#!/usr/bin/env python3
"""Tessera and JAX side by side: alternates the two runners and prints one table.

    python compare.py --build build/default [--rounds 5] [--reps 3] [--devices N]
                      [--only diff,sum,jit,seeds,jac_stellarator] [--out DIR]
                      [--jac-sizes 4099,100000] [--jac-devices 2,8] [--jac-rounds 2]

For every group of workloads and every round, runs bench_compare_tessera and
jax_workloads.py one after the other, each in its own process (so only one
runtime's threads exist at a time), swapping which goes first every round so
that drift and order effects hit both alike. The reported time of a workload
on a side is the median of all its samples over all rounds. The machine
limits (streaming bandwidth of 1 and N threads, single-thread sgemm x
devices; each the median of its reps, the statistic of the times divided by
them) are measured by the Tessera runner in the same run, before and after
the workloads; the limit is the median of the two (their mean).

The jac_stellarator family (the Jacobian of 2*tanh(A x) + 1, A (M, 512)
f64 with rows sharded; jacfwd and jacrev whole and chunked) runs every
(M, N, form) row in a process of its own on each side, so that the process's
peak RSS is that row's; N comes from --jac-devices, not --devices, and the
family runs at most --jac-rounds rounds (a call of M = 1e5 rows takes about a
second). Its rows get a table of their own, with the peaks beside the times.

The seeds group (the small programs of the distributed-JAX introduction:
tanh of arange(8), dot(x, w) + b on a 4x2 mesh, a shard_map normalize with
pmean, a shard_map matmul with all_gather; each eagerly and under jit) runs
on 8 devices whatever --devices says: 8 virtual devices on a machine of few
cores measure dispatch overhead. Latency rows: the median time per call,
block_until_ready() included, with at least 200 calls per sample (fewer
where a sample would take over 0.5 s), and no machine limit.

Writes <out>/compare.json (everything, samples included) and compare.md (the
table in Markdown); <out> defaults to <build>/bench-results.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COLLECTIVES = ("psum", "psum_owned", "all_gather", "all_gather_owned", "psum_scatter", "ppermute", "ppermute_owned",
               "all_to_all")
GROUPS = [
    ("diff", ["diff_1dev", "diff_rows", "diff_cols"]),
    ("sin", ["sin", "sin_jit"]),
    ("sum", ["sum"]),
    ("mlp", ["mlp_auto", "mlp_shard_map"]),
    ("collectives 4 KiB", [f"{c}_4k" for c in COLLECTIVES]),
    ("collectives 64 MiB", [f"{c}_64m" for c in COLLECTIVES]),
    ("dispatch", ["dispatch"]),
    ("uneven", ["uneven_diff"]),
    ("jit", ["chain_jit", "chain_eager", "trace_compile", "mlp_big_jit", "mlp_big_explicit"]),
    # One process per workload: the peak RSS of each is its own.
    ("autodiff jac_vmap", ["jac_vmap"]),
    ("autodiff jac_map", ["jac_map"]),
    ("autodiff mlp_grad", ["mlp_grad"]),
    # A third element fixes the group's device count (else --devices).
    ("seeds", [f"seed_{w}{form}" for w in ("tanh", "matmul2d", "normalize", "allgather_matmul")
               for form in ("", "_jit")], 8),
]
# Groups whose rows have no machine limit: they alone need no limits run.
NO_LIMIT_GROUPS = {"seeds"}
TITLES = {
    "diff_1dev": "diff axis 0, 4096² f64, prepend 0",
    "diff_rows": "  same, along the sharded axis",
    "diff_cols": "  same, across the sharded axis",
    "sin": "2*sin(x)+1, 2^24 f32",
    "sin_jit": "  same under jit (one fused pass)",
    "sum": "sum over sharded axis, 4096² f32",
    "mlp_auto": "sigmoid(x@w+b) 8192x1024x1024 f32",
    "mlp_shard_map": "  same, shard_map + psum",
    "dispatch": "dispatch: x+1 on 16 f32",
    "uneven_diff": "uneven: diff on 4097x4096 f64",
    "chain_jit": "jit: 20-op tanh chain, 2^24 f32",
    "chain_eager": "  same chain, eager (op by op)",
    "trace_compile": "  trace + compile it afresh, 1024 f32",
    "mlp_big_jit": "jit: sigmoid(x@w+b) x 16384, w 16384x512 f32",
    "mlp_big_explicit": "  same, Explicit mesh axis",
    "jac_vmap": "Jacobian 4096x8 rows, 24 params f64: vmap(jacfwd)",
    "jac_map": "  same, chunked 128 rows (JAX lax.map batch_size)",
    "mlp_grad": "jit(grad) 3-layer MLP 8192x256 f32, batch sharded",
    "seed_tanh": "seeds (8 dev): tanh(arange(8)) i32, eager",
    "seed_tanh_jit": "  same, jit",
    "seed_matmul2d": "seeds: dot(x,w)+b 192x64 @ 64x128 f32, eager",
    "seed_matmul2d_jit": "  same, jit",
    "seed_normalize": "seeds: shard_map normalize (pmean j) 192x64, eager",
    "seed_normalize_jit": "  same, jit",
    "seed_allgather_matmul": "seeds: shard_map x @ all_gather(w, i) 192x64x128, eager",
    "seed_allgather_matmul_jit": "  same, jit",
}
JAC_FAMILY = "jac_stellarator"
JAC_FORMS = ("fwd", "fwd16", "fwd64", "fwd128", "rev", "rev16", "rev64", "rev128")
JAC_PARAMS = 512
# Reverse mode pulls back one output direction at a time, over the (M, M)
# identity: 2*M*M*P FLOP on either side (1e13 at M = 1e5) and, whole, an
# M x M basis (75 GiB at M = 1e5). It runs where that basis fits in 1 GiB.
JAC_REV_MAX_BASIS = 1 << 30
JAC_BUDGET_MB = 256  # a chunked Jacobian should need at most its inputs, its output and this


def jac_groups(sizes, devices):
    """One group (one process per side) per (N, M, form) of the jac_stellarator family."""
    groups = []
    for n in devices:
        for m in sizes:
            for form in JAC_FORMS:
                if form.startswith("rev") and m * m * 8 > JAC_REV_MAX_BASIS:
                    continue
                w = f"stel_n{n}_m{m}_{form}"
                groups.append((f"{JAC_FAMILY} {w}", [w], n))
    return groups


def is_jac(group):
    return group.startswith(JAC_FAMILY + " ")


def jac_title(w):
    _, _, m, form = w.split("_")
    mode = "jacfwd" if form.startswith("fwd") else "jacrev"
    chunk = form[3:]
    if form == "fwd":
        return f"2tanh(Ax)+1, A {m[1:]}x{JAC_PARAMS} f64: jacfwd"
    return f"  {mode}, chunk {chunk}" if chunk else f"  {mode}"


for c in COLLECTIVES:
    name, owned = (c[: -len("_owned")], True) if c.endswith("_owned") else (c, False)
    form = " (owned)" if owned else " (zero-copy)" if name in ("psum", "all_gather", "ppermute") else ""
    TITLES[f"{c}_4k"] = f"shard_map {name}{form}, 4 KiB"
    TITLES[f"{c}_64m"] = f"shard_map {name}{form}, 64 MiB"


def fmt_time(s):
    if s is None:
        return "–"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e9:.0f} ns"


def fmt_mib(v):
    return "–" if v is None else f"{v:.0f} MiB" if v >= 100 else f"{v:.1f} MiB"


def run_json_lines(cmd, timeout, env=None):
    """Runs cmd; returns (parsed JSON lines, error text or None)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout} s: {' '.join(cmd)}"
    rows = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    err = None
    if p.returncode != 0 and not rows:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        err = f"exit {p.returncode}: " + " | ".join(tail)
    return rows, err


def machine_description():
    desc = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        keep = ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)", "L1d cache",
                "L2 cache", "L3 cache", "Hypervisor vendor", "NUMA node(s)")
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in keep:
                desc[k.strip()] = v.strip()
        flags = next((l.split(":", 1)[1] for l in out.splitlines() if l.startswith("Flags")), "")
        desc["simd"] = " ".join(f for f in ("avx2", "fma", "avx512f") if f in flags.split())
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        desc["memory"] = f"{kb / (1 << 20):.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return desc


def cpu_busy(seconds=1.0):
    """Fraction of all CPUs' time spent busy over `seconds` (other programs, since we sleep)."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v[:8]), idle
    try:
        t0, i0 = read()
        time.sleep(seconds)
        t1, i1 = read()
        return 1.0 - (i1 - i0) / max(t1 - t0, 1)
    except (OSError, ValueError, IndexError):
        return None


def jac_notes(rows):
    """What the jac_stellarator table cannot show: JAX's padding, the checksums, the memory budget."""
    notes = []
    padded = {}  # M -> {N: rows JAX's A got, error type}
    for r in rows:
        jm = r["jax_meta"] or {}
        if jm.get("padded_rows"):
            _, n, m, _ = r["workload"].split("_")
            err = jm.get("uneven_error", "").split(":")[0] or "no error"
            padded.setdefault(int(m[1:]), {})[int(n[1:])] = (jm["padded_rows"], err)
    for m, by_n in sorted(padded.items()):
        errs = sorted({e for _, e in by_n.values()})
        notes.append(f"jax {JAC_FAMILY}, M = {m}: JAX refuses to lay out {m} rows over "
                     f"{' or '.join(map(str, sorted(by_n)))} devices ({', '.join(errs)}; the text is in "
                     f"compare.json); its A gets zero rows up to "
                     + ", ".join(f"{rp} (N = {n})" for n, (rp, _) in sorted(by_n.items()))
                     + ", whose Jacobian rows are zero, and its time and memory include them")
    mismatched = []
    for r in rows:
        ct, cj = (r["tessera_meta"] or {}).get("checksum"), (r["jax_meta"] or {}).get("checksum")
        if ct is not None and cj is not None and abs(ct - cj) > 1e-9 * max(1.0, abs(ct)):
            mismatched.append(f"{r['workload']} (tessera {ct!r}, jax {cj!r})")
    if mismatched:
        notes.append("Jacobians differ (sum of all entries): " + "; ".join(mismatched))
    elif any((r["tessera_meta"] or {}).get("checksum") is not None for r in rows):
        notes.append(f"{JAC_FAMILY}: on every row that ran on both sides the sums of the Jacobians' entries agree "
                     f"to 1e-9")
    layouts = {}  # (N, M, Tessera's block, JAX's block) -> forms
    for r in rows:
        bt, bj = r["jacobian_device_mb"], (r["jax_meta"] or {}).get("jacobian_device_mb")
        if bt and bj and bt > 1.5 * bj:
            _, n, m, form = r["workload"].split("_")
            layouts.setdefault((int(n[1:]), int(m[1:]), bt, bj), []).append(form)
    if layouts:
        notes.append(f"{JAC_FAMILY}: Tessera's Jacobian has larger blocks per device than JAX's rows-sharded one "
                     f"(the whole of it where J/device is its size, {JAC_PARAMS} x M x 8 bytes): "
                     + "; ".join(f"N = {n}, M = {m} ({', '.join(forms)}): {fmt_mib(bt)} against {fmt_mib(bj)}"
                                 for (n, m, bt, bj), forms in sorted(layouts.items())))
    # A chunked Jacobian should need its inputs, its output and at most
    # JAC_BUDGET_MB more; whole ones hold their full basis and tangents.
    over = []
    for r in rows:
        if not r["workload"][-1].isdigit():
            continue
        for side in ("tessera", "jax"):
            m = r[f"{side}_meta"] or {}
            if "peak_rss_mb" not in m:
                continue
            allowed = m["inputs_mb"] + m["jacobian_mb"] + JAC_BUDGET_MB
            rise = r[f"{side}_peak_rss_mb"] - m["rss_start_mb"]
            if rise > allowed:
                over.append(f"{side} {r['workload']} RSS +{rise:.0f} MiB (allowed {allowed:.0f})")
        dev = r["tessera_peak_device_above_inputs_mb"]
        if dev is not None and dev > r["jacobian_device_mb"] + JAC_BUDGET_MB:
            over.append(f"tessera {r['workload']} device +{dev:.0f} MiB "
                        f"(allowed {r['jacobian_device_mb'] + JAC_BUDGET_MB:.0f})")
    starts = {side: [(r[f"{side}_meta"] or {}).get("rss_start_mb") for r in rows] for side in ("tessera", "jax")}
    starts = {side: [v for v in vs if v is not None] for side, vs in starts.items()}
    if any(starts.values()):
        notes.append(f"{JAC_FAMILY} chunked rows against inputs + Jacobian + {JAC_BUDGET_MB} MiB (peak RSS less the "
                     f"process's RSS before the inputs: "
                     + ", ".join(f"{side} {statistics.median(vs):.0f} MiB" for side, vs in starts.items() if vs)
                     + "; Tessera's device peak against its Jacobian block): "
                     + ("; ".join(over) if over else "all within"))
    skipped = sorted({int(r["workload"].split("_")[2][1:]) for r in rows})
    skipped = [m for m in skipped if m * m * 8 > JAC_REV_MAX_BASIS]
    if skipped:
        notes.append(f"{JAC_FAMILY}: jacrev is not run for M = {', '.join(map(str, skipped))}: reverse mode pulls "
                     f"back one of the M output directions at a time, 2*M*M*{JAC_PARAMS} FLOP and, whole, an M x M "
                     f"basis ({skipped[-1] ** 2 * 8 / (1 << 30):.0f} GiB f64) on either side")
    return notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="samples per workload per round")
    ap.add_argument("--devices", type=int, default=os.cpu_count())
    ap.add_argument("--only", default="", help="comma-separated group names or workloads")
    ap.add_argument("--out", default=None, help="directory for compare.json / compare.md")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per runner process")
    ap.add_argument("--jac-sizes", default="4099,100000", help=f"rows M of the {JAC_FAMILY} rows")
    ap.add_argument("--jac-devices", default="2,8", help=f"device counts N of the {JAC_FAMILY} rows")
    ap.add_argument("--jac-rounds", type=int, default=2, help=f"at most this many rounds of the {JAC_FAMILY} rows")
    args = ap.parse_args()

    runner = os.path.join(args.build, "bench", "compare", "bench_compare_tessera")
    if not os.access(runner, os.X_OK):
        print(f"compare.py: {runner} not found; build it with "
              f"cmake --build {args.build} --target bench_compare_tessera", file=sys.stderr)
        return 2
    jax_py = [sys.executable, os.path.join(HERE, "jax_workloads.py")]
    out_dir = args.out or os.path.join(args.build, "bench-results")
    os.makedirs(out_dir, exist_ok=True)
    n = args.devices

    groups = [(g[0], g[1], g[2] if len(g) > 2 else n) for g in GROUPS]
    groups += jac_groups([int(m) for m in args.jac_sizes.split(",")], [int(d) for d in args.jac_devices.split(",")])
    if args.only:
        want = set(args.only.split(","))
        groups = [(g, [w for w in ws if g in want or w in want or g.split()[0] in want], gn) for g, ws, gn in groups]
        groups = [(g, ws, gn) for g, ws, gn in groups if ws]

    info, err = run_json_lines(jax_py + ["--info", "--devices", str(n)], 120)
    if err or not info:
        print(f"compare.py: JAX does not start: {err}", file=sys.stderr)
        return 1
    info = info[0]
    busy_before = cpu_busy()
    started = time.time()
    print(f"Tessera vs JAX {info['jax']} on {n} CPU devices: {args.rounds} rounds x {args.reps} samples, "
          f"alternating (the order swaps every round)", flush=True)
    if any(is_jac(g) for g, _, _ in groups):
        k = min(args.rounds, args.jac_rounds)
        print(f"  {JAC_FAMILY}: N = {args.jac_devices.replace(',', ', ')} devices, {k} round{'s' if k != 1 else ''}",
              flush=True)
    fixed = [(g, gn) for g, _, gn in groups if not is_jac(g) and gn != n]
    if fixed:
        print("  " + ", ".join(f"{g}: {gn} devices" for g, gn in fixed), flush=True)
    if busy_before is not None and busy_before > 0.1:
        print(f"  warning: other programs keep {busy_before:.0%} of the CPUs busy before the run; "
              f"times will be noisy (both sides alike, thanks to the alternation)", flush=True)

    # OpenBLAS 0.3.21 (Debian 12) runs its AVX2 "Haswell" kernels on CPUs it
    # does not know, AVX-512 ones included; the AVX-512 kernels are one
    # environment variable away. The machine's BLAS limit is the better of the
    # two, and the mlp workloads also run (alternated) with the AVX-512 kernel.
    try:
        with open("/proc/cpuinfo") as f:
            avx512 = " avx512f" in f.read()
    except OSError:
        avx512 = False
    env512 = dict(os.environ, OPENBLAS_CORETYPE="SkylakeX") if avx512 else None

    def limits():
        rows, e = run_json_lines([runner, "--limits", "--devices", str(n)], args.timeout)
        if e or not rows:
            raise SystemExit(f"compare.py: measuring the machine limits failed: {e}")
        r = rows[0]
        if env512:
            rows512, _ = run_json_lines([runner, "--limits", "--devices", str(n)], args.timeout, env512)
            if rows512:
                r["sgemm_1thread_avx512_gflops"] = rows512[0]["sgemm_1thread_gflops"]
        return r

    # The Jacobian rows use no limit: measured only when other rows need them.
    need_limits = any(not is_jac(g) and g not in NO_LIMIT_GROUPS for g, _, _ in groups)
    lim_runs = [limits()] if need_limits else []
    samples = {}  # (side, workload) -> [seconds]
    meta = {}     # (side, workload) -> last result (without samples)
    errors = {}   # (side, workload) -> error text
    peaks = {}    # (side, workload) -> [peak RSS of each round's process, MiB]
    for rnd in range(args.rounds):
        for gi, (gname, ws, gn) in enumerate(groups):
            if is_jac(gname) and rnd >= args.jac_rounds:
                continue
            # The Jacobian rows may run a single round: their order also
            # swaps from one row to the next.
            swap = rnd + (gi if is_jac(gname) else 0)
            sides = ["tessera", "jax"] if swap % 2 == 0 else ["jax", "tessera"]
            if env512 and gname in ("mlp", "autodiff mlp_grad"):
                sides.insert(1, "tessera_avx512")
            for side in sides:
                base = jax_py if side == "jax" else [runner]
                cmd = base + ["--workload", ",".join(ws), "--reps", str(args.reps), "--devices", str(gn)]
                rows, e = run_json_lines(cmd, args.timeout, env512 if side == "tessera_avx512" else None)
                seen = set()
                for r in rows:
                    w = r.get("workload")
                    seen.add(w)
                    if "error" in r:
                        errors[(side, w)] = r["error"]
                        meta[(side, w)] = r
                        continue
                    samples.setdefault((side, w), []).extend(r["samples"])
                    meta[(side, w)] = {k: v for k, v in r.items() if k != "samples"}
                    if is_jac(gname):
                        peaks.setdefault((side, w), []).append(r["peak_rss_mb"])
                for w in ws:
                    if w not in seen:
                        errors[(side, w)] = e or "no result"
            print(f"  round {rnd + 1}/{args.rounds}: {gname} done ({time.time() - started:.0f} s)", flush=True)
    if need_limits:
        lim_runs.append(limits())
    elapsed = time.time() - started
    busy_after = cpu_busy()
    # Medians, like the times: a ratio of a median time to the better of two
    # limit measurements would mix two statistics.
    lim = None
    if lim_runs:
        lim = {k: statistics.median(r[k] for r in lim_runs) for k in ("stream1_gbps", "streamN_gbps",
                                                                      "sgemm_1thread_gflops", "memcpy_64MiB_gbps")}
        lim["sgemm_1thread_avx512_gflops"] = statistics.median(r.get("sgemm_1thread_avx512_gflops", 0)
                                                               for r in lim_runs)
        lim["blas_gflops"] = n * max(lim["sgemm_1thread_gflops"], lim["sgemm_1thread_avx512_gflops"])

    def vs_limit(w, t):
        m = meta.get(("tessera", w), {})
        kind = m.get("limit", "none")
        if t is None or kind == "none" or lim is None:
            return None, "–"
        if kind in ("stream1", "streamN"):
            bw = lim[f"{kind}_gbps"]
            threads = 1 if kind == "stream1" else n
            return m["bytes"] / t / 1e9 / bw, f"stream {threads}T {bw:.1f} GB/s"
        if kind == "blas":
            return m["flops"] / t / 1e9 / lim["blas_gflops"], f"sgemm 1T x {n}: {lim['blas_gflops']:.0f} GFLOP/s"
        return None, "–"

    table = []
    failed = False
    for gname, ws, _ in groups:
        for w in ws:
            ts_ = statistics.median(samples[("tessera", w)]) if ("tessera", w) in samples else None
            tj = statistics.median(samples[("jax", w)]) if ("jax", w) in samples else None
            rt, lim_text = vs_limit(w, ts_)
            rj, _ = vs_limit(w, tj)
            layout = meta.get(("tessera", w), {}).get("layout") or meta.get(("jax", w), {}).get("layout", "")
            if ("tessera", w) in errors:
                failed = True
            table.append({
                "workload": w, "title": jac_title(w) if is_jac(gname) else TITLES.get(w, w), "layout": layout,
                "tessera_seconds": ts_, "jax_seconds": tj,
                "tessera_over_jax": ts_ / tj if ts_ and tj else None,
                "tessera_vs_limit": rt, "jax_vs_limit": rj, "limit": lim_text,
                "tessera_error": errors.get(("tessera", w)), "jax_error": errors.get(("jax", w)),
                "tessera_samples": samples.get(("tessera", w), []), "jax_samples": samples.get(("jax", w), []),
                "tessera_avx512_samples": samples.get(("tessera_avx512", w)),
                "tessera_meta": meta.get(("tessera", w)), "jax_meta": meta.get(("jax", w)),
                "family": JAC_FAMILY if is_jac(gname) else None,
            })
            if is_jac(gname):
                tm = meta.get(("tessera", w)) or {}
                table[-1].update({
                    "tessera_peak_rss_mb": max(peaks[("tessera", w)]) if ("tessera", w) in peaks else None,
                    "jax_peak_rss_mb": max(peaks[("jax", w)]) if ("jax", w) in peaks else None,
                    "tessera_peak_device_above_inputs_mb": tm.get("peak_device_above_inputs_mb"),
                    "jacobian_device_mb": tm.get("jacobian_device_mb"),
                })

    def cell_time(row, side):
        if row[f"{side}_error"]:
            return "error" if side == "tessera" or row["workload"] != "uneven_diff" else "rejected (see below)"
        return fmt_time(row[f"{side}_seconds"])

    def cell_ratio(v):
        if v is None:
            return "–"
        return f"{v:.3f}" if v < 0.1 else f"{v:.0f}" if v >= 100 else f"{v:.2f}"

    def print_table(header, lines):
        widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
        print()
        print("  ".join(h.ljust(widths[i]) for i, h in enumerate(header)))
        for l in lines:
            print("  ".join(c.ljust(widths[i]) for i, c in enumerate(l)))

    header = ["workload", "layout", "Tessera", "JAX", "Tessera/JAX", "Tessera/limit", "JAX/limit", "limit"]
    lines = [[r["title"], r["layout"], cell_time(r, "tessera"), cell_time(r, "jax"),
              cell_ratio(r["tessera_over_jax"]), cell_ratio(r["tessera_vs_limit"]), cell_ratio(r["jax_vs_limit"]),
              r["limit"]] for r in table if not r["family"]]
    if lines:
        print_table(header, lines)
        print("Tessera/JAX: time ratio (below 1: Tessera faster). x/limit: achieved over the machine limit of this "
              "run (bytes read + written or FLOP per second over the streaming bandwidth of as many threads or the "
              "sgemm peak). Collectives: the least bytes read + written for the result as delivered (zero-copy: one "
              "shared result; owned: a private result per device, as JAX's), over the N-thread streaming rate; both "
              "sides are measured against the same bytes, so JAX's ratio is fair on the owned rows.")
    jac_header = ["workload", "layout", "Tessera", "JAX", "Tessera/JAX", "peak RSS Tessera", "peak RSS JAX",
                  "Tessera device peak", "J/device"]
    jac_rows = [r for r in table if r["family"]]
    jac_lines = [[r["title"], r["layout"], cell_time(r, "tessera"), cell_time(r, "jax"),
                  cell_ratio(r["tessera_over_jax"]), fmt_mib(r["tessera_peak_rss_mb"]), fmt_mib(r["jax_peak_rss_mb"]),
                  fmt_mib(r["tessera_peak_device_above_inputs_mb"]), fmt_mib(r["jacobian_device_mb"])]
                 for r in jac_rows]
    if jac_lines:
        print_table(jac_header, jac_lines)
        print(f"{JAC_FAMILY}: r(x) = 2*tanh(A x) + 1, A (M, {JAC_PARAMS}) f64 with rows sharded over N devices, "
              f"x replicated; times are medians of single calls after one warm-up. JAX: jit(jacfwd), jit(jacrev); "
              f"chunk c: DESC's jacfwd_chunked, jit of lax.map(jvp, eye(P), batch_size=c).T, and for jacrev "
              f"lax.map(vjp, eye(M), batch_size=c). Tessera: ts::jacfwd / ts::jacrev with chunk_size c. "
              f"Peak RSS: the largest over rounds of a process that ran only that row (runtime, inputs, warm-up "
              f"and timed calls). Tessera device peak: the most one device's memory (ts::memory_stats) rose above "
              f"its inputs during the timed calls. J/device: the largest block of Tessera's Jacobian on one device.")
    notes = []
    for r in table:
        for side in ("tessera", "jax"):
            if r[f"{side}_error"]:
                notes.append(f"{side} {r['workload']}: {r[f'{side}_error']}")
    short = {"float32": "f32", "float64": "f64"}
    for r in table:
        dt, dj = (r["tessera_meta"] or {}).get("dtype"), (r["jax_meta"] or {}).get("dtype")
        if dt and dj and short.get(dj, dj) != dt:
            notes.append(f"dtype mismatch in {r['workload']}: tessera {dt}, jax {dj}")
        st, sj = (r["tessera_meta"] or {}).get("shape"), (r["jax_meta"] or {}).get("shape")
        padded = (r["jax_meta"] or {}).get("padded_rows")
        if st is not None and sj is not None and list(st) != list(sj) and not padded:
            notes.append(f"shape mismatch in {r['workload']}: tessera {st}, jax {sj}")
    notes += jac_notes(jac_rows)
    if any(r["workload"].startswith("ppermute") and r["tessera_seconds"] for r in table):
        notes.append("tessera ppermute (zero-copy) hands the sender's buffer to the receiver (one process, no copy), "
                     "so its time does not grow with the size and it has no limit; ppermute (owned) copies")
    for w in ("mlp_auto", "mlp_shard_map", "mlp_grad"):
        if ("tessera_avx512", w) in samples:
            t = statistics.median(samples[("tessera_avx512", w)])
            tj = statistics.median(samples[("jax", w)]) if ("jax", w) in samples else None
            notes.append(f"tessera {w} with OpenBLAS's AVX-512 kernel (OPENBLAS_CORETYPE=SkylakeX): {fmt_time(t)}"
                         + (f", {t / tj:.2f} of JAX's time" if tj else "")
                         + f", {vs_limit(w, t)[0]:.2f} of the limit")
    seeds = [r for r in table if r["workload"].startswith("seed_")]
    if seeds:
        inner = {side: sorted({(r[f"{side}_meta"] or {}).get("inner") for r in seeds} - {None})
                 for side in ("tessera", "jax")}
        notes.append("seeds: 8 devices (a 1-d mesh i for tanh, a (4, 2) mesh i, j for the rest); eager: the function "
                     "called as it is (JAX: the jnp function or the shard_map-wrapped one, without jax.jit), jit: "
                     "ts::jit / jax.jit of it; median time per call, block_until_ready() included, calls per sample "
                     + ", ".join(f"{side} {v[0]}-{v[-1]}" if len(v) > 1 else f"{side} {v[0]}"
                                 for side, v in inner.items() if v))
    jd = meta.get(("jax", "dispatch"), {})
    if "eager_seconds" in jd:
        notes.append(f"jax dispatch without jit (x + 1 eagerly): {fmt_time(jd['eager_seconds'])} per op")
    for w in ("chain_jit", "mlp_big_jit", "mlp_big_explicit"):
        for side in ("tessera", "jax"):
            m = meta.get((side, w), {})
            if m.get("steps"):
                notes.append(f"{side} {w}: {m['steps']}")
            if m.get("communication"):
                notes.append(f"{side} {w} plan: " + "; ".join(m["communication"]))
    for w in ("jac_vmap", "jac_map", "mlp_grad"):
        for side in ("tessera", "jax"):
            m = meta.get((side, w), {})
            if "peak_rss_mb" in m:
                notes.append(f"{side} {w}: peak RSS of its process {m['peak_rss_mb']:.0f} MiB"
                             + (f", peak per device {m['peak_device_mb']:.1f} MiB" if "peak_device_mb" in m else ""))
            if m.get("uneven_error"):
                notes.append(f"{side} {w} with M = 4099 rows (not divisible by {n}): {m['uneven_error']}")
            if m.get("uneven_seconds"):
                notes.append(f"{side} {w} with M = 4099 rows: {fmt_time(m['uneven_seconds'])}")
    for note in notes:
        print("  " + note)
    limits_line = "" if lim is None else (f"limits (median reps, median of before/after): streaming copy (read + write) 1 thread {lim['stream1_gbps']:.1f} GB/s, "
                f"{n} thread{'s' if n > 1 else ''} {lim['streamN_gbps']:.1f} GB/s; sgemm 1 thread {lim['sgemm_1thread_gflops']:.0f} "
                f"GFLOP/s (OpenBLAS's default kernel)"
                + (f", {lim['sgemm_1thread_avx512_gflops']:.0f} GFLOP/s (its AVX-512 kernel)"
                   if lim["sgemm_1thread_avx512_gflops"] else "")
                + f"; single-thread memcpy 64 MiB {lim['memcpy_64MiB_gbps']:.1f} GB/s (reference only)")
    if lim:
        print(limits_line)
    if busy_before is not None and busy_after is not None:
        print(f"CPU busy with other programs: {busy_before:.0%} before, {busy_after:.0%} after the run")

    def md_table(header, lines):
        md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return md + ["| " + " | ".join(c.strip().replace("|", "\\|") for c in l) + " |" for l in lines]

    md = md_table(header, lines) if lines else []
    if jac_lines:
        md += ([""] if md else []) + md_table(jac_header, jac_lines)
    md_path = os.path.join(out_dir, "compare.md")
    with open(md_path, "w") as f:
        f.write("\n".join(md) + "\n\n" + "\n".join(f"- {x}" for x in notes + [limits_line] if x) + "\n")
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "devices": n, "rounds": args.rounds, "reps": args.reps,
        "jax": info, "machine": machine_description(), "limits": lim, "limit_runs": lim_runs,
        "elapsed_seconds": elapsed, "cpu_busy_before": busy_before, "cpu_busy_after": busy_after,
        "loadavg_after": os.getloadavg(), "results": table,
    }
    json_path = os.path.join(out_dir, "compare.json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {json_path} and {md_path} ({elapsed:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
