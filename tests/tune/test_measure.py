"""Measuring candidates on cpu_llvm: negative samples, the default as reference and floor, time-outs,
early stops, duplicate binaries. Small GEMMs, few trials (the runner's child process is shared)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph, tune
from tensorkiln.tune.measure import LocalMeasurer, MeasureOptions, build_candidate
from tensorkiln.tune.record import DUPLICATE, INVALID, OK, STOPPED_EARLY, TIMEOUT, WRONG_OUTPUT
from tensorkiln.tune.session import TaskState, _measure, _start
from tensorkiln.tune.scheduler import TaskProgress
from tensorkiln.tune.tuners import GridTuner

SHAPE = (64, 128, 64)   # M, N, K


@pytest.fixture(scope="module")
def task():
    return tune.Task.from_op("gemm", SHAPE, "cpu_llvm")


@pytest.fixture(scope="module")
def measurer():
    with LocalMeasurer(builders=1, options=MeasureOptions(repeats=2, min_seconds=0.002, timeout=20)) as m:
        yield m


def _state(task) -> TaskState:
    task.results = []
    state = TaskState(task, GridTuner(task.space), TaskProgress(1))
    state.identity = task.identity()
    return state


def test_the_space_comes_from_the_strategy(task):
    assert task.space.size > 1 and task.implementation_name.startswith("cpu_llvm.")
    assert task.space.default_config() == tk.compile(
        graph.nn.matmul(graph.var("A", shape=(64, 64)), graph.var("B", shape=(64, 128))), "cpu_llvm"
    ).summary()["strategies"]["fused_nn_matmul"]["config"]


def test_an_illegal_candidate_is_a_negative_sample_with_its_reason(task):
    knob = task.space.knobs[0]
    built = build_candidate(task, {knob.name: "no-such-value"})
    assert built.artifact is None and built.result.status == INVALID
    assert knob.name in built.result.error and "no-such-value" in built.result.error
    built = build_candidate(task, {"no_such_knob": 1})
    assert built.result.status == INVALID and "no_such_knob" in built.result.error


def test_trial_zero_is_the_default_and_its_output_is_numpys(task, measurer):
    state = _state(task)
    _start(state, measurer, None, 0.0)
    assert state.default.trial == 0 and state.default.config == task.space.default_config()
    assert state.default.status == OK and state.default.cost > 0
    a, b = state.inputs
    np.testing.assert_allclose(state.reference[0], a @ b, rtol=1e-4, atol=1e-4)
    assert '"primitive"' in state.default.trace   # the replayable schedule trace, as JSON


def test_equal_binaries_are_measured_once(task, measurer):
    state = _state(task)
    _start(state, measurer, None, 0.0)
    default = task.space.default_config()
    _measure(state, [default, dict(default)], measurer, None, 0.0)
    first, second = state.results[1], state.results[2]
    assert first.digest == second.digest == state.default.digest
    assert first.status == DUPLICATE and second.status == DUPLICATE and second.cost == state.default.cost


def test_wrong_output_early_stop_and_time_out(task, measurer):
    built = build_candidate(task, task.space.default_config())
    inputs = task.input_arrays(seed=3)
    wrong = [np.zeros((SHAPE[0], SHAPE[1]), np.float32) + 1]
    answer = measurer._runner.run("wrong", str(task.target), built, inputs, wrong, None, measurer.options)
    assert answer["status"] == WRONG_OUTPUT and "differs from the default" in answer["error"]
    answer = measurer._runner.run("wrong", str(task.target), built, inputs, None, 1e-12, measurer.options)
    assert answer["status"] == STOPPED_EARLY and "3 x best" in answer["error"]
    impatient = MeasureOptions(repeats=50, min_seconds=0.5, timeout=0.05)
    answer = measurer._runner.run("wrong", str(task.target), built, inputs, None, None, impatient)
    assert answer["status"] == TIMEOUT and "ended" in answer["error"]
    # the next candidate gets a fresh child process
    answer = measurer._runner.run("wrong", str(task.target), built, inputs, None, None, measurer.options)
    assert answer["status"] == OK


def test_tuning_never_returns_something_slower_than_the_default(task, measurer):
    db = tune.Database(":memory:")
    result = tune.tune(task, trials=5, strategy="random", batch=4, db=db, measurer=measurer)
    best, default = task.best(), task.results[0]
    assert default.config == task.space.default_config()
    assert best.cost <= default.cost
    assert len(db) == len(task.results) >= 5
    row = result.summary()[0]
    assert row["trials"] == len(task.results) and row["speedup"] >= 1.0
    # the best record applies in tk.compile and computes the same product as numpy
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32)
    lib = tk.compile(graph.nn.matmul(graph.var("A", shape=(64, 64)), graph.var("B", shape=(64, 128))), "cpu_llvm",
                     tuning_db=db)
    used = lib.summary()["strategies"]["fused_nn_matmul"]
    assert used["tuning_record"]["config"] == best.config == used["config"]
    np.testing.assert_allclose(lib.run([a, b])[0], a @ b, rtol=1e-4, atol=1e-4)


class _ScriptedMeasurer:
    """Builds nothing and answers runs from a table: what the search measured first (lucky or not),
    then each config's true time on re-measuring."""

    def __init__(self, first: dict, true: dict) -> None:
        self.first, self.true, self.runs = first, true, {}

    def build(self, task, configs):
        from tensorkiln.tune.measure import Built
        from tensorkiln.tune.record import MeasureResult
        return [Built(MeasureResult(dict(c), digest=str(sorted(c.items()))), artifact=object()) for c in configs]

    def run(self, task, built, inputs, reference, best):
        key = built.result.digest
        count = self.runs[key] = self.runs.get(key, 0) + 1
        cost = self.first[key] if count == 1 else self.true[key]
        return {"status": OK, "cost": cost, "costs": (cost,), "outputs": [np.zeros(1)]}


