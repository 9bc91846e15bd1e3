"""ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum standard and nesterov) match onnx's
reference evaluator on cpu_llvm, for the first step (T = 0) and a later one, one or several tensors,
float32 and float64; T and R are run-time inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from tensorkiln.ir.errors import TensorkilnError

TRAINING = "ai.onnx.preview.training"

# op type -> (accumulators per tensor, attributes)
OPTIMIZERS = {
    "adagrad": ("Adagrad", 1, dict(decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.001)),
    "adam": ("Adam", 2, dict(alpha=0.9, beta=0.8, epsilon=1e-3, norm_coefficient=0.01, norm_coefficient_post=0.02)),
    "momentum": ("Momentum", 1, dict(alpha=0.95, beta=0.1, mode="standard", norm_coefficient=0.001)),
    "nesterov": ("Momentum", 1, dict(alpha=0.9, beta=0.7, mode="nesterov", norm_coefficient=0.01)),
}


def _model(op_type: str, accumulators: int, attrs: dict, shapes: list, dtype) -> tuple:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    groups = ["X", "G"] + [f"A{k}_" for k in range(accumulators)]
    inputs = ["R", "T"] + [f"{g}{i}" for g in groups for i in range(len(shapes))]
    outputs = [f"{g}{i}_new" for g in ["X"] + groups[2:] for i in range(len(shapes))]
    value_infos = [helper.make_tensor_value_info("R", elem, []), helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    value_infos += [helper.make_tensor_value_info(name, elem, shapes[i % len(shapes)])
                    for i, name in enumerate(inputs[2:])]
    output_infos = [helper.make_tensor_value_info(name, elem, shapes[i % len(shapes)]) for i, name in enumerate(outputs)]
    node = helper.make_node(op_type, inputs, outputs, domain=TRAINING, **attrs)
    graph = helper.make_graph([node], "step", value_infos, output_infos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(TRAINING, 1)])
    return model, inputs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shapes", [[(3, 4)], [(5,), (2, 3)]], ids=["one", "two"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_step_matches_onnx_reference(name, shapes, dtype):
    op_type, accumulators, attrs = OPTIMIZERS[name]
    model, inputs = _model(op_type, accumulators, attrs, shapes, dtype)
    compiled = tk.compile(model, target="cpu_llvm")
    rng = np.random.default_rng(len(name) + len(shapes))
    for step in (0, 3):
        feeds = {"R": np.array(0.1, dtype=dtype), "T": np.array(step, dtype=np.int64)}
        for i, key in enumerate(inputs[2:]):
            value = rng.standard_normal(shapes[i % len(shapes)]).astype(dtype)
            feeds[key] = np.abs(value) if key.startswith("A") and op_type != "Momentum" else value  # H >= 0
        want = ReferenceEvaluator(model).run(None, feeds)
        got = compiled.run(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, np.asarray(w).astype(dtype), rtol=1e-4 if dtype == "float32" else 1e-10,
                                       atol=1e-6, err_msg=f"{name} step {step}")


def test_optimizer_with_a_wrong_input_count_is_refused():
    model, _ = _model("Adagrad", 1, OPTIMIZERS["adagrad"][2], [(2,)], "float32")
    model.graph.node[0].input.pop()   # R, T, X, G: the accumulator H is missing
    with pytest.raises(TensorkilnError, match=r"Adagrad.*4 inputs; expected R, T and 3 groups"):
        tk.compile(model, target="cpu_llvm")


@pytest.mark.parametrize("shape, attrs", [((4, 3), {}), ((2, 3, 5), dict(momentum=0.7)),
                                          ((2, 3, 4, 5), dict(epsilon=1e-2, momentum=0.5))])
def test_batch_norm_training_mode_matches_onnx_reference(shape, attrs):
    """training_mode=1: y normalized with the batch's statistics, and the running mean and variance."""
    channels = shape[1]
    names = ["x", "scale", "bias", "mean", "var"]
    shapes = [shape] + [(channels,)] * 4
    node = helper.make_node("BatchNormalization", names, ["y", "running_mean", "running_var"], training_mode=1,
                            **attrs)
    graph = helper.make_graph([node], "bn", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                             for n, s in zip(names, shapes)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
                               helper.make_tensor_value_info("running_mean", TensorProto.FLOAT, (channels,)),
                               helper.make_tensor_value_info("running_var", TensorProto.FLOAT, (channels,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    rng = np.random.default_rng(7)
    feeds = {n: (rng.standard_normal(s) * 2 + 1).astype("float32") for n, s in zip(names, shapes)}
    feeds["var"] = np.abs(feeds["var"])
    got = tk.compile(model, target="cpu_llvm").run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w, name in zip(got, want, ["y", "running_mean", "running_var"]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
