"""ONNX TopK and CumSum through the importer on cpu_llvm against onnx's ReferenceEvaluator: TopK's
largest=0/1, sorted=0/1 and negative axes with many ties (the lower index first), k a run-time input;
CumSum's exclusive/reverse with a negative run-time axis. (The algorithms' work bounds are pinned in
test_scan_sort.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk


def _compile_and_compare(model, feeds, exact=True):
    got = tk.compile(model, target="cpu_llvm").run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [-1, -2, 0])
def test_topk_matches_onnx_reference_with_ties(largest, sorted_, axis):
    x = np.random.default_rng(abs(axis) + 3 * largest).integers(0, 4, (5, 37)).astype(np.float32)   # many ties
    k = 3 if x.shape[axis] > 3 else 2
    out_shape = list(x.shape)
    out_shape[axis] = k
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest, sorted=sorted_)
    graph = helper.make_graph([node], "topk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                              helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("values", TensorProto.FLOAT, out_shape),
                               helper.make_tensor_value_info("indices", TensorProto.INT64, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    # sorted=0 leaves the order free; tensorkiln (as onnx's reference) still returns it sorted
    _compile_and_compare(model, {"x": x, "k": np.array([k], np.int64)})


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_matches_onnx_reference(exclusive, reverse):
    x = np.random.default_rng(exclusive + 2 * reverse).standard_normal((3, 50, 4)).astype(np.float32)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    graph = helper.make_graph([node], "cumsum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                                 helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    _compile_and_compare(model, {"x": x, "axis": np.array(-2, np.int64)}, exact=False)
