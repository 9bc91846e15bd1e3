"""compiler/gc_tuning.py: the collector is tuned only while the outermost compile runs, and a
process's own gc settings (its freeze, a disabled collector, its thresholds) come back unchanged."""
import gc

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.compiler import gc_tuning
from tensorkiln.compiler.gc_tuning import COMPILE_THRESHOLD0, holding_gc
from tensorkiln import graph


@pytest.fixture(autouse=True)
def restore_gc():
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()
    assert gc_tuning._depth == 0


def test_tuned_inside_restored_after():
    gc.set_threshold(700, 10, 10)
    seen = []

    @holding_gc
    def inner():
        seen.append((gc.get_threshold(), gc.get_freeze_count()))

    @holding_gc
    def outer():
        inner()     # nested: still tuned after the inner one returns
        seen.append((gc.get_threshold(), gc.get_freeze_count()))

    assert gc.get_freeze_count() == 0
    outer()
    assert [s[0] for s in seen] == [(COMPILE_THRESHOLD0, 10, 10)] * 2
    assert all(count > 0 for _, count in seen)     # objects from before the compile are frozen
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_restored_when_the_function_raises():
    gc.set_threshold(700, 10, 10)

    @holding_gc
    def failing():
        raise ValueError("boom")

    with pytest.raises(ValueError):
        failing()
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_a_process_freeze_and_a_disabled_collector_are_kept():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        holding_gc(lambda: None)()
        assert gc.get_freeze_count() == frozen     # not unfrozen: the freeze was the process's own
    finally:
        gc.unfreeze()
    gc.disable()
    holding_gc(lambda: gc.get_freeze_count())()
    assert not gc.isenabled() and gc.get_freeze_count() == 0


def test_cycles_made_during_a_compile_are_collected():
    class Node:
        pass

    @holding_gc
    def make_cycles():
        for _ in range(3 * COMPILE_THRESHOLD0):
            node = Node()
            node.self = node
    before = sum(1 for o in gc.get_objects() if type(o) is Node)
    make_cycles()
    gc.collect()
    assert sum(1 for o in gc.get_objects() if type(o) is Node) == before == 0


def test_compile_restores_and_computes_the_same():
    x, y = graph.var("x", shape=(4, 8)), graph.var("y", shape=(4, 8))
    threshold = gc.get_threshold()
    lib = tk.compile(graph.Module.from_expr(x * y + x), target="cpu_llvm")
    assert gc.get_threshold() == threshold and gc.get_freeze_count() == 0
    a, b = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(lib(a, b), a * b + a, rtol=1e-6, atol=1e-6)   # fused multiply-add
