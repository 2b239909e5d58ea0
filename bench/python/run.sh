#!/usr/bin/env bash
# Python front end overhead: the same small calls from C++ (bench_dispatch),
# from Python through Tessera's bindings, and through JAX (CPU, from PyPI,
# in a venv under the build tree). Writes BUILD/bench-results/python.json
# and prints a table.
#
#   bash bench/python/run.sh build/default
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/default}
source bench/venv.sh
out=$build/bench-results
mkdir -p "$out"
n=$(nproc)

if [ ! -x "$build/python-venv/bin/python" ] || ! "$build/python-venv/bin/python" -c "import tessera" 2>/dev/null; then
  bash scripts/python-test.sh --prebuilt "$build" --co -q >/dev/null  # builds and installs the package
fi
jax_venv=$build/jax-venv
if [ ! -x "$jax_venv/bin/python" ] || ! "$jax_venv/bin/python" -c "import jax" 2>/dev/null; then
  make_venv bench-python "$jax_venv" "$build/jax-venv-install.log" "jax[cpu]" numpy
fi

cxx=$(TESSERA_NUM_CPU_DEVICES=$n "$build/bench/bench_dispatch")
py=$(BENCH_DEVICES=$n "$build/python-venv/bin/python" bench/python/overhead.py tessera)
jx=$(BENCH_DEVICES=$n "$jax_venv/bin/python" bench/python/overhead.py jax)
python3 - "$cxx" "$py" "$jx" "$out/python.json" <<'PY'
import json, sys
cxx, py, jx = (json.loads(a) for a in sys.argv[1:4])
rows = [("x + 1, 16 f32, one device, eager", "eager_1dev"),
        (f"x + 1, 16 f32 over {py['devices']} devices, eager", "eager_ndev"),
        ("cached jit call of x + 1, 16 f32, one device", "jit_cached_1dev")]
print(f"{'call':48s} {'C++':>9s} {'Python':>9s} {'JAX':>9s} {'Py/JAX':>7s}")
for name, key in rows:
    print(f"{name:48s} {cxx[key]*1e6:7.2f}us {py[key]*1e6:7.2f}us {jx[key]*1e6:7.2f}us {py[key]/jx[key]:7.2f}")
json.dump({"cxx": cxx, "python": py, "jax": jx}, open(sys.argv[4], "w"), indent=1)
PY
