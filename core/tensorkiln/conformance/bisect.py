"""conformance/bisect.py: find the ops whose results on a target diverge from a reference target.

    result = bisect("model.onnx", "opencl")           # reference: cpu_llvm
    result.first_divergence                            # StepComparison or None
    result.defects                                     # steps wrong on the reference's inputs
    tensorkiln debug bisect model.onnx --target opencl --shape input=1,3,32,32

Both sides compile at opt level 0, so every graph op is its own kernel and op
boundaries exist; both run on the same random inputs while every intermediate
value is captured (`intermediates.run_capturing`), and the steps are compared in
execution order with the op's registered tolerance.

Each step is measured twice:

- on its own inputs, the target's results of the earlier steps: what the model's
  output sees. After the first divergence, later steps may diverge here only
  because they are fed wrong values.
- on the reference's inputs: the target's kernel for the step alone, called with
  the reference's values of its inputs. A step that diverges here is wrong
  itself, so a second, independent defect shows even behind the first.

A step that raises (a kernel, or the loader copying values between the target
and a CPU fallback) is recorded with its error instead of ending the bisection.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .compare import errors, exceeds
from .intermediates import StepValues, run_capturing

__all__ = ["Measurement", "StepComparison", "BisectResult", "bisect", "random_inputs"]


@dataclass(frozen=True)
class Measurement:
    """A step's outputs against the reference's: max abs / rel error (see compare.errors), the verdict,
    and a note (a shape mismatch, or the error the step raised)."""

    max_abs_error: float
    max_rel_error: float
    diverges: bool
    note: str = ""


@dataclass(frozen=True)
class StepComparison:
    """One step of the plan. The flat error fields are on the step's own inputs;
    `on_reference_inputs` is the same kernel on the reference's inputs (None when
    the plans differ at this step, so there is nothing to feed it)."""

    index: int
    kernel: str
    ops: tuple[str, ...]
    placed_on: str
    max_abs_error: float
    max_rel_error: float
    tolerance: float
    diverges: bool
    note: str = ""
    on_reference_inputs: Measurement | None = None

    @property
    def diverges_on_reference_inputs(self) -> bool:
        """The step is wrong itself (unknown, so as on its own inputs, when it could not be fed)."""
        if self.on_reference_inputs is None:
            return self.diverges
        return self.on_reference_inputs.diverges

    @property
    def verdict(self) -> str:
        if self.diverges and self.diverges_on_reference_inputs:
            return "diverges on its own inputs and on the reference's inputs"
        if self.diverges_on_reference_inputs:
            return "diverges on the reference's inputs"
        if self.diverges:
            return "diverges on its own inputs only"
        return "ok"


@dataclass
class BisectResult:
    target: str
    reference: str
    steps: list[StepComparison] = field(default_factory=list)

    @property
    def first_divergence(self) -> StepComparison | None:
        return next((s for s in self.steps if s.diverges or s.diverges_on_reference_inputs), None)

    @property
    def defects(self) -> list[StepComparison]:
        """Steps that diverge on the reference's inputs: each is a defect of its own."""
        return [s for s in self.steps if s.diverges_on_reference_inputs]

    def to_json(self) -> dict:
        first = self.first_divergence
        return {"target": self.target, "reference": self.reference,
                "first_divergence": None if first is None else _step_json(first),
                "defects": [s.index for s in self.defects],
                "steps": [_step_json(s) for s in self.steps]}

    def print(self, console=None) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        console = console or Console()
        table = Table(title=escape(f"bisect: {self.target} vs {self.reference} (opt level 0, one op per kernel)"))
        for column in ("#", "ops", "placed on", "own inputs: abs / rel err", "reference's inputs: abs / rel err",
                       "tolerance", "verdict"):
            table.add_column(column, overflow="fold")
        for s in self.steps:
            theirs = s.on_reference_inputs
            table.add_row(str(s.index), ", ".join(s.ops), escape(s.placed_on),
                          _errors_text(s.max_abs_error, s.max_rel_error),
                          "-" if theirs is None else _errors_text(theirs.max_abs_error, theirs.max_rel_error),
                          _number(s.tolerance), _verdict_markup(s))
        console.print(table)
        first = self.first_divergence
        if first is None:
            console.print(f"[green]no divergence[/green]: all {len(self.steps)} ops match {escape(self.reference)}")
            return
        console.print("[red]first divergence[/red] " + escape(
            f"at step {first.index}: op {', '.join(first.ops)} (kernel {first.kernel} on {first.placed_on}): "
            f"{first.verdict}; max abs error {_number(first.max_abs_error)}, max rel error "
            f"{_number(first.max_rel_error)} (tolerance {_number(first.tolerance)})"
            + (f"; {first.note}" if first.note else "")))
        defects = self.defects
        if not defects:
            console.print("every kernel matches on the reference's inputs: the divergence comes from how values "
                          "reach the kernels or come back (the loader's to_host / copy_into / view, or a step that "
                          "raised), not from a kernel's arithmetic")
        else:
            listed = ", ".join(f"{s.index} ({', '.join(s.ops)})" for s in defects)
            console.print(f"[red]{len(defects)} step(s) diverge on the reference's inputs[/red], each a defect of "
                          f"its own: {listed}")
        inherited = [s for s in self.steps if s.diverges and not s.diverges_on_reference_inputs]
        if inherited:
            cause = "fed by the defects above" if defects else "see the notes"
            console.print(f"{len(inherited)} step(s) diverge only on their own inputs ({cause}): "
                          f"{', '.join(str(s.index) for s in inherited)}")


