# The CUDA platform from Python: a process started with
# TESSERA_PLATFORM=cuda runs on CUDA devices. Here on emulated GPUs
# (TESSERA_CUDA_EMULATE: device memory in host memory, kernels as host
# loops), so it runs on any machine whose module was built with CUDA; the
# results must be the CPU's bits.
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera as ts

SCRIPT = r"""
import numpy as np
import tessera as ts
import tessera.numpy as tnp

devs = ts.devices()
assert {d.platform for d in devs} == {"gpu"} and {d.device_kind for d in devs} == {"cuda"}, devs
assert len(devs) == 4 and repr(devs[0]) == "CudaDevice(id=0)", devs
mesh = ts.make_mesh((len(devs),), ("x",))
x = ts.device_put(np.linspace(-20.0, 20.0, 1001, dtype=np.float32), ts.NamedSharding(mesh, ts.P("x")))

@ts.jit
def f(x):
    return 2 * tnp.sin(x) + tnp.exp(x / 10) * x - 1

np.save(OUT, np.asarray(f(x)))
"""


def _cuda_in_module():
    try:
        ts.devices("cuda")
    except ts.DeviceError as e:
        return "built without CUDA" not in str(e)
    return True


@pytest.mark.skipif(not _cuda_in_module(), reason="the module was built without CUDA")
def test_emulated_gpus_give_the_cpu_bits(tmp_path):
    out = tmp_path / "gpu.npy"
    env = dict(os.environ, TESSERA_PLATFORM="cuda", TESSERA_CUDA_EMULATE="2", TESSERA_DEVICES_PER_GPU="2")
    r = subprocess.run([sys.executable, "-c", f"OUT = {str(out)!r}\n" + SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    gpu = np.load(out)

    import tessera.numpy as tnp

    mesh = ts.make_mesh((4,), ("x",), devices=ts.devices()[:4])
    x = ts.device_put(np.linspace(-20.0, 20.0, 1001, dtype=np.float32), ts.NamedSharding(mesh, ts.P("x")))
    cpu = np.asarray(ts.jit(lambda x: 2 * tnp.sin(x) + tnp.exp(x / 10) * x - 1)(x))
    assert gpu.dtype == cpu.dtype and gpu.shape == cpu.shape
    assert gpu.tobytes() == cpu.tobytes()


def test_cuda_in_a_cpu_process_says_how_to_choose():
    # This process runs on the CPU devices already: asking for GPUs names the
    # way to choose them (or why there are none).
    ts.devices()
    with pytest.raises(ts.DeviceError, match=r"^\[devices\] devices\(\"cuda\"\): "):
        ts.devices("cuda")
