"""benchmarks/real_graphs.py: small real-world ONNX graphs for benchmarks/models.py, built with onnx.helper.

Each builder returns (name, ModelProto, {input name: array}) with weights drawn from a fixed
seed, shaped like the layer or block it imitates:

    transformer_encoder   one BERT-base-like encoder layer (seq 128, d 256, 4 heads, FFN 1024)
    gpt_decoder_block     a GPT-2 style pre-norm block with causal attention (seq 64, d 256, 4 heads)
    depthwise_cnn         a MobileNet-v1-like depthwise-separable CNN (112x112, 5 blocks, classifier)
    tcn                   a dilated 1-D conv net (8 residual layers, dilations 1..8, 256 steps)
    unet                  a two-level UNet with max-pool down, nearest Resize up and skip concats (64x64)
    shape_ops             a graph dominated by shape arithmetic (Shape/Gather/Concat/Reshape/Transpose/Slice)

Built here rather than downloaded: the machines that run the benchmarks have no internet.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
_FLOAT = TensorProto.FLOAT


class _Graph:
    """A tiny helper that names nodes and initializers and collects them."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, value, stem: str = "c") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(max(1, fan_in))
        return self.const(self.rng.normal(0, scale, size=shape).astype(np.float32), "w")

    def op(self, op_type: str, inputs, outputs: int = 1, **attrs):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        return names[0] if outputs == 1 else names

    def model(self, name: str, inputs: dict[str, tuple], output: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(k, _FLOAT, list(shape)) for k, shape in inputs.items()],
            [helper.make_tensor_value_info(output, _FLOAT, None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        # the output's shape is left to inference; the full checker wants it written, so infer it
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)

    # -- layers ---------------------------------------------------------------------------

    def linear(self, x: str, d_in: int, d_out: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight(d_in, d_out)]),
                               self.const(np.zeros(d_out, np.float32) + 0.01, "b")])

    def layer_norm(self, x: str, d: int) -> str:
        return self.op("LayerNormalization", [x, self.const(np.ones(d, np.float32), "g"),
                                              self.const(np.zeros(d, np.float32), "b")], axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:  # erf form, as PyTorch exports nn.GELU()
        inner = self.op("Erf", [self.op("Div", [x, self.const(np.float32(np.sqrt(2.0)))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [inner, self.const(np.float32(1.0))])]),
                               self.const(np.float32(0.5))])

    def attention(self, x: str, seq: int, d: int, heads: int, causal: bool) -> str:
        head = d // heads

        def split_heads(t: str) -> str:  # (1, seq, d) -> (1, heads, seq, head)
            return self.op("Transpose", [self.op("Reshape", [t, self.const(np.array([1, seq, heads, head]))])],
                           perm=[0, 2, 1, 3])
        q, k, v = (split_heads(self.linear(x, d, d)) for _ in range(3))
        scores = self.op("Div", [self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                                 self.const(np.float32(np.sqrt(head)))])
        if causal:
            mask = np.triu(np.full((seq, seq), -1e9, np.float32), k=1)
            scores = self.op("Add", [scores, self.const(mask, "mask")])
        context = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        merged = self.op("Reshape", [self.op("Transpose", [context], perm=[0, 2, 1, 3]),
                                     self.const(np.array([1, seq, d]))])
        return self.linear(merged, d, d)

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1, group: int = 1,
             dilation: int = 1, relu: bool = True, ndim: int = 2) -> str:
        pad = dilation * (kernel - 1) // 2
        shape = (c_out, c_in // group) + (kernel,) * ndim
        y = self.op("Conv", [x, self.weight(*shape), self.const(np.zeros(c_out, np.float32) + 0.01, "b")],
                    kernel_shape=[kernel] * ndim, strides=[stride] * ndim, pads=[pad] * (2 * ndim),
                    group=group, dilations=[dilation] * ndim)
        return self.op("Relu", [y]) if relu else y


def transformer_encoder(seq: int = 128, d: int = 256, heads: int = 4, ffn: int = 1024):
    g = _Graph(1)
    x = "x"
    h = g.layer_norm(g.op("Add", [x, g.attention(x, seq, d, heads, causal=False)]), d)
    out = g.layer_norm(g.op("Add", [h, g.linear(g.gelu(g.linear(h, d, ffn)), ffn, d)]), d)
    data = np.random.default_rng(11).normal(size=(1, seq, d)).astype(np.float32)
    return "transformer_encoder", g.model("transformer_encoder", {"x": (1, seq, d)}, out), {"x": data}


def gpt_decoder_block(seq: int = 64, d: int = 256, heads: int = 4):
    g = _Graph(2)
    x = "x"
    h = g.op("Add", [x, g.attention(g.layer_norm(x, d), seq, d, heads, causal=True)])
    out = g.op("Add", [h, g.linear(g.gelu(g.linear(g.layer_norm(h, d), d, 4 * d)), 4 * d, d)])
    data = np.random.default_rng(12).normal(size=(1, seq, d)).astype(np.float32)
    return "gpt_decoder_block", g.model("gpt_decoder_block", {"x": (1, seq, d)}, out), {"x": data}


def depthwise_cnn(size: int = 112, classes: int = 100):
    g = _Graph(3)
    y = g.conv("x", 3, 32, 3, stride=2)
    channels = 32
    for out_channels, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1)):
        y = g.conv(y, channels, channels, 3, stride=stride, group=channels)   # depthwise
        y = g.conv(y, channels, out_channels, 1)                                # pointwise
        channels = out_channels
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [y])])
    out = g.op("Gemm", [pooled, g.weight(classes, channels), g.const(np.zeros(classes, np.float32))], transB=1)
    data = np.random.default_rng(13).uniform(size=(1, 3, size, size)).astype(np.float32)
    return "depthwise_cnn", g.model("depthwise_cnn", {"x": (1, 3, size, size)}, out), {"x": data}