def _step_json(step: StepComparison) -> dict:
    data = dataclasses.asdict(step)
    data["verdict"] = step.verdict
    return _json_floats(data)


def _json_floats(value: Any) -> Any:
    """inf and nan as the strings "inf" / "nan" (strict JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_floats(v) for k, v in value.items()}
    return value


def _number(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3g}"


def _errors_text(max_abs: float, max_rel: float) -> str:
    if math.isnan(max_abs):
        return "-"
    if max_abs == 0.0:
        return "0"
    # inf relative error with a finite abs error: the differing elements all expect 0 (or inf)
    rel = "inf (ref 0)" if math.isinf(max_rel) and math.isfinite(max_abs) else _number(max_rel)
    return f"{_number(max_abs)} / {rel}"


def _verdict_markup(step: StepComparison) -> str:
    verdict = step.verdict
    if step.diverges_on_reference_inputs:
        text = f"[red]DIVERGES[/red] {verdict.removeprefix('diverges ')}"
    elif step.diverges:
        text = f"[yellow]{verdict}[/yellow]"
    else:
        text = verdict
    notes = [step.note] if step.note else []
    if step.on_reference_inputs is not None and step.on_reference_inputs.note:
        notes.append(f"on the reference's inputs: {step.on_reference_inputs.note}")
    from rich.markup import escape

    return text + escape("".join(f" ({note})" for note in notes))


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def random_inputs(lib, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random values for every input of a CompiledModel (normal floats, small non-negative ints)."""
    from ..ir.dtypes import to_numpy

    rng = np.random.default_rng(seed)
    inputs = {}
    for info in lib.input_info():
        np_dtype = to_numpy(info["dtype"])
        if np.issubdtype(np_dtype, np.floating):
            inputs[info["name"]] = rng.standard_normal(info["shape"]).astype(np_dtype)
        elif np_dtype == np.bool_:
            inputs[info["name"]] = rng.random(info["shape"]) < 0.5
        else:
            inputs[info["name"]] = rng.integers(0, 3, size=info["shape"]).astype(np_dtype)
    return inputs


def _tolerance(ops: tuple[str, ...], dtype: str, reference: np.ndarray) -> float:
    from ..graph.registry import DEFAULT_TOLERANCE, get_op

    if not dtype.startswith("float"):
        return 0.0
    rtol = max([get_op(name).rtol(dtype) for name in ops] or [DEFAULT_TOLERANCE.get(dtype, 1e-5)])
    return rtol * max(1.0, float(np.max(np.abs(reference), initial=0.0)))


def _step_tolerance(ops: tuple[str, ...], expected: Sequence[np.ndarray]) -> float:
    return max([_tolerance(ops, str(e.dtype) if e.dtype != np.bool_ else "bool", e) for e in expected] or [0.0])


