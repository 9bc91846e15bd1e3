"""tests/runtime/test_cpu_llvm_properties.py: Random computes with random legal schedules (tests/te/strategies.py) built for cpu_llvm, against numpy."""
from __future__ import annotations

from hypothesis import given, settings

import tensorkiln as tk

from ..te.strategies import scheduled_cases


def _build_and_check(case):
    module = tk.build(case.schedule, case.args, target="llvm -num_threads=2", name="case")
    outputs = case.fresh_outputs()
    module(*case.inputs, *outputs)
    case.check(outputs)


@given(case=scheduled_cases(kinds=("elementwise", "broadcast", "reduction")))
@settings(max_examples=30, deadline=None, derandomize=True)
def test_scheduled_simple_ops_match_numpy(case):
    _build_and_check(case)


@given(case=scheduled_cases(kinds=("matmul", "pool", "conv2d")))
@settings(max_examples=25, deadline=None, derandomize=True)
def test_scheduled_matmul_pool_conv2d_match_numpy(case):
    _build_and_check(case)


@given(case=scheduled_cases(caches=True))
@settings(max_examples=25, deadline=None, derandomize=True)
def test_scheduled_cache_stages_match_numpy(case):
    _build_and_check(case)
