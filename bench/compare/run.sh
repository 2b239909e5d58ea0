#!/usr/bin/env bash
# `make bench-compare`: Tessera side by side with JAX on the same workloads.
#
#   bash bench/compare/run.sh [BUILD_DIR] [compare.py options...]
#
# BUILD_DIR (default build/default) must be a configured Release build. This
# script creates a Python virtual environment with JAX for CPU from PyPI
# under BUILD_DIR/jax-venv (once; only here, never for the build or the
# tests), builds bench_compare_tessera, and runs compare.py, which alternates
# the two sides, prints one table and writes BUILD_DIR/bench-results/
# compare.json and compare.md. Extra arguments go to compare.py (--rounds,
# --reps, --only diff,sum, --devices N; the tutorial's small programs on 8
# devices: --only seeds; the Jacobian family: --only jac_stellarator,
# --jac-sizes, --jac-devices, --jac-rounds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source bench/venv.sh
BUILD="${1:-build/default}"
shift || true

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "bench-compare: $BUILD is not a configured build (run: cmake --preset default)" >&2
  exit 1
fi

VENV="$BUILD/jax-venv"
LOG="$BUILD/jax-venv-install.log"
if ! "$VENV/bin/python" -c "import jax" >/dev/null 2>&1; then
  echo "bench-compare: installing JAX for CPU from PyPI into $VENV (once; log in $LOG)"
  make_venv bench-compare "$VENV" "$LOG" "jax[cpu]"
fi

if ! cmake --build "$BUILD" --target bench_compare_tessera >"$BUILD/bench-compare-build.log" 2>&1; then
  echo "bench-compare: building bench_compare_tessera failed; last lines of $BUILD/bench-compare-build.log:" >&2
  tail -n 20 "$BUILD/bench-compare-build.log" >&2
  exit 1
fi

exec "$VENV/bin/python" bench/compare/compare.py --build "$BUILD" "$@"
