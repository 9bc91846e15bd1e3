"""tune/session.py: `tune.tune(...)`, the loop that ties tasks, tuners, measurement and the database.

For each task, trial 0 is its analytic default (the implementation's knob defaults): its
output becomes the reference every other candidate is checked against, and its cost the
bar. Then batches: the scheduler picks a task (tune/scheduler.py), its tuner proposes
configs, the measurer builds them in parallel and runs them one at a time; a binary equal
to an earlier one is not run again; every result, failures included, goes to the tuner,
the database and the task's history. At the end the three best binaries and the default are
measured again, alternately, and a candidate not faster than the default then is dropped:
tuning never returns anything slower than the default.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..ir.errors import TensorkilnError
from .features import knob_features
from .measure import LocalMeasurer, MeasureOptions
from .record import DUPLICATE, OK, SLOWER_ON_RECHECK, UNCONFIRMED, MeasureResult
from .scheduler import GradientScheduler, TaskProgress
from .task import Task
from .tuners import Tuner, make_tuner
from .workload import workload_text

__all__ = ["tune", "tuner_for", "TaskState", "TuneResult"]


@dataclass
class TaskState:
    task: Task
    tuner: Tuner
    progress: TaskProgress
    default: MeasureResult | None = None
    reference: list | None = None
    inputs: list | None = None
    digests: dict = field(default_factory=dict)
    curve: list = field(default_factory=list)     # (trial, seconds since start, best cost)
    identity: dict = field(default_factory=dict)
    skipped: str = ""                             # why the task was not tuned

    @property
    def results(self) -> list[MeasureResult]:
        return self.task.results

    @property
    def best(self) -> MeasureResult | None:
        return self.task.best()


@dataclass
class TuneResult:
    states: list[TaskState]
    seconds: float

    def summary(self) -> list[dict]:
        rows = []
        for state in self.states:
            best, default = state.best, state.default
            rows.append({"task": state.task.name, "weight": state.task.weight,
                         "implementation": state.task.implementation_name, "space": state.task.space.size,
                         "trials": len(state.results),
                         "default_ms": default.cost * 1e3 if default is not None and default.valid else None,
                         "best_ms": best.cost * 1e3 if best is not None else None,
                         "speedup": (default.cost / best.cost) if best is not None and default is not None
                         and default.valid else None,
                         "best_config": best.config if best is not None else None,
                         "failed": sum(1 for r in state.results if not r.valid), "skipped": state.skipped})
        return rows


def tuner_for(task: Task, strategy: "str | Callable", seed: int = 0, db=None) -> Tuner:
    """The tuner `tune()` uses for `task`: `model` gets the analytic cost of lowered candidates and the
    database's records of similar workloads as warm start."""
    if callable(strategy) and not isinstance(strategy, str):
        return strategy(task.space, seed)
    if strategy != "model":
        return make_tuner(strategy, task.space, seed)
    from .cost_model import analytic_cost, workload_features
    from .features import loop_features
    cache: dict[str, float] = {}

    def analytic(config: dict) -> float:
        key = json.dumps(config, sort_keys=True, default=str)
        if key not in cache:
            try:
                cache[key] = analytic_cost(loop_features(task.lower(config).func))
            except TensorkilnError:
                cache[key] = math.inf
        return cache[key]

    return make_tuner("model", task.space, seed, analytic=analytic, workload=workload_features(task),
                      warm_start=_warm_start(task, db))


def _warm_start(task: Task, db) -> list[tuple[list[float], float]]:
    """(features, log relative cost) of the database's records of similar workloads."""
    if db is None:
        return []
    by_workload: dict[str, list[dict]] = {}
    for row in db.similar(task.identity()):
        features = json.loads(row["features"])
        if "knobs" in features and "workload" in features:
            by_workload.setdefault(row["workload_key"], []).append({**row, "parsed": features})
    samples = []
    for rows in by_workload.values():
        costs = [r["cost"] for r in rows if r["cost"] is not None]
        if not costs:
            continue
        best, worst = min(costs), max(costs)
        for row in rows:
            cost = row["cost"] if row["cost"] is not None else 2 * worst
            samples.append((row["parsed"]["knobs"] + row["parsed"]["workload"], math.log(cost / best)))
    return samples


