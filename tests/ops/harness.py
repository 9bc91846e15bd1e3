"""Run one registered op (or a te DAG) through compute -> cpu_llvm's schedule -> lower -> run.

`run_op` builds placeholders for the case's arrays, calls the registry's compute, asks
cpu_llvm's strategies for the schedule (`tensorkiln.compiler.strategy.schedule_for`; or
takes the core's naive default), then runs the kernel with the tir interpreter ("interpret") or compiled for llvm
("llvm"), and returns the outputs as numpy arrays.
"""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
import tensorkiln.ops  # noqa: F401  (attaches computes to the registry)
from tensorkiln import te, tir
from tensorkiln.compiler.strategy import schedule_for
from tensorkiln.graph.types import TensorType
from tensorkiln.ir.dtypes import from_numpy, to_numpy
from tensorkiln.ops import naive_schedule

__all__ = ["run_op", "run_schedule", "assert_matches", "static_work", "LLVM"]


LLVM = tk.target("llvm")


def run_schedule(s, inputs: list, outputs: list, arrays: list[np.ndarray], backend: str) -> list[np.ndarray]:
    """Run schedule `s` on `arrays`; returns fresh output arrays."""
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=to_numpy(o.dtype)) for o in outputs]
    if backend == "interpret":
        tir.interpret(te.lower(s, [*inputs, *outputs], name="kernel"), *arrays, *results)
    else:
        tk.build(s, [*inputs, *outputs], target=LLVM, name="kernel")(*arrays, *results)
    return results


def run_op(op, arrays: list[np.ndarray], attrs, backend: str, naive: bool = False) -> list[np.ndarray]:
    """The op's outputs for `arrays`, computed by its te compute and scheduled by cpu_llvm's strategies
    (`naive`: by the core's naive default, what a target without strategies gets)."""
    inputs = [te.placeholder(a.shape, from_numpy(a.dtype), name=f"input{i}") for i, a in enumerate(arrays)]
    out_type = op.type_rule(tuple(TensorType(a.shape, t.dtype) for a, t in zip(arrays, inputs)), attrs)
    outputs = op.compute(inputs, attrs, out_type)
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    s = naive_schedule(outputs) if naive else schedule_for(outputs, LLVM, ops=(op.name,))
    return run_schedule(s, inputs, outputs, arrays, backend)


def assert_matches(op, actual: list[np.ndarray], arrays: list[np.ndarray], attrs, atol: float) -> None:
    """Compare with the registered numpy reference, using the op's tolerance for the dtype."""
    expected = op.reference(*arrays, attrs)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(actual) == len(expected), f"{op.name}: {len(actual)} outputs, reference has {len(expected)}"
    for got, want in zip(actual, expected):
        want = np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype, \
            f"{op.name}: got {got.dtype}{got.shape}, reference {want.dtype}{want.shape}"
        rtol = op.rtol(str(want.dtype))
        scale = 10 * rtol if want.dtype == np.float16 else atol
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=max(rtol, 1e-6),
                                   atol=scale, equal_nan=True, err_msg=f"{op.name}")


def static_work(inputs: list, outputs: list) -> int:
    """Store executions of the outputs' naive-scheduled kernel if every loop ran in full and every branch
    were taken (static extents); stores of a constant (a reduction's initial value) are no work."""
    func = tk.lower(naive_schedule(outputs), [*inputs, *outputs])
    total = 0

    class Count(tir.StmtExprVisitor):
        def __init__(self):
            self.extent = 1

        def visit_For(self, s):
            outer, self.extent = self.extent, self.extent * s.extent.value
            self.visit_stmt(s.body)
            self.extent = outer

        def visit_Store(self, s):
            nonlocal total
            if not isinstance(s.value, (tir.IntImm, tir.FloatImm)):
                total += self.extent
    Count().visit_stmt(func.body)
    return total
