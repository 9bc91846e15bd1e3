"""conformance/intermediates.py: run a GraphExecutor step by step, capturing every kernel's outputs.

    values = run_capturing(lib.executor, {"x": x})   # [StepValues(step_index, step, outputs), ...]

Outputs are copied to numpy right after their step runs, so later steps reusing
the storage (memory planning) cannot overwrite them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

__all__ = ["StepValues", "run_capturing"]


@dataclass(frozen=True)
class StepValues:
    index: int
    step: Any                         # compiler.plan.KernelStep
    outputs: tuple[np.ndarray, ...]


def _to_numpy(executor, value_id: int) -> np.ndarray:
    # TODO(#7): GraphExecutor has no public per-step hook; this reads its value table.
    target = executor._value_target[value_id]
    array = executor._host_values[value_id]
    if target is None or executor._loaders[target].uses_host_memory:
        return np.array(array, copy=True)
    return np.asarray(executor._loaders[target].to_host(array))


def run_capturing(executor, inputs: Mapping[str, Any]) -> list[StepValues]:
    """Set `inputs`, run every step of the plan in order, and return each step's outputs."""
    for name, array in inputs.items():
        executor.set_input(name, array)
    captured = []
    for index, (step, function, args) in enumerate(zip(executor.plan.steps, executor._functions, executor._step_args)):
        executor._refresh_mirrors(step)
        function(*args)
        captured.append(StepValues(index, step, tuple(_to_numpy(executor, v) for v in step.outputs)))
    return captured
