"""Quantized ONNX import: the ONNX node tests of the quantization ops, QDQ folding, onnxruntime's QDQ models."""
import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk
from tensorkiln import graph as g
from tensorkiln.frontend import from_onnx
from tensorkiln.graph import Call, post_order
from tensorkiln.node_tests import run_node_tests
from tensorkiln.onnx_backend import backend_for

from ._models import small_resnet

# test names of QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger, MatMulInteger,
# QLinearConv and QLinearMatMul (and the expanded DynamicQuantizeLinear functions)
QUANTIZATION_TESTS = ("quantizelinear", "convinteger", "matmulinteger", "qlinear")
MIN_PASSES = 29   # measured: 29 of 45; the other 16 are float8 / 4-bit / 2-bit / float4 element types
# one case per op compiled on cpu_llvm (all of them: 8 s more, the reference interpreter covers the rest)
COMPILED = {"test_quantizelinear_axis", "test_dequantizelinear_axis", "test_dynamicquantizelinear",
            "test_convinteger_with_padding", "test_matmulinteger", "test_qlinearconv",
            "test_qlinearmatmul_3D_int8_float32", "test_quantizelinear_blocked_asymmetric"}


def _is_quantization_test(name: str) -> bool:
    return any(key in name for key in QUANTIZATION_TESTS)


def _check(results, minimum: int) -> None:
    failures = [f"{r.name}: {r.detail}" for r in results if r.status == "fail"]
    assert not failures, "\n".join(failures)
    passed = [r.name for r in results if r.status == "pass"]
    assert len(passed) >= minimum, [(r.name, r.status, r.detail) for r in results if r.status != "pass"]
    unsupported = [r.detail for r in results if r.status == "unsupported"]
    assert all("element type" in d for d in unsupported), unsupported


def test_onnx_node_tests_of_the_quantization_ops_pass_with_the_reference_interpreter():
    _check(run_node_tests(name_filter=_is_quantization_test), MIN_PASSES)


def test_onnx_node_tests_of_the_quantization_ops_pass_compiled_on_cpu_llvm():
    _check(run_node_tests(backend=backend_for("cpu_llvm"), name_filter=COMPILED.__contains__), len(COMPILED))


def _ops(lib):
    return [n for n in post_order(lib.graph.main.body, into_functions=True)
            if isinstance(n, Call) and isinstance(n.op, g.Op)]


def _qdq_conv_model(zero_point: int, per_channel: bool):
    """Q(x) -> DQ -> Conv(DQ(int8 weight)) -> Q -> DQ, the shape onnxruntime's QDQ export has."""
    rng = np.random.default_rng(5)
    weight = rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    w_scale = (rng.random(8) * 0.01 + 0.005).astype(np.float32) if per_channel else np.float32(0.01)
    inits = [numpy_helper.from_array(weight, "wq"), numpy_helper.from_array(np.asarray(w_scale), "ws"),
             numpy_helper.from_array(np.zeros(8 if per_channel else (), np.int8), "wz"),
             numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.int8(zero_point), "xz"),
             numpy_helper.from_array(np.float32(0.05), "ys"), numpy_helper.from_array(np.int8(-3), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("zero_point, per_channel", [(-20, False), pytest.param(0, True, marks=pytest.mark.slow)])
def test_qdq_conv_folds_into_an_int32_accumulating_conv_and_matches_the_float_path(zero_point, per_channel):
    model = _qdq_conv_model(zero_point, per_channel)
    x = np.random.default_rng(6).standard_normal((1, 4, 10, 10)).astype(np.float32)
    unfolded = g.evaluate(from_onnx(model), {"x": x})     # the reference interpreter runs the QDQ graph as is
    lib = tk.compile(model, "cpu_llvm")
    convs = [n for n in _ops(lib) if n.op.name == "nn.conv2d"]
    assert convs and all(c.attrs.out_dtype == "int32" and c.args[1].dtype == "int8" for c in convs)
    # exact int32 accumulation: at most one output step (0.05) apart, where float rounding flips a tie
    np.testing.assert_allclose(lib.run([x])[0], unfolded, rtol=0, atol=0.05 + 1e-6)
    assert np.mean(lib.run([x])[0] == unfolded) > 0.99
    unfused = tk.compile(model, "cpu_llvm", opt_level=0)   # no fold: runs as is, in float
    assert not any(n.op.name == "nn.conv2d" and n.attrs.out_dtype for n in _ops(unfused))
    np.testing.assert_allclose(unfused.run([x])[0], unfolded, rtol=0, atol=0.05 + 1e-6)


def _ort_qdq(model, calibration, per_channel: bool):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(calibration)

        def get_next(self):
            item = next(self.items, None)
            return None if item is None else {"data": item}

    with tempfile.TemporaryDirectory() as folder:
        source, dest = os.path.join(folder, "float.onnx"), os.path.join(folder, "qdq.onnx")
        onnx.save(model, source)
        quantize_static(source, dest, Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
        return onnx.load(dest)


def _output_step(model) -> float:
    (output,) = model.graph.output
    producer = next(n for n in model.graph.node if output.name in n.output)
    scale = next(i for i in model.graph.initializer if i.name == producer.input[1])
    return float(numpy_helper.to_array(scale))


@pytest.mark.parametrize("per_channel", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_onnxruntime_quantize_static_resnet_matches_onnxruntime_within_one_step(per_channel):
    import onnxruntime as ort

    rng = np.random.default_rng(7)
    calibration = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(8)]
    qdq = _ort_qdq(small_resnet(seed=1), calibration, per_channel)
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in qdq.graph.node}
    session = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    lib = tk.compile(qdq, "cpu_llvm")
    assert sum(n.op.name == "nn.conv2d" and n.attrs.out_dtype == "int32" for n in _ops(lib)) == 6   # every conv
    assert any(n.op.name == "nn.dense" and n.attrs.out_dtype == "int32" for n in _ops(lib))
    step = _output_step(qdq)
    for _ in range(3):
        x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        expected = session.run(None, {"data": x})[0]
        np.testing.assert_allclose(lib.run([x])[0], expected, rtol=0, atol=step * 1.001)
