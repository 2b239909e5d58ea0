#!/usr/bin/env bash
# Gathers what a full build of the tests needs from this machine's Debian
# packages into one folder (default build/gpu-deps, about 45 MiB), for a GPU
# machine that has cmake, ninja, nvcc and g++ but no Debian packages and no
# network: OpenBLAS (headers and the library with its Fortran runtime),
# GoogleTest, CLI11 and nlohmann_json (the benchmarks). scripts/gpu-check.sh --full builds the library and
# its suites there against it (without MPI and the IFU app) and runs the
# tests labelled cuda.
#
#   scripts/gpu-deps.sh [DEST]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/build/gpu-deps}"
# The folder mirrors /usr (include/, lib/x86_64-linux-gnu/, share/), so the
# CMake package files, which locate everything relative to themselves, work
# unchanged from there.
MULTI=lib/x86_64-linux-gnu
rm -rf "$DEST"
mkdir -p "$DEST/include/x86_64-linux-gnu" "$DEST/$MULTI/cmake" "$DEST/share/cmake"

# OpenBLAS: the headers, and the library itself (resolved through Debian's
# alternatives) with its runtime dependencies.
cp -L /usr/include/x86_64-linux-gnu/cblas*.h /usr/include/x86_64-linux-gnu/openblas_config.h \
  "$DEST/include/x86_64-linux-gnu/"
cp -L "/usr/$MULTI/libopenblas.so.0" "$DEST/$MULTI/libopenblas.so.0"
ln -sf libopenblas.so.0 "$DEST/$MULTI/libopenblas.so"
for dep in $(ldd "/usr/$MULTI/libopenblas.so.0" | awk '/=>/ {print $3}'); do
  case "$(basename "$dep")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|ld-linux*|libgcc_s.so*) ;;  # every machine has these
    *) cp -L "$dep" "$DEST/$MULTI/" ;;
  esac
done

# GoogleTest (static) and CLI11 (headers), with their CMake package files.
cp -r /usr/include/gtest /usr/include/gmock /usr/include/CLI /usr/include/nlohmann "$DEST/include/"
cp -L /usr/$MULTI/libgtest.a /usr/$MULTI/libgtest_main.a /usr/$MULTI/libgmock.a /usr/$MULTI/libgmock_main.a "$DEST/$MULTI/"
cp -r "/usr/$MULTI/cmake/GTest" "$DEST/$MULTI/cmake/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$DEST/share/cmake/"
du -sh "$DEST"
