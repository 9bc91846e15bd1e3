"""ONNX Conv with 3 and 4 spatial axes (graph op nn.conv): one-node models compiled for cpu_llvm through
the standard backend protocol (prepare, then run: nothing bound) match onnxruntime and onnx's
ReferenceEvaluator, and a brute-force loop in this file; the type rule's shape errors name the shapes."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tensorkiln import onnx_backend
from tensorkiln.graph.ops.conv_nd import ConvAttrs
from tensorkiln.graph.registry import get_op
from tensorkiln.graph.types import TensorType
from tensorkiln.ir.errors import ShapeError

_TOLERANCE = dict(rtol=1e-4, atol=1e-4)


def _data(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def _model(node, inputs: dict[str, np.ndarray], out_shape) -> object:
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, a.shape) for name, a in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _onnxruntime(model, inputs):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def _brute_force(x, w, bias, strides, pads, dilations, group):
    """Each output element summed tap by tap over its group's input channels."""
    rank = x.ndim - 2
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[a], pads[rank + a]) for a in range(rank)])
    per_in, per_out = w.shape[1], w.shape[0] // group
    sizes = [(x.shape[2 + a] - (w.shape[2 + a] - 1) * dilations[a] - 1) // strides[a] + 1 for a in range(rank)]
    out = np.zeros((x.shape[0], w.shape[0], *sizes))
    for b, o, *position in itertools.product(range(x.shape[0]), range(w.shape[0]), *(range(s) for s in sizes)):
        g = o // per_out
        total = 0.0 if bias is None else float(bias[o])
        for tap in itertools.product(*(range(k) for k in w.shape[2:])):
            source = tuple(p * s + t * d for p, s, t, d in zip(position, strides, tap, dilations))
            total += float(np.dot(x[(b, slice(g * per_in, (g + 1) * per_in), *source)], w[(o, slice(None), *tap)]))
        out[(b, o, *position)] = total
    return out.astype(np.float32)


CONV_3D = [   # (attributes, data shape, weight shape)
    (dict(), (1, 3, 5, 6, 4), (4, 3, 3, 3, 3)),
    (dict(pads=[1, 0, 2, 1, 1, 0], strides=[2, 1, 2]), (2, 3, 6, 5, 7), (5, 3, 3, 2, 3)),
    (dict(dilations=[2, 1, 2], pads=[1, 1, 1, 1, 1, 1]), (1, 2, 7, 6, 7), (3, 2, 2, 3, 3)),
    (dict(group=2, strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 1]), (1, 4, 5, 6, 5), (6, 2, 2, 3, 2)),
    (dict(group=6, pads=[1, 1, 1, 1, 1, 1]), (1, 6, 5, 4, 6), (6, 1, 3, 3, 3)),            # depthwise
    (dict(group=3, pads=[1, 1, 1, 1, 1, 1]), (1, 3, 4, 5, 4), (6, 1, 3, 3, 3)),            # multiplier 2
    (dict(auto_pad="SAME_UPPER", strides=[2, 1, 2]), (1, 3, 5, 6, 7), (4, 3, 2, 3, 2)),
    (dict(auto_pad="SAME_LOWER", strides=[1, 2, 2]), (1, 3, 5, 6, 7), (4, 3, 2, 3, 2)),
    (dict(auto_pad="VALID", strides=[2, 2, 1], dilations=[1, 2, 1]), (1, 2, 7, 8, 5), (3, 2, 3, 2, 2)),
    (dict(kernel_shape=[3, 1, 2], auto_pad="NOTSET", pads=[0, 0, 1, 0, 0, 0]), (1, 2, 4, 3, 5), (2, 2, 3, 1, 2)),
]


@pytest.mark.parametrize("attrs, data_shape, weight_shape", CONV_3D,
                         ids=[str(i) for i in range(len(CONV_3D))])
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_3d_matches_onnxruntime_and_the_reference(attrs, data_shape, weight_shape, with_bias):
    x, w = _data(data_shape, 1), _data(weight_shape, 2)
    inputs = {"x": x, "w": w}
    if with_bias:
        inputs["b"] = _data((weight_shape[0],), 3)
    node = helper.make_node("Conv", list(inputs), ["y"], **attrs)
    expected = _onnxruntime(_model(node, inputs, None), inputs)
    model = _model(node, inputs, expected.shape)
    (got,) = onnx_backend.prepare(model).run([inputs[name] for name in inputs])
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, **_TOLERANCE, err_msg="vs onnxruntime")
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, inputs)[0], **_TOLERANCE,
                               err_msg="vs onnx reference")


