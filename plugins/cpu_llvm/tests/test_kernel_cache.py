"""cpu_llvm's kernel cache: a module compiled again (same kernels and target) comes from memory or disk."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import tensorkiln as tk
from tensorkiln import te
from tensorkiln_cpu_llvm.kernel_cache import kernel_cache

_PROGRAM = """
import numpy as np, tensorkiln as tk
from tensorkiln import te
from tensorkiln_cpu_llvm.kernel_cache import kernel_cache
a = te.placeholder((64,), name="a")
b = te.compute((64,), lambda i: a[i] * {scale}, name="b")
f = tk.build(te.create_schedule(b.op), [a, b], target="llvm", name="scaled")
x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
f(x, out)
assert np.array_equal(out, x * {scale})
print(kernel_cache().hits, kernel_cache().misses)
"""


def _scaled(scale: float):
    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] * scale, name="b")
    return tk.build(te.create_schedule(b.op), [a, b], target="llvm", name="scaled")


def _run(module, scale: float) -> None:
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    module(x, out)
    np.testing.assert_array_equal(out, x * np.float32(scale))


def test_the_same_kernels_compile_once_per_process_and_once_per_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORKILN_KERNEL_CACHE", raising=False)
    cache = kernel_cache()
    first = _scaled(3.0)
    assert (cache.hits, cache.misses) == (0, 1)
    again = _scaled(3.0)
    assert (cache.hits, cache.misses) == (1, 1)
    assert again.artifact.binary == first.artifact.binary and again.artifact.source == first.artifact.source
    _run(again, 3.0)
    other = _scaled(5.0)                       # another constant: another key, compiled, not the cached one
    assert (cache.hits, cache.misses) == (1, 2)
    _run(other, 5.0)
    assert len(list((tmp_path / "cpu_llvm").glob("*.o"))) == 2
    # another process with the same directory reads the object from disk
    env = {**os.environ, "TENSORKILN_CACHE_DIR": str(tmp_path)}
    env.pop("TENSORKILN_KERNEL_CACHE", None)
    done = subprocess.run([sys.executable, "-c", _PROGRAM.format(scale="3.0")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0"]


def test_a_damaged_entry_is_compiled_again_and_the_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORKILN_KERNEL_CACHE", raising=False)
    cache = kernel_cache()
    _scaled(7.0)
    for entry in (tmp_path / "cpu_llvm").glob("*.json"):
        entry.write_text("{not json")
    cache.memory.clear()
    _run(_scaled(7.0), 7.0)
    assert cache.misses == 2 and cache.hits == 0
    monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", "0")
    assert kernel_cache() is None
    _run(_scaled(7.0), 7.0)
