"""Model-level comparison with onnxruntime on ONNX models built here with onnx.helper:
a residual CNN block, a transformer encoder layer and a Gemm MLP, random weights, batch 2."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk

ort = pytest.importorskip("onnxruntime")

RTOL, ATOL = 1e-4, 1e-5
BATCH = 2


class _Builder:
    """Collects nodes and initializers; `op(...)` returns the name of the node's first output."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def const(self, array, name: str | None = None) -> str:
        self.count += 1
        name = name or f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape: int, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs) -> str:
        self.count += 1
        names = [f"{op_type.lower()}{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=f"{op_type}_{self.count}", **attrs))
        return names[0]

    def model(self, inputs, output: str, output_shape, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "generated",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, output_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def residual_block() -> tuple[onnx.ModelProto, dict]:
    """conv3x3/s2-bn-relu-conv3x3-bn + (conv1x1/s2-bn downsample) -> add -> relu."""
    b = _Builder(1)
    cin, cout, hw = 8, 16, 16

    def bn(x: str, c: int) -> str:
        return b.op("BatchNormalization", x,
                    b.const((1 + 0.1 * b.rng.standard_normal(c)).astype(np.float32)),
                    b.const((0.1 * b.rng.standard_normal(c)).astype(np.float32)),
                    b.const((0.1 * b.rng.standard_normal(c)).astype(np.float32)),
                    b.const(b.rng.uniform(0.5, 1.5, c).astype(np.float32)), epsilon=1e-5)

    y = b.op("Conv", "x", b.weight(cout, cin, 3, 3), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = b.op("Relu", bn(y, cout))
    y = b.op("Conv", y, b.weight(cout, cout, 3, 3), b.weight(cout, scale=0.1), kernel_shape=[3, 3],
             pads=[1, 1, 1, 1])
    y = bn(y, cout)
    shortcut = bn(b.op("Conv", "x", b.weight(cout, cin, 1, 1), kernel_shape=[1, 1], strides=[2, 2]), cout)
    out = b.op("Relu", b.op("Add", y, shortcut))
    shape = (BATCH, cin, hw, hw)
    x = b.rng.standard_normal(shape).astype(np.float32)
    return b.model([("x", shape)], out, (BATCH, cout, hw // 2, hw // 2)), {"x": x}


def transformer_encoder_layer() -> tuple[onnx.ModelProto, dict]:
    """Post-norm encoder layer: 4-head attention from MatMul/Reshape/Transpose/Softmax with a
    1/sqrt(d) scale, residual + LayerNormalization, Erf-GELU FFN, residual + LayerNormalization."""
    b = _Builder(2)
    seq, d, heads, ffn = 8, 32, 4, 64
    dh = d // heads

    def linear(x: str, n_in: int, n_out: int) -> str:
        product = b.op("MatMul", x, b.weight(n_in, n_out, scale=1 / np.sqrt(n_in)))
        return b.op("Add", product, b.weight(n_out, scale=0.1))

    def heads_first(x: str) -> str:  # (B, S, D) -> (B, H, S, Dh)
        return b.op("Transpose", b.op("Reshape", x, b.const(np.array([BATCH, seq, heads, dh], np.int64))),
                    perm=[0, 2, 1, 3])

    def layer_norm(x: str) -> str:
        gamma = b.const((1 + 0.1 * b.rng.standard_normal(d)).astype(np.float32))
        beta = b.const((0.1 * b.rng.standard_normal(d)).astype(np.float32))
        return b.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-5)

    q, k, v = (heads_first(linear("x", d, d)) for _ in range(3))
    k_t = b.op("Transpose", k, perm=[0, 1, 3, 2])
    scores = b.op("Mul", b.op("MatMul", q, k_t), b.const(np.array(1 / np.sqrt(dh), np.float32)))
    attention = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
    merged = b.op("Reshape", b.op("Transpose", attention, perm=[0, 2, 1, 3]),
                  b.const(np.array([BATCH, seq, d], np.int64)))
    h = layer_norm(b.op("Add", "x", linear(merged, d, d)))
    up = linear(h, d, ffn)
    erf = b.op("Erf", b.op("Div", up, b.const(np.array(np.sqrt(2), np.float32))))
    gelu = b.op("Mul", b.op("Mul", up, b.op("Add", erf, b.const(np.array(1, np.float32)))),
                b.const(np.array(0.5, np.float32)))
    out = layer_norm(b.op("Add", h, linear(gelu, ffn, d)))
    shape = (BATCH, seq, d)
    x = b.rng.standard_normal(shape).astype(np.float32)
    return b.model([("x", shape)], out, shape), {"x": x}


def gemm_mlp() -> tuple[onnx.ModelProto, dict]:
    """Gemm(transB) -> Relu -> Gemm(alpha, beta) -> Sigmoid -> Gemm -> Softmax."""
    b = _Builder(3)
    sizes = [64, 128, 96, 10]
    y = b.op("Gemm", "x", b.weight(sizes[1], sizes[0]), b.weight(sizes[1], scale=0.1), transB=1)
    y = b.op("Relu", y)
    y = b.op("Gemm", y, b.weight(sizes[1], sizes[2]), b.weight(1, sizes[2], scale=0.1), alpha=0.5, beta=2.0)
    y = b.op("Sigmoid", y)
    y = b.op("Gemm", y, b.weight(sizes[3], sizes[2]), b.weight(sizes[3], scale=0.1), transB=1)
    out = b.op("Softmax", y, axis=1)
    shape = (BATCH, sizes[0])
    x = b.rng.standard_normal(shape).astype(np.float32)
    return b.model([("x", shape)], out, (BATCH, sizes[3])), {"x": x}


MODELS = {"residual_block": residual_block, "transformer_encoder_layer": transformer_encoder_layer,
          "gemm_mlp": gemm_mlp}


def _onnxruntime(model: onnx.ModelProto, inputs: dict) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_matches_onnxruntime(name, opt_level):
    model, inputs = MODELS[name]()
    expected = _onnxruntime(model, inputs)
    lib = tk.compile(model, target="cpu_llvm", opt_level=opt_level)
    actual = lib.run(inputs)[0]
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)
    # The numpy reference interpreter agrees too (it is the spec every backend is held to).
    reference = tk.graph.evaluate(tk.frontend.from_onnx(model), inputs)
    np.testing.assert_allclose(reference, expected, rtol=RTOL, atol=ATOL)