def test_conv_3d_same_lower_pads_more_at_the_start():
    """SAME_LOWER against the brute-force loop with the spec's padding (the odd extra cell at the start)."""
    x, w = _data((1, 2, 5, 4, 6), 4), _data((3, 2, 2, 3, 2), 5)
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[1, 2, 2])
    # totals per axis: d 1 (k 2, s 1), h 1 (out 2: 1*2+3-4), w 0 (out 3: 2*2+2-6); odd -> 1 at the start
    expected = _brute_force(x, w, None, (1, 2, 2), (1, 1, 0, 0, 0, 0), (1, 1, 1), 1)
    (got,) = onnx_backend.prepare(_model(node, {"x": x, "w": w}, expected.shape)).run([x, w])
    np.testing.assert_allclose(got, expected, **_TOLERANCE)


@pytest.mark.parametrize("group, weight_shape", [(1, (3, 4, 2, 2, 3, 2)), (2, (4, 2, 2, 3, 2, 2))])
def test_conv_4d_matches_a_brute_force_loop(group, weight_shape):
    x, w, bias = _data((1, 4, 4, 5, 4, 3), 6), _data(weight_shape, 7), _data((weight_shape[0],), 8)
    strides, pads, dilations = (1, 2, 1, 1), (1, 0, 1, 0, 0, 1, 0, 1), (1, 1, 2, 1)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(strides), pads=list(pads),
                            dilations=list(dilations), group=group)
    expected = _brute_force(x, w, bias, strides, pads, dilations, group)
    model = _model(node, {"x": x, "w": w, "b": bias}, expected.shape)
    (got,) = onnx_backend.prepare(model).run([x, w, bias])
    np.testing.assert_allclose(got, expected, **_TOLERANCE, err_msg="vs brute force")
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x, "w": w, "b": bias})[0],
                               **_TOLERANCE, err_msg="vs onnx reference")


def test_the_reference_matches_the_brute_force_loop():
    """The graph op's numpy reference (what the per-op numerics tests trust) on its own."""
    x, w = _data((2, 4, 5, 4, 6), 9), _data((6, 2, 3, 2, 2), 10)
    attrs = ConvAttrs(strides=(2, 1, 2), padding=(1, 0, 1, 0, 1, 1), dilation=(1, 2, 1), groups=2)
    got = get_op("nn.conv").reference(x, w, attrs)
    np.testing.assert_allclose(got, _brute_force(x, w, None, attrs.strides, attrs.padding, attrs.dilation, 2),
                               **_TOLERANCE)


def _type(data, weight, **attrs):
    return get_op("nn.conv").type_rule((TensorType(data, "float32"), TensorType(weight, "float32")),
                                       ConvAttrs(**attrs))


def test_type_rule_errors_name_the_shapes():
    three = dict(strides=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1))
    assert _type((1, 4, 5, 6, 7), (8, 2, 3, 3, 3), groups=2, **three).shape == (1, 8, 3, 4, 5)
    with pytest.raises(ShapeError, match=r"nn.conv: data \(1, 4, 5, 6\) and weight \(8, 4, 3, 3, 3\) must both "
                                         r"have 2 \+ 3 axes"):
        _type((1, 4, 5, 6), (8, 4, 3, 3, 3), **three)
    with pytest.raises(ShapeError, match=r"data \(1, 4, 5, 6, 7\) has 4 channels but weight \(8, 3, 3, 3, 3\)"):
        _type((1, 4, 5, 6, 7), (8, 3, 3, 3, 3), **three)
    with pytest.raises(ShapeError, match=r"weight \(6, 1, 3, 3, 3\) has 6 output channels, not a multiple of "
                                         r"groups \(4\)"):
        _type((1, 4, 5, 6, 7), (6, 1, 3, 3, 3), groups=4, **three)
    with pytest.raises(ShapeError, match=r"kernel 4 \(dilation 2\) on spatial axis 0 spans 7, more than the "
                                         r"padded input 5"):
        _type((1, 2, 5, 6, 7), (2, 2, 4, 3, 3), strides=(1, 1, 1), padding=(0,) * 6, dilation=(2, 1, 1))


def test_attrs_must_have_one_entry_per_axis():
    with pytest.raises(Exception, match=r"padding \(0, 0, 0, 0\) must have 1, 1 and 2 entries per spatial axis"):
        ConvAttrs(strides=(1, 1, 1), padding=(0, 0, 0, 0), dilation=(1, 1, 1))
