"""runtime/profiler.py: where a compiled model's time goes, per kernel, and a Chrome trace of one run.

    report = profile(lib, {"input": x}, repeat=20)
    print(report.table())                  # kernels by total median time, share, launches, ops
    report.write_chrome_trace("run.json")  # open in chrome://tracing or https://ui.perfetto.dev

Times come from the executor's per-step timer (`GraphExecutor.last_step_times`), which
brackets each kernel call; the medians over `repeat` runs are reported. Profiled runs go
through the Python executor even where the plan has a native entry (which times nothing). Steps of one
concurrent level start together in the trace, one row per step of the level.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["profile", "Profile", "StepTime"]


@dataclass(frozen=True)
class StepTime:
    """One step of the plan: its kernel, target, ops and the median of its times in seconds."""

    index: int
    kernel: str
    target: str
    ops: tuple[str, ...]
    seconds: float


@dataclass
class Profile:
    steps: list[StepTime]
    run_seconds: float                      # median wall time of a whole run
    levels: tuple[tuple[int, ...], ...] = field(default=())

    def by_kernel(self) -> list[tuple[str, str, int, float, tuple[str, ...]]]:
        """(kernel, target, launches, total seconds, ops), slowest first."""
        totals: dict[tuple[str, str], list] = {}
        for step in self.steps:
            entry = totals.setdefault((step.kernel, step.target), [0, 0.0, step.ops])
            entry[0] += 1
            entry[1] += step.seconds
        rows = [(kernel, target, n, seconds, ops) for (kernel, target), (n, seconds, ops) in totals.items()]
        return sorted(rows, key=lambda row: -row[3])

    def table(self, limit: int | None = None) -> str:
        kernel_seconds = sum(step.seconds for step in self.steps) or 1e-12
        lines = [f"{'kernel':<48} {'target':<10} {'calls':>5} {'ms':>9} {'share':>6}  ops"]
        for kernel, target, calls, seconds, ops in self.by_kernel()[:limit]:
            lines.append(f"{kernel[:48]:<48} {target.split()[0][:10]:<10} {calls:>5} {seconds * 1e3:9.3f} "
                         f"{100 * seconds / kernel_seconds:5.1f}%  {', '.join(ops)}")
        overhead = max(0.0, self.run_seconds - kernel_seconds)
        lines.append(f"kernels {kernel_seconds * 1e3:.3f} ms of a {self.run_seconds * 1e3:.3f} ms run "
                     f"(outside kernels: {overhead * 1e3:.3f} ms)")
        return "\n".join(lines)

    def chrome_trace(self) -> dict:
        """The trace as Chrome's JSON trace-event format (complete events, microseconds)."""
        levels = self.levels or tuple((step.index,) for step in self.steps)
        by_index = {step.index: step for step in self.steps}
        events, start = [], 0.0
        for level in levels:
            for row, index in enumerate(level):
                step = by_index[index]
                events.append({"name": step.kernel, "cat": step.target.split()[0], "ph": "X", "pid": 1,
                               "tid": row, "ts": start * 1e6, "dur": step.seconds * 1e6,
                               "args": {"step": index, "ops": list(step.ops), "target": step.target}})
            start += max(by_index[i].seconds for i in level)
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path) -> None:
        with open(path, "w") as handle:
            json.dump(self.chrome_trace(), handle)


def profile(model, inputs: Mapping[str, Any], repeat: int = 10, warmup: int = 2) -> Profile:
    """Run `model` (a CompiledModel or a deployed model) `warmup + repeat` times on `inputs`."""
    import time

    executor = model.executor
    per_step: list[list[float]] = [[] for _ in executor.plan.steps]
    runs = []
    for iteration in range(warmup + max(1, repeat)):
        start = time.perf_counter()
        executor.run_with(dict(inputs), native=False)   # step by step: the native entry has no per-step timer
        elapsed = time.perf_counter() - start
        if iteration < warmup:
            continue
        runs.append(elapsed)
        for index, seconds in enumerate(executor.last_step_times):
            per_step[index].append(seconds)
    steps = [StepTime(index, step.kernel, step.target, tuple(step.ops), statistics.median(times))
             for index, (step, times) in enumerate(zip(executor.plan.steps, per_step))]
    levels = executor.plan.concurrent_levels if executor.concurrent else ()
    return Profile(steps, statistics.median(runs), tuple(levels))
