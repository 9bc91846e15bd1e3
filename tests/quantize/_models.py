"""Small ONNX models for the quantization tests, built with onnx.helper (seeded random weights)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def weight(self, shape, scale: float) -> str:
        name = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def node(self, op: str, inputs, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> str:
        w = self.weight((cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        b = self.weight((cout,), 0.1)
        y = self.node("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        return self.node("Relu", [y]) if relu else y


def small_resnet(seed: int = 0, classes: int = 10, size: int = 32) -> onnx.ModelProto:
    """conv stem, two residual blocks (one strided with a projection), global pool, Gemm, batch 1."""
    b = _Builder(seed)
    x = b.conv("data", 3, 16, 3)
    for cin, cout, stride in ((16, 16, 1), (16, 32, 2)):
        y = b.conv(b.conv(x, cin, cout, 3, stride), cout, cout, 3, relu=False)
        shortcut = x if (cin, stride) == (cout, 1) else b.conv(x, cin, cout, 1, stride, relu=False)
        x = b.node("Relu", [b.node("Add", [y, shortcut])])
    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    logits = b.node("Gemm", [pooled, b.weight((classes, 32), 0.3), b.weight((classes,), 0.1)], transB=1)
    graph = helper.make_graph(
        b.nodes, "small_resnet", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, classes])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
