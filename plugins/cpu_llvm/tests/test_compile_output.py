"""What a cpu_llvm compile writes: nothing on stderr unless remarks are asked for, no assembly unless asked."""
from __future__ import annotations

import os
import subprocess
import sys

import tensorkiln as tk
from tensorkiln import te

# a reduction over a 37-wide row: LLVM's loop vectorizer looks at it and reports what it decided
_PROGRAM = """
import tensorkiln as tk
from tensorkiln import te
a = te.placeholder((64, 37), name="a")
k = te.reduce_axis((0, 37), name="k")
b = te.compute((64,), lambda i: te.sum(a[i, k] * a[i, k], axis=k), name="b")
tk.build(te.create_schedule(b.op), [a, b], target="llvm")
print("built")
"""


def _compile_in_a_process(**env) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "TENSORKILN_LLVM_REMARKS"}
    return subprocess.run([sys.executable, "-c", _PROGRAM], env={**environment, **env}, capture_output=True,
                          text=True, timeout=300)


def test_a_compile_prints_no_llvm_remarks_unless_asked():
    quiet = _compile_in_a_process()
    assert quiet.returncode == 0 and quiet.stdout.strip() == "built"
    assert quiet.stderr == ""
    asked = _compile_in_a_process(TENSORKILN_LLVM_REMARKS="loop-vectorize")
    assert asked.returncode == 0 and "remark:" in asked.stderr


def test_assembly_is_rendered_on_request_only():
    a = te.placeholder((16,), name="a")
    b = te.compute((16,), lambda i: a[i] * 2.0, name="b")
    module = tk.build(te.create_schedule(b.op), [a, b], target="llvm")
    assert "asm" not in module.artifact.sources
    assembly = module.get_source("asm")
    assert assembly and ".text" in assembly
