#!/usr/bin/env bash
# Checks Tessera's CUDA slice on a machine with a GPU, writing every log to
# $OUT (default ./gpu-check-out):
#
#   nvidia-smi.txt        the driver's view of the GPUs
#   gpu_info.txt          the GPU port (src/backend/cuda/discovery.cpp): names,
#                         memory, compute capability
#   nccl.txt             each libnccl found: its version, and whether one GPU
#                         holds two NCCL ranks (tests/kernels/nccl_probe.cpp)
#   nccl-suites.txt      with a full build, where one does: the collectives'
#                         suites with TESSERA_GPU_COLLECTIVES=nccl, 8 ranks
#   shared_math_gpu.txt   the shared kernel math (src/kernels/) on each GPU
#                         against the CPU, bit for bit (tests/kernels)
#   memcheck.txt          the same under compute-sanitizer memcheck
#   memcheck-platform.txt, memcheck-kernels.txt
#                         with a full build: memcheck of test_cuda_platform,
#                         of the diff and long-row reduction tests, and of
#                         jit's graph replays (test_jit_graphs)
#   devices*.txt, ctest-cuda.txt
#                         with a full build (BUILD_DIR): `tessera devices`,
#                         TESSERA_PLATFORM=cuda, and the ctest tests labelled cuda
#                         (the IFU cube against the CPU's, byte for byte, among
#                         them: cuda.ifu_cube)
#   example-<name>.txt    every example with TESSERA_PLATFORM=cuda, 8 devices
#   ifu-1e6-cuda.txt, ifu-1e6-cpu.txt, ifu-1e7-cuda.txt, ifu-1e7-cpu.txt
#                         `tessera ifu` on 10^6 and 10^7 particles, on 8 devices
#                         of the GPU and on 16 CPU devices: times, peak memory
#                         of the process and of a device
#   rubix-gpu.txt         Rubix 0.0.5 on JAX on the GPU on the same galaxies,
#                         against the cubes of `tessera ifu --platform cuda`:
#                         times, peak GPU memory, cube agreement (needs
#                         build/gpu-wheels from scripts/gpu-wheels.sh)
#
#   scripts/gpu-check.sh [BUILD_DIR | --full]
#
# Needs only a driver, nvcc (CUDA 12 or later, found on PATH, in $CUDA_HOME
# or /usr/local/cuda) and a C++20 host compiler (g++ 12 or later): the first
# three checks compile their few sources directly, since such machines often
# lack the Debian packages the whole library needs (OpenBLAS, GoogleTest,
# CLI11, ...). compute-sanitizer is used when the toolkit has it. BUILD_DIR,
# a CMake build of the whole project made on that machine (with CUDA on),
# adds the last checks. --full makes that build here from the folder
# scripts/gpu-deps.sh gathers on a build machine (carried as build/gpu-deps:
# deps.tar.xz, 19 MiB, unpacked here; or the unpacked folder itself), and
# should finish within 9 minutes on 16 cores: the checks after the ctest run
# each have a time limit and stop once GPU_CHECK_SECONDS (default 510) have
# passed since the start.
#
# A shorter check (a rerun after a fix) takes, from the environment:
#   GPU_CHECK_TARGETS  the build targets, instead of everything (the
#                      command line, tessera_cli, is always built)
#   GPU_CHECK_TESTS    a ctest -R pattern within the tests labelled cuda
#   GPU_CHECK_STEPS    the checks to run besides the build, of:
#                      sweep (the shared math and its memcheck, first)
#                      ctest bench memcheck nccl examples ifu rubix
#                      (default all), so the checks can be split over two
#                      calls; a second call on a warm machine finds
#                      build/gpu as the first left it.
#
# Exit status: 0 when every check that ran passed, 1 otherwise, 2 when the
# tools are missing.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$PWD/gpu-check-out}"
BUILD_DIR="${1:-}"
mkdir -p "$OUT/bin"
status=0
deadline=$(( $(date +%s) + ${GPU_CHECK_SECONDS:-510} ))

