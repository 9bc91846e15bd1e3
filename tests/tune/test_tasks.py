"""Tasks from a model (one per distinct fused-group workload, weighted) and the gradient task scheduler."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph, tune
from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.tune.scheduler import GradientScheduler, TaskProgress


def _two_alike_dense_and_one_other():
    """x -> dense(w1) -> relu -> dense(w2) -> relu -> dense(w3): the first two groups are one workload."""
    rng = np.random.default_rng(0)
    x = graph.var("x", shape=(8, 64))
    w1, w2 = (graph.const(rng.standard_normal((64, 64)).astype(np.float32)) for _ in range(2))
    w3 = graph.const(rng.standard_normal((32, 64)).astype(np.float32))
    h = graph.nn.relu(graph.nn.dense(graph.nn.relu(graph.nn.dense(x, w1)), w2))
    return graph.nn.dense(h, w3)


def test_tasks_are_distinct_workloads_weighted_by_how_often_they_run():
    model = _two_alike_dense_and_one_other()
    tasks = tune.extract_tasks(model, "cpu_llvm")
    lib = tk.compile(model, "cpu_llvm")
    launches = {}
    for step in lib.plan.steps:
        launches[step.kernel] = launches.get(step.kernel, 0) + 1
    tunable = {name: row for name, row in lib.summary()["strategies"].items() if row["space_size"] > 1}
    # one task per distinct tunable kernel, and its weight is how many launches share it
    assert sorted(t.weight for t in tasks) == sorted(launches[name] for name in tunable)
    assert sorted(t.weight for t in tasks) == [1, 2]
    assert len({t.key for t in tasks}) == len(tasks)
    assert all(t.space.size > 1 and t.recipe is None for t in tasks)   # a graph, not a file: no recipe


def test_the_same_group_from_two_models_has_one_workload_key():
    a = tune.Task.from_op("dense", (8, 64, 64), "cpu_llvm")
    b = tune.Task.from_op("dense", (8, 64, 64), "cpu_llvm")
    c = tune.Task.from_op("dense", (8, 32, 64), "cpu_llvm")
    assert a.key == b.key != c.key
    assert a.recipe == {"op": "dense", "shape": [8, 64, 64], "dtype": "float32", "target": str(a.target),
                        "key": a.key, "space": "template"}


@pytest.mark.parametrize("op,shape,message", [("gemm", (4, 4), "M,N,K"), ("softmax", (4,), "unknown op"),
                                              ("gemm", (0, 4, 4), "positive")])
def test_bad_op_or_shape_is_a_clear_error(op, shape, message):
    with pytest.raises(TensorkilnError, match=message):
        tune.Task.from_op(op, shape, "cpu_llvm")


def test_gradient_scheduler_gives_trials_where_the_weighted_gain_is():
    flat = TaskProgress(weight=1, best_by_trial=[1.0] * 9)                   # stopped improving
    improving = TaskProgress(weight=1, best_by_trial=[1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35])
    heavy_flat = TaskProgress(weight=2, best_by_trial=[2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    scheduler = GradientScheduler([flat, improving, heavy_flat], window=3)
    assert scheduler.next_task() == 1
    improving.done = True
    assert scheduler.next_task() == 2       # its weight x the average gain per trial so far
    fresh = TaskProgress(weight=1, best_by_trial=[0.5])
    assert GradientScheduler([improving, fresh]).next_task() == 1   # every task gets a first batch
    assert GradientScheduler([TaskProgress(1, [math.inf])]).gain(TaskProgress(1, [math.inf])) == math.inf
