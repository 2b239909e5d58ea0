# Sourced by the side-by-side benchmarks (bench/compare/run.sh,
# bench/ifu/run.sh): a Python virtual environment under the build tree with
# packages from PyPI, made once. Never used by the build or the tests.
#
#   make_venv TAG VENV LOG PACKAGE...
# (Re)creates VENV and pip-installs the packages, logging to LOG; on failure
# prints what went wrong as "TAG: ...", removes VENV and exits 1.
make_venv() {
  local tag="$1" venv="$2" log="$3"
  shift 3
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >"$log" 2>&1; then
    echo "$tag: could not create a virtual environment with 'python3 -m venv' (Debian: apt-get install python3-venv); see $log" >&2
    rm -rf "$venv"
    exit 1
  fi
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$@" >>"$log" 2>&1; then
    echo "$tag: 'pip install $*' failed (is PyPI reachable?); last lines of $log:" >&2
    tail -n 5 "$log" >&2
    rm -rf "$venv"
    exit 1
  fi
}
