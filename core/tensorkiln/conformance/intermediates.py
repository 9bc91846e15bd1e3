"""conformance/intermediates.py: run a GraphExecutor step by step, capturing every kernel's outputs.

    values = run_capturing(lib.executor, {"x": x})   # [StepValues(step_index, step, outputs), ...]
    values = run_capturing(lib.executor, {"x": x}, record_errors=True)   # a step that raises: .error

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
    outputs: tuple[np.ndarray, ...]   # () when the step raised
    error: str = ""                   # "ValueError: ..." when the step raised (record_errors=True)


def run_capturing(executor, inputs: Mapping[str, Any], record_errors: bool = False) -> list[StepValues]:
    """Set `inputs`, run every step of the plan in order, and return each step's outputs.

    With `record_errors`, a step whose run (or the copy of its outputs) raises is recorded
    with the error and the later steps still run, on whatever the failed step left behind;
    without it the exception propagates.
    """
    for name, array in inputs.items():
        executor.set_input(name, array)
    captured = []
    for index, step in enumerate(executor.plan.steps):
        try:
            executor.run_step(index)
            outputs = tuple(executor.value(v) for v in step.outputs)
        except Exception as error:  # the target's kernels or loader: recorded, named by step
            if not record_errors:
                raise
            captured.append(StepValues(index, step, (), f"{type(error).__name__}: {error}"))
            continue
        captured.append(StepValues(index, step, outputs))
    return captured
