#!/bin/sh
# `tessera ifu` on CUDA devices writes the CPU's cube byte for byte:
#   ifu_cube.sh TESSERA DATA OUTDIR [LAUNCHER...]
# runs the golden test's galaxy, config and cut templates (DATA) on 4 CPU
# devices and on 4 CUDA devices (TESSERA_CUDA_EMULATE or real GPUs, as the
# environment says), then compares the two FITS files. With a LAUNCHER
# (`mpirun -np 2 ...`), the CUDA run is launched with it: the GPUs of
# several processes (4 devices each) must write the same cube.
set -eu
tessera="$1" data="$2" out="$3"
shift 3
mkdir -p "$out"
run() {
  platform="$1"
  shift
  # --platform chooses (TESSERA_PLATFORM would override it).
  env -u TESSERA_PLATFORM "$@" "$tessera" ifu --platform "$platform" --devices 4 --config "$data/config.yml" --input "$data/galaxy.h5" \
    --ssp "$data/ssp_bc03_cut.h5" --no-plots --quiet --output "$out/cube_$platform.fits"
}
run cpu
run cuda "$@"
if cmp -s "$out/cube_cpu.fits" "$out/cube_cuda.fits"; then
  echo "the CUDA devices' cube${1:+ (launched with $*)} is the CPU's, byte for byte ($(wc -c < "$out/cube_cpu.fits") bytes)"
else
  cmp "$out/cube_cpu.fits" "$out/cube_cuda.fits" || true
  echo "FAILED: the cubes differ"
  exit 1
fi
