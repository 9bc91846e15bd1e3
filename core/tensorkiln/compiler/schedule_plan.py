"""compiler/schedule_plan.py: execution order, concurrent levels and memory planning of a plan.

Dependency analysis on the kernel steps of an ExecutionPlan (a step depends on
the steps producing its inputs: for an elided concatenation, the steps writing
its parts, `value_writers`), used three ways:

- `order_steps`: a topological order that lowers peak activation memory. Greedy,
  as onnxruntime's and TVM's memory-aware orderings: among the ready steps, run
  the one that frees the most bytes (outputs allocated minus inputs whose last
  reader it is). The greedy and the breadth-first orders are planned and the
  lowest peak wins over the given (depth-first) order only when strictly lower,
  so it never makes things worse.
- `find_concurrent_levels`: steps grouped by dependency depth; the steps of a
  level read only values of earlier levels, so they may run at the same time.
- `schedule_plan`: the two plus `plan_memory`. With concurrency every level is
  planned as one step (its values live together, and no step of a level writes
  a storage another step of that level reads), so the executor can run a level
  on a thread pool and only wait between levels.

    plan = schedule_plan(plan, reuse=True, concurrent=True)
    plan.concurrent_levels   # ((0,), (1, 2, 3), (4,), ...): step indices per level
"""
from __future__ import annotations

import heapq
from dataclasses import replace

from ..runtime.plan import ExecutionPlan, KernelStep
from .memory_plan import plan_memory

__all__ = ["schedule_plan", "order_steps", "find_concurrent_levels", "peak_bytes", "step_dependencies",
           "value_writers"]


def schedule_plan(plan: ExecutionPlan, reuse: bool = True, concurrent: bool = False) -> ExecutionPlan:
    """Order the steps, find concurrent levels when asked, and plan memory accordingly."""
    if reuse:
        plan = order_steps(plan)
    if not concurrent:
        return plan_memory(plan, reuse=reuse)
    levels = find_concurrent_levels(plan)
    order = [index for level in levels for index in level]
    plan = replace(plan, steps=tuple(plan.steps[i] for i in order))
    levels, start = [], 0
    for level in find_concurrent_levels(plan):
        levels.append(tuple(range(start, start + len(level))))
        start += len(level)
    return _plan_memory_by_level(plan, tuple(levels), reuse)


def step_dependencies(plan: ExecutionPlan) -> list[set[int]]:
    """For each step, the indices of the steps producing its inputs."""
    writers = value_writers(plan)
    return [set().union(*(writers[v] for v in step.inputs)) for step in plan.steps]


def value_writers(plan: ExecutionPlan) -> list[frozenset[int]]:
    """For each value, the indices of the steps writing its bytes: the step producing it; for an alias,
    its source's writers; for an elided concatenation (`ValueInfo.placed_in` of its parts), the union
    of its parts' writers, and nothing else: reading a part waits for that part's writer only."""
    producer = {value: index for index, step in enumerate(plan.steps) for value in step.outputs}
    parts: dict[int, list[int]] = {}
    for value in plan.values:
        if value.placed_in >= 0:
            parts.setdefault(value.placed_in, []).append(value.id)
    writers: list[frozenset[int] | None] = [None] * len(plan.values)

    def of(value_id: int) -> frozenset[int]:
        # iterative: chains of concatenations and aliases can be as long as the model
        stack = [value_id]
        while stack:
            current = stack[-1]
            if writers[current] is not None:
                stack.pop()
                continue
            value = plan.values[current]
            sources = [value.alias_of] if value.alias_of >= 0 else parts.get(current, [])
            missing = [s for s in sources if writers[s] is None]
            if current in producer:
                writers[current] = frozenset((producer[current],))
            elif missing:
                stack.extend(missing)
                continue
            else:
                writers[current] = frozenset().union(*(writers[s] for s in sources))
            stack.pop()
        return writers[value_id]

    return [of(v) for v in range(len(plan.values))]