def _record(state: TaskState, result: MeasureResult, db, start: float) -> None:
    from .cost_model import workload_features
    result.trial = len(state.results)
    result.features = {**result.features, "knobs": knob_features(state.task.space, result.config),
                       "workload": workload_features(state.task)}
    state.results.append(result)
    state.tuner.tell([result])
    best = state.best
    state.progress.best_by_trial.append(best.cost if best is not None else math.inf)
    state.curve.append((result.trial, time.perf_counter() - start, state.progress.best))
    if db is not None:
        result.record_id = db.add(state.identity, result, workload_text(state.task.function))


def _measure(state: TaskState, configs: Sequence[dict], measurer, db, start: float) -> None:
    for built in measurer.build(state.task, list(configs)):
        result = built.result
        if built.artifact is not None:
            if result.digest in state.digests:
                earlier = state.digests[result.digest]
                result.status, result.cost, result.costs = DUPLICATE, earlier.cost, earlier.costs
                result.error = f"same binary as trial {earlier.trial}"
            else:
                best = state.best
                answer = measurer.run(state.task, built, state.inputs, state.reference,
                                      best.cost if best is not None else None)
                result.status, result.cost = answer["status"], answer.get("cost")
                result.costs, result.error = tuple(answer.get("costs", ())), answer.get("error", "")
                result.run_seconds = answer.get("seconds", 0.0)
                if state.reference is None and result.status == OK:
                    state.reference = answer.get("outputs")
                if result.status == OK:
                    state.digests[result.digest] = result
        _record(state, result, db, start)


def _start(state: TaskState, measurer, db, start: float) -> None:
    """Trial 0: the analytic default, whose output is the reference.

    A task in a generated space first runs its group's template default (what the compiler
    uses without records): its output is the reference the sketch is checked against, and
    its record is what a generated record must beat to be applied (tune/database.py)."""
    task = state.task
    state.inputs = task.input_arrays()
    if task.space_kind == "generated":
        _run_template_default(state, measurer, db)
    _measure(state, [task.space.default_config()], measurer, db, start)
    state.default = state.results[0]
    if not state.default.valid:
        state.skipped = f"its default did not run ({state.default.status}: {state.default.error})"
        state.progress.done = True


def _run_template_default(state: TaskState, measurer, db) -> None:
    from .cost_model import workload_features
    template = state.task.template_twin()
    config = template.space.default_config()
    built = measurer.build(template, [config])[0]
    if built.artifact is None:
        return
    answer = measurer.run(template, built, state.inputs, None, None)
    if answer["status"] != OK:
        return
    state.reference = answer.get("outputs")
    result = built.result
    result.status, result.cost, result.costs = OK, answer["cost"], tuple(answer.get("costs", ()))
    result.features = {**result.features, "knobs": knob_features(template.space, result.config),
                       "workload": workload_features(template)}
    if db is not None:
        result.record_id = db.add(template.identity(), result, workload_text(template.function))


def _confirm(state: TaskState, measurer, db, top: int = 3, rounds: int = 2, passes: int = 3) -> None:
    """Validate and pick: the `top` fastest binaries not yet re-measured and the default are measured
    again, alternately (the same moments, the same load), and each keeps its fastest time; repeated
    while an unchecked candidate still looks faster than every checked one. A candidate not faster
    than the default then is SLOWER_ON_RECHECK; one never checked that still looks fastest is
    UNCONFIRMED. So `best()` (and the database's best) is the default or a candidate that beat it
    side by side."""
    default = state.default
    if default is None or not default.valid:
        return
    checked = {default.digest}
    for _ in range(passes):
        fastest_checked = min(r.cost for r in state.results if r.valid and r.digest in checked)
        ranked, seen = [], set(checked)
        for result in sorted((r for r in state.results if r.status == OK and r.cost < fastest_checked),
                             key=lambda r: r.cost):
            if result.digest not in seen:
                seen.add(result.digest)
                ranked.append(result)
            if len(ranked) == top:
                break
        if not ranked:
            break
        _remeasure(state, measurer, [default, *ranked], rounds)
        checked |= {r.digest for r in ranked}
    fastest_checked = min(r.cost for r in state.results if r.valid and r.digest in checked)
    for result in state.results:
        if result.valid and result.digest not in checked and result.cost < fastest_checked:
            result.status, result.error = UNCONFIRMED, "looked fastest but was not measured again beside the default"
    if db is not None:   # the database's best is then tune()'s best
        for result in state.results:
            if result.record_id is not None:
                db.update(result.record_id, result)


