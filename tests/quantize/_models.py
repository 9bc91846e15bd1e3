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


LIGHT_MODELS = __import__("os").path.join(__import__("os").path.dirname(onnx.__file__), "backend", "test", "data",
                                          "light")


def light_model_with_random_weights(name: str, seed: int = 0, logits: bool = True) -> onnx.ModelProto:
    """onnx's light_<name> model (every weight a ConstantOfShape of 0.02, so every class scores the same)
    with seeded random weights instead: He-scaled conv / Gemm weights, batch norms that shrink (scale
    0.3-0.6, so that residual sums do not grow by 2x per block), small biases. The architecture and
    shapes are the model zoo's; with `logits` the final Softmax is dropped, so the output is the logits."""
    import os

    model = onnx.load(os.path.join(LIGHT_MODELS, f"light_{name}.onnx"))
    rng = np.random.default_rng(seed)
    shapes = {t.name: tuple(numpy_helper.to_array(t)) for t in model.graph.initializer}
    role = {}
    for node in model.graph.node:
        if node.op_type == "Conv":
            role[node.input[1]] = "conv"
            if len(node.input) > 2:
                role[node.input[2]] = "bias"
        elif node.op_type == "Gemm":
            role[node.input[1]], role[node.input[2]] = "gemm", "bias"
        elif node.op_type == "BatchNormalization":
            for index, kind in zip(range(1, 5), ("bn_scale", "bias", "bn_mean", "bn_var")):
                role[node.input[index]] = kind
    nodes, inits = [], list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            nodes.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        kind = role.get(node.output[0], "bias")
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if kind in ("conv", "gemm"):
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
            if kind == "gemm":   # zero-sum rows: the mean of the (positive, pooled) features moves no logit
                value -= value.mean(axis=1, keepdims=True)
        elif kind == "bn_scale":
            value = rng.uniform(0.3, 0.6, shape)
        elif kind == "bn_var":
            value = rng.uniform(0.5, 1.5, shape)
        elif kind == "bn_mean":
            value = rng.standard_normal(shape) * 0.1
        else:
            value = rng.standard_normal(shape) * 0.1
        inits.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    if logits and nodes[-1].op_type == "Softmax" and nodes[-1].output[0] == model.graph.output[0].name:
        model.graph.output[0].name = nodes.pop().input[0]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    model.ir_version = max(model.ir_version, 4)   # initializers need not be graph inputs from IR 4 on
    return model


def tiny_convnet(seed: int = 0) -> onnx.ModelProto:
    """conv -> relu -> conv -> relu -> global pool -> Gemm on 8x8 inputs: cheap to compile several times."""
    b = _Builder(seed)
    x = b.conv(b.conv("data", 3, 8, 3), 8, 8, 3)
    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    logits = b.node("Gemm", [pooled, b.weight((5, 8), 0.5), b.weight((5,), 0.1)], transB=1)
    graph = helper.make_graph(
        b.nodes, "tiny_convnet", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, 5])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
