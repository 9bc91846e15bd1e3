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


def run_capturing(executor, inputs: Mapping[str, Any]) -> list[StepValues]:
    """Set `inputs`, run every step of the plan in order, and return each step's outputs."""
    for name, array in inputs.items():
        executor.set_input(name, array)
    captured = []
    for index, step in enumerate(executor.plan.steps):
        executor.run_step(index)
        captured.append(StepValues(index, step, tuple(executor.value(v) for v in step.outputs)))
    return captured
