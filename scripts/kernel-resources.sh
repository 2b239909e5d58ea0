#!/usr/bin/env bash
# Registers and stack frame of every CUDA kernel of the library, from ptxas
# (no GPU needed): a kernel with a stack frame keeps an array the compiler
# could not put in registers (indexed at run time) in local memory, which a
# memory-bound kernel pays for at every element.
#
#   scripts/kernel-resources.sh [BUILD_DIR] [--all]
#
# BUILD_DIR (default build/default) is a configured build with CUDA; the
# sources are compiled for sm_90 with the library's own flags. Without --all
# only kernels with a stack frame are listed, one line per kernel template
# and frame size, with how many instances share it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build/default"
ALL=0
for a in "$@"; do
  case "$a" in
    --all) ALL=1 ;;
    *) BUILD="$a" ;;
  esac
done
RSP="$BUILD/CMakeFiles/tessera.dir/includes_CUDA.rsp"
[ -f "$RSP" ] || { echo "kernel-resources: $RSP not found (configure $BUILD with CUDA first)" >&2; exit 1; }
NVCC="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$BUILD"
for f in "$ROOT"/src/backend/cuda/*.cu; do
  "$NVCC" -DOMPI_SKIP_MPICXX --options-file "$RSP" -O3 -DNDEBUG -arch=sm_90 --fmad=false --ftz=false \
    --prec-div=true --prec-sqrt=true -std=c++20 -x cu -cubin -Xptxas -v "$f" -o "$tmp/k.cubin" 2>&1 |
    awk -v file="$(basename "$f")" -v all=$ALL '
      /Compiling entry function/ { name = $0; sub(/.*_cu_[0-9a-f]+[0-9]*/, "", name); sub(/I.*/, "", name); sub(/E+vlT_.*/, "", name) }
      /bytes stack frame/ { frame = $1 }
      /Used [0-9]+ registers/ { regs = $5; if (all || frame + 0 > 0) print file, name, regs " registers", frame " bytes of stack" }'
done | sort | uniq -c | sort -k2,2 -k3,3