log() { echo "gpu-check: $*" | tee -a "$OUT/summary.txt"; }
# step NAME: whether GPU_CHECK_STEPS asks for the check NAME.
step() { case " ${GPU_CHECK_STEPS:-sweep ctest bench memcheck nccl examples ifu rubix} " in *" $1 "*) return 0 ;; esac; return 1; }
fail() { log "FAIL: $*"; status=1; }
# bounded SECONDS NAME command...: runs the command for at most SECONDS, and
# not past the deadline (then it is not started); exit 124 either way.
bounded() {
  local limit="$1" name="$2" left=$(( deadline - $(date +%s) ))
  shift 2
  if [ $left -lt 15 ]; then
    log "$name: not run, the time for the checks is spent"
    return 124
  fi
  timeout $(( limit < left ? limit : left )) "$@"
}
# unpack ARCHIVE DIR: a .tar.gz or .tar.xz; without xz on the machine,
# Python's tarfile reads the .tar.xz. Errors go to unpack.txt.
unpack() {
  tar -C "$2" -xf "$1" 2>>"$OUT/unpack.txt" ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2" 2>>"$OUT/unpack.txt"
}
why() { [ "$1" = 124 ] && echo "out of time" || echo "exit $1"; }

CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}"
NVCC="$CUDA_HOME/bin/nvcc"
# compute-sanitizer: the toolkit's, else one on PATH, else none (memchecks skipped).
SANITIZER="$CUDA_HOME/bin/compute-sanitizer"
[ -x "$SANITIZER" ] || SANITIZER="$(command -v compute-sanitizer || true)"
CXX="${CXX:-g++}"
if [ ! -x "$NVCC" ] || ! command -v "$CXX" >/dev/null; then
  log "needs nvcc (looked in $CUDA_HOME/bin) and a C++20 compiler ($CXX)"
  exit 2
fi
: > "$OUT/summary.txt"
log "nvcc: $("$NVCC" --version | tail -1); host compiler: $("$CXX" --version | head -1)"

if command -v nvidia-smi >/dev/null; then
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || fail "nvidia-smi"
else
  log "no nvidia-smi on PATH"
fi

# The flags of cmake/cuda_options.cmake and of the CPU kernels: the same
# bits need the same rules (no contraction, no flush to zero, IEEE division
# and square root). Hopper code plus its PTX, as the CMake build.
ARCH="${CUDA_ARCH:---generate-code=arch=compute_90,code=[sm_90,compute_90]}"
NVCC_FLAGS=(-O3 -std=c++20 "$ARCH" --fmad=false --ftz=false --prec-div=true --prec-sqrt=true
  -Xcompiler=-Wall,-Wextra,-ffp-contract=off)
CXX_FLAGS=(-O3 -std=c++20 -Wall -Wextra -ffp-contract=off -fno-trapping-math)
INC=(-I"$ROOT/src" -I"$ROOT/include" -I"$ROOT/tests" -I"$CUDA_HOME/include")
CUDART=(-L"$CUDA_HOME/lib64" -lcudart_static -ldl -lrt -lpthread)

build() {  # name, command...
  local name="$1"
  shift
  if ! "$@" > "$OUT/build-$name.txt" 2>&1; then
    fail "building $name (see build-$name.txt)"
    return 1
  fi
}

# The GPU port alone.
build gpu_info "$CXX" "${CXX_FLAGS[@]}" "${INC[@]}" "$ROOT/tests/kernels/gpu_info.cpp" \
  "$ROOT/src/backend/cuda/discovery.cpp" "${CUDART[@]}" -o "$OUT/bin/gpu_info" &&
  { "$OUT/bin/gpu_info" > "$OUT/gpu_info.txt" 2>&1 || fail "gpu_info"; }

