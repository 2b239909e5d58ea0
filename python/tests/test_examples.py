"""Runs the user examples in examples/python/ as a user would, one process each.

Each example checks its own numbers against NumPy and exits with status 1
when a check fails; here we also look for a few lines of its output.
"""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"

# Example -> (extra arguments, lines its output must contain).
KNOWN = {
    "intro_distributed.py": ([], [
        "Mesh('i': 8)",
        "Mesh('i': 4, 'j': 2)",
        "Output shape (192, 128) type f32[192@i,128@j]",
        "Output [[22], [20], [12], [17]]",
        "Before [0, 1, 2, 3]",
        "After  [3, 0, 1, 2]",
        "Device 5: i-axis=2, j-axis=1",
        "All checks passed.",
    ]),
    "spmd_tutorial.py": ([], [
        "NamedSharding(mesh=Mesh('x': 2, 'y': 4), spec=PartitionSpec('x', 'y'))",
        "shardings match: True",
        "[48. 52. 56. 60. 64. 68. 72. 76.]",
        "sharded_array type: i32[4@X,2]",
        "ans sharding: i32[4@X,8@Y]",
        "device local shapes: [(4,)]",
        "All checks passed.",
    ]),
    # A smaller array than the default 4096 x 4096 keeps the test quick.
    "sharded_diff.py": (["--size", "1000", "--repeats", "2"], [
        "diff along axis 0 of a 1000 x 1000 float64 array",
        "8 along diff axis    Mesh('x': 8)           PartitionSpec('x', None)",
        "All layouts equal np.diff bitwise and move one boundary row per block of rows at most.",
    ]),
    "chunked_jacobian.py": ([], [
        "rows per device: [126, 126, 126, 125, 125, 125, 125, 125]",
        "chunk_size=64: equals the unchunked Jacobian bitwise",
        "All checks passed.",
    ]),
}

# The known examples and any other script in the folder (run without
# arguments, checked for a clean exit only).
NAMES = sorted(set(KNOWN) | {p.name for p in EXAMPLES.glob("*.py")})


@pytest.mark.parametrize("name", NAMES)
def test_example(name):
    path = EXAMPLES / name
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} is absent")
    args, expected_lines = KNOWN.get(name, ([], []))
    env = dict(os.environ, TESSERA_NUM_CPU_DEVICES="8")
    proc = subprocess.run([sys.executable, str(path), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    report = f"\n--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, f"{name} exited with status {proc.returncode}{report}"
    for line in expected_lines:
        assert line in proc.stdout, f"{name}: {line!r} is missing from its output{report}"
