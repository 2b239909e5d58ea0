#!/usr/bin/env bash
# Tessera across processes: the launches of bench_mpi (and of `tessera ifu`)
# under mpirun, P processes x D devices each, against one process x P devices.
#
#   bash bench/mpi/run.sh [BUILD_DIR] [bench_mpi options...]
#
# BUILD_DIR (default build/default) must hold a built bench/bench_mpi (built
# only where CMake found MPI). Launches, each RUNS times (default 2: this is
# a shared machine), alternating the layouts:
#   psum  2 processes x 1 device (MPI_Allreduce vs Tessera psum over MPI)
#         1 process x 2 devices (Tessera psum on threads, the baseline)
#   diff  1 process x 2 devices, 2 processes x 1 device
#   ifu   `tessera ifu --no-plots --quiet --repeat 3` on 2 x 1 and 1 x 2, when
#         BUILD_DIR/tools/tessera and BUILD_DIR/ifu-data/BC03lr.h5 (from
#         scripts/fetch-bc03.sh) exist. Each process is given its own output
#         names, so the report says which processes wrote files (only process
#         0 should) and whether the two layouts' cubes are byte-identical.
# JSON goes to BUILD_DIR/bench-results/mpi-*.json; a summary table follows.
# Extra arguments go to every bench_mpi launch (e.g. --max-bytes 16M).
# Environment: RUNS (launches per layout), MPIRUN (default mpirun),
# LAUNCH_TIMEOUT (seconds per launch, default 900).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BUILD="${1:-build/default}"
shift || true
RUNS="${RUNS:-2}"
MPIRUN="${MPIRUN:-mpirun}"
LAUNCH_TIMEOUT="${LAUNCH_TIMEOUT:-900}"
BENCH="$BUILD/bench/mpi/bench_mpi"
OUT="$BUILD/bench-results"

if ! command -v "$MPIRUN" >/dev/null 2>&1; then
  echo "bench-mpi: $MPIRUN not found: skipped (install Open MPI to run the multi-process benchmarks)"
  exit 0
fi
if [ ! -x "$BENCH" ]; then
  echo "bench-mpi: $BENCH not built (CMake did not find MPI): skipped"
  exit 0
fi
mkdir -p "$OUT"
rm -f "$OUT"/mpi-*.json

# Open MPI refuses to run as root without these; this machine's containers
# run as root. Oversubscribe and no binding: more devices than cores, and
# each device's worker thread must be free to move.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch() {  # launch NP DEVICES COMMAND...
  local np="$1" devices="$2"
  shift 2
  timeout "$LAUNCH_TIMEOUT" "$MPIRUN" --oversubscribe --bind-to none -np "$np" \
    -x TESSERA_NUM_CPU_DEVICES="$devices" "$@"
}

failed=0
run_bench() {  # run_bench MODE NP DEVICES RUN
  local mode="$1" np="$2" devices="$3" run="$4"
  local json="$OUT/mpi-$mode-${np}x${devices}-run$run.json"
  echo
  echo "=== $mode: $np process(es) x $devices device(s), run $run"
  echo "    $MPIRUN --oversubscribe --bind-to none -np $np -x TESSERA_NUM_CPU_DEVICES=$devices $BENCH --mode $mode --json $json ${*:5}"
  if ! launch "$np" "$devices" "$BENCH" --mode "$mode" --json "$json" "${@:5}"; then
    echo "bench-mpi: the $mode launch ($np x $devices, run $run) failed" >&2
    failed=1
  fi
}

for run in $(seq 1 "$RUNS"); do
  run_bench psum 2 1 "$run" "$@"
  run_bench psum 1 2 "$run" "$@"
done
for run in $(seq 1 "$RUNS"); do
  run_bench diff 1 2 "$run" "$@"
  run_bench diff 2 1 "$run" "$@"
done

