"""examples/make_small_cnn.py: write models/small_cnn.onnx, the model the README's main job runs.

A small residual CNN classifier (conv-bn-relu, a residual block, max pool, global
average pool, gemm, softmax) with fixed random weights, opset 17.
Run: python3 examples/make_small_cnn.py
"""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).parent / "models" / "small_cnn.onnx"


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = []

    def weight(name, *shape, scale=0.2):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def bn(prefix, channels):
        names = []
        for suffix, value in (("scale", 1 + 0.1 * rng.standard_normal(channels)), ("bias", 0.1 * rng.standard_normal(channels)),
                              ("mean", 0.1 * rng.standard_normal(channels)), ("var", 0.5 + rng.random(channels))):
            inits.append(numpy_helper.from_array(value.astype(np.float32), f"{prefix}_{suffix}"))
            names.append(f"{prefix}_{suffix}")
        return names

    nodes = [
        helper.make_node("Conv", ["input", weight("w0", 16, 3, 3, 3), weight("b0", 16)], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("BatchNormalization", ["c0", *bn("bn0", 16)], ["n0"], name="bn0"),
        helper.make_node("Relu", ["n0"], ["r0"], name="relu0"),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2], name="pool0"),
        helper.make_node("Conv", ["p0", weight("w1", 16, 16, 3, 3, scale=0.1)], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", *bn("bn1", 16)], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", weight("w2", 16, 16, 3, 3, scale=0.1)], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("BatchNormalization", ["c2", *bn("bn2", 16)], ["n2"], name="bn2"),
        helper.make_node("Add", ["n2", "p0"], ["s2"], name="residual"),
        helper.make_node("Relu", ["s2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", weight("fc_w", 10, 16), weight("fc_b", 10)], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tensorkiln-examples")
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(), OUT)
    print(f"wrote {OUT}")
