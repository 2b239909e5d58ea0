#!/usr/bin/env bash
# Builds NCCL 2.30 for the GPU machines (Hopper, sm_90) into DEST (default
# build/gpu-nccl/nccl.tar.xz: lib/libnccl.so.2 and include/nccl.h), for
# scripts/gpu-check.sh to check Tessera's collectives over NCCL there.
#
#   scripts/gpu-nccl.sh [NCCL_SOURCE] [DEST]
#
# Why: those machines have one GPU, and NCCL before 2.30 refuses two ranks on
# one GPU ("Multiple Ranks are using the same GPU"). 2.30 lets ranks share it
# under NCCL_MULTI_RANK_GPU_ENABLE=1, so 8 devices of one GPU
# (TESSERA_DEVICES_PER_GPU=8) can run the collectives' suites with
# TESSERA_GPU_COLLECTIVES=nccl. The CUDA toolkit here and there ships 2.28,
# and a 2.30 wheel (every architecture, every kernel) is far over the 64 MiB
# that travels to the GPU machine.
#
# So this builds NCCL's release tag v2.30.7-1 with the toolkit's nvcc for
# sm_90 only, and with only the device kernels that are used:
#   SendRecv                 Tessera's NCCL transport (src/backend/cuda/
#                            nccl.cpp) moves bytes with ncclSend/ncclRecv only;
#                            every combine is Tessera's own kernel;
#   AllReduce Sum f32 * *    tests/kernels/nccl_probe.cpp's all-reduce.
# NCCL's other collectives stay in the library's API but have no kernel:
# calling one fails at run time. The library is stripped and packed with xz
# (gpu-check.sh unpacks it with Python's tarfile where the machine lacks xz).
#
# NCCL_SOURCE is a checkout of https://github.com/NVIDIA/nccl (at any commit:
# the tag is checked out into a temporary worktree); without one the tag is
# cloned from GitHub. The build takes about 6 minutes on 2 cores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TAG=v2.30.7-1
SRC="${1:-}"
DEST="${2:-$ROOT/build/gpu-nccl}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
ONLY_FUNCS="SendRecv|AllReduce Sum f32 * *"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/nccl"
if [ -n "$SRC" ]; then
  git -C "$SRC" archive "$TAG" | tar -x -C "$WORK/nccl"
else
  git clone --quiet --depth 1 --branch "$TAG" https://github.com/NVIDIA/nccl "$WORK/nccl"
fi
# The toolkit's include folder without its own NCCL (2.28) headers: NCCL's
# device-side host files put the toolkit's folder before NCCL's own, and
# 2.28's nccl_device headers lack what 2.30's code uses.
mkdir -p "$WORK/cuda-include"
for f in "$CUDA_HOME"/include/*; do
  case "$(basename "$f")" in nccl*) ;; *) ln -s "$f" "$WORK/cuda-include/" ;; esac
done
make -C "$WORK/nccl" -j "$(nproc)" src.build CUDA_HOME="$CUDA_HOME" CUDA_INC="$WORK/cuda-include" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ONLY_FUNCS="$ONLY_FUNCS" > "$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log"; exit 1; }

S="$WORK/pack"
mkdir -p "$S/lib" "$S/include"
cp "$(readlink -f "$WORK/nccl/build/lib/libnccl.so.2")" "$S/lib/libnccl.so.2"
strip --strip-unneeded "$S/lib/libnccl.so.2"
cp "$WORK/nccl/build/include/nccl.h" "$S/include/"
rm -rf "$DEST"
mkdir -p "$DEST"
tar -C "$S" -cf - . | xz -9 -T "$(nproc)" > "$DEST/nccl.tar.xz"
du -sh "$S/lib/libnccl.so.2" "$DEST/nccl.tar.xz"
