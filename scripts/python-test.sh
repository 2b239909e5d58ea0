#!/usr/bin/env bash
# Builds the Python package (pyproject.toml, python/) into a virtual
# environment under build/python-venv and runs its pytest suite
# (python/tests). Build requirements come from PyPI; without a network (and
# without them already in the venv) it prints "skipped: ..." and exits 0.
#
#   scripts/python-test.sh            build, install, run every test
#   scripts/python-test.sh -k jit     extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

venv=build/python-venv
python=${PYTHON:-python3}
requirements=(nanobind scikit-build-core pytest numpy)

if ! command -v "$python" >/dev/null 2>&1; then
  echo "skipped: no $python to build the Python package with"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    echo "skipped: $python cannot create a virtual environment (Debian: apt-get install python3-venv)"
    exit 0
  fi
fi

# Already-satisfied requirements need no network; missing ones do.
if ! "$venv/bin/pip" install -q "${requirements[@]}" >build/python-pip.log 2>&1; then
  if ! "$venv/bin/python" -c "import nanobind, scikit_build_core, pytest, numpy" >/dev/null 2>&1; then
    echo "skipped: pip could not install ${requirements[*]} (no network?); see build/python-pip.log"
    exit 0
  fi
fi

# The build compiles the whole library: serialise it with other builds on
# this machine and keep it to two jobs.
lock=()
if command -v flock >/dev/null 2>&1; then lock=(flock /tmp/tessera-build.lock); fi
echo "building and installing the tessera package (log: build/python-install.log)"
if ! CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "${lock[@]}" \
    "$venv/bin/pip" install -v --no-build-isolation ./ >build/python-install.log 2>&1; then
  tail -40 build/python-install.log
  echo "FAILED: building the tessera package (build/python-install.log)"
  exit 1
fi

exec "$venv/bin/python" -m pytest python/tests -q "$@"
