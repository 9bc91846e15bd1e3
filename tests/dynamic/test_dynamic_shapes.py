"""Symbolic dimensions: a model with `batch`/`seq` dims compiles once (tk.compile) and runs at any size
within its bounds, checked against onnxruntime; a size outside the bounds is a clear error."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk
from tensorkiln.cli_common import parse_shapes
from tensorkiln.frontend.onnx import input_signature
from tensorkiln.graph.types import Dim, SymbolicTensorType, parse_shape
from tensorkiln.ir.errors import ShapeError, UnsupportedOpError
from tensorkiln.runtime.specialize import SpecializedModel

pytestmark = pytest.mark.skipif(not tk.target("cpu_llvm").spec.is_available, reason="cpu_llvm codegen not available")

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _mlp(batch="batch"):
    """A small classifier: Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, batch symbolic."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(RNG.standard_normal((5, 4)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", F, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [batch, 5])], initializer=[w, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_batch_runs_at_1_3_8_from_one_compile():
    model = _mlp()
    lib = tk.compile(model, target="cpu_llvm")
    assert isinstance(lib, SpecializedModel)
    assert lib.signature["x"].shape == (Dim("batch", 0), 3, 8, 8)  # the model's symbol: 0 and up
    for batch in (1, 3, 8):
        x = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(lib(x), _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    lib(np.zeros((3, 3, 8, 8), np.float32))
    assert lib.output_info() == [{"name": "y", "shape": (Dim("batch", 0), 5), "dtype": "float32"}]
    info = lib.cache_info()
    assert info["compiles"] == 3 and info["hits"] == 1 and info["entries"] == 3


def test_bounds_from_the_api_and_a_clear_error_outside_them():
    lib = tk.compile(_mlp(), target="cpu_llvm", shape={"x": "?:1..4x3x8x8"})
    assert lib.signature["x"].shape[0] == Dim("batch", 1, 4)  # "?" keeps the model's name for the dimension
    lib(np.zeros((4, 3, 8, 8), np.float32))
    with pytest.raises(ShapeError, match=r"dimension 0 \('batch'\) is 5, outside its bounds 1\.\.4"):
        lib(np.zeros((5, 3, 8, 8), np.float32))
    with pytest.raises(ShapeError, match=r"dimension 2 is 9, but it was declared static 8"):
        lib(np.zeros((2, 3, 9, 8), np.float32))
    with pytest.raises(ShapeError, match="4 dimensions"):
        lib(np.zeros((2, 3, 8), np.float32))
    assert lib.cache_info()["compiles"] == 1


def test_shape_binding_still_compiles_ahead_of_time():
    lib = tk.compile(_mlp(), target="cpu_llvm", shape={"x": (2, 3, 8, 8)})
    assert not isinstance(lib, SpecializedModel)
    assert lib.input_info()[0]["shape"] == (2, 3, 8, 8)


def test_shared_symbol_must_agree_between_inputs():
    node = helper.make_node("Add", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", F, ["n", 2]),
                                            helper.make_tensor_value_info("b", F, ["n", 2])],
                              [helper.make_tensor_value_info("y", F, ["n", 2])])
    lib = tk.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), target="cpu_llvm")
    a = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(lib(a, a), a + a)
    empty = np.ones((0, 2), np.float32)  # a model's symbol may be 0
    assert lib(empty, empty).shape == (0, 2)
    with pytest.raises(ShapeError, match=r"\('n'\) is 4, but 'n' is 3 in another input"):
        lib(a, np.ones((4, 2), np.float32))


def test_unsupported_op_is_reported_at_compile_time():
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, ["b", 4])],
                              [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        tk.compile(model, target="cpu_llvm")


def test_signature_keeps_symbols_and_parses_bounds():
    signature = input_signature(_mlp())
    assert signature == {"x": SymbolicTensorType((Dim("batch", 0), 3, 8, 8), "float32")}
    assert parse_shape("?x3x224x224", "d") == (Dim("d0"), 3, 224, 224)
    assert parse_shape("batch:1..64,3") == (Dim("batch", 1, 64), 3)
    assert parse_shape("..8x128") == (Dim("dim0", 1, 8), 128)
    with pytest.raises(ShapeError, match="must look like lo..hi"):
        parse_shape("b:3x4")
    assert parse_shapes(["input=?x3x224x224", "mask=1,3"]) == {"input": "?x3x224x224", "mask": (1, 3)}


def test_threads_running_different_shapes_at_once_get_their_own_results():
    from concurrent.futures import ThreadPoolExecutor

    node = helper.make_node("Mul", ["a", "a"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", F, ["n", 3])],
                              [helper.make_tensor_value_info("y", F, ["n", 3])])
    lib = tk.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), target="cpu_llvm")
    arrays = [RNG.standard_normal((1 + i % 3, 3)).astype(np.float32) for i in range(12)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lib, arrays))
    for array, result in zip(arrays, results):
        np.testing.assert_array_equal(result, array * array)
    assert lib.cache_info()["entries"] == 3