# NCCL: each libnccl the machine has (the toolkit's, the Python wheel's, the
# one scripts/gpu-nccl.sh built and carried as build/gpu-nccl), its version
# and whether it runs two ranks on one GPU (NCCL 2.30 and later with
# NCCL_MULTI_RANK_GPU_ENABLE=1): what collectives over NCCL can be checked
# on with one GPU. Information, not a pass or fail.
nccl_libs=()
NCCL_SHARES=""
NCCL_INCLUDE=""
carried_nccl="${GPU_NCCL:-$ROOT/build/gpu-nccl}/nccl.tar.xz"
if [ -f "$carried_nccl" ]; then
  rm -rf "$ROOT/build/gpu-nccl.unpacked" && mkdir -p "$ROOT/build/gpu-nccl.unpacked"
  unpack "$carried_nccl" "$ROOT/build/gpu-nccl.unpacked" ||
    log "nccl: unpacking $carried_nccl failed (see unpack.txt)"
fi
for lib in "$ROOT/build/gpu-nccl.unpacked/lib/libnccl.so.2" "$CUDA_HOME/lib/libnccl.so.2" "$CUDA_HOME/lib64/libnccl.so.2" \
  "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)"; do
  [ -f "$lib" ] && nccl_libs+=("$(readlink -f "$lib")")
done
if [ ${#nccl_libs[@]} = 0 ]; then
  log "nccl: no libnccl.so.2 in the toolkit or Python's nvidia-nccl"
elif build nccl_probe "$CXX" "${CXX_FLAGS[@]}" "${INC[@]}" "$ROOT/tests/kernels/nccl_probe.cpp" "${CUDART[@]}" \
  -o "$OUT/bin/nccl_probe"; then
  : > "$OUT/nccl.txt"
  for lib in $(printf '%s\n' "${nccl_libs[@]}" | sort -u); do
    timeout 60 "$OUT/bin/nccl_probe" "$lib" > "$OUT/bin/nccl-one.txt" 2>&1
    rc=$?
    [ $rc = 0 ] && [ -z "$NCCL_SHARES" ] && NCCL_SHARES="$lib" && NCCL_INCLUDE="$(dirname "$(dirname "$lib")")/include"
    cat "$OUT/bin/nccl-one.txt" >> "$OUT/nccl.txt"
    log "nccl probe, exit $rc (0: two ranks share the GPU, 3: refused): $(tr '\n' ' ' < "$OUT/bin/nccl-one.txt" | tail -c 400)"
  done
fi

# The sweep: the kernel by nvcc, the CPU reference by the host compiler.
build_sweep() {
  "$NVCC" "${NVCC_FLAGS[@]}" "${INC[@]}" -c "$ROOT/tests/kernels/sweep_device.cu" -o "$OUT/bin/sweep_device.o" &&
    "$CXX" "${CXX_FLAGS[@]}" "${INC[@]}" -c "$ROOT/tests/kernels/test_shared_math_gpu.cpp" -o "$OUT/bin/main.o" &&
    "$NVCC" -cudart static "$OUT/bin/main.o" "$OUT/bin/sweep_device.o" -o "$OUT/bin/test_shared_math_gpu"
}
if ! step sweep; then
  log "shared math on the GPU: not run (GPU_CHECK_STEPS)"
elif build shared_math_gpu build_sweep; then
  "$OUT/bin/test_shared_math_gpu" > "$OUT/shared_math_gpu.txt" 2>&1
  rc=$?
  case $rc in
    0) log "shared math on the GPU: passed" ;;
    77) fail "shared math on the GPU: skipped, no GPU ($(head -1 "$OUT/shared_math_gpu.txt"))" ;;
    *) fail "shared math on the GPU (exit $rc, see shared_math_gpu.txt)" ;;
  esac
  if [ -n "$SANITIZER" ]; then
    "$SANITIZER" --tool memcheck --error-exitcode 1 "$OUT/bin/test_shared_math_gpu" > "$OUT/memcheck.txt" 2>&1 ||
      fail "compute-sanitizer memcheck (see memcheck.txt)"
  else
    log "no compute-sanitizer: memcheck skipped"
  fi
