"""Control-flow steps at run time: If, Loop and Scan around compiled bodies.

The compiler compiles each body of an `if`, `loop` or `scan` call (graph/ops/control_flow.py)
as a CompiledModel of its own and makes the call a step of the plan whose "kernel" is a
host program from here: the executor hands it the step's input arrays and copies its
results into the step's outputs. A body runs through its own executor (`run_with`, which
is thread safe), so a body may hold control flow in turn, to any depth. This is the Python
path; when the model runs in a native entry that takes control flow, the entry runs the step
itself with the same semantics (runtime/native_control.py, sdk/plan_entry.py), and this program
runs only where it cannot, or with `native=False`.

Arguments of the control-flow call that fusion inlined as scalar constants are not step
inputs; `ArgumentSpec` puts them back in place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..graph.ops.control_flow import IfAttrs, LoopAttrs, ScanAttrs, run_loop, run_scan

__all__ = ["ArgumentSpec", "ControlFlowProgram", "host_step"]


@dataclass(frozen=True)
class ArgumentSpec:
    """Argument i of the call is step input `sources[i]` (an int), or the constant array given."""

    sources: tuple[Any, ...]

    @property
    def num_inputs(self) -> int:
        return sum(1 for s in self.sources if isinstance(s, int))

    def arguments(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [inputs[s] if isinstance(s, int) else s for s in self.sources]


class ControlFlowProgram:
    """One control-flow step: `program(inputs) -> outputs` (numpy arrays in host memory)."""

    def __init__(self, attrs, bodies: Sequence[Any], spec: ArgumentSpec) -> None:
        self.attrs = attrs
        self.bodies = tuple(bodies)      # CompiledModels: (then, else) or (body,)
        self.spec = spec

    @property
    def num_inputs(self) -> int:
        return self.spec.num_inputs

    @staticmethod
    def _run_body(model, values: Sequence[Any]) -> list[np.ndarray]:
        """`model.executor.run_with(values)` without its per-call checks: the body's parameter types
        fix the shapes and dtypes of `values` (the graph's type rules checked them at compile time),
        and a loop runs its body once per iteration."""
        executor = model.executor
        state = executor._acquire_state()
        try:
            for value_id, array in zip(executor.plan.inputs, values):
                np.copyto(state.host_values[value_id], array)
            executor._run_state(state)
            return [state.value(v) for v in executor.plan.outputs]
        finally:
            executor._release_state(state)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        args = self.spec.arguments(inputs)
        attrs = self.attrs
        if isinstance(attrs, IfAttrs):
            taken = self.bodies[0] if bool(np.asarray(args[0]).reshape(-1)[0]) else self.bodies[1]
            return self._run_body(taken, args[1:])
        body = self.bodies[0]
        run = lambda values: self._run_body(body, values)  # noqa: E731
        if isinstance(attrs, LoopAttrs):
            carried = list(args[2:2 + attrs.num_carried])
            return run_loop(run, attrs, args[0], args[1], carried, list(args[2 + attrs.num_carried:]))
        if isinstance(attrs, ScanAttrs):
            num_inputs = len(attrs.input_axes)
            return run_scan(run, attrs, list(args[:attrs.num_states]),
                            list(args[attrs.num_states:attrs.num_states + num_inputs]),
                            list(args[attrs.num_states + num_inputs:]))
        raise TypeError(f"not a control-flow op's attrs: {type(attrs).__name__}")



def host_step(program: ControlFlowProgram, loader) -> Callable[..., None]:
    """The executor's callable for a control-flow step: (*input buffers, *output buffers) like a kernel,
    with the buffers in `loader`'s memory (copied to and from the host around the program)."""
    def run(*buffers: Any) -> None:
        count = program.num_inputs
        inputs = [np.asarray(loader.to_host(b)) for b in buffers[:count]]
        for buffer, value in zip(buffers[count:], program(inputs)):
            loader.copy_into(buffer, np.asarray(value))
    return run
