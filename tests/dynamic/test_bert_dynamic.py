"""A BERT-style encoder built with onnx.helper, its sequence length symbolic (`seq`, up to 128): one
tk.compile, then runs at lengths 7, 64 and 128 that match onnxruntime. The reshapes take their shapes
from Shape(x) at run time, and the position table is sliced to Shape(ids)[1], as exporters write them."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk
from tensorkiln.ir.errors import ShapeError
from tensorkiln.runtime.specialize import SpecializedModel

pytestmark = pytest.mark.skipif(not tk.target("cpu_llvm").spec.is_available, reason="cpu_llvm codegen not available")

VOCAB, HIDDEN, HEADS, FFN, LAYERS, MAX_LEN = 50, 32, 4, 64, 2, 128


class _Graph:
    """Collects nodes and initializers with fresh names."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes, self.inits, self.count, self.rng = [], [], 0, np.random.default_rng(seed)

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, value, prefix: str = "c") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int) -> str:
        return self.const((self.rng.standard_normal(shape) * 0.2).astype(np.float32), "w")

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out


def _layer_norm(g: _Graph, x: str) -> str:
    return g.op("LayerNormalization", x, g.const(np.ones(HIDDEN, np.float32) + g.rng.standard_normal(HIDDEN).astype(np.float32) * 0.1),
                g.const(g.rng.standard_normal(HIDDEN).astype(np.float32) * 0.1), axis=-1, epsilon=1e-5)


def _dense(g: _Graph, x: str, n_in: int, n_out: int) -> str:
    return g.op("Add", g.op("MatMul", x, g.weight(n_in, n_out)), g.weight(n_out))


def _heads(g: _Graph, x: str, batch_seq: str, perm: list[int]) -> str:
    shape = g.op("Concat", batch_seq, g.const(np.array([HEADS, HIDDEN // HEADS], np.int64)), axis=0)
    return g.op("Transpose", g.op("Reshape", x, shape), perm=perm)


def _encoder_layer(g: _Graph, h: str, mask_bias: str) -> str:
    batch_seq = g.op("Slice", g.op("Shape", h), g.const(np.array([0])), g.const(np.array([2])))
    q = _heads(g, _dense(g, h, HIDDEN, HIDDEN), batch_seq, [0, 2, 1, 3])
    k = _heads(g, _dense(g, h, HIDDEN, HIDDEN), batch_seq, [0, 2, 3, 1])
    v = _heads(g, _dense(g, h, HIDDEN, HIDDEN), batch_seq, [0, 2, 1, 3])
    scores = g.op("Div", g.op("MatMul", q, k), g.const(np.float32(np.sqrt(HIDDEN // HEADS))))
    probs = g.op("Softmax", g.op("Add", scores, mask_bias), axis=-1)
    context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    merged = g.op("Reshape", context, g.op("Concat", batch_seq, g.const(np.array([HIDDEN], np.int64)), axis=0))
    h = _layer_norm(g, g.op("Add", h, _dense(g, merged, HIDDEN, HIDDEN)))
    inner = _dense(g, h, HIDDEN, FFN)
    gelu = g.op("Mul", g.op("Mul", inner, g.const(np.float32(0.5))),
                g.op("Add", g.const(np.float32(1.0)), g.op("Erf", g.op("Div", inner, g.const(np.float32(np.sqrt(2.0)))))))
    return _layer_norm(g, g.op("Add", h, _dense(g, gelu, FFN, HIDDEN)))


def bert_encoder():
    g = _Graph()
    words = g.op("Gather", g.weight(VOCAB, HIDDEN), "ids", axis=0)
    seq_len = g.op("Slice", g.op("Shape", "ids"), g.const(np.array([1])), g.const(np.array([2])))
    positions = g.op("Slice", g.weight(MAX_LEN, HIDDEN), g.const(np.array([0])), seq_len, g.const(np.array([0])))
    h = _layer_norm(g, g.op("Add", words, positions))
    # (1 - mask) * -10000, broadcast over heads and query positions: [batch, 1, 1, seq]
    mask_bias = g.op("Mul", g.op("Sub", g.const(np.float32(1.0)), "mask"), g.const(np.float32(-10000.0)))
    mask_bias = g.op("Unsqueeze", mask_bias, g.const(np.array([1, 2])))
    for _ in range(LAYERS):
        h = _encoder_layer(g, h, mask_bias)
    g.nodes[-1].output[0] = "hidden"
    graph = helper.make_graph(
        g.nodes, "bert", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"]),
                          helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, "seq"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, "seq", HIDDEN])], initializer=g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bert_encoder_compiles_once_and_matches_onnxruntime_at_7_64_128():
    model = bert_encoder()
    lib = tk.compile(model, target="cpu_llvm", shape={"ids": f"1xseq:1..{MAX_LEN}"})
    assert isinstance(lib, SpecializedModel)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for seq in (7, 64, 128):
        feeds = {"ids": rng.integers(0, VOCAB, (1, seq)).astype(np.int64),
                 "mask": (rng.random((1, seq)) > 0.2).astype(np.float32)}
        (expected,) = session.run(None, feeds)
        np.testing.assert_allclose(lib.run(feeds)[0], expected, rtol=1e-4, atol=1e-4)
    assert lib.cache_info()["compiles"] == 3
    with pytest.raises(ShapeError, match=r"dimension 1 \(.seq.\) is 129, outside its bounds 1..128"):
        lib.run({"ids": np.zeros((1, 129), np.int64), "mask": np.ones((1, 129), np.float32)})
