"""cpu_llvm's parallel loops: dynamically claimed chunks cover every iteration once; thread placement setting."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te


@pytest.mark.parametrize("rows", [1, 7, 1001])
def test_every_iteration_runs_once_at_any_thread_count(rows):
    a = te.placeholder((rows, 8), name="a")
    b = te.compute((rows, 8), lambda i, j: a[i, j] * 2.0 + 1.0, name="b")
    s = te.create_schedule(b.op)
    s[b].parallel(s[b].op.axis[0])
    module = tk.build(s, [a, b], target="llvm", name=f"twice{rows}")
    x = np.random.default_rng(rows).standard_normal((rows, 8), dtype=np.float32)
    for threads in (1, 2, 3, 8):          # more threads than chunks or cores as well
        module.loaded.set_num_threads(threads)
        out = np.full((rows, 8), np.nan, np.float32)
        module(x, out)
        np.testing.assert_array_equal(out, x * 2.0 + 1.0)


_PLACEMENT = """
import os, numpy as np, tensorkiln as tk
from tensorkiln import te
a = te.placeholder((64, 64), name="a")
b = te.compute((64, 64), lambda i, j: a[i, j] + 1.0, name="b")
s = te.create_schedule(b.op)
s[b].parallel(s[b].op.axis[0])
f = tk.build(s, [a, b], target="llvm -num_threads=2", name="placed")
f(np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32))
allowed = []
for tid in os.listdir("/proc/self/task"):
    for line in open(f"/proc/self/task/{tid}/status"):
        if line.startswith("Cpus_allowed_list"):
            allowed.append(line.split()[1])
print(os.environ.get("OMP_PROC_BIND"), " ".join(sorted(allowed)))
"""


def _placement(**env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_PROC_BIND", "OMP_PLACES")}
    return subprocess.run([sys.executable, "-c", _PLACEMENT], env={**environment, **env}, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.skipif(not os.path.exists("/proc/self/task") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs to see threads pinned")
def test_thread_affinity_setting_pins_the_team_to_cores():
    pinned = _placement(TENSORKILN_THREAD_AFFINITY="close")
    assert pinned.returncode == 0, pinned.stderr
    bind, *allowed = pinned.stdout.split()
    assert bind == "close"
    assert sum("-" not in cpus and "," not in cpus for cpus in allowed) >= 2   # master and worker on one core each
    free = _placement()
    assert free.returncode == 0, free.stderr
    assert free.stdout.split()[0] == "None"


def test_an_unknown_affinity_is_a_clear_error(monkeypatch):
    from tensorkiln_cpu_llvm.runtime import _apply_affinity

    monkeypatch.setenv("TENSORKILN_THREAD_AFFINITY", "sideways")
    with pytest.raises(tk.ir.TensorkilnError, match="TENSORKILN_THREAD_AFFINITY='sideways': use one of"):
        _apply_affinity()


def test_a_kernel_reusing_its_heap_block_is_safe_to_call_from_several_threads_at_once():
    """A large intermediate lives in a heap block kept between calls (cgutils.reused_heap_block); a call
    that finds it busy allocates its own, so concurrent calls never share scratch memory."""
    from concurrent.futures import ThreadPoolExecutor

    a = te.placeholder((256, 256), name="a")
    doubled = te.compute((256, 256), lambda i, j: a[i, j] * 2.0, name="doubled")      # 256 KiB: on the heap
    b = te.compute((256, 256), lambda i, j: doubled[j, i] + a[i, j], name="b")
    s = te.create_schedule(b.op)
    module = tk.build(s, [a, b], target="llvm", name="scratch")
    assert "scratch.impl.doubled.block" in module.get_source("llvm-unoptimized")
    inputs = [np.random.default_rng(seed).standard_normal((256, 256), dtype=np.float32) for seed in range(8)]

    def run(x):
        out = np.empty_like(x)
        for _ in range(20):
            module(x, out)
            np.testing.assert_allclose(out, x.T * 2.0 + x, rtol=1e-6)
        return True
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(run, inputs))


def test_the_process_wide_thread_count_reaches_a_module_kept_only_through_its_function():
    import gc
    import weakref
    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] + 1.0, name="b")
    s = te.create_schedule(b.op)
    s[b].parallel(s[b].op.axis[0])
    module = tk.build(s, [a, b], target="llvm", name="kept_by_function")
    function = module.get_function(module.entry_name)
    loaded = weakref.ref(module.loaded)
    del module
    gc.collect()
    assert loaded() is not None
    before = tk.runtime.get_num_threads()
    try:
        tk.runtime.set_num_threads(1)
        assert loaded().get_num_threads() == 1
    finally:
        tk.runtime.set_num_threads(0)
        tk.runtime.set_num_threads(before)
    out = np.zeros(64, np.float32)
    function(np.arange(64, dtype=np.float32), out)
    np.testing.assert_array_equal(out, np.arange(64, dtype=np.float32) + 1)
