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


# -- corrupt and oversized models: every one a TensorkilnError naming the field, never a raw exception --

@pytest.mark.parametrize("data", [b"", b"\x08\x07\x12\xff\xff\xff\xff\x0f", b"garbage" * 10],
                         ids=["empty", "corrupt_varint", "text"])
def test_garbage_bytes_raise_frontend_error(data):
    with pytest.raises(FrontendError, match="ONNX model"):
        from_onnx(data)


def test_an_object_that_is_not_a_model_raises_frontend_error():
    with pytest.raises(FrontendError, match="cannot import an object of type int"):
        from_onnx(5)


def test_missing_initializer_names_the_node_and_value():
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], [_info("x", [2])], [_info("y", [2])])
    with pytest.raises(FrontendError, match=r"ONNX node 'add_w' \(Add\) reads 'w', which no node, initializer"):
        from_onnx(model)


def test_initializer_with_too_little_data_is_a_frontend_error():
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[5, 5], float_data=[1.0])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_info("x", [5, 5])], [_info("y", [5, 5])], [w])
    with pytest.raises(FrontendError, match="tensor name: w.*too small for the declared shape"):
        from_onnx(model)


def test_a_graph_without_nodes_or_outputs_is_a_frontend_error():
    with pytest.raises(FrontendError, match="has no graph"):
        from_onnx(_model([], [], []))


def test_a_graph_that_returns_its_input_imports():
    mod = from_onnx(_model([], [_info("x", [2, 3])], [_info("x", [2, 3])]))
    assert mod.main.body.checked_type.shape == (2, 3)


def test_a_long_chain_imports_without_recursion_error():
    count = 3000
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < count - 1 else "y"])
             for i in range(count)]
    mod = from_onnx(_model(nodes, [_info("x", [2])], [_info("y", [2])]))
    assert mod.main.body.checked_type.shape == (2,)


def test_a_huge_graph_input_fails_before_any_allocation():
    from tensorkiln.ir.errors import MemoryLimitError
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", [10**6, 10**6])],
                   [_info("y", [10**6, 10**6])])
    with pytest.raises(MemoryLimitError, match=r"graph input 'x' has shape \(1000000, 1000000\) \(float32\): "
                                               r"1000000000000 elements, 4000000000000 bytes .*memory limit"):
        from_onnx(model)


@pytest.mark.parametrize("op", ["ConstantOfShape", "Range", "Expand"])
def test_a_huge_folded_tensor_fails_before_it_is_allocated(op):
    from tensorkiln.ir.errors import MemoryLimitError
    big = 10**12
    if op == "ConstantOfShape":
        nodes = [helper.make_node(op, ["s"], ["y"], name="big")]
        inits = [numpy_helper.from_array(np.array([big], np.int64), "s")]
    elif op == "Range":
        nodes = [helper.make_node(op, ["a", "b", "c"], ["y"], name="big")]
        inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("a", 0), ("b", big), ("c", 1))]
    else:
        nodes = [helper.make_node(op, ["a", "s"], ["y"], name="big")]
        inits = [numpy_helper.from_array(np.ones(1, np.float32), "a"),
                 numpy_helper.from_array(np.array([big], np.int64), "s")]
    dtype = TensorProto.FLOAT if op != "Range" else TensorProto.INT64
    model = _model(nodes, [], [_info("y", [big], dtype)], inits)
    with pytest.raises(MemoryLimitError, match=rf"ONNX node 'big' \({op}\): .*\({big},\).*memory limit"):
        from_onnx(model, memory_limit=1 << 30)


def test_a_shape_input_that_is_not_1d_is_a_shape_error():
    s = numpy_helper.from_array(np.array([[2, 3]], np.int64), "s")
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_0")], [_info("x", [6])],
                   [_info("y", None)], [s])
    with pytest.raises(ShapeError, match=r"ONNX node 'reshape_0' \(Reshape\): the shape \(input 1\) must be a 1-D "
                                         r"tensor, got shape \(1, 2\)"):
        from_onnx(model)


def test_an_op_type_that_is_not_utf8_is_a_frontend_error():
    data = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", [2])], [_info("y", [2])]).SerializeToString()
    corrupt = data.replace(b"Relu", b"R\xcalu")
    with pytest.raises(FrontendError, match=r"the op_type of ONNX node #0 is not valid UTF-8"):
        from_onnx(corrupt)
