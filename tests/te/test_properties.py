"""Random computes with random legal schedules, lowered and interpreted, against numpy."""
from hypothesis import given, settings

from tensorkiln import te, tir

from .strategies import make_workload, scheduled_cases


def _run(case):
    func = te.lower(case.schedule, case.args)
    outputs = case.fresh_outputs()
    tir.interpret(func, *case.inputs, *outputs)
    case.check(outputs)
    return func


@given(case=scheduled_cases(kinds=("elementwise", "broadcast", "reduction")))
@settings(max_examples=25, deadline=None, derandomize=True)
def test_scheduled_simple_ops_match_numpy(case):
    _run(case)


@given(case=scheduled_cases(kinds=("matmul", "pool")))
@settings(max_examples=20, deadline=None, derandomize=True)
def test_scheduled_matmul_and_pool_match_numpy(case):
    _run(case)


@given(case=scheduled_cases(kinds=("conv2d",)))
@settings(max_examples=15, deadline=None, derandomize=True)
def test_scheduled_conv2d_matches_numpy(case):
    _run(case)


@given(case=scheduled_cases(caches=True))
@settings(max_examples=25, deadline=None, derandomize=True)
def test_scheduled_cache_stages_match_numpy(case):
    _run(case)


@given(case=scheduled_cases(caches=True))
@settings(max_examples=15, deadline=None, derandomize=True)
def test_trace_replay_gives_the_same_loop_nest(case):
    func = te.lower(case.schedule, case.args)
    fresh = make_workload(case.workload.kind, case.workload.params)
    s2 = te.create_schedule([t.op for t in fresh.outputs])
    te.replay(case.trace, s2)
    assert s2.trace == case.trace
    tir.assert_structural_equal(func, te.lower(s2, fresh.args))
