"""cumsum/cumprod as an O(n) scan tree and topk as an extern stage (a bounded heap per row, a merge sort
for long rows with large k; ops/sort.py): they match numpy (the ops' references) on cpu_llvm and the tir
interpreter, their lowered loops stay within O(n) and O(n log k)-style bounds (not the n^2 of the old masked
reductions), and they run at real sizes."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.graph.ops.tensor import CumsumAttrs, TopKAttrs
from tensorkiln.graph.registry import get_op
from tensorkiln.graph.types import TensorType

from ..ops.harness import run_op, static_work

DTYPES = ["float32", "float64", "int32", "int64", "uint8"]


@st.composite
def _tensor(draw, nan: bool = False):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=9))
    if dtype.startswith("float"):
        elements = st.floats(-4, 4, width=32).map(lambda v: float(round(v * 2) / 2))  # ties are likely
        if nan:
            elements = st.one_of(elements, st.just(float("nan")))
    else:
        elements = st.integers(0, 5)
    return draw(hnp.arrays(dtype, shape, elements=elements)), draw(st.integers(-len(shape), len(shape) - 1))


@settings(max_examples=10, deadline=None)
@given(_tensor(), st.sampled_from(["cumsum", "cumprod"]), st.booleans(), st.booleans())
def test_cumulative_ops_match_numpy(case, op, exclusive, reverse):
    x, axis = case
    attrs = CumsumAttrs(axis=axis, exclusive=exclusive, reverse=reverse)
    want = get_op(op).reference(x, attrs)
    for backend in ("llvm", "interpret"):
        (got,) = run_op(get_op(op), [x], attrs, backend)
        if x.dtype.kind == "f":   # the tree adds pairwise: rounding differs from the running sum
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=backend)
        else:
            np.testing.assert_array_equal(got, want, err_msg=backend)


@settings(max_examples=10, deadline=None)
@given(_tensor(nan=True), st.booleans(), st.data())
def test_topk_matches_numpy_with_ties_and_nans(case, largest, data):
    x, axis = case
    k = data.draw(st.integers(0 if x.shape[axis] == 0 else 1, x.shape[axis]))
    attrs = TopKAttrs(k=k, axis=axis, largest=largest)
    want = get_op("topk").reference(x, attrs)
    for backend in ("llvm", "interpret"):
        got = run_op(get_op("topk"), [x], attrs, backend)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=f"{backend} k={k} axis={axis} largest={largest}")


def _loop_iterations(op: str, shape, attrs) -> int:
    """Iterations of every innermost loop body of the op's lowered kernel (static extents)."""
    x = te.placeholder(shape, "float32", name="x")
    outputs = get_op(op).compute([x], attrs, get_op(op).type_rule((TensorType(shape, "float32"),), attrs))
    return static_work([x], list(outputs) if isinstance(outputs, list) else [outputs])


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_cumulative_ops_do_linear_work(op):
    n = 1 << 14
    assert _loop_iterations(op, (n,), CumsumAttrs(axis=0)) <= 5 * n   # n^2 / 2 before


@pytest.mark.parametrize("k", [8, 1 << 12])
def test_topk_does_n_log2_k_work(k):
    n = 1 << 12
    work = _loop_iterations("topk", (n,), TopKAttrs(k=k, axis=0))
    log_k = int(math.log2(k))
    assert work <= n * (log_k * (log_k + 1) // 2 + 2 * log_k + 4)   # 2 n^2 before (ranks, then selection)


def _run_onnx(node, inputs: dict, outputs, initializers=()):
    from onnx import helper
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                           v.shape) for k, v in inputs.items()],
                              outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm").run(inputs)


def test_cumsum_of_a_million_floats_matches_float64_numpy():
    from onnx import TensorProto, helper
    x = np.random.default_rng(1).standard_normal(10 ** 6).astype("float32")
    (got,) = _run_onnx(helper.make_node("CumSum", ["x", "axis"], ["y"]), {"x": x},
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10 ** 6])],
                       [helper.make_tensor("axis", TensorProto.INT64, [], [0])])
    exact = np.cumsum(x.astype(np.float64))
    # pairwise sums: closer to the exact sums than numpy's own float32 running sum
    assert np.abs(got - exact).max() <= np.abs(np.cumsum(x) - exact).max() + 1e-3


def _topk_onnx(x: np.ndarray, k: int):
    from onnx import TensorProto, helper
    outputs = [helper.make_tensor_value_info("v", TensorProto.FLOAT, [k]),
               helper.make_tensor_value_info("i", TensorProto.INT64, [k])]
    return _run_onnx(helper.make_node("TopK", ["x", "k"], ["v", "i"]), {"x": x}, outputs,
                     [helper.make_tensor("k", TensorProto.INT64, [1], [k])])


def test_topk_of_ten_over_a_hundred_thousand_elements():
    x = np.random.default_rng(2).integers(0, 1000, 10 ** 5).astype("float32")   # many ties
    values, indices = _topk_onnx(x, 10)
    order = np.argsort(-x, kind="stable")[:10]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, x[order])


@pytest.mark.slow
def test_topk_sorting_a_hundred_thousand_elements():
    x = np.random.default_rng(3).standard_normal(10 ** 5).astype("float32")
    values, indices = _topk_onnx(x, 10 ** 5)
    order = np.argsort(-x, kind="stable")
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, x[order])