fi

# --full: build the library, its test suites, the examples and the IFU app
# (without PLplot) here, against the Debian packages that scripts/gpu-deps.sh
# gathered on a build machine (carried to this one as build/gpu-deps, or
# $GPU_DEPS: its archive deps.tar.xz (or .gz), unpacked to
# $GPU_DEPS_UNPACKED, or the unpacked folder): no MPI. Then run the checks
# below on that build.
if [ "$BUILD_DIR" = "--full" ]; then
  DEPS="${GPU_DEPS:-$ROOT/build/gpu-deps}"
  BUILD_DIR="${GPU_BUILD_DIR:-$ROOT/build/gpu}"
  archive="$(ls "$DEPS"/deps.tar.xz "$DEPS"/deps.tar.gz 2>/dev/null | head -1)"
  if [ ! -d "$DEPS/include/gtest" ] && [ -n "$archive" ]; then
    unpacked="${GPU_DEPS_UNPACKED:-$ROOT/build/gpu-deps.unpacked}"
    rm -rf "$unpacked" && mkdir -p "$unpacked"
    if unpack "$archive" "$unpacked"; then
      DEPS="$unpacked"
    else
      fail "unpacking $archive (see unpack.txt)"
    fi
  fi
  if [ ! -d "$DEPS/include/gtest" ]; then
    fail "--full needs the folder scripts/gpu-deps.sh makes ($DEPS)"
    BUILD_DIR=""
  else
    MULTI="$DEPS/lib/x86_64-linux-gnu"
    # The carried libraries for every program below (HDF5's libcurl among
    # them), and the carried pkg-config looking at the carried .pc files only.
    export LD_LIBRARY_PATH="$MULTI${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PKG_CONFIG_LIBDIR="$MULTI/pkgconfig" PKG_CONFIG_PATH=""
    export TESSERA_IFU_DATA="$DEPS/share/tessera/ifu-data"
    GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
    start=$(date +%s)
    if cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$DEPS" \
        -DCMAKE_CUDA_COMPILER="$NVCC" -DTESSERA_WITH_CUDA=ON -DTESSERA_WITH_MPI=OFF \
        -DTESSERA_BUILD_IFU=ON -DTESSERA_IFU_PLOTS=OFF -DTESSERA_BUILD_EXAMPLES=ON \
        -DPKG_CONFIG_EXECUTABLE="$DEPS/bin/pkg-config" \
        -DCBLAS_INCLUDE_DIR="$DEPS/include/x86_64-linux-gnu" \
        -DBLAS_LIBRARIES="$MULTI/libopenblas.so" \
        ${NCCL_INCLUDE:+$([ -f "$NCCL_INCLUDE/nccl.h" ] && echo "-DNCCL_INCLUDE_DIR=$NCCL_INCLUDE")} \
        > "$OUT/build-full.txt" 2>&1 &&
      cmake --build "$BUILD_DIR" -j "$(nproc)" ${GPU_CHECK_TARGETS:+--target $GPU_CHECK_TARGETS tessera_cli} \
        >> "$OUT/build-full.txt" 2>&1; then
      log "full build: $(( $(date +%s) - start )) s"
    else
      fail "full build (see build-full.txt)"
      BUILD_DIR=""
    fi
  fi
fi

