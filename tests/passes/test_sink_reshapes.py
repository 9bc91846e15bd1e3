"""sink_reshapes: shape-only ops move below elementwise ops and cancel; the values do not change."""
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph import Call, Module, assert_structural_equal, post_order
from tensorkiln.passes import sink_reshapes

RNG = np.random.default_rng(0)


def _ops(mod: Module) -> list[str]:
    return [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)]


def _same_values(before: Module, after: Module, **inputs) -> None:
    np.testing.assert_allclose(graph.evaluate(after, inputs), graph.evaluate(before, inputs), rtol=1e-6)


def test_an_elementwise_op_moves_below_the_squeeze_it_alone_reads():
    x = graph.var("x", shape=(1, 4, 1, 6))
    before = Module.from_expr(graph.nn.relu(graph.squeeze(x, axis=(2,))))
    expected = Module.from_expr(graph.reshape(graph.nn.relu(x), (1, 4, 6)))
    assert_structural_equal(sink_reshapes(before), expected)


def test_a_squeeze_then_expand_dims_around_elementwise_ops_cancel():
    """The 1-D conv chain the ONNX importer builds: squeeze -> relu -> expand_dims is relu alone."""
    x = graph.var("x", shape=(1, 4, 1, 6))
    before = Module.from_expr(graph.expand_dims(graph.sigmoid(graph.nn.relu(graph.squeeze(x, axis=(2,)))), axis=2))
    assert_structural_equal(sink_reshapes(before), Module.from_expr(graph.sigmoid(graph.nn.relu(x))))


def test_other_operands_follow_a_full_shape_a_scalar_or_a_unit_axis_broadcast():
    """A residual of the result's shape, a scalar and a per-channel constant of the 3-D tensor are reshaped onto
    the 4-D one; the values are the same."""
    x = graph.var("x", shape=(1, 4, 1, 6))
    skip = graph.var("skip", shape=(1, 4, 6))
    channel = graph.const(RNG.standard_normal((4, 1)).astype("float32"))
    squeezed = graph.squeeze(x, axis=(2,))
    body = graph.multiply(graph.add(graph.add(squeezed, skip), channel), graph.const(np.float32(0.5)))
    before = Module.from_expr(graph.nn.relu(body))
    after = sink_reshapes(before)
    ops = _ops(after)
    assert ops[-1] == "reshape" and "squeeze" not in ops   # one reshape, at the end
    assert all(n.checked_type.shape == (1, 4, 1, 6) for n in post_order(after["main"])
               if isinstance(n, Call) and n.op.name in ("add", "multiply", "nn.relu"))
    _same_values(before, after, x=RNG.standard_normal((1, 4, 1, 6)).astype("float32"),
                 skip=RNG.standard_normal((1, 4, 6)).astype("float32"))


def test_a_squeeze_with_another_user_stays():
    x = graph.var("x", shape=(1, 4, 1, 6))
    squeezed = graph.squeeze(x, axis=(2,))
    before = Module.from_expr(graph.add(graph.nn.relu(squeezed), squeezed))
    assert sink_reshapes(before) is before


def test_a_broadcast_over_merged_extents_keeps_the_op_in_place():
    """reshape [2, 3, 4] -> [6, 4] merges extents: a constant broadcast over the 6 rows has no shape on the
    3-D side, so the add stays below the reshape."""
    x = graph.var("x", shape=(2, 3, 4))
    rows = graph.const(RNG.standard_normal((6, 1)).astype("float32"))
    before = Module.from_expr(graph.add(graph.reshape(x, (6, 4)), rows))
    assert sink_reshapes(before) is before


def test_ops_with_an_axis_stay():
    x = graph.var("x", shape=(1, 4, 1, 6))
    before = Module.from_expr(graph.nn.softmax(graph.squeeze(x, axis=(2,)), axis=-1))
    assert sink_reshapes(before) is before


_UNARY = (graph.nn.relu, graph.sigmoid, graph.negative, graph.exp)


