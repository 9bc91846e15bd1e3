"""thread_pool.c: parallel regions on tensorkiln's pool (revocable workers) or on libgomp, same results.

Each check runs in a child process, so the backend (TENSORKILN_THREAD_POOL) and the CPUs the
process may use are its own. On one CPU a region's workers are mostly not running when the
caller finishes the work: the caller then closes the region and returns without them, and
every kind of region must still compute every piece exactly once: a parallel loop (guided
chunks), a GEMM whose threads wait for the packing of B (sgemm.py), and a plan level whose
steps run concurrently (plan_entry.py), with the kernels inside those steps starting regions
of their own (run on their caller alone).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tensorkiln_cpu_llvm import thread_pool

_CHILD = r"""
import os, sys, numpy as np, tensorkiln as tk
from tensorkiln import graph, te
from tensorkiln_cpu_llvm import thread_pool
if sys.argv[1] == "one-cpu":
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
rng = np.random.default_rng(3)

# a parallel loop
a = te.placeholder((1001, 8), name="a")
b = te.compute((1001, 8), lambda i, j: a[i, j] * 2.0 + 1.0, name="b")
s = te.create_schedule(b.op)
s[b].parallel(s[b].op.axis[0])
loop = tk.build(s, [a, b], target="llvm", name="twice")
x = rng.standard_normal((1001, 8), dtype=np.float32)

# a GEMM that packs B (several slivers), in a graph whose two branches form a concurrent level
d = graph.var("d", shape=(96, 256))
w1, w2 = (rng.standard_normal((256, 320)).astype("float32") for _ in range(2))
left = graph.nn.relu(graph.nn.matmul(d, graph.const(w1)))
right = graph.nn.matmul(d, graph.const(w2)) * graph.const(np.float32(0.5))
model = graph.Module.from_expr(graph.concatenate([left, right], axis=1))
lib = tk.compile(model, "cpu_llvm")
data = rng.standard_normal((96, 256)).astype("float32")
expected = np.concatenate([np.maximum(data @ w1, 0), (data @ w2) * 0.5], axis=1)

for threads in (1, 2, 3, 8):
    tk.runtime.set_num_threads(threads)
    for _ in range(20):
        out = np.full((1001, 8), np.nan, np.float32)
        loop(x, out)
        assert np.array_equal(out, x * 2.0 + 1.0), threads
        got = lib.run({"d": data})[0]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
counts = thread_pool.pool_counts()
print(counts["backoffs"], thread_pool.backend(), len(lib.executor.plan.concurrent_levels),
      counts["pooled"] + counts["alone"])
"""


def _child(cpus: str, backend: str) -> subprocess.CompletedProcess:
    env = {**os.environ, thread_pool.BACKEND_ENV: backend}
    return subprocess.run([sys.executable, "-c", _CHILD, cpus], env=env, capture_output=True, text=True, timeout=600)


needs_compiler = pytest.mark.skipif(thread_pool.compiler() is None,
                                    reason="the pool is built with a C compiler (scripts/setup.sh installs gcc)")


@needs_compiler
@pytest.mark.parametrize("cpus", ["all", "one-cpu"])
def test_every_kind_of_region_computes_everything_once_on_the_pool(cpus):
    result = _child(cpus, "pool")
    assert result.returncode == 0, result.stderr[-3000:]
    _backoffs, backend, concurrent, regions = result.stdout.split()[-4:]
    assert backend == "pool"
    assert int(concurrent) >= 1   # the two branches form a concurrent level
    assert int(regions) >= 3 * 20   # pool_counts(): the 2-, 3- and 8-thread rounds each ran regions on the pool
    # Whether the pool backs off here depends on the OS's scheduling: on one CPU the caller often finishes
    # a region before any worker runs, and nothing is lost (CI's host: no back-off). The back-off itself is
    # checked deterministically below.


_BACKOFF_CHILD = r"""
import ctypes, threading, time
from tensorkiln_cpu_llvm import thread_pool
pool = ctypes.CDLL(thread_pool.pool_library())
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
caller = threading.get_ident()
claimed = threading.Event()

def held(_):
    # the caller waits until a worker holds a piece; that worker then stays off its core for 5 ms (asleep:
    # wall time without CPU time, as when the OS deschedules a worker on a loaded machine)
    if threading.get_ident() == caller:
        deadline = time.monotonic() + 2.0
        while not claimed.is_set() and time.monotonic() < deadline:
            time.sleep(0)
        return
    claimed.set()
    time.sleep(0.005)

def counts():
    c = (ctypes.c_int64 * 3)()
    pool.tk_pool_counts(c)
    return list(c)

held_task, quick_task = TASK(held), TASK(lambda _: None)
for regions in range(1, 21):
    claimed.clear()
    pool.tk_parallel(held_task, None, 2)
    if counts()[2]:
        break
print(regions, *counts())
for _ in range(300):
    pool.tk_parallel(quick_task, None, 2)
print(regions, *counts())
"""


_SLOW_BACKOFF_CHILD = _BACKOFF_CHILD.split("held_task, quick_task")[0] + r"""
held_task = TASK(held)
slow_task = TASK(lambda _: time.sleep(0.01) if threading.get_ident() == caller else None)
for regions in range(1, 21):
    claimed.clear()
    pool.tk_parallel(held_task, None, 2)
    if counts()[2]:
        break
start, backoffs = time.monotonic(), counts()[2]
pooled = counts()[0]
while counts()[0] == pooled and time.monotonic() - start < 5:
    pool.tk_parallel(slow_task, None, 2)
