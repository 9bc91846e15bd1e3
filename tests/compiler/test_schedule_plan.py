"""Memory-aware step order, concurrent levels and level-aware memory planning."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.compiler.memory_plan import plan_memory
from tensorkiln.compiler.plan import build_plan
from tensorkiln.compiler.schedule_plan import (find_concurrent_levels, order_steps, peak_bytes, schedule_plan,
                                               step_dependencies)
from tensorkiln.passes import fuse_ops, group_each_op

sys.path.insert(0, str(Path(__file__).parents[1] / "passes"))
from _graphs import inception, random_input  # noqa: E402


def _plan(mod):
    fused = group_each_op(fuse_ops(mod))
    calls = [n for n in graph.post_order(fused.main.body)
             if isinstance(n, graph.Call) and isinstance(n.op, graph.Function)]
    plan, _ = build_plan(fused.main, {id(c): f"k{i}" for i, c in enumerate(calls)}, "cpu_llvm")
    return plan


def _is_topological(plan):
    return all(all(p < i for p in producers) for i, producers in enumerate(step_dependencies(plan)))


def _assert_levels_do_not_share_storage(plan):
    for level in plan.concurrent_levels:
        for a in level:
            written = {plan.values[v].storage for v in plan.steps[a].outputs}
            for b in level:
                if a != b:
                    touched = {plan.values[v].storage for v in (*plan.steps[b].inputs, *plan.steps[b].outputs)
                               if plan.values[v].kind not in ("input", "constant")}
                    assert not written & touched, f"steps {a} and {b} of one level share storages {written & touched}"


def test_memory_aware_order_is_topological_and_not_worse_on_a_branchy_graph():
    plan = _plan(inception(blocks=3))
    ordered = order_steps(plan)
    assert _is_topological(ordered)
    assert sorted(s.kernel for s in ordered.steps) == sorted(s.kernel for s in plan.steps)
    assert peak_bytes(plan_memory(ordered)) <= peak_bytes(plan_memory(plan))


def test_memory_aware_order_runs_the_branch_that_frees_memory_first():
    # x feeds a big branch and a small one; after the big producer, its consumer frees it before the
    # small branch allocates. The post-order keeps both big buffers alive; the greedy order does not.
    x = graph.var("x", shape=(1, 4, 32, 32))
    big = graph.nn.relu(graph.exp(x) * graph.const(2.0))
    big = graph.sum(big, axis=(2, 3))                     # (1, 4): the big one dies here
    small = graph.sum(graph.nn.relu(x), axis=(2, 3))
    plan = _plan(graph.Module.from_expr(big + small))
    ordered = order_steps(plan)
    assert _is_topological(ordered)
    assert peak_bytes(plan_memory(ordered)) <= peak_bytes(plan_memory(plan))


def test_concurrent_levels_of_an_inception_block():
    plan = schedule_plan(_plan(inception(blocks=1)), concurrent=True)
    widths = [len(level) for level in plan.concurrent_levels]
    # the four branches start together (three 1x1 convs and the pool), then two convs, then the pool's conv
    assert widths[0] == 4 and max(widths) == 4 and widths[-1] == 1
    assert sorted(i for level in plan.concurrent_levels for i in level) == list(range(len(plan.steps)))
    assert _is_topological(plan)
    dependencies = step_dependencies(plan)
    for level in plan.concurrent_levels:
        assert all(not dependencies[i] & set(level) for i in level)
    _assert_levels_do_not_share_storage(plan)


def test_level_aware_planning_never_lets_concurrent_steps_share_storage():
    plan = schedule_plan(_plan(inception(blocks=3)), concurrent=True)
    _assert_levels_do_not_share_storage(plan)
    sequential = schedule_plan(_plan(inception(blocks=3)), concurrent=False)
    assert sequential.concurrent_levels == ()
    no_reuse = plan_memory(_plan(inception(blocks=3)), reuse=False)
    assert peak_bytes(sequential) <= peak_bytes(plan) < peak_bytes(no_reuse)


def test_find_concurrent_levels_refuses_an_unordered_plan():
    plan = _plan(inception(blocks=1))
    reversed_plan = plan.__class__(plan.values, plan.steps[::-1], plan.inputs, plan.outputs)
    with pytest.raises(ValueError, match="not in topological order"):
        find_concurrent_levels(reversed_plan)


def test_concurrent_execution_matches_the_reference():
    mod = inception(channels=4, size=8, blocks=2)
    data = random_input(mod.main.params[0])
    expected = graph.evaluate(mod, {"x": data})
    lib = tk.compile(mod, "cpu_llvm", opt_level=2, concurrent=True)
    assert max(len(level) for level in lib.plan.concurrent_levels) > 1
    for _ in range(5):  # races would show as differing results
        np.testing.assert_allclose(lib(data), expected, rtol=1e-4, atol=1e-5)
    lib.executor.concurrent = False  # the runtime switch: run the same plan step by step
    np.testing.assert_allclose(lib(data), expected, rtol=1e-4, atol=1e-5)
    sequential = tk.compile(mod, "cpu_llvm", opt_level=2, concurrent=False)
    assert sequential.plan.concurrent_levels == ()
    np.testing.assert_allclose(sequential(data), expected, rtol=1e-4, atol=1e-5)