@st.composite
def _chains(draw):
    """A random chain of shape-only and elementwise ops over x (1 x C x 1 x W), with full-shape, scalar and
    per-channel operands."""
    channels, width = draw(st.integers(1, 5)), draw(st.integers(1, 7))
    x = graph.var("x", shape=(1, channels, 1, width))
    value, feeds = x, {"x": RNG.standard_normal((1, channels, 1, width)).astype("float32")}
    for step in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(("squeeze", "expand", "reshape", "unary", "full", "scalar", "channel")))
        shape = tuple(value.checked_type.shape)
        if kind == "squeeze" and 1 in shape:
            value = graph.squeeze(value, axis=(shape.index(1),))
        elif kind == "expand":
            value = graph.expand_dims(value, axis=draw(st.integers(0, len(shape))))
        elif kind == "reshape":
            value = graph.reshape(value, (int(np.prod(shape)),) if draw(st.booleans()) else (channels, 1, width))
        elif kind == "unary":
            value = draw(st.sampled_from(_UNARY))(value)
        elif kind == "full":
            name = f"y{step}"
            feeds[name] = RNG.standard_normal(shape).astype("float32")
            value = graph.add(value, graph.var(name, shape=shape))
        elif kind == "scalar":
            value = graph.multiply(value, graph.const(np.float32(0.75)))
        elif kind == "channel" and channels in shape:
            axis = shape.index(channels)
            constant = RNG.standard_normal((channels,) + (1,) * (len(shape) - axis - 1)).astype("float32")
            value = graph.add(value, graph.const(constant))
    return Module.from_expr(value), feeds


@given(case=_chains())
@settings(max_examples=40, deadline=None, derandomize=True)
def test_random_chains_keep_their_values(case):
    before, feeds = case
    after = sink_reshapes(before)
    _same_values(before, after, **feeds)
    # nothing is left between two shape-only ops
    for node in post_order(after["main"]):
        if isinstance(node, Call) and node.op.name in ("reshape", "squeeze", "expand_dims"):
            source = node.args[0]
            assert not (isinstance(source, Call) and source.op.name in ("reshape", "squeeze", "expand_dims"))


def _conv1d_net(channels=16, steps=40, layers=3):
    """An ONNX dilated 1-D conv net: Conv -> Relu -> Conv -> Add(residual) -> Relu per layer."""
    nodes, inits = [], []

    def weight(name, *shape):
        inits.append(numpy_helper.from_array(RNG.normal(0, 0.3, size=shape).astype(np.float32), name))
        return name

    value = "x"
    for layer in range(layers):
        dilation = 2 ** layer
        conv = lambda source, out, tag: helper.make_node(   # noqa: E731
            "Conv", [source, weight(f"w{tag}", channels, channels, 3), weight(f"b{tag}", channels)], [out],
            dilations=[dilation], pads=[dilation, dilation])
        nodes += [conv(value, f"c{layer}a", f"{layer}a"), helper.make_node("Relu", [f"c{layer}a"], [f"r{layer}a"]),
                  conv(f"r{layer}a", f"c{layer}b", f"{layer}b"),
                  helper.make_node("Add", [f"c{layer}b", value], [f"s{layer}"]),
                  helper.make_node("Relu", [f"s{layer}"], [f"r{layer}"])]
        value = f"r{layer}"
    shape = [1, channels, steps]
    g = helper.make_graph(nodes, "conv1d_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(value, TensorProto.FLOAT, [1, channels, steps])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_a_1d_conv_net_fuses_every_relu_and_residual_into_its_conv(target):
    """Each Conv1d is expand_dims -> conv2d -> squeeze after import: with the squeezes sunk and cancelled, no
    relu or add is a kernel of its own, and the outputs match onnxruntime at 1 and 2 threads."""
    ort = pytest.importorskip("onnxruntime")
    model = _conv1d_net()
    x = RNG.standard_normal((1, 16, 40)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    lib = tk.compile(model, target)
    for name, strategy in lib.summary()["strategies"].items():
        if {"nn.relu", "add"} & set(strategy["ops"]):
            assert "nn.conv2d" in strategy["ops"] or "nn.matmul" in strategy["ops"], name
    before = tk.runtime.get_num_threads()
    try:
        for threads in (1, 2):
            tk.runtime.set_num_threads(threads)
            np.testing.assert_allclose(lib.run({"x": x})[0], expected, rtol=1e-4, atol=1e-4)
    finally:
        tk.runtime.set_num_threads(0)
        tk.runtime.set_num_threads(before)
