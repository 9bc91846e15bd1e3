"""conformance/bisect.py: find the first op whose results on a target diverge from a reference target.

    result = bisect("model.onnx", "opencl")           # reference: cpu_llvm
    result.first_divergence                            # StepComparison or None
    tensorkiln debug bisect model.onnx --target opencl --shape input=1,3,32,32

Both sides compile at opt level 0, so every graph op is its own kernel and op
boundaries exist; both run on the same random inputs while every intermediate
value is captured (`intermediates.run_capturing`), and the steps are compared in
execution order with the op's registered tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .compare import errors
from .intermediates import run_capturing

__all__ = ["StepComparison", "BisectResult", "bisect", "random_inputs"]


@dataclass(frozen=True)
class StepComparison:
    index: int
    kernel: str
    ops: tuple[str, ...]
    placed_on: str
    max_abs_error: float
    max_rel_error: float
    tolerance: float
    diverges: bool
    note: str = ""


@dataclass
class BisectResult:
    target: str
    reference: str
    steps: list[StepComparison] = field(default_factory=list)

    @property
    def first_divergence(self) -> StepComparison | None:
        return next((s for s in self.steps if s.diverges), None)

    def to_json(self) -> dict:
        first = self.first_divergence
        return {"target": self.target, "reference": self.reference,
                "first_divergence": None if first is None else first.__dict__,
                "steps": [s.__dict__ for s in self.steps]}

    def print(self, console=None) -> None:
        from rich.console import Console
        from rich.table import Table

        console = console or Console()
        table = Table(title=f"bisect: {self.target} vs {self.reference} (opt level 0, one op per kernel)")
        for column in ("#", "ops", "placed on", "max abs err", "max rel err", "tolerance", "verdict"):
            table.add_column(column)
        for s in self.steps:
            verdict = "[red]DIVERGES[/red]" if s.diverges else "ok"
            table.add_row(str(s.index), ", ".join(s.ops), s.placed_on, f"{s.max_abs_error:.3g}",
                          f"{s.max_rel_error:.3g}", f"{s.tolerance:.3g}", verdict + (f" ({s.note})" if s.note else ""))
        console.print(table)
        first = self.first_divergence
        if first is None:
            console.print(f"[green]no divergence[/green]: all {len(self.steps)} ops match {self.reference}")
        else:
            console.print(f"[red]first divergence[/red] at step {first.index}: op {', '.join(first.ops)} "
                          f"(kernel {first.kernel} on {first.placed_on}): max abs error {first.max_abs_error:.3g}, "
                          f"max rel error {first.max_rel_error:.3g} (tolerance {first.tolerance:.3g})")


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


def bisect(model: Any, target: Any, reference: Any = "cpu_llvm", shape: dict | None = None, seed: int = 0,
           inputs: dict | None = None) -> BisectResult:
    """Compare `model` (ONNX path/proto or graph Module) on `target` and `reference`, op by op."""
    import tensorkiln as tk
    from ..compiler import as_module

    mod = as_module(model, shape)
    under_test = tk.compile(mod, target=target, opt_level=0)
    baseline = tk.compile(mod, target=reference, opt_level=0)
    inputs = inputs or random_inputs(baseline, seed)
    got = run_capturing(under_test.executor, inputs)
    want = run_capturing(baseline.executor, inputs)
    result = BisectResult(str(tk.target(target)), str(tk.target(reference)))
    for index, (ours, theirs) in enumerate(zip(got, want)):
        note = ""
        if ours.step.ops != theirs.step.ops:
            note = f"plans differ: {ours.step.ops} vs {theirs.step.ops}"
        max_abs, max_rel, tolerance, diverges = 0.0, 0.0, 0.0, bool(note)
        for actual, expected in zip(ours.outputs, theirs.outputs):
            if actual.shape != expected.shape:
                diverges, note = True, f"shape {actual.shape} vs {expected.shape}"
                continue
            abs_err, rel_err = errors(actual, expected)
            tol = _tolerance(ours.step.ops, str(expected.dtype) if expected.dtype != np.bool_ else "bool", expected)
            max_abs, max_rel, tolerance = max(max_abs, abs_err), max(max_rel, rel_err), max(tolerance, tol)
            finite = np.isfinite(expected)
            bad = np.abs(actual.astype(np.float64) - expected.astype(np.float64)) > tol + tol * np.abs(expected)
            if np.any(bad[finite]) or np.any(actual[~finite] != expected[~finite]):
                diverges = True
        result.steps.append(StepComparison(index, ours.step.kernel, ours.step.ops, ours.step.target, max_abs, max_rel,
                                           tolerance, diverges, note))
    return result