print(f"{time.monotonic() - start:.3f}", counts()[1], counts()[2] - backoffs)
"""


@needs_compiler
def test_a_back_off_ends_after_a_quarter_second_whatever_regions_are_left():
    """A back-off runs BACKOFF_REGIONS (200) regions on the caller alone, but BACKOFF_MAX_SECONDS (0.25 s) at most:
    regions of 10 ms (a large GEMM) go back to the pool after about 25, not 200 (2 s on one thread)."""
    result = subprocess.run([sys.executable, "-c", _SLOW_BACKOFF_CHILD],
                            env={**os.environ, thread_pool.BACKEND_ENV: "pool"}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seconds, alone, _ = result.stdout.split()
    assert 0.25 <= float(seconds) < 1.0 and 10 <= int(alone) < 100


@needs_compiler
def test_a_pool_whose_workers_lose_their_core_backs_off_then_tries_again():
    """Regions that a worker held while off its core (lost time: wall time without CPU time) make the pool
    run the next BACKOFF_REGIONS (200) regions on the caller alone; then it tries its workers again."""
    result = subprocess.run([sys.executable, "-c", _BACKOFF_CHILD], env={**os.environ, thread_pool.BACKEND_ENV: "pool"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    held, after_held = result.stdout.split("\n")[0], result.stdout.split("\n")[1]
    regions, pooled, alone, backoffs = map(int, held.split())
    assert backoffs == 1 and alone == 0 and pooled == regions
    assert regions <= 10   # the moving average of the lost fraction passes WASTE_LIMIT (0.25) within a few regions
    _, pooled_after, alone_after, backoffs_after = map(int, after_held.split())
    assert alone_after >= 200   # the back-off: the 200 regions after it ran on the caller alone
    assert pooled_after > pooled or backoffs_after > backoffs   # then the pool was tried again


def test_the_libgomp_backend_gives_the_same_results():
    result = _child("one-cpu", "libgomp")
    assert result.returncode == 0, result.stderr[-3000:]
    backend, _, regions = result.stdout.split()[-3:]
    assert backend == "libgomp" and regions == "0"   # pool_counts() counts the pool's regions only


def test_an_unknown_backend_is_a_clear_error():
    env = {**os.environ, thread_pool.BACKEND_ENV: "tbb"}
    result = subprocess.run([sys.executable, "-c", "import tensorkiln as tk, numpy as np; from tensorkiln import te;"
                             "a = te.placeholder((4,), name='a'); b = te.compute((4,), lambda i: a[i] + 1.0);"
                             "tk.build(te.create_schedule(b.op), [a, b], target='llvm')"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "TENSORKILN_THREAD_POOL='tbb': use 'pool' (thread_pool.c) or 'libgomp'" in result.stderr


@needs_compiler
def test_the_pool_is_built_once_into_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE_DIR", str(tmp_path))
    thread_pool.pool_library.cache_clear()
    try:
        path = thread_pool.pool_library()
        assert path is not None and path.startswith(str(tmp_path / "runtime"))
        stamp = os.stat(path).st_mtime_ns
        thread_pool.pool_library.cache_clear()
        assert thread_pool.pool_library() == path and os.stat(path).st_mtime_ns == stamp
    finally:
        thread_pool.pool_library.cache_clear()


_SLEEP_OFF_CHILD = r"""
import os, sys, time, threading, numpy as np, tensorkiln as tk
from tensorkiln import te
allowed = sorted(os.sched_getaffinity(0))
if sys.argv[1] == "one-cpu":
    allowed = allowed[:1]
    os.sched_setaffinity(0, set(allowed))
a = te.placeholder((4096, 64), name="a")
b = te.compute((4096, 64), lambda i, j: a[i, j] + 1.0, name="b")
s = te.create_schedule(b.op)
s[b].parallel(s[b].op.axis[0])
loop = tk.build(s, [a, b], target="llvm", name="plus_one")
x = np.ones((4096, 64), np.float32)
out = np.empty_like(x)
tk.runtime.set_num_threads(2)
loop(x, out)   # starts the worker, with the process's whole mask
main = threading.get_native_id()
for caller in allowed[:2]:
    os.sched_setaffinity(0, {caller})   # this (the caller's) thread only: the worker keeps its own mask
    for _ in range(5):
        loop(x, out)
        assert np.array_equal(out, x + 1.0)
    time.sleep(0.2)   # the worker spins ~30 us, then sleeps
    masks = [sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task") if int(tid) != main]
    print(caller, ";".join(",".join(map(str, m)) for m in masks))
    os.sched_setaffinity(0, set(allowed))
"""


@needs_compiler
@pytest.mark.parametrize("cpus", ["all", "one-cpu"])
def test_a_sleeping_worker_is_off_the_core_of_the_last_caller(cpus):
    """A worker woken on the caller's own core waited for the caller's whole region: while it sleeps, its
    mask leaves out the core the last region started on (on one CPU there is nowhere else: unchanged)."""
    result = subprocess.run([sys.executable, "-c", _SLEEP_OFF_CHILD, cpus], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    allowed = sorted(os.sched_getaffinity(0))
    lines = result.stdout.split("\n")[-1 - (1 if cpus == "one-cpu" or len(allowed) < 2 else 2):-1]
    for line in lines:
        caller, masks = line.split()
        masks = [[int(c) for c in m.split(",")] for m in masks.split(";")]
        if cpus == "one-cpu" or len(allowed) < 2:
            assert [allowed[0]] in masks   # the worker, on the only CPU there is
        else:
            # the worker (other threads, e.g. BLAS's, keep the whole mask)
            assert [c for c in allowed if c != int(caller)] in masks, (caller, masks)
