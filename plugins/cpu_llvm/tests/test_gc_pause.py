"""The emitter builds llvmlite modules with the cyclic GC paused (gc_pause.py) and frees them without
it (emitter._dismantle): no llvmlite object is left for the collector, the collector's state comes
back as it was, and the compiled kernels compute what numpy does."""
import gc
import threading

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln_cpu_llvm import parallel_compile
from tensorkiln_cpu_llvm.gc_pause import collector_paused


@pytest.fixture(autouse=True)
def restore_gc():
    enabled, flags = gc.isenabled(), gc.get_debug()
    yield
    gc.set_debug(flags)
    gc.garbage.clear()
    (gc.enable if enabled else gc.disable)()


def test_pause_nests_and_restores():
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()     # the outer pause still holds
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with collector_paused():
            raise ValueError("boom")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_pauses_in_threads_end_with_the_collector_enabled():
    gc.enable()
    inside, leave = threading.Barrier(3), threading.Event()

    def hold():
        with collector_paused():
            inside.wait()
            leave.wait()
    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    assert not gc.isenabled()
    leave.set()
    for thread in threads:
        thread.join()
    assert gc.isenabled()


def _llvmlite_garbage() -> list:
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    found = [o for o in gc.garbage if type(o).__module__.startswith("llvmlite.ir")]
    gc.garbage.clear()
    gc.set_debug(0)
    return found


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_compiled_modules_leave_no_llvmlite_cycles(monkeypatch, jobs):
    # 2 jobs: the module is built in chunks (enough kernels), each chunk dismantled after printing
    monkeypatch.setenv(parallel_compile.JOBS_ENV, jobs)
    monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", "0")
    x = graph.var("x", shape=(8, 16))
    y = x
    steps = parallel_compile.MIN_PARALLEL_KERNELS + 2
    for step in range(steps):   # distinct scales: no two groups share a kernel
        scale = 0.1 * (step + 1)
        y = graph.call("exp", y * scale) if step % 2 else graph.call("tanh", y * scale) - x
    gc.collect()
    gc.disable()
    lib = tk.compile(graph.Module.from_expr(y), target="cpu_llvm", opt_level=0)
    assert _llvmlite_garbage() == []
    assert sum(len(a.kernels) for a in lib.artifacts.values()) >= parallel_compile.MIN_PARALLEL_KERNELS
    a = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32) * 0.1
    expected = a
    for step in range(steps):
        scale = np.float32(0.1 * (step + 1))
        expected = np.exp(expected * scale) if step % 2 else np.tanh(expected * scale) - a
    np.testing.assert_allclose(lib(a), expected, rtol=2e-5, atol=1e-6)
