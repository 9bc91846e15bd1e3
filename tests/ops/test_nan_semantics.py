"""NaN in, NaN out: Max/Min, Relu, Clip, ReduceMax/ReduceMin and TopK compiled for cpu_llvm and
opencl match onnxruntime (reductions: numpy and onnx.reference, see below).

tir.Min/Max mean numpy's minimum/maximum, so every backend must propagate NaN (a bare
`a > b ? a : b`, fmax or vmaxps drops it); TopK ranks NaN above every number, as onnxruntime does.
"""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk

ort = pytest.importorskip("onnxruntime")

TARGETS = ["cpu_llvm", "opencl"]
NAN = np.nan
A = np.array([1, NAN, 3, NAN, -2, 0.5], np.float32)
B = np.array([NAN, 2, NAN, NAN, 5, -0.5], np.float32)


def _model(op_type: str, inputs: dict, constants: dict | None = None, outputs=None, **attrs) -> onnx.ModelProto:
    """One node; `outputs` is ((dtype, shape), ...), by default one float tensor shaped like the first input."""
    outputs = outputs or ((TensorProto.FLOAT, next(iter(inputs.values())).shape),)
    constants = constants or {}
    names = [f"y{i}" for i in range(len(outputs))]
    node = helper.make_node(op_type, [*inputs, *constants], names, **attrs)
    graph = helper.make_graph(
        [node], "nan", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(name, dtype, shape) for name, (dtype, shape) in zip(names, outputs)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run_both(model: onnx.ModelProto, inputs: dict, target: str) -> tuple[list, list]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, inputs)
    actual = tk.compile(model, target=target).run(inputs)
    return actual, expected


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op_type", ["Max", "Min"])
def test_elementwise_max_and_min_propagate_nan_like_onnxruntime(target, op_type):
    actual, expected = _run_both(_model(op_type, {"a": A, "b": B}), {"a": A, "b": B}, target)
    np.testing.assert_array_equal(actual[0], expected[0])   # NaN == NaN here
    assert np.isnan(actual[0][:4]).all()


@pytest.mark.parametrize("target", TARGETS)
def test_relu_and_clip_keep_nan_like_onnxruntime(target):
    for model in (_model("Relu", {"a": A}),
                  _model("Clip", {"a": A}, {"low": np.float32(0), "high": np.float32(2)})):
        actual, expected = _run_both(model, {"a": A}, target)
        np.testing.assert_array_equal(actual[0], expected[0])
        assert np.isnan(actual[0][[1, 3]]).all()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axis", [0, 1])
def test_max_and_min_reductions_propagate_nan_like_numpy(target, op_type, axis):
    # onnxruntime 1.32 is not consistent here: it propagates NaN along axis 0 but skips it along
    # the last axis. The ONNX spec defers to numpy, and numpy and onnx.reference propagate it.
    data = np.array([[1, NAN, 3, 8], [2, 5, 4, -1], [0, 1, NAN, 2]], np.float32)
    reduced = (TensorProto.FLOAT, data.shape[1 - axis: 2 - axis])
    model = _model(op_type, {"x": data}, outputs=(reduced,), axes=[axis], keepdims=0)
    actual = tk.compile(model, target=target).run({"x": data})[0]
    expected = (np.max if op_type == "ReduceMax" else np.min)(data, axis=axis)
    np.testing.assert_array_equal(actual, expected)
    assert np.isnan(actual).any()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("data, k", [([1, NAN, 3, 2, 7, 7], 3), ([1, NAN, 3, 2, 7, 7], 6), ([NAN, 1, NAN, 7], 4)])
def test_topk_ranks_nan_above_every_number_like_onnxruntime(target, largest, data, k):
    # before: [1, nan, 3, 2, 7, 7] gave indices [5, 5, 2] (one 7 twice, the other never)
    x = np.array(data, np.float32)
    model = _model("TopK", {"x": x}, {"k": np.array([k], np.int64)},
                   outputs=((TensorProto.FLOAT, (k,)), (TensorProto.INT64, (k,))), largest=largest)
    (values, indices), (expected_values, expected_indices) = _run_both(model, {"x": x}, target)
    assert sorted(indices.tolist()) == sorted(set(indices.tolist()))   # a permutation without repeats
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_array_equal(values, expected_values)
