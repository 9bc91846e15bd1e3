"""from_onnx: shapes, constants, opset differences and errors."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorkiln import graph
from tensorkiln.frontend import from_onnx
from tensorkiln.graph import Call, Constant
from tensorkiln.ir.errors import FrontendError, ShapeError, UnsupportedOpError


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    g = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _run_both(model, feeds):
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = graph.evaluate(from_onnx(model), feeds)
    return (got if isinstance(got, list) else [got]), expected


def test_shape_chain_folds_to_static_reshape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["new_shape"], axis=0),
             helper.make_node("Reshape", ["x", "new_shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "zero_axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    model = _model(nodes, [_info("x", [2, 3, 4])], [_info("y", None)], inits)
    mod = from_onnx(model)
    body = mod.main.body
    assert isinstance(body, Call) and body.op.name == "reshape" and body.attrs.newshape == (2, -1)
    assert isinstance(body.args[0], graph.Var)
    assert body.span == ""  or body.span is None or isinstance(body.span, str)


def test_symbolic_dim_needs_binding():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", ["batch", 3])], [_info("y", None)])
    with pytest.raises(FrontendError, match=r"graph input 'x' has symbolic dimension 0 \('batch'\); bind its "
                                            r"shape with from_onnx\(..., shape=\{'x': \(...\)\}\)"):
        from_onnx(model)
    mod = from_onnx(model, shape={"x": (5, 3)})
    assert mod.main.params[0].shape == (5, 3)


def test_unsupported_ops_are_listed_in_one_error():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("FooOp", ["a"], ["b"], name="foo_1"),
             helper.make_node("BarOp", ["b"], ["c"], name="bar_1"), helper.make_node("FooOp", ["c"], ["y"], name="foo_2")]
    model = _model(nodes, [_info("x", [2])], [_info("y", None)])
    with pytest.raises(UnsupportedOpError, match=r"2 unsupported op type\(s\): BarOp \(nodes: bar_1\); "
                                                 r"FooOp \(nodes: foo_1, foo_2\)"):
        from_onnx(model)


def test_truncated_file_raises_frontend_error(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", [2])], [_info("y", None)],
                   [numpy_helper.from_array(np.zeros(1000, np.float32), "w")])
    data = model.SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FrontendError):
        from_onnx(str(path))


def test_garbage_bytes_raise_frontend_error(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(FrontendError):
        from_onnx(str(path))
    with pytest.raises(FrontendError, match="does not exist"):
        from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(FrontendError):
        from_onnx(b"")


def test_malformed_graph_names_the_missing_value():
    model = _model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add_0")], [_info("x", [2])],
                   [_info("y", None)])
    with pytest.raises(FrontendError, match="ONNX node 'add_0' \\(Add\\) reads 'nowhere'"):
        from_onnx(model)


def test_shape_error_names_the_onnx_node():
    model = _model([helper.make_node("Add", ["x", "z"], ["y"], name="bad_add")],
                   [_info("x", [2, 3]), _info("z", [4])], [_info("y", None)])
    with pytest.raises(ShapeError, match=r"(?s)add: shapes \(2, 3\) and \(4,\).*from ONNX node 'bad_add'"):
        from_onnx(model)


@pytest.mark.parametrize("opset", [9, 13])
def test_squeeze_unsqueeze_axes_attribute_and_input(opset):
    x = np.random.rand(3, 1, 4).astype(np.float32)
    if opset < 13:
        nodes = [helper.make_node("Squeeze", ["x"], ["s"], axes=[1]),
                 helper.make_node("Unsqueeze", ["s"], ["y"], axes=[0, 3])]
        inits = []
    else:
        nodes = [helper.make_node("Squeeze", ["x", "a1"], ["s"]), helper.make_node("Unsqueeze", ["s", "a2"], ["y"])]
        inits = [numpy_helper.from_array(np.array([1], np.int64), "a1"),
                 numpy_helper.from_array(np.array([0, 3], np.int64), "a2")]
    model = _model(nodes, [_info("x", [3, 1, 4])], [_info("y", None)], inits, opset=opset)
    got, expected = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize("opset", [9, 11])
def test_clip_and_pad_across_opsets(opset):
    x = np.random.randn(2, 3).astype(np.float32)
    if opset < 11:
        nodes = [helper.make_node("Clip", ["x"], ["c"], min=-0.5, max=0.5),
                 helper.make_node("Pad", ["c"], ["y"], pads=[0, 1, 1, 0], mode="constant", value=2.0)]
        inits = []
    else:
        nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
                 helper.make_node("Pad", ["c", "pads", "v"], ["y"], mode="reflect")]
        inits = [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                 numpy_helper.from_array(np.array(0.5, np.float32), "hi"),
                 numpy_helper.from_array(np.array([0, 1, 1, 0], np.int64), "pads"),
                 numpy_helper.from_array(np.array(0.0, np.float32), "v")]
    model = _model(nodes, [_info("x", [2, 3])], [_info("y", None)], inits, opset=opset)
    got, expected = _run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], expected[0])


def test_multi_output_split_and_constants():
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
             helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Add", ["b", "ones"], ["y"])]
    inits = [numpy_helper.from_array(np.array([1, 3], np.int64), "sizes"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "shape")]
    model = _model(nodes, [_info("x", [2, 4])], [_info("a", None), _info("y", None)], inits)
    x = np.random.rand(2, 4).astype(np.float32)
    got, expected = _run_both(model, {"x": x})
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e)


def test_constants_argument_freezes_an_input():
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [_info("x", [2, 3]), _info("shape", [2], TensorProto.INT64)], [_info("y", None)])
    with pytest.raises(UnsupportedOpError, match="the shape must be known at import time"):
        from_onnx(model)
    mod = from_onnx(model, constants={"shape": np.array([3, 2], np.int64)})
    assert [p.name for p in mod.main.params] == ["x"] and mod.main.ret_type.shape == (3, 2)


def test_initializers_become_constants_and_gemm_folds_transpose():
    w = np.random.rand(4, 3).astype(np.float32)
    model = _model([helper.make_node("Gemm", ["x", "w"], ["y"], alpha=2.0)], [_info("x", [2, 4])],
                   [_info("y", None)], [numpy_helper.from_array(w, "w")])
    mod = from_onnx(model)
    dense = mod.main.body.args[0]
    assert dense.op.name == "nn.dense" and isinstance(dense.args[1], Constant)
    np.testing.assert_allclose(dense.args[1].value, w.T)
    x = np.random.rand(2, 4).astype(np.float32)
    np.testing.assert_allclose(graph.evaluate(mod, {"x": x}), 2 * x @ w, rtol=1e-6)
