"""A C-like plugin installed in a throw-away site builds and runs a te kernel named `main` and a graph.

Shared by test_scaffold.py and test_tutorial_example.py. The emitter calls a kernel named
`main` `main_1` in C, so this is what catches a loader that looks kernels up by name; the
script runs with its own TMPDIR, which must stay empty after several loads.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .dists import environment

_SCRIPT = """\
import os, sys, tempfile
import numpy as np, tensorkiln as tk
from tensorkiln import te

target = sys.argv[1]
A = te.placeholder((16,), "float32", name="A")
B = te.compute((16,), lambda i: A[i] * 2.0 + 1.0, name="B")
s = te.create_schedule(B.op)
a = np.arange(16, dtype="float32")
for _ in range(5):
    f = tk.build(s, [A, B], target=target)      # the default kernel name: main
    b = np.full(16, np.nan, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1)
x = tk.graph.var("x", shape=(2, 8))
lib = tk.compile(tk.graph.nn.relu(tk.graph.multiply(tk.graph.add(x, x), x)), target=target, strict=True)
v = np.linspace(-1, 1, 16, dtype="float32").reshape(2, 8)
np.testing.assert_allclose(lib(v), np.maximum((v + v) * v, 0), rtol=1e-6)
print("leftover:", sorted(os.listdir(tempfile.gettempdir())))
"""


def check_main_kernel_and_graph(target: str, site: Path, scratch: Path) -> None:
    """Run the script above for `target`; assert it matched numpy and left nothing in its TMPDIR."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**environment(site), "TMPDIR": str(scratch)}
    ran = subprocess.run([sys.executable, "-c", _SCRIPT, target], capture_output=True, text=True, env=env,
                         timeout=240)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "leftover: []", ran.stdout
