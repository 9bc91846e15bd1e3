"""test_opencl_properties.py: random te computes with random GPU bindings, opencl vs numpy.

Hypothesis draws a shape, an elementwise expression (or a reduction) and a GPU
schedule: the output axes are fused, split by a drawn factor, bound to blockIdx.x /
threadIdx.x, and optionally the innermost axis is split by 4 and vectorized.
Examples stay few (the kernels are compiled by PoCL each time).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import te

_UNARY = {
    "neg": (lambda x: 0.0 - x, np.negative),
    "tanh": (te.tanh, np.tanh),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "sqrt_abs": (lambda x: te.sqrt(te.fabs(x)), lambda x: np.sqrt(np.abs(x))),
    "exp": (te.exp, np.exp),
}
_BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "max": (te.max, np.maximum),
    "min": (te.min, np.minimum),
    "select": (lambda a, b: te.if_then_else(a > b, a - b, b * 0.5),
               lambda a, b: np.where(a > b, a - b, b * np.float32(0.5))),
}


@st.composite
def _expressions(draw, depth=0):
    """(te builder, numpy function) pairs over the two inputs A and B (indexed alike)."""
    if depth >= 3 or draw(st.booleans()) and depth > 0:
        leaf = draw(st.sampled_from(["A", "B", "const"]))
        if leaf == "const":
            value = draw(st.sampled_from([0.5, -1.25, 2.0]))
            return (lambda a, b: te.const(value, "float32")), (lambda a, b: np.float32(value))
        return ((lambda a, b: a) if leaf == "A" else (lambda a, b: b)), \
            ((lambda a, b: a) if leaf == "A" else (lambda a, b: b))
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(_UNARY)))
        te_op, np_op = _UNARY[name]
        te_x, np_x = draw(_expressions(depth + 1))
        return (lambda a, b: te_op(te_x(a, b))), (lambda a, b: np_op(np_x(a, b)))
    name = draw(st.sampled_from(sorted(_BINARY)))
    te_op, np_op = _BINARY[name]
    te_x, np_x = draw(_expressions(depth + 1))
    te_y, np_y = draw(_expressions(depth + 1))
    return (lambda a, b: te_op(te_x(a, b), te_y(a, b))), (lambda a, b: np_op(np_x(a, b), np_y(a, b)))


_shapes = st.lists(st.integers(1, 20), min_size=1, max_size=3).map(tuple)
_threads = st.sampled_from([1, 7, 16, 32, 64])


def _bind_flat(s, stage_tensor, axes, threads):
    """Fuse `axes`, split by `threads`, bind outer -> blockIdx.x, inner -> threadIdx.x."""
    stage = s[stage_tensor]
    fused = axes[0] if len(axes) == 1 else stage.fuse(*axes)
    outer, inner = stage.split(fused, factor=threads)
    stage.bind(outer, te.thread_axis("blockIdx.x"))
    stage.bind(inner, te.thread_axis("threadIdx.x"))


def _arrays(shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, shape).astype("float32") for _ in range(2)]


@settings(max_examples=15, deadline=None, derandomize=True)
@given(shape=_shapes, expression=_expressions(), threads=_threads, vectorize=st.booleans(), seed=st.integers(0, 9))
def test_random_elementwise_with_gpu_bindings_matches_numpy(shape, expression, threads, vectorize, seed):
    te_fn, np_fn = expression
    A = te.placeholder(shape, name="A")
    B = te.placeholder(shape, name="B")
    C = te.compute(shape, lambda *i: te_fn(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    axes = list(C.op.axis)
    if vectorize and shape[-1] % 4 == 0:
        outer, inner = s[C].split(axes[-1], factor=4)
        axes[-1] = outer
        s[C].vectorize(inner)
    _bind_flat(s, C, axes, threads)
    f = tk.build(s, [A, B, C], target="opencl", name="ew")
    a, b = _arrays(shape, seed)
    c = np.zeros(shape, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, np.broadcast_to(np_fn(a, b), shape), rtol=2e-5, atol=2e-5)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(rows=st.integers(1, 40), columns=st.integers(1, 40), reducer=st.sampled_from(["sum", "max", "min"]),
       threads=_threads, cache=st.booleans(), seed=st.integers(0, 9))
def test_random_row_reductions_with_gpu_bindings_match_numpy(rows, columns, reducer, threads, cache, seed):
    A = te.placeholder((rows, columns), name="A")
    k = te.reduce_axis((0, columns), name="k")
    B = te.compute((rows,), lambda i: getattr(te, reducer)(A[i, k] * 2.0, axis=k), name="B")
    s = te.create_schedule(B.op)
    local = s.cache_write(B, "local") if cache else None
    stage = s[B]
    outer, inner = stage.split(B.op.axis[0], factor=threads)
    stage.bind(outer, te.thread_axis("blockIdx.x"))
    stage.bind(inner, te.thread_axis("threadIdx.x"))
    if local is not None:
        s[local].compute_at(stage, inner)
    f = tk.build(s, [A, B], target="opencl", name="reduce")
    a = np.random.default_rng(seed).uniform(-2, 2, (rows, columns)).astype("float32")
    b = np.zeros(rows, "float32")
    f(a, b)
    expected = getattr(np, reducer)(a * 2.0, axis=1)
    np.testing.assert_allclose(b, expected, rtol=1e-5, atol=1e-5 * math.sqrt(columns))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(n=st.sampled_from([16, 24, 32]), tile=st.sampled_from([4, 8]), seed=st.integers(0, 9))
def test_random_matmuls_with_shared_tiles_match_numpy(n, tile, seed):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    bi, ti = s[C].split(C.op.axis[0], factor=tile)
    bj, tj = s[C].split(C.op.axis[1], factor=tile)
    s[C].reorder(bi, bj, ti, tj)
    for axis, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        s[C].bind(axis, te.thread_axis(tag))
    s[AA].compute_at(s[C], bj)
    s[BB].compute_at(s[C], bj)
    f = tk.build(s, [A, B, C], target="opencl", name="mm")
    a, b = _arrays((n, n), seed)
    c = np.zeros((n, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def _shared_strategies():
    """tests/te/strategies.py of the core (random computes + legal schedules), when this checkout has it."""
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[3])
    if root not in sys.path:
        sys.path.append(root)
    return pytest.importorskip("tests.te.strategies", reason="the core's tests/te/strategies.py is not in this checkout")


_strategies = _shared_strategies()


def _bind_outer_leaves(schedule, output_name: str) -> None:
    """The binding step the shared strategies leave out: outermost data leaves -> blockIdx.x, threadIdx.x."""
    stage = schedule[output_name]
    leaves = list(stage.leaf_iter_vars)
    for leaf, tag in zip(leaves, ("blockIdx.x", "threadIdx.x")):
        if leaf.kind == "reduce":
            break
        stage.bind(leaf, te.thread_axis(tag))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(case=_strategies.scheduled_cases(kinds=("elementwise", "broadcast", "reduction", "matmul", "pool")),
       bind=st.booleans())
def test_shared_strategy_cases_run_on_opencl(case, bind):
    outputs_names = [t.op.name for t in case.workload.outputs]
    if bind:
        _bind_outer_leaves(case.schedule, outputs_names[0])
    f = tk.build(case.schedule, case.args, target="opencl", name="case")
    outputs = case.fresh_outputs()
    f(*case.inputs, *outputs)
    case.check(outputs)
