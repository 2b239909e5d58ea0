#!/usr/bin/env bash
# Builds the Python package (pyproject.toml, python/) into a virtual
# environment and runs its pytest suite (python/tests). Build requirements
# come from PyPI; without a network (and without them already in the venv)
# it prints "skipped the Python tests: ..." and exits 0.
#
#   scripts/python-test.sh            venv build/python-venv; builds the library too
#   scripts/python-test.sh -k jit     extra arguments go to pytest
#   scripts/python-test.sh --prebuilt build/default [pytest args]
#       (what `make test` runs through ctest) venv build/default/python-venv,
#       links build/default's library instead of compiling it again
set -euo pipefail
cd "$(dirname "$0")/.."

venv=build/python-venv
config=()
if [ "${1:-}" = "--prebuilt" ]; then
  prebuilt=$(cd "$2" && pwd)
  shift 2
  venv=$prebuilt/python-venv
  config=(-C "build-dir=$prebuilt/python-ext" -C "cmake.define.TESSERA_PREBUILT_DIR=$prebuilt")
fi
python=${PYTHON:-python3}
requirements=(nanobind scikit-build-core pytest numpy)

if ! command -v "$python" >/dev/null 2>&1; then
  echo "skipped the Python tests: no $python to build the Python package with"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    echo "skipped the Python tests: $python cannot create a virtual environment (Debian: apt-get install python3-venv)"
    exit 0
  fi
fi

# Already-satisfied requirements need no network; missing ones do.
log=$venv.log
if ! "$venv/bin/pip" install -q "${requirements[@]}" >"$log" 2>&1; then
  if ! "$venv/bin/python" -c "import nanobind, scikit_build_core, pytest, numpy" >/dev/null 2>&1; then
    echo "skipped the Python tests: pip could not install ${requirements[*]} (no network?); see $log"
    exit 0
  fi
fi

# The build compiles the whole library: serialise it with other builds on
# this machine and keep it to two jobs.
lock=()
if command -v flock >/dev/null 2>&1; then lock=(flock /tmp/tessera-build.lock); fi
echo "building and installing the tessera package (log: $venv-install.log)"
if ! CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "${lock[@]}" \
    "$venv/bin/pip" install -v --no-build-isolation "${config[@]}" ./ >"$venv-install.log" 2>&1; then
  tail -40 "$venv-install.log"
  echo "FAILED: building the tessera package ($venv-install.log)"
  exit 1
fi

exec "$venv/bin/python" -m pytest python/tests -q "$@"
