"""Registry-driven numerics: every op's te compute + schedule against its numpy reference.

Tiny shapes run through the tir interpreter (the reference for lowered loop IR), scheduled
by cpu_llvm's strategies and by the core's naive default (what a target without strategies
gets); moderate shapes (conv2d 1x16x14x14 k3, dense 64x128x96, ...) run compiled for llvm.
Inputs come from op_inputs.CASES; tolerances from the op's registry record.
"""
import numpy as np
import pytest

from tensorkiln.graph import get_op, list_ops

from .harness import assert_matches, run_op
from .op_inputs import CASES, cases_for

# Compiled runs: ops whose moderate cases are the point of the test (schedules with tiles,
# vectors and threads) run every case; the rest run their first case to keep the suite fast.
ALL_MODERATE_CASES = {"nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.matmul", "nn.max_pool2d",
                      "nn.avg_pool2d", "nn.softmax", "nn.layer_norm", "sum", "add", "image.resize"}


def _params(size: str, all_cases: set | None = None):
    params = []
    for op in list_ops():
        if op.name not in CASES:
            continue
        cases = cases_for(op.name, size)
        if all_cases is not None and op.name not in all_cases:
            cases = cases[:1]
        for index, case in enumerate(cases):
            params.append(pytest.param(op.name, index, id=f"{op.name}-{case.label or index}"))
    return params


@pytest.mark.parametrize("name, index", _params("tiny"))
def test_op_matches_reference_interpreted(name, index):
    op, case = get_op(name), cases_for(name, "tiny")[index]
    assert_matches(op, run_op(op, case.inputs, case.attrs, "interpret"), case.inputs, case.attrs, case.atol)


@pytest.mark.parametrize("name, index", _params("tiny"))
def test_op_matches_reference_with_the_naive_default(name, index):
    op, case = get_op(name), cases_for(name, "tiny")[index]
    assert_matches(op, run_op(op, case.inputs, case.attrs, "interpret", naive=True), case.inputs, case.attrs,
                   case.atol)


@pytest.mark.parametrize("name, index", _params("moderate", ALL_MODERATE_CASES))
def test_op_matches_reference_compiled(name, index):
    op, case = get_op(name), cases_for(name, "moderate")[index]
    assert_matches(op, run_op(op, case.inputs, case.attrs, "llvm"), case.inputs, case.attrs, case.atol)


FLOAT16_OPS = ["exp", "tanh", "sigmoid", "nn.gelu", "add", "multiply", "sum", "mean", "nn.softmax", "nn.conv2d",
               "nn.dense", "nn.avg_pool2d", "nn.layer_norm"]


@pytest.mark.parametrize("name", FLOAT16_OPS)
def test_float16_matches_reference_with_registry_tolerance(name):
    op, case = get_op(name), cases_for(name, "tiny")[0]
    arrays = [a.astype(np.float16) if a.dtype == np.float32 else a for a in case.inputs]
    assert_matches(op, run_op(op, arrays, case.attrs, "interpret"), arrays, case.attrs, case.atol)
