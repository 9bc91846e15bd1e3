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


def branch(name: str, nodes, out: str, shape):
    """An If branch: a graph of `nodes` with no inputs (it reads the outer scope) and one output."""
    return h.make_graph(nodes, name, [], [tensor(out, shape)])


def if_model(after: str | None = None) -> onnx.ModelProto:
    """y = If(sum(x) > 0) then relu(x) + w else x * w, the branches reading x and w = exp(x) (outer scope);
    with `after`, the model's output is after(y) (an op applied past the If)."""
    then = branch("then", [h.make_node("Relu", ["x"], ["r"]), h.make_node("Add", ["r", "w"], ["t"])], "t", (3, 4))
    other = branch("else", [h.make_node("Mul", ["x", "w"], ["e"])], "e", (3, 4))
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), const_node("zero", np.float32(0)),
             h.make_node("Greater", ["s", "zero"], ["c"]), h.make_node("Exp", ["x"], ["w"]),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    if after:
        nodes.append(h.make_node(after, ["y"], ["z"]))
    return model(nodes, [tensor("x", (3, 4))], [tensor("z" if after else "y", (3, 4))])


def scanning_loop(trip: int, step_nodes, scan_op: str) -> onnx.ModelProto:
    """A Loop of `trip` (static) iterations over x, y0: xi = x * i, then `step_nodes` turn y_in and xi into
    y_out, carried; scan_op(y_out) is each iteration's scan output; cond passes through."""
    body = h.make_graph([
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Mul", ["x", "fi"], ["xi"]), *step_nodes,
        h.make_node("Identity", ["cond"], ["cond_out"]), h.make_node(scan_op, ["y_out"], ["scan"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (2, 3))],
        [tensor("cond_out", (), T.BOOL), tensor("y_out", (2, 3)), tensor("scan", (2, 3))])
    nodes = [const_node("M", np.int64(trip)), const_node("c", np.array(True)),
             h.make_node("Loop", ["M", "c", "y0"], ["y", "s"], body=body)]
    return model(nodes, [tensor("x", (2, 3)), tensor("y0", (2, 3))], [tensor("y", (2, 3)), tensor("s", (trip, 2, 3))])


def if_in_loop(trip: int) -> onnx.ModelProto:
    """Loop over i < trip carrying y: y = If(i even) then y + x*i else (y - x*i) * x; each tanh(y) a scan
    output. The If reads x from the main graph (two scopes up) and y_in, xi from the body."""
    then = branch("then", [h.make_node("Add", ["y_in", "xi"], ["t"])], "t", (2, 3))
    other = branch("else", [h.make_node("Sub", ["y_in", "xi"], ["e"]), h.make_node("Mul", ["e", "x"], ["e2"])],
                   "e2", (2, 3))
    return scanning_loop(trip, [
        const_node("two", np.int64(2)), h.make_node("Mod", ["i", "two"], ["m"]),
        const_node("zero", np.int64(0)), h.make_node("Equal", ["m", "zero"], ["even"]),
        h.make_node("If", ["even"], ["y_out"], then_branch=then, else_branch=other)], "Tanh")



def early_ending_loop() -> onnx.ModelProto:
    """A Loop of at most 4 iterations carrying y0 unchanged and scanning it, that ends once i >= stop; its
    scan output's length ("n") is the iterations run."""
    body = h.make_graph([
        h.make_node("Identity", ["y_in"], ["y_out"]), h.make_node("Identity", ["y_in"], ["scan"]),
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Less", ["fi", "stop"], ["cond_out"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (2,))],
        [tensor("cond_out", (), T.BOOL), tensor("y_out", (2,)), tensor("scan", (2,))])
    nodes = [const_node("M", np.int64(4)), const_node("c", np.array(True)),
             h.make_node("Loop", ["M", "c", "y0"], ["y", "s"], body=body)]
    return model(nodes, [tensor("y0", (2,)), tensor("stop", ())],
              [tensor("y", (2,)), h.make_tensor_value_info("s", T.FLOAT, ["n", 2])])


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
