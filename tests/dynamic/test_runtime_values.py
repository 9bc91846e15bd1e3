"""Parameters computed from graph inputs (axes, pads, scales, shapes, repeats, ...) are specialised at run
time: tk.compile takes the model as it is, the first run with given values compiles, the same values reuse
the compiled module, and the results match onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorkiln as tk
from tensorkiln.ir.errors import RuntimeLaunchError, ShapeError, UnsupportedOpError
from tensorkiln.runtime.specialize import SpecializedModel

pytestmark = pytest.mark.skipif(not tk.target("cpu_llvm").spec.is_available, reason="cpu_llvm codegen not available")

F, I = TensorProto.FLOAT, TensorProto.INT64


def _model(node, inputs, opset=18):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(node.output[0], F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)

# (model, a list of feeds: each run must match onnxruntime)
CASES = {
    "reducesum_axes": (
        _model(helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0), [("x", F, [2, 3, 4]), ("axes", I, [1])]),
        [{"x": X, "axes": np.array([a])} for a in (0, 2, -1)]),
    "pad_pads": (
        _model(helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant"), [("x", F, [2, 3, 4]), ("pads", I, [6])]),
        [{"x": X, "pads": np.array(p)} for p in ([0, 1, 0, 0, 2, 1], [1, 0, 0, 0, 0, 3])]),
    "reshape_shape": (
        _model(helper.make_node("Reshape", ["x", "shape"], ["y"]), [("x", F, [2, 3, 4]), ("shape", I, [2])]),
        [{"x": X, "shape": np.array(s)} for s in ([6, 4], [4, -1], [24, 1])]),
    "expand_shape": (
        _model(helper.make_node("Expand", ["x", "shape"], ["y"]), [("x", F, [2, 3, 4]), ("shape", I, [4])]),
        [{"x": X, "shape": np.array(s)} for s in ([2, 2, 3, 4], [1, 2, 3, 4])]),
    "tile_repeats": (
        _model(helper.make_node("Tile", ["x", "repeats"], ["y"]), [("x", F, [2, 3, 4]), ("repeats", I, [3])]),
        [{"x": X, "repeats": np.array(r)} for r in ([1, 2, 1], [2, 1, 3])]),
    "slice_starts_ends": (
        _model(helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"]),
               [("x", F, [2, 3, 4]), ("starts", I, [1]), ("ends", I, [1]), ("axes", I, [1])]),
        [{"x": X, "starts": np.array([s]), "ends": np.array([e]), "axes": np.array([a])}
         for s, e, a in ((0, 2, 2), (1, 3, 1), (-2, 100, 2))]),
    "resize_scales": (
        _model(helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest"),
               [("x", F, [1, 1, 2, 3]), ("scales", F, [4])]),
        [{"x": X.reshape(1, 2, 3, 4)[:1, :1, :2, :3].copy(), "scales": np.array(s, np.float32)}
         for s in ([1, 1, 2, 2], [1, 1, 3, 1])]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_parameter_from_an_input_is_specialised_at_run_time(name):
    model, runs = CASES[name]
    lib = tk.compile(model, target="cpu_llvm")
    assert isinstance(lib, SpecializedModel)
    for feeds in runs:
        (expected,) = _ort(model, feeds)
        (actual,) = lib.run(feeds)
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    info = lib.cache_info()
    assert info["compiles"] == len(runs) and info["hits"] == 0
    lib.run(runs[0])  # the same values again: no new compile
    assert lib.cache_info()["compiles"] == len(runs) and lib.cache_info()["hits"] == 1


def test_value_computed_from_an_input_binds_that_input():
    """ConstantOfShape(Add(shape, 1)): the shape is computed from the input, which becomes a value input."""
    one = helper.make_tensor("one", I, [1], [1])
    nodes = [helper.make_node("Add", ["n", "one"], ["n1"]),
             helper.make_node("ConstantOfShape", ["n1"], ["y"], value=helper.make_tensor("v", F, [1], [2.5]))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("n", I, [1])],
                              [helper.make_tensor_value_info("y", F, None)], initializer=[one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    lib = tk.compile(model, target="cpu_llvm")
    for n in (1, 4):
        (y,) = lib.run({"n": np.array([n])})
        np.testing.assert_array_equal(y, np.full(n + 1, 2.5, np.float32))
    assert lib.value_inputs == ("n",)


def test_range_and_onehot_depth_from_inputs():
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("OneHot", ["r", "depth", "values"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, I, []) for n in ("start", "limit", "delta", "depth")]
                              + [helper.make_tensor_value_info("values", F, [2])],
                              [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    lib = tk.compile(model, target="cpu_llvm")
    for limit, depth in ((4, 5), (3, 7)):
        feeds = {"start": np.array(0), "limit": np.array(limit), "delta": np.array(1), "depth": np.array(depth),
                 "values": np.array([0.0, 1.0], np.float32)}
        np.testing.assert_array_equal(lib.run(feeds)[0], _ort(model, feeds)[0])


def test_static_model_still_compiles_ahead_of_time():
    model = _model(helper.make_node("Relu", ["x"], ["y"]), [("x", F, [3, 4])])
    lib = tk.compile(model, target="cpu_llvm")
    assert not isinstance(lib, SpecializedModel)
    np.testing.assert_array_equal(lib.run({"x": X[0]})[0], np.maximum(X[0], 0))


def test_standard_backend_protocol_runs_a_data_dependent_model():
    import tensorkiln.onnx_backend as backend

    model, runs = CASES["pad_pads"]
    model = onnx.shape_inference.infer_shapes(model)  # onnx's checker in prepare() wants typed outputs
    rep = backend.prepare(model)
    (actual,) = rep.run([runs[0]["x"], runs[0]["pads"]])
    np.testing.assert_allclose(actual, _ort(model, runs[0])[0])


def test_value_input_errors_stay_clear():
    model, _ = CASES["reshape_shape"]
    lib = tk.compile(model, target="cpu_llvm")
    with pytest.raises(ShapeError):
        lib.run({"x": X, "shape": np.array([5, 5])})
    with pytest.raises(RuntimeLaunchError, match="dtype int32, expected int64"):
        lib.run({"x": X, "shape": np.array([6, 4], np.int32)})


def test_dropout_training_mode_from_an_input():
    node = helper.make_node("Dropout", ["x", "ratio", "training"], ["y", "mask"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2, 3, 4]),
                                            helper.make_tensor_value_info("ratio", F, []),
                                            helper.make_tensor_value_info("training", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", F, None),
                               helper.make_tensor_value_info("mask", TensorProto.BOOL, None)])
    lib = tk.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), target="cpu_llvm")
    for ratio, training in ((0.5, False), (0.0, True)):
        y, mask = lib.run({"x": X, "ratio": np.array(ratio, np.float32), "training": np.array(training)})
        np.testing.assert_array_equal(y, X)
        assert mask.all()
    with pytest.raises(UnsupportedOpError, match="no seed attribute: each run must draw new random numbers"):
        lib.run({"x": X, "ratio": np.array(0.5, np.float32), "training": np.array(True)})


@pytest.mark.parametrize("op", ["HannWindow", "BlackmanWindow"])
def test_window_size_from_an_input_with_schema_default_attributes(op):
    """The window length is a graph input (specialised on), and the function body's @periodic and
    @output_datatype references take the schema's defaults when the node leaves them out."""
    node = helper.make_node(op, ["size"], ["y"], periodic=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("size", TensorProto.INT32, [])],
                              [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lib = tk.compile(model, target="cpu_llvm")
    for size in (5, 8):
        feeds = {"size": np.array(size, np.int32)}
        np.testing.assert_allclose(lib.run(feeds)[0], _ort(model, feeds)[0], rtol=1e-5, atol=1e-6)