def test_a_lucky_first_measurement_never_makes_the_result_slower_than_the_default(task):
    """Candidate a measured 0.5 once but truly takes 1.2 (the default takes 1.0); b truly 0.8."""
    configs = [c for c in task.space if c != task.space.default_config()][:3]
    default, a, b, c = (str(sorted(x.items())) for x in [task.space.default_config(), *configs])
    measurer = _ScriptedMeasurer(first={default: 1.0, a: 0.5, b: 0.9, c: 3.0},
                                 true={default: 1.0, a: 1.2, b: 0.8, c: 3.0})
    db = tune.Database(":memory:")

    class Scripted(GridTuner):
        def _propose(self, n):
            return [self.to_point(x) for x in configs][:n]

    tune.tune(task, trials=4, strategy=lambda space, seed: Scripted(space), db=db, measurer=measurer)
    by_config = {str(sorted(r.config.items())): r for r in task.results}
    assert by_config[a].status == "slower_on_recheck" and by_config[a].cost == 1.2
    assert task.best().config == configs[1] and task.best().cost == 0.8
    assert json.loads(db.best(task.identity())["config"]) == configs[1]   # the database agrees


def test_a_script_tuning_at_its_top_level_without_a_main_guard_measures(tmp_path):
    """A spawned process imports the parent's __main__ before its target runs: a script that calls
    tune.tune at its top level (no `if __name__ == "__main__":`) ran again in the runner's child,
    which died starting its own, and every candidate was a run error. The runner starts without it."""
    import subprocess
    import sys

    script = tmp_path / "tune_gemm.py"
    script.write_text(
        "from tensorkiln import tune\n"
        "task = tune.Task.from_op('gemm', (16, 32, 16), 'cpu_llvm')\n"
        "options = tune.MeasureOptions(repeats=1, min_seconds=0.001)\n"
        "result = tune.tune(task, trials=2, strategy='grid', options=options)\n"
        "(row,) = result.summary()\n"
        "print('RESULT', row['default_ms'] is not None, row['failed'], repr(row['skipped']))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT True 0 ''" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
