"""tests/fuzz/seeds.py: the small valid ONNX models the fuzzer mutates.

Each seed is a function returning a fresh ModelProto that onnx.checker, onnxruntime
and tensorkiln all accept: examples/models/small_cnn.onnx plus small graphs built with
onnx.helper (an elementwise chain, conv + relu + pool, matmul + add, a gather, a
reshape/transpose chain).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["SEEDS"]

_SMALL_CNN = Path(__file__).resolve().parents[2] / "examples" / "models" / "small_cnn.onnx"
_OPSET = 17


def _info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], ir_version=8)


def _const(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def small_cnn() -> onnx.ModelProto:
    return onnx.load(str(_SMALL_CNN))


def elementwise_chain() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Mul", ["a", "x"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"),
             helper.make_node("Sub", ["s", "c"], ["y"], name="sub")]
    return _model(nodes, [_info("x", [2, 3, 4])], [_info("y", [2, 3, 4])],
                  [_const("c", np.linspace(-1, 1, 4))])


def conv_relu_pool() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    return _model(nodes, [_info("x", [1, 2, 8, 8])], [_info("y", [1, 4, 4, 4])],
                  [_const("w", rng.standard_normal((4, 2, 3, 3))), _const("b", rng.standard_normal(4))])


def matmul_add() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    return _model(nodes, [_info("x", [3, 4])], [_info("y", [3, 5])],
                  [_const("w", rng.standard_normal((4, 5))), _const("b", rng.standard_normal(5))])


def gather() -> onnx.ModelProto:
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=0)]
    return _model(nodes, [_info("x", [5, 4])], [_info("y", [3, 4])], [_const("i", [4, 0, 2], np.int64)])


def reshape_transpose() -> onnx.ModelProto:
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"], name="reshape1"),
             helper.make_node("Transpose", ["a"], ["b"], name="transpose1", perm=[1, 0]),
             helper.make_node("Reshape", ["b", "s2"], ["c"], name="reshape2"),
             helper.make_node("Transpose", ["c"], ["y"], name="transpose2", perm=[2, 0, 1])]
    return _model(nodes, [_info("x", [2, 3, 4])], [_info("y", [2, 4, 3])],
                  [_const("s1", [6, 4], np.int64), _const("s2", [4, 3, 2], np.int64)])


SEEDS = {fn.__name__: fn for fn in (small_cnn, elementwise_chain, conv_relu_pool, matmul_add, gather,
                                    reshape_transpose)}