# With a full build: the command line and the ctest tests labelled cuda.
if [ -n "$BUILD_DIR" ]; then
  TESSERA="$BUILD_DIR/tools/tessera"
  if [ -x "$TESSERA" ]; then
    "$TESSERA" devices > "$OUT/devices.txt" 2>&1 || fail "tessera devices"
    # The runtime on the GPUs: CUDA devices, two per GPU.
    TESSERA_PLATFORM=cuda TESSERA_DEVICES_PER_GPU=2 "$TESSERA" devices > "$OUT/devices-platform-cuda.txt" 2>&1 ||
      fail "TESSERA_PLATFORM=cuda tessera devices (see devices-platform-cuda.txt)"
    grep -q "CudaDevice(id=1)  kind=cuda" "$OUT/devices-platform-cuda.txt" || fail "TESSERA_PLATFORM=cuda lists no CUDA devices"
  else
    fail "no $TESSERA"
  fi
  # Every suite on the GPUs (label cuda: 8 devices per GPU), then the
  # emulated runs for comparison when time allows (label cuda-emulated).
  if step ctest; then
    ctest --test-dir "$BUILD_DIR" -L '^cuda$' ${GPU_CHECK_TESTS:+-R "$GPU_CHECK_TESTS"} -j 4 --timeout 300 \
      --output-on-failure > "$OUT/ctest-cuda.txt" 2>&1 ||
      fail "ctest -L cuda (see ctest-cuda.txt)"
    tail -15 "$OUT/ctest-cuda.txt" | tee -a "$OUT/summary.txt"
  fi
  # The benchmarks against the GPU's own limits (bench/bench_gpu.cpp).
  if step bench && [ -x "$BUILD_DIR/bench/bench_gpu" ]; then
    "$BUILD_DIR/bench/bench_gpu" --json "$OUT/bench_gpu.json" > "$OUT/bench_gpu.txt" 2>&1 || fail "bench_gpu (see bench_gpu.txt)"
    tee -a "$OUT/summary.txt" < "$OUT/bench_gpu.txt"
  fi
  if step memcheck && [ -n "$SANITIZER" ] && [ -x "$BUILD_DIR/tests/test_cuda_platform" ]; then
    TESSERA_PLATFORM=cuda TESSERA_DEVICES_PER_GPU=2 "$SANITIZER" --tool memcheck --error-exitcode 1 \
      "$BUILD_DIR/tests/test_cuda_platform" > "$OUT/memcheck-platform.txt" 2>&1 ||
      fail "compute-sanitizer memcheck of test_cuda_platform (see memcheck-platform.txt)"
    # The stencil and reduction kernels whose index arithmetic is their own
    # (diff's runs and windows, the warp walk of long rows), and jit's graph
    # replays (graphs reading the blocks they keep), on 8 devices as their
    # suites expect.
    : > "$OUT/memcheck-kernels.txt"
    for t in "test_stencil Diff.*" "test_reduce ReduceKernel.LongRowsOnADevice*" "test_jit_graphs *"; do
      read -r bin filter <<< "$t"
      [ -x "$BUILD_DIR/tests/$bin" ] || continue
      bounded 90 "memcheck $bin" env TESSERA_PLATFORM=cuda TESSERA_DEVICES_PER_GPU=8 "$SANITIZER" --tool memcheck \
        --error-exitcode 1 "$BUILD_DIR/tests/$bin" --gtest_filter="$filter" >> "$OUT/memcheck-kernels.txt" 2>&1 ||
        fail "compute-sanitizer memcheck of $bin $filter (see memcheck-kernels.txt)"
    done
  fi
  # Collectives over NCCL (TESSERA_GPU_COLLECTIVES=nccl), 8 ranks on the
  # GPU, when a libnccl above let ranks share it: the collectives' suites
  # and the direct groups' own (comm/direct.hpp), into nccl-suites.txt.
  # NCCL's notes on ranks sharing a GPU: each rank takes its own channels,
  # and more ranks than the GPU's SMs hold at once hang; NCCL_MAX_CTAS
  # bounds each rank's blocks (8 ranks x 2 here, of the GPU's 132 SMs).
  if step nccl && [ -n "$NCCL_SHARES" ]; then
    : > "$OUT/nccl-suites.txt"
    # nccl_suite RANKS LIMIT TEST: one suite over NCCL, RANKS devices on the
    # GPU; its time in nccl_seconds.
    nccl_suite() {
      local t0
      t0=$(date +%s)
      echo "== $3, $1 ranks on the GPU" >> "$OUT/nccl-suites.txt"
      bounded "$2" "nccl $3" env TESSERA_PLATFORM=cuda TESSERA_DEVICES_PER_GPU="$1" TESSERA_GPU_COLLECTIVES=nccl \
        NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=2 TESSERA_NCCL_LIBRARY="$NCCL_SHARES" "$BUILD_DIR/tests/$3" \
        >> "$OUT/nccl-suites.txt" 2>&1
      local rc=$?
      nccl_seconds=$(( $(date +%s) - t0 ))
      return $rc
    }
    # The direct groups' own suite first (2 groups, so 2 communicators of
    # each rank; the collectives' suite makes 24, the shard_map suite 16):
    # when it fails, the bigger suites would only spend the time the checks
    # after this one need. It then runs again on 2 ranks (what NCCL's notes
    # say one GPU holds by default), to tell the number of ranks from the rest.
    for t in test_direct_groups test_collectives test_shard_map; do
      [ -x "$BUILD_DIR/tests/$t" ] || continue
      limit=150
      [ $t = test_direct_groups ] && limit=90
      nccl_suite 8 $limit $t
      rc=$?
      if [ $rc = 0 ]; then
        log "nccl: $t passed ($nccl_seconds s)"
        continue
      fi
      fail "nccl: $t on 8 ranks ($(why $rc) after $nccl_seconds s, see nccl-suites.txt)"
      if [ $t = test_direct_groups ]; then
        nccl_suite 2 45 $t && log "nccl: $t passed on 2 ranks" || log "nccl: $t failed on 2 ranks too ($(why $?))"
        log "nccl: the collectives' suites not run"
        break
      fi
    done
  elif step nccl; then
    log "nccl suites: not run, no libnccl here lets two ranks share the GPU (nccl.txt)"
  fi
  # The IFU cube on the GPU against the CPU's (tests/cuda/ifu_cube.sh), run
  # above: ctest registers it only when the IFU app is built.
  has_ifu=0
  [ -x "$TESSERA" ] && "$TESSERA" --help 2>&1 | grep -q '^  ifu ' && has_ifu=1
  if ! step ctest; then
    :
  elif grep -q "cuda\.ifu_cube .*Passed" "$OUT/ctest-cuda.txt"; then
    log "IFU cube on the GPU: the CPU's, byte for byte"
  elif [ $has_ifu = 1 ] && [ -z "${GPU_CHECK_TESTS:-}" ]; then
    fail "IFU cube on the GPU: cuda.ifu_cube did not pass (see ctest-cuda.txt)"
  fi

  # Every example on the GPU, with the arguments ctest gives them on the CPU.
  step examples && for ex in "finite_difference 256" mlp_layer collectives_tour "chunked_jacobian 4099 12" "ifu_pipeline 30011"; do
    name="${ex%% *}"
    [ -x "$BUILD_DIR/examples/$name" ] || { fail "no example $name in $BUILD_DIR/examples"; continue; }
    # shellcheck disable=SC2086  # the example's arguments
    bounded 120 "example $name" env TESSERA_PLATFORM=cuda TESSERA_DEVICES_PER_GPU=8 \
      "$BUILD_DIR/examples/$name" ${ex#"$name"} > "$OUT/example-$name.txt" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
      log "example $name on the GPU: passed"
    else
      fail "example $name on the GPU ($(why $rc), see example-$name.txt)"
    fi
  done

  # `tessera ifu` at scale: 10^6 and 10^7 particles with the carried BC03
  # templates, on 8 devices of the GPU and on 16 CPU devices, each with its
  # times and peak memory. The galaxies are those of bench/ifu/bench_ifu.py
  # (its seed, its config, particles nudged off spaxel edges), written in
  # Rubix's form too, so that the Rubix step below compares what `make
  # bench-ifu` compares on CPUs.
  RUNS="$(mkdir -p "$BUILD_DIR/ifu-runs" && cd "$BUILD_DIR/ifu-runs" && pwd)"
  generated=" "
  # ifu_galaxy PARTICLES: RUNS/nPARTICLES/ holds config.yml, galaxy.h5 and
  # rubix/rubix_galaxy.h5, written once per check.
  ifu_galaxy() {
    local dir="$RUNS/n$1"
    case "$generated" in *" $1 "*) return 0 ;; esac
    rm -rf "$dir" && mkdir -p "$dir/rubix"
    sed "s|\"@RUBIX_GALAXY_DIR@\"|\"$dir/rubix\"|" "$ROOT/bench/ifu/config.yml" > "$dir/config.yml"
    bounded 60 "ifu-generate $1" "$TESSERA" ifu-generate --particles "$1" --seed 20240601 --config "$dir/config.yml" \
      --output "$dir/galaxy.h5" --rubix-output "$dir/rubix/rubix_galaxy.h5" > "$dir/generate.txt" 2>&1 ||
      { fail "tessera ifu-generate, $1 particles (see $dir/generate.txt)"; return 1; }
    generated+="$1 "
  }
  # ifu_run TAG PARTICLES PLATFORM DEVICES LIMIT: `tessera ifu` on that
  # galaxy; cube-TAG-PLATFORM.fits and tessera-TAG-PLATFORM.json in RUNS.
  ifu_run() {
    ifu_galaxy "$2" || return 1
    rm -f "$RUNS/cube-$1-$3.fits" "$RUNS/tessera-$1-$3.json"
    bounded "$5" "ifu $1 on $3" env -u TESSERA_PLATFORM "$TESSERA" ifu --platform "$3" --devices "$4" \
      --config "$RUNS/n$2/config.yml" --input "$RUNS/n$2/galaxy.h5" --no-plots --output "$RUNS/cube-$1-$3.fits" \
      --json "$RUNS/tessera-$1-$3.json" > "$OUT/ifu-$1-$3.txt" 2>&1
  }
  if step ifu && [ $has_ifu = 1 ]; then
    for run in "1e6 1000000 60" "1e7 10000000 150"; do
      read -r tag particles limit <<< "$run"
      for where in "cuda 8" "cpu 16"; do
        read -r platform devices <<< "$where"
        ifu_run "$tag" "$particles" "$platform" "$devices" "$limit"
        rc=$?
        if [ $rc -eq 0 ]; then
          log "tessera ifu, $particles particles, $devices $platform devices:$(grep -h -E '^  (time|peak device)' \
            "$OUT/ifu-$tag-$platform.txt" | tr -s ' ' | tr '\n' ';')"
        else
          fail "tessera ifu, $particles particles on $platform ($(why $rc), see ifu-$tag-$platform.txt)"
        fi
      done
    done
  fi

  # Rubix 0.0.5 on JAX on the GPU (JAX's default device), on the galaxies
  # above, against the cubes of `tessera ifu --platform cuda`: Rubix's first
  # call (trace, compile, run) and second call, the peak memory JAX held on
  # the GPU, the speed ratio, and the largest relative difference per
  # element as bench_ifu.py computes it (scripts/gpu_rubix.py), all in
  # rubix-gpu.txt. Rubix and what it imports that this machine's Python
  # lacks come as wheels (scripts/gpu-wheels.sh, carried as build/gpu-wheels).
  # At most GPU_CHECK_RUBIX_SECONDS (150) in all: 10^5 particles first (so
  # that one comparison finishes: on an H200, Rubix had not finished 10^6
  # within 110 s), then 10^6 and 10^7 in what is left (Rubix may run out of GPU
  # memory there: recorded).
  WHEELS="${GPU_WHEELS:-$ROOT/build/gpu-wheels}"
  PY="${PYTHON:-python3}"
  if step rubix && [ $has_ifu = 1 ] && ! ls "$WHEELS"/*.whl > /dev/null 2>&1; then
    log "rubix on the GPU: not run, no wheels in $WHEELS (scripts/gpu-wheels.sh makes them)"
  elif step rubix && [ $has_ifu = 1 ]; then
    rubix_end=$(( $(date +%s) + ${GPU_CHECK_RUBIX_SECONDS:-150} ))
    site="$BUILD_DIR/rubix-site"
    rm -rf "$site"
    : > "$OUT/rubix-gpu.txt"
    if bounded 60 "rubix wheels" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$site" "$WHEELS"/*.whl >> "$OUT/rubix-gpu.txt" 2>&1; then
      for run in "1e5 100000" "1e6 1000000" "1e7 10000000"; do
        read -r tag particles <<< "$run"
        rm -f "$RUNS/rubix-$tag".*
        if [ $(( rubix_end - $(date +%s) )) -lt 20 ]; then
          log "rubix on the GPU, $particles particles: not run, the step's time is spent"
          continue
        fi
        # Tessera's side: the timings' above, else (GPU_CHECK_STEPS=rubix) run here.
        if [ ! -f "$RUNS/tessera-$tag-cuda.json" ]; then
          if step ifu && [ "$tag" != 1e5 ]; then
            log "rubix on the GPU, $particles particles: not run, tessera ifu on cuda wrote no cube"
            continue
          elif ! ifu_run "$tag" "$particles" cuda 8 60; then
            fail "tessera ifu, $particles particles on cuda (see ifu-$tag-cuda.txt)"
            continue
          fi
        fi
        left=$(( rubix_end - $(date +%s) ))
        echo "== Rubix, $particles particles, against $RUNS/cube-$tag-cuda.fits" >> "$OUT/rubix-gpu.txt"
        bounded "$left" "rubix $tag" env PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=2 \
          "$PY" "$ROOT/scripts/gpu_rubix.py" --config "$RUNS/n$particles/config.yml" --expect-platform gpu \
          --tessera-cube "$RUNS/cube-$tag-cuda.fits" --tessera-json "$RUNS/tessera-$tag-cuda.json" \
          --tessera-log "$OUT/ifu-$tag-cuda.txt" --repeat 2 --out-cube "$RUNS/rubix-$tag.npy" \
          --json "$RUNS/rubix-$tag.json" > "$RUNS/rubix-$tag.txt" 2>&1
        rc=$?
        cat "$RUNS/rubix-$tag.txt" >> "$OUT/rubix-gpu.txt"
        result="$(grep -h "^gpu_rubix: .* particles on " "$RUNS/rubix-$tag.txt" | tail -1)"
        last="$(grep -h "^gpu_rubix: " "$RUNS/rubix-$tag.txt" | tail -1)"
        if [ -n "$result" ] && [ $rc -eq 0 ]; then
          log "rubix on the GPU, ${result#gpu_rubix: }"
        elif [ -n "$result" ]; then
          fail "rubix on the GPU, ${result#gpu_rubix: } (see rubix-gpu.txt)"
        elif [ $rc = 124 ] || [ $rc = 3 ] || [ "$tag" = 1e7 ]; then
          # Rubix too slow or out of memory: a finding about Rubix, not a failed check.
          log "rubix on the GPU, $particles particles: did not finish ($(why $rc)); ${last#gpu_rubix: }"
        else
          fail "rubix on the GPU, $particles particles: did not start ($(why $rc)); ${last#gpu_rubix: }"
        fi
      done
    else
      fail "installing the wheels of $WHEELS (see rubix-gpu.txt)"
    fi
  fi
fi

[ $status -eq 0 ] && log "all checks passed" || log "some checks failed"
exit $status