def _remeasure(state: TaskState, measurer, contenders: list[MeasureResult], rounds: int) -> None:
    default = contenders[0]
    built = measurer.build(state.task, [r.config for r in contenders])
    # only times measured side by side count: an earlier time was taken under another load
    times = {r.trial: [] for r in contenders}
    for _ in range(rounds):
        for result, candidate in zip(contenders, built):
            if candidate.artifact is not None:
                answer = measurer.run(state.task, candidate, state.inputs, state.reference, None)
                if answer.get("status") == OK:
                    times[result.trial].append(answer["cost"])
    default_cost = min(times[default.trial], default=default.cost)
    for contender in contenders:
        cost = min(times[contender.trial], default=contender.cost)
        for result in state.results:   # the contender and its duplicates (same binary)
            if result.digest != contender.digest or not result.valid:
                continue
            result.cost = cost
            if contender is not default and cost >= default_cost:
                result.status = SLOWER_ON_RECHECK
                result.error = f"{cost * 1e3:.4f} ms on re-measuring, the default {default_cost * 1e3:.4f} ms"


def tune(tasks: "Task | Sequence[Task]", *, trials: int = 64, strategy: "str | Callable" = "model", db=None,
         measurer=None, batch: int = 8, seed: int = 0, time_budget: float | None = None,
         options: MeasureOptions | None = None, on_batch: Callable[[TaskState, "TuneResult"], None] | None = None,
         confirm: bool = True) -> TuneResult:
    """Tune `tasks` with `trials` measurements in all (trial 0 of each task, its default, included).

    `strategy`: "model" (cost-model guided, default), "evolutionary", "optuna", "anneal", "random",
    "grid", or a callable (space, seed) -> Tuner. `db`: a `tune.Database` that gets every record
    and warm-starts the cost model. `measurer`: a `LocalMeasurer` (default) or a
    `tune.distributed.DaskMeasurer`. `time_budget`: seconds for the whole session; no batch starts
    that would end after 90 % of it (the last 10 % are for the final re-measurement).
    Each task's `best()` is its fastest valid result afterwards.
    """
    tasks = [tasks] if isinstance(tasks, Task) else list(tasks)
    if not tasks:
        raise TensorkilnError("nothing to tune: no task has an implementation with knobs")
    own = measurer is None
    measurer = measurer or LocalMeasurer(options=options)
    start = time.perf_counter()
    states = []
    for index, task in enumerate(tasks):
        task.results = []
        state = TaskState(task, tuner_for(task, strategy, seed + index, db), TaskProgress(task.weight))
        state.identity = task.identity()
        states.append(state)
    result = TuneResult(states, 0.0)
    try:
        used = 0
        for state in states:
            _start(state, measurer, db, start)
            used += 1
            if on_batch is not None:
                on_batch(state, result)
        scheduler = GradientScheduler([s.progress for s in states])
        last_batch = 0.0
        while used < trials:
            # the budget covers the whole session: no batch that would end past 90 % of it (the rest is
            # for the final re-measurement)
            if time_budget is not None and time.perf_counter() - start + last_batch > 0.9 * time_budget:
                break
            batch_start = time.perf_counter()
            index = scheduler.next_task()
            if index is None:
                break
            state = states[index]
            configs = state.tuner.ask(min(batch, trials - used))
            if not configs:
                state.progress.done = True
                continue
            _measure(state, configs, measurer, db, start)
            last_batch = time.perf_counter() - batch_start
            used += len(configs)
            if on_batch is not None:
                on_batch(state, result)
        if confirm:
            for state in states:
                _confirm(state, measurer, db)
    finally:
        if own:
            measurer.close()
    result.seconds = time.perf_counter() - start
    return result
