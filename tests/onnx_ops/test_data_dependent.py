"""Ops whose output shape depends on input values (NonZero, Unique, Compress, NonMaxSuppression):
folded by numpy on constant inputs, and specialised per input value at run time otherwise; checked
against onnxruntime on cpu_llvm with several inputs through one compiled model."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk


def _model(node, inputs: dict, opset: int = 18):
    from onnx import helper
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                           v.shape) for k, v in inputs.items()],
                              [helper.make_empty_tensor_value_info(o) for o in node.output])
    import onnx
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _check_runs(node, feeds_list, opset: int = 18):
    ort = pytest.importorskip("onnxruntime")
    model = _model(node, feeds_list[0], opset)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    lib = tk.compile(model, target="cpu_llvm")
    for feeds in feeds_list:
        for got, want in zip(lib.run(feeds), session.run(None, feeds)):
            np.testing.assert_array_equal(got, want)


def test_nonzero_and_unique_follow_their_inputs():
    from onnx import helper
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.integers(0, 3, (3, 4)).astype("float32")} for _ in range(3)]
    _check_runs(helper.make_node("NonZero", ["x"], ["y"]), feeds)
    _check_runs(helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=0), feeds)
    _check_runs(helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=1, axis=1), feeds)


def test_compress_with_a_run_time_condition():
    from onnx import helper
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((4, 3)).astype("float32"), "c": rng.integers(0, 2, 4).astype(bool)}
             for _ in range(2)]
    _check_runs(helper.make_node("Compress", ["x", "c"], ["y"], axis=0), feeds)


def test_non_max_suppression():
    from onnx import TensorProto, helper
    rng = np.random.default_rng(2)

    def feeds():
        corners = rng.uniform(0, 10, (2, 12, 2, 2))
        boxes = np.concatenate([corners[..., 0, :], corners[..., 0, :] + rng.uniform(0.5, 4, (2, 12, 2))], axis=-1)
        return {"boxes": boxes.astype("float32"), "scores": rng.uniform(0, 1, (2, 3, 12)).astype("float32")}
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"], ["y"])
    model_feeds = [feeds(), feeds()]
    ort = pytest.importorskip("onnxruntime")
    inits = [helper.make_tensor("limit", TensorProto.INT64, [1], [4]),
             helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.3]),
             helper.make_tensor("floor", TensorProto.FLOAT, [1], [0.2])]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [2, 12, 4]),
                                            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 3, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    lib = tk.compile(model, target="cpu_llvm")
    for f in model_feeds:
        np.testing.assert_array_equal(lib.run(f)[0], session.run(None, f)[0])
