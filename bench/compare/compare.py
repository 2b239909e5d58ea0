#!/usr/bin/env python3
"""Tessera and JAX side by side: alternates the two runners and prints one table.

    python compare.py --build build/default [--rounds 5] [--reps 3] [--devices N]
                      [--only diff,sum,jit] [--out DIR]

For every group of workloads and every round, runs bench_compare_tessera and
jax_workloads.py one after the other, each in its own process (so only one
runtime's threads exist at a time), swapping which goes first every round so
that drift and order effects hit both alike. The reported time of a workload
on a side is the median of all its samples over all rounds. The machine
limits (streaming bandwidth of 1 and N threads, single-thread sgemm x
devices; each the median of its reps, the statistic of the times divided by
them) are measured by the Tessera runner in the same run, before and after
the workloads; the limit is the median of the two (their mean).

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
]
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
}
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="samples per workload per round")
    ap.add_argument("--devices", type=int, default=os.cpu_count())
    ap.add_argument("--only", default="", help="comma-separated group names or workloads")
    ap.add_argument("--out", default=None, help="directory for compare.json / compare.md")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per runner process")
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

    groups = GROUPS
    if args.only:
        want = set(args.only.split(","))
        groups = [(g, [w for w in ws if g in want or w in want or g.split()[0] in want]) for g, ws in GROUPS]
        groups = [(g, ws) for g, ws in groups if ws]

    info, err = run_json_lines(jax_py + ["--info", "--devices", str(n)], 120)
    if err or not info:
        print(f"compare.py: JAX does not start: {err}", file=sys.stderr)
        return 1
    info = info[0]
    busy_before = cpu_busy()
    started = time.time()
    print(f"Tessera vs JAX {info['jax']} on {n} CPU devices: {args.rounds} rounds x {args.reps} samples, "
          f"alternating (the order swaps every round)", flush=True)
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

    lim_runs = [limits()]
    samples = {}  # (side, workload) -> [seconds]
    meta = {}     # (side, workload) -> last result (without samples)
    errors = {}   # (side, workload) -> error text
    for rnd in range(args.rounds):
        for gname, ws in groups:
            sides = ["tessera", "jax"] if rnd % 2 == 0 else ["jax", "tessera"]
            if env512 and gname in ("mlp", "autodiff mlp_grad"):
                sides.insert(1, "tessera_avx512")
            for side in sides:
                base = jax_py if side == "jax" else [runner]
                cmd = base + ["--workload", ",".join(ws), "--reps", str(args.reps), "--devices", str(n)]
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
                for w in ws:
                    if w not in seen:
                        errors[(side, w)] = e or "no result"
            print(f"  round {rnd + 1}/{args.rounds}: {gname} done ({time.time() - started:.0f} s)", flush=True)
    lim_runs.append(limits())
    elapsed = time.time() - started
    busy_after = cpu_busy()
    # Medians, like the times: a ratio of a median time to the better of two
    # limit measurements would mix two statistics.
    lim = {k: statistics.median(r[k] for r in lim_runs) for k in ("stream1_gbps", "streamN_gbps",
                                                                  "sgemm_1thread_gflops", "memcpy_64MiB_gbps")}
    lim["sgemm_1thread_avx512_gflops"] = statistics.median(r.get("sgemm_1thread_avx512_gflops", 0) for r in lim_runs)
    lim["blas_gflops"] = n * max(lim["sgemm_1thread_gflops"], lim["sgemm_1thread_avx512_gflops"])

    def vs_limit(w, t):
        m = meta.get(("tessera", w), {})
        kind = m.get("limit", "none")
        if t is None or kind == "none":
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
    for _, ws in groups:
        for w in ws:
            ts_ = statistics.median(samples[("tessera", w)]) if ("tessera", w) in samples else None
            tj = statistics.median(samples[("jax", w)]) if ("jax", w) in samples else None
            rt, lim_text = vs_limit(w, ts_)
            rj, _ = vs_limit(w, tj)
            layout = meta.get(("tessera", w), {}).get("layout") or meta.get(("jax", w), {}).get("layout", "")
            if ("tessera", w) in errors:
                failed = True
            table.append({
                "workload": w, "title": TITLES.get(w, w), "layout": layout,
                "tessera_seconds": ts_, "jax_seconds": tj,
                "tessera_over_jax": ts_ / tj if ts_ and tj else None,
                "tessera_vs_limit": rt, "jax_vs_limit": rj, "limit": lim_text,
                "tessera_error": errors.get(("tessera", w)), "jax_error": errors.get(("jax", w)),
                "tessera_samples": samples.get(("tessera", w), []), "jax_samples": samples.get(("jax", w), []),
                "tessera_avx512_samples": samples.get(("tessera_avx512", w)),
                "tessera_meta": meta.get(("tessera", w)), "jax_meta": meta.get(("jax", w)),
            })

    def cell_time(row, side):
        if row[f"{side}_error"]:
            return "error" if side == "tessera" or row["workload"] != "uneven_diff" else "rejected (see below)"
        return fmt_time(row[f"{side}_seconds"])

    def cell_ratio(v):
        if v is None:
            return "–"
        return f"{v:.3f}" if v < 0.1 else f"{v:.0f}" if v >= 100 else f"{v:.2f}"

    header = ["workload", "layout", "Tessera", "JAX", "Tessera/JAX", "Tessera/limit", "JAX/limit", "limit"]
    lines = [[r["title"], r["layout"], cell_time(r, "tessera"), cell_time(r, "jax"),
              cell_ratio(r["tessera_over_jax"]), cell_ratio(r["tessera_vs_limit"]), cell_ratio(r["jax_vs_limit"]),
              r["limit"]] for r in table]
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
    print()
    print("  ".join(h.ljust(widths[i]) for i, h in enumerate(header)))
    for l in lines:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(l)))
    print("Tessera/JAX: time ratio (below 1: Tessera faster). x/limit: achieved over the machine limit of this run "
          "(bytes read + written or FLOP per second over the streaming bandwidth of as many threads or the sgemm "
          "peak). Collectives: the least bytes read + written for the result as delivered (zero-copy: one shared "
          "result; owned: a private result per device, as JAX's), over the N-thread streaming rate; both sides are "
          "measured against the same bytes, so JAX's ratio is fair on the owned rows.")
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
        if st is not None and sj is not None and list(st) != list(sj):
            notes.append(f"shape mismatch in {r['workload']}: tessera {st}, jax {sj}")
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
    limits_line = (f"limits (median reps, median of before/after): streaming copy (read + write) 1 thread {lim['stream1_gbps']:.1f} GB/s, "
                f"{n} thread{'s' if n > 1 else ''} {lim['streamN_gbps']:.1f} GB/s; sgemm 1 thread {lim['sgemm_1thread_gflops']:.0f} "
                f"GFLOP/s (OpenBLAS's default kernel)"
                + (f", {lim['sgemm_1thread_avx512_gflops']:.0f} GFLOP/s (its AVX-512 kernel)"
                   if lim["sgemm_1thread_avx512_gflops"] else "")
                + f"; single-thread memcpy 64 MiB {lim['memcpy_64MiB_gbps']:.1f} GB/s (reference only)")
    print(limits_line)
    if busy_before is not None and busy_after is not None:
        print(f"CPU busy with other programs: {busy_before:.0%} before, {busy_after:.0%} after the run")

    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(c.strip().replace("|", "\\|") for c in l) + " |" for l in lines]
    md_path = os.path.join(out_dir, "compare.md")
    with open(md_path, "w") as f:
        f.write("\n".join(md) + "\n\n" + "\n".join(f"- {x}" for x in notes + [limits_line]) + "\n")
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