def tcn(channels: int = 64, steps: int = 256, layers: int = 8):
    g = _Graph(4)
    y = g.conv("x", 32, channels, 1, ndim=1)
    for layer in range(layers):
        dilation = 2 ** (layer % 4)
        branch = g.conv(y, channels, channels, 3, dilation=dilation, ndim=1)
        y = g.op("Relu", [g.op("Add", [y, g.conv(branch, channels, channels, 1, relu=False, ndim=1)])])
    out = g.conv(y, channels, 10, 1, relu=False, ndim=1)
    data = np.random.default_rng(14).normal(size=(1, 32, steps)).astype(np.float32)
    return "tcn", g.model("tcn", {"x": (1, 32, steps)}, out), {"x": data}


def unet(size: int = 64, base: int = 16):
    g = _Graph(5)

    def block(x, c_in, c_out):
        return g.conv(g.conv(x, c_in, c_out, 3), c_out, c_out, 3)
    e1 = block("x", 3, base)
    e2 = block(g.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), base, 2 * base)
    mid = block(g.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 2 * base, 4 * base)
    scales = g.const(np.array([1, 1, 2, 2], np.float32))

    def up(x):
        return g.op("Resize", [x, "", scales], mode="nearest")
    d2 = block(g.op("Concat", [up(mid), e2], axis=1), 6 * base, 2 * base)
    d1 = block(g.op("Concat", [up(d2), e1], axis=1), 3 * base, base)
    out = g.conv(d1, base, 2, 1, relu=False)
    data = np.random.default_rng(15).uniform(size=(1, 3, size, size)).astype(np.float32)
    return "unet", g.model("unet", {"x": (1, 3, size, size)}, out), {"x": data}


def shape_ops(batch: int = 4, seq: int = 32, d: int = 64):
    """Flatten / split heads / regroup with shapes computed from Shape, as exporters write them."""
    g = _Graph(6)
    x = "x"
    y = g.linear(x, d, d)
    for _ in range(4):
        shape = g.op("Shape", [y])
        dims = [g.op("Unsqueeze", [g.op("Gather", [shape, g.const(np.array(i))], axis=0), g.const(np.array([0]))])
                for i in range(2)]
        heads = g.op("Concat", dims + [g.const(np.array([4, d // 4]))], axis=0)
        split = g.op("Transpose", [g.op("Reshape", [y, heads])], perm=[0, 2, 1, 3])
        first = g.op("Slice", [split, g.const(np.array([0])), g.const(np.array([2])), g.const(np.array([1]))])
        rest = g.op("Slice", [split, g.const(np.array([2])), g.const(np.array([4])), g.const(np.array([1]))])
        swapped = g.op("Concat", [rest, first], axis=1)
        merged = g.op("Reshape", [g.op("Transpose", [swapped], perm=[0, 2, 1, 3]),
                                  g.op("Concat", dims + [g.const(np.array([d]))], axis=0)])
        y = g.op("Add", [merged, g.op("Relu", [y])])
    out = g.op("ReduceMean", [y], axes=[1], keepdims=0)
    data = np.random.default_rng(16).normal(size=(batch, seq, d)).astype(np.float32)
    return "shape_ops", g.model("shape_ops", {"x": (batch, seq, d)}, out), {"x": data}


BUILDERS = (transformer_encoder, gpt_decoder_block, depthwise_cnn, tcn, unet, shape_ops)
NAMES = tuple(builder.__name__ for builder in BUILDERS)


def build(name: str):
    """(name, model, inputs) of the graph called `name`."""
    for builder in BUILDERS:
        if builder.__name__ == name:
            return builder()
    raise KeyError(f"no real-world graph {name!r}; choose from {', '.join(NAMES)}")