def find_concurrent_levels(plan: ExecutionPlan) -> tuple[tuple[int, ...], ...]:
    """Step indices grouped by dependency depth (ASAP); each level depends only on earlier ones."""
    depth: list[int] = []
    for index, producers in enumerate(step_dependencies(plan)):
        if any(p >= index for p in producers):
            raise ValueError(f"step {index} reads a value produced later; the plan is not in topological order")
        depth.append(1 + max((depth[p] for p in producers), default=-1))
    levels: dict[int, list[int]] = {}
    for index, level in enumerate(depth):
        levels.setdefault(level, []).append(index)
    return tuple(tuple(levels[level]) for level in sorted(levels))


def peak_bytes(plan: ExecutionPlan) -> int:
    """Total planned activation bytes (what `CompiledModel.summary()` calls peak_activation_bytes)."""
    return sum(storage.nbytes for storage in plan.storages)


def order_steps(plan: ExecutionPlan) -> ExecutionPlan:
    """A topological order of the steps with a planned peak no higher than the current order's.

    Candidates: the current order, the greedy memory-aware order and the
    breadth-first (level by level) order; the one with the lowest planned peak wins,
    the current order on ties. Each candidate costs one `plan_memory` call.
    """
    best, best_peak = plan, peak_bytes(plan_memory(plan))
    breadth_first = [index for level in find_concurrent_levels(plan) for index in level]
    for order in (_greedy_order(plan), breadth_first):
        if order == list(range(len(plan.steps))):
            continue
        candidate = replace(plan, steps=tuple(plan.steps[i] for i in order))
        peak = peak_bytes(plan_memory(candidate))
        if peak < best_peak:
            best, best_peak = candidate, peak
    return best


def _greedy_order(plan: ExecutionPlan) -> list[int]:
    dependencies = step_dependencies(plan)
    waiting = [len(d) for d in dependencies]
    dependents: list[list[int]] = [[] for _ in plan.steps]
    for index, producers in enumerate(dependencies):
        for producer in producers:
            dependents[producer].append(index)
    readers: dict[int, int] = {}   # by root value: an alias's reads keep its root's storage live
    for step in plan.steps:
        for value in {plan.root(v) for v in step.inputs}:
            readers[value] = readers.get(value, 0) + 1
    kept = {plan.root(v) for v in plan.outputs} | {v.id for v in plan.values if v.kind in ("input", "constant")}

    def growth(index: int) -> int:
        step = plan.steps[index]
        allocated = sum(plan.values[v].nbytes for v in step.outputs)
        freed = sum(plan.values[v].nbytes for v in {plan.root(u) for u in step.inputs}
                    if readers[v] == 1 and v not in kept)
        return allocated - freed

    ready = [(growth(i), i) for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, index = heapq.heappop(ready)
        order.append(index)
        for value in {plan.root(v) for v in plan.steps[index].inputs}:
            readers[value] -= 1
        # A reader count dropping changes the growth of steps already ready: recompute them.
        ready = [(growth(i), i) for _, i in ready]
        for dependent in dependents[index]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append((growth(dependent), dependent))
        heapq.heapify(ready)
    return order


def _plan_memory_by_level(plan: ExecutionPlan, levels: tuple[tuple[int, ...], ...], reuse: bool) -> ExecutionPlan:
    """plan_memory with each (level, target) as one step: the values of a level are live together."""
    merged: list[KernelStep] = []
    for level in levels:
        by_target: dict[str, list[KernelStep]] = {}
        for index in level:
            by_target.setdefault(plan.steps[index].target, []).append(plan.steps[index])
        for target, steps in by_target.items():
            if len(steps) == 1:
                merged.append(steps[0])  # a lone step keeps its ops, so it may still run in place
                continue
            inputs = tuple(dict.fromkeys(v for s in steps for v in s.inputs))
            outputs = tuple(v for s in steps for v in s.outputs)
            merged.append(KernelStep("+".join(s.kernel for s in steps), target, inputs, outputs, ()))
    planned = plan_memory(replace(plan, steps=tuple(merged)), reuse=reuse)
    return replace(plan, values=planned.values, storages=planned.storages, concurrent_levels=levels)
