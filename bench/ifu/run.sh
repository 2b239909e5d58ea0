#!/usr/bin/env bash
# `make bench-ifu`: Tessera's IFU pipeline side by side with Rubix 0.0.5.
#
#   bash bench/ifu/run.sh [BUILD_DIR] [bench_ifu.py options...]
#
# BUILD_DIR (default build/default) must be a configured Release build. This
# script creates a Python virtual environment with astro-rubix 0.0.5 (and its
# JAX for CPU) from PyPI under BUILD_DIR/rubix-venv (once; only here, never
# for the build or the tests), builds the tessera program (tessera_cli), and
# runs bench_ifu.py with that environment's Python. bench_ifu.py generates the
# galaxies, alternates the two sides, checks Tessera's cubes against Rubix's,
# prints one table and writes BUILD_DIR/bench-results/ifu.json and ifu.md.
# Extra arguments go to bench_ifu.py (--devices 1,2, --repeat 5, --rounds 1,
# --large 1000000,10000000, --rubix-large, --no-rubix, --tolerance 1e-5; the
# gradient and fit cases: --grad-particles, --fit-particles, --fit-steps,
# --no-grad, --no-rubix-grad, --no-fit).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source bench/venv.sh
BUILD="${1:-build/default}"
shift || true

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "bench-ifu: $BUILD is not a configured build (run: cmake --preset default)" >&2
  exit 1
fi

RUBIX_VERSION=0.0.5
VENV="$BUILD/rubix-venv"
LOG="$BUILD/rubix-venv-install.log"
# The version check reads the package metadata only (importing rubix starts JAX).
have_rubix() {
  "$VENV/bin/python" - "$RUBIX_VERSION" >/dev/null 2>&1 <<'PY'
import importlib.metadata, sys
import h5py, astropy, numpy, yaml  # noqa: F401  (bench_ifu.py and rubix_run.py need them)
sys.exit(importlib.metadata.version("astro-rubix") != sys.argv[1])
PY
}
if ! have_rubix; then
  echo "bench-ifu: installing astro-rubix==$RUBIX_VERSION (with JAX for CPU) from PyPI into $VENV (once; log in $LOG)"
  make_venv bench-ifu "$VENV" "$LOG" "astro-rubix==$RUBIX_VERSION"
  if ! have_rubix; then
    echo "bench-ifu: astro-rubix==$RUBIX_VERSION installed into $VENV, but it or h5py, astropy, numpy, PyYAML does not import; see $LOG" >&2
    exit 1
  fi
fi

if ! cmake --build "$BUILD" --target tessera_cli >"$BUILD/bench-ifu-build.log" 2>&1; then
  echo "bench-ifu: building tessera_cli failed; last lines of $BUILD/bench-ifu-build.log:" >&2
  tail -n 20 "$BUILD/bench-ifu-build.log" >&2
  exit 1
fi

exec "$VENV/bin/python" bench/ifu/bench_ifu.py --build "$BUILD" "$@"