def _measure(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], tolerance: float) -> Measurement:
    max_abs = max_rel = 0.0
    diverges, notes = False, []
    if len(actual) != len(expected):
        return Measurement(math.nan, math.nan, True, f"{len(actual)} outputs vs {len(expected)}")
    for got, want in zip(actual, expected):
        if got.shape != want.shape:
            diverges, max_abs, max_rel = True, math.nan, math.nan   # nan: no error to measure
            notes.append(f"shape {got.shape} vs {want.shape}")
            continue
        abs_err, rel_err = errors(got, want)
        if not math.isnan(max_abs):   # a mismatched shape leaves the errors unmeasured
            max_abs, max_rel = max(max_abs, abs_err), max(max_rel, rel_err)
        diverges = diverges or bool(np.any(exceeds(got, want, tolerance, tolerance)))
    return Measurement(max_abs, max_rel, diverges, "; ".join(notes))


def _failed(note: str) -> Measurement:
    return Measurement(math.nan, math.nan, True, note)


def _reference_values(baseline, want: list[StepValues]) -> dict[int, np.ndarray]:
    """Value id (of the reference's plan) -> its value: inputs and constants, then every step's outputs."""
    values: dict[int, np.ndarray] = {}
    for v in baseline.plan.values:
        if v.kind in ("input", "constant"):
            values[v.id] = baseline.executor.value(v.id)
    for captured in want:
        values.update(zip(captured.step.outputs, captured.outputs))
    return values


def _run_on_reference_inputs(lib, index: int, theirs: StepValues, reference: dict[int, np.ndarray]
                             ) -> tuple[np.ndarray, ...]:
    """Step `index` of `lib` alone, its kernel called with numpy arrays holding the reference's inputs."""
    from ..ir.dtypes import to_numpy

    step = lib.plan.steps[index]
    arrays = []
    for ours_id, theirs_id in zip(step.inputs, theirs.step.inputs):
        value = lib.plan.values[ours_id]
        arrays.append(np.ascontiguousarray(reference[theirs_id], dtype=to_numpy(value.dtype)).reshape(value.shape))
    outputs = [np.zeros(lib.plan.values[v].shape, to_numpy(lib.plan.values[v].dtype)) for v in step.outputs]
    lib.loaded_module(step.target).get_function(step.kernel)(*arrays, *outputs)
    return tuple(outputs)


def _own_run(lib, inputs: dict) -> list[StepValues]:
    """Every step on its own inputs; a failure to set up the executor is recorded on every step."""
    try:
        executor = lib.executor
    except Exception as error:  # the target's loader (load, empty, view): named, not a traceback
        message = f"not run: setting up the executor raised {type(error).__name__}: {error}"
        return [StepValues(i, step, (), message) for i, step in enumerate(lib.plan.steps)]
    return run_capturing(executor, inputs, record_errors=True)


def bisect(model: Any, target: Any, reference: Any = "cpu_llvm", shape: dict | None = None, seed: int = 0,
           inputs: dict | None = None) -> BisectResult:
    """Compare `model` (ONNX path/proto or graph Module) on `target` and `reference`, op by op."""
    import tensorkiln as tk
    from ..compiler import as_module

    mod = as_module(model, shape)
    under_test = tk.compile(mod, target=target, opt_level=0)
    baseline = tk.compile(mod, target=reference, opt_level=0)
    inputs = inputs or random_inputs(baseline, seed)
    want = run_capturing(baseline.executor, inputs)
    got = _own_run(under_test, inputs)
    reference_values = _reference_values(baseline, want)
    result = BisectResult(str(tk.target(target)), str(tk.target(reference)))
    for index, (ours, theirs) in enumerate(zip(got, want)):
        tolerance = _step_tolerance(ours.step.ops, theirs.outputs)
        if ours.step.ops != theirs.step.ops or len(ours.step.inputs) != len(theirs.step.inputs):
            own = _failed(f"plans differ: {ours.step.ops} vs {theirs.step.ops}")
            on_reference = None
        else:
            own = (_failed(f"raised {_first_line(ours.error)}") if ours.error
                   else _measure(ours.outputs, theirs.outputs, tolerance))
            try:
                on_reference = _measure(_run_on_reference_inputs(under_test, index, theirs, reference_values),
                                        theirs.outputs, tolerance)
            except Exception as error:  # the target's kernel or loader, run alone: named, not a traceback
                on_reference = _failed(f"raised {type(error).__name__}: {_first_line(str(error))}")
        result.steps.append(StepComparison(index, ours.step.kernel, ours.step.ops, ours.step.target,
                                           own.max_abs_error, own.max_rel_error, tolerance, own.diverges, own.note,
                                           on_reference))
    return result
