#!/bin/sh
# Runs a test on the real GPUs: run_on_gpu.sh GPU_INFO COMMAND [ARGS...].
# GPU_INFO (tessera_gpu_info) says whether this machine has a GPU; without
# one the test is skipped (exit 77, which ctest reports as skipped, never
# as passed).
info=$("$1" 2>&1)
case "$info" in
  *"GPUs: none"*)
    echo "skipped: no GPU here: $info"
    exit 77
    ;;
esac
shift
TESSERA_PLATFORM=cuda exec "$@"
