#!/usr/bin/env bash
# Downloads Rubix 0.0.5 (astro-rubix) and the packages its IFU pipeline
# imports that the GPU machine's Python (3.12, with JAX and its CUDA plugin,
# NumPy, SciPy, h5py, Equinox, jaxtyping, Optax, PyYAML, Matplotlib,
# requests) lacks, as wheels for CPython 3.12 on manylinux x86_64, into DEST
# (default build/gpu-wheels). scripts/gpu-check.sh --full installs them there
# (pip --no-index --no-deps --target) and runs bench/ifu's Rubix side on the
# GPU against `tessera ifu --platform cuda` (scripts/gpu_rubix.py).
#
#   scripts/gpu-wheels.sh [--as-is] [DEST]
#
# The set was found by running bench/ifu/rubix_run.py with only that Python's
# packages plus these wheels: rubix imports pynbody (its input handlers),
# beartype, interpax (which imports jaxkd) and astropy (units, Planck15,
# FITS), and astropy imports pyerfa and astropy-iers-data. The versions are
# those pip chose with astro-rubix 0.0.5 for the IFU golden data
# (tests/data/ifu/README.md). They are installed with --no-deps, so the
# image's own JAX and NumPy stay.
#
# What travels to the GPU machine is at most 64 MiB, the checkout,
# build/gpu-deps (19 MiB) and build/gpu-nccl (scripts/gpu-nccl.sh)
# included. The PyPI wheels take 32 MiB; DEST holds them recompressed
# with LZMA instead (26 MiB): the same files, byte for byte (their RECORD
# hashes still hold), in zips that pip reads like any other. --as-is keeps
# the PyPI files unchanged. DEST/SHA256SUMS lists the PyPI files' hashes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REPACK=1
if [ "${1:-}" = "--as-is" ]; then
  REPACK=0
  shift
fi
DEST="${1:-$ROOT/build/gpu-wheels}"
PYTHON="${PYTHON:-python3}"

WHEELS=(
  astro-rubix==0.0.5
  astropy==8.0.2
  pyerfa==2.0.1.5
  astropy-iers-data==0.2026.11.2.0.34.55
  pynbody==2.8.0
  beartype==0.23.1
  interpax==0.3.16
  jaxkd==0.1.2
)

PYPI="$(mktemp -d)"
trap 'rm -rf "$PYPI"' EXIT
# The recipe of the device README; pynbody 2.8.0 is built for manylinux_2_24
# and 2_28, pip matches each tag exactly.
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$PYPI" "${WHEELS[@]}"

count=$(find "$PYPI" -name "*.whl" | wc -l)
if [ "$count" -ne ${#WHEELS[@]} ]; then
  echo "gpu-wheels: expected ${#WHEELS[@]} wheels, pip saved $count:" >&2
  ls "$PYPI" >&2
  exit 1
fi

rm -rf "$DEST"
mkdir -p "$DEST"
(cd "$PYPI" && sha256sum -- *.whl) > "$DEST/SHA256SUMS"
if [ $REPACK = 1 ]; then
  "$PYTHON" - "$PYPI" "$DEST" <<'PY'
import glob, os, sys, zipfile

src, dest = sys.argv[1:]
for path in sorted(glob.glob(os.path.join(src, "*.whl"))):
    out = os.path.join(dest, os.path.basename(path))
    # Every entry keeps its name, date and attributes; only the compression
    # changes, so RECORD (hashes of the uncompressed files) still holds.
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info), compress_type=zipfile.ZIP_LZMA)
    with zipfile.ZipFile(out) as check:
        bad = check.testzip()
        if bad:
            sys.exit(f"gpu-wheels: {out}: {bad} does not read back")
PY
else
  cp "$PYPI"/*.whl "$DEST/"
fi

for f in "$DEST"/*.whl; do
  printf '%9s  %s\n' "$(du -k "$f" | cut -f1) KiB" "$(basename "$f")"
done
echo "gpu-wheels: $(du -ch "$DEST"/*.whl | tail -1 | cut -f1) in $DEST (PyPI's files: $(du -ch "$PYPI"/*.whl | tail -1 | cut -f1))"