# ---- tessera ifu, 2 x 1 vs 1 x 2.
TOOL="$BUILD/tools/tessera"
IFU_NOTE=""
if [ -x "$TOOL" ] && [ -f "$BUILD/ifu-data/BC03lr.h5" ]; then
  work="$BUILD/bench-work/mpi-ifu"
  rm -rf "$work"
  mkdir -p "$work"
  for run in $(seq 1 "$RUNS"); do
    for layout in "2 1" "1 2"; do
      read -r np devices <<<"$layout"
      prefix="$work/ifu-${np}x${devices}-run$run"
      echo
      echo "=== tessera ifu: $np process(es) x $devices device(s), run $run"
      # Each process gets its own file names ($OMPI_COMM_WORLD_RANK): two
      # processes writing one file would race, and the names show who wrote.
      t0=$(date +%s.%N)
      # shellcheck disable=SC2016  # expanded by the launched shell, per process
      if ! TESSERA_IFU_DATA="$BUILD/ifu-data" launch "$np" "$devices" bash -c \
          'exec "$0" ifu --no-plots --quiet --repeat 3 --json "$1.rank$OMPI_COMM_WORLD_RANK.json" --output "$1.rank$OMPI_COMM_WORLD_RANK.fits"' \
          "$TOOL" "$prefix"; then
        echo "bench-mpi: tessera ifu ($np x $devices, run $run) failed" >&2
        failed=1
        continue
      fi
      t1=$(date +%s.%N)
      wrote=""
      for f in "$prefix".rank*.json; do
        [ -e "$f" ] || continue
        r="${f##*.rank}"
        wrote+="${r%.json} "
      done
      echo "    launch wall time $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s; processes that wrote files: ${wrote:-none}"
      cp "$prefix.rank0.json" "$OUT/mpi-ifu-${np}x${devices}-run$run.json" 2>/dev/null || true
      if [ -f "$prefix.rank0.json" ]; then
        python3 - "$prefix.rank0.json" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1]))
steady = sorted(j["steady_s"])
med = steady[len(steady) // 2] if steady else float("nan")
print(f"    devices {j['devices']}, read {j['read_s']:.3f} s, put {j['put_s']:.3f} s, "
      f"pipeline first {j['first_s']:.3f} s, then median {med:.3f} s; peak RSS {j['peak_rss_mib']:.0f} MiB")
PY
      fi
      if [ -n "${wrote#0 }" ]; then
        IFU_NOTE="tessera ifu is not MPI-aware yet: every process wrote its cube and JSON (only process 0 should)."
      fi
    done
    a="$work/ifu-2x1-run$run.rank0.fits" b="$work/ifu-1x2-run$run.rank0.fits"
    if [ -f "$a" ] && [ -f "$b" ]; then
      if cmp -s "$a" "$b"; then echo "    run $run: the 2x1 and 1x2 cubes are byte-identical"
      else echo "    run $run: the 2x1 and 1x2 cubes DIFFER"; failed=1; fi
    fi
  done
else
  IFU_NOTE="tessera ifu not timed: needs $TOOL (cmake --build $BUILD --target tessera_cli) and $BUILD/ifu-data/BC03lr.h5 (bash scripts/fetch-bc03.sh)"
fi

echo
echo "=== summary ($RUNS run(s) per layout; JSON in $OUT/mpi-*.json)"
shopt -s nullglob
files=("$OUT"/mpi-psum-*.json "$OUT"/mpi-diff-*.json)
if [ "${#files[@]}" -gt 0 ]; then
  "$BENCH" --summary "${files[@]}"
fi
ifu_files=("$OUT"/mpi-ifu-*.json)
if [ "${#ifu_files[@]}" -gt 0 ]; then
  python3 - "${ifu_files[@]}" <<'PY' || true
import json, os, re, sys
rows = {}
for f in sys.argv[1:]:
    m = re.search(r"mpi-ifu-(\d+x\d+)-run", os.path.basename(f))
    j = json.load(open(f))
    rows.setdefault(m.group(1), []).extend(j["steady_s"] or [j["first_s"]])
print("\ntessera ifu (10^5 particles, generated disk), steady pipeline runs: median [fastest] over every run")
for layout, t in sorted(rows.items()):
    t.sort()
    print(f"  {layout}: {t[len(t) // 2]:.3f} s [{t[0]:.3f} s]")
PY
fi
[ -n "$IFU_NOTE" ] && echo "$IFU_NOTE"
exit "$failed"
