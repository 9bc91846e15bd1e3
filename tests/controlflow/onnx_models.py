"""ONNX models with control flow and recurrent layers, built with onnx.helper, for the tests here."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

OPSET = 17


def tensor(name: str, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, list(shape))


def model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    return m


def const_node(name: str, value: np.ndarray):
    return h.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value), name))


def recurrent_model(kind: str, steps: int, batch: int, inputs: int, hidden: int, *, direction="forward",
                    layout=0, with_lengths=False, with_initial=False, peepholes=False, seed=0, **attrs):
    """X (and optionally sequence_lens, initial_h/c) as graph inputs, W, R, B as initializers."""
    rng = np.random.default_rng(seed)
    gates = {"RNN": 1, "LSTM": 4, "GRU": 3}[kind]
    dirs = 2 if direction == "bidirectional" else 1
    w = rng.standard_normal((dirs, gates * hidden, inputs)).astype(np.float32) * 0.5
    r = rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5
    b = rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.5
    inits = [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(r, "R"),
             onnx.numpy_helper.from_array(b, "B")]
    x_shape = (batch, steps, inputs) if layout else (steps, batch, inputs)
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    graph_inputs = [tensor("X", x_shape)]
    names = ["X", "W", "R", "B", "", "", ""]
    if with_lengths:
        graph_inputs.append(tensor("L", (batch,), T.INT32))
        names[4] = "L"
    if with_initial:
        graph_inputs.append(tensor("H0", state_shape))
        names[5] = "H0"
        if kind == "LSTM":
            graph_inputs.append(tensor("C0", state_shape))
            names[6] = "C0"
    if kind == "LSTM" and peepholes:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal((dirs, 3 * hidden)).astype(np.float32), "P"))
        names.append("P")
    if kind != "LSTM":
        names = names[:6]
    while names and names[-1] == "":
        names.pop()
    y_shape = (batch, steps, dirs, hidden) if layout else (steps, dirs, batch, hidden)
    outputs = [tensor("Y", y_shape), tensor("Y_h", state_shape)]
    if kind == "LSTM":
        outputs.append(tensor("Y_c", state_shape))
    node = h.make_node(kind, names, [o.name for o in outputs], hidden_size=hidden, direction=direction,
                       **({"layout": layout} if layout else {}), **attrs)
    return model([node], graph_inputs, outputs, inits, opset=14 if layout else OPSET)


def recurrent_feeds(m: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in m.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.name == "L":
            steps = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
            layout = any(a.name == "layout" and a.i for a in m.graph.node[0].attribute)
            length = steps[1] if layout else steps[0]
            feeds["L"] = rng.integers(1, length + 1, size=shape).astype(np.int32)
            feeds["L"][0] = length
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds
