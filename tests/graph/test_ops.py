"""Registry-driven op tests: every registered op's type rule agrees with its numpy
reference, attrs validate, a few references match hand-written numpy, and type
rule errors are pinned."""
import numpy as np
import pytest

from tensorkiln import graph
from tensorkiln.graph import AttrsError, OpPattern, TensorType, get_op, list_ops
from tensorkiln.graph.ops.nn import Conv2DAttrs
from tensorkiln.ir.errors import DTypeError, ShapeError, UnsupportedOpError

RNG = np.random.default_rng(0)


def f32(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype("float32")


def i64(*shape, high=3):
    return RNG.integers(0, high, shape).astype("int64")


# Inputs and attrs per op. Ops not listed get a rule by fusion pattern (see _sample).
SAMPLES = {
    "asin": ([f32(2, 3, low=-0.9, high=0.9)], {}), "acos": ([f32(2, 3, low=-0.9, high=0.9)], {}),
    "atanh": ([f32(2, 3, low=-0.9, high=0.9)], {}), "acosh": ([f32(2, 3, low=1.1, high=3)], {}),
    "sqrt": ([f32(2, 3, low=0.1)], {}), "rsqrt": ([f32(2, 3, low=0.1)], {}), "log": ([f32(2, 3, low=0.1)], {}),
    "logical_not": ([f32(2, 3) > 0], {}), "bitwise_not": ([i64(2, 3)], {}),
    "isnan": ([np.array([1.0, np.nan], "float32")], {}), "isinf": ([np.array([np.inf, -np.inf, 1], "float32")], {}),
    "cast": ([f32(2, 3)], {"dtype": "int32"}), "clip": ([f32(2, 3)], {"a_min": -0.5, "a_max": 0.5}),
    "power": ([f32(2, 3, low=0.1), f32(3)], {}),
    "mod": ([i64(2, 3, high=9), i64(3) + 1], {}), "fmod": ([f32(2, 3), f32(3, low=0.5)], {}),
    "divide": ([f32(2, 3), f32(3, low=0.5)], {}),
    "where": ([f32(2, 3) > 0, f32(2, 3), f32(3)], {}),
    "nn.conv2d": ([f32(1, 4, 7, 7), f32(6, 2, 3, 3)], {"strides": (2, 1), "padding": (1, 0, 1, 2), "groups": 2,
                                                       "dilation": (1, 2)}),
    "nn.conv2d_winograd": ([f32(1, 7, 6, 4), f32(6, 6, 2, 4, 4)], {"tile_size": 4, "padding": (1, 0, 1, 2)}),
    "nn.conv2d_transpose": ([f32(1, 4, 5, 5), f32(4, 3, 3, 3)], {"strides": (2, 2), "padding": (1, 1, 1, 1),
                                                                 "groups": 2, "output_padding": (1, 0)}),
    "nn.dense": ([f32(2, 5), f32(3, 5)], {}), "nn.dense_pack": ([f32(2, 3, 5), f32(2, 5, 4)], {"units": 7}),
    "nn.matmul": ([f32(2, 1, 4, 5), f32(3, 5, 2)], {}),
    "nn.batch_norm": ([f32(2, 3, 4), f32(3), f32(3), f32(3), f32(3, low=0.1)], {}),
    "nn.bias_add": ([f32(2, 3, 4), f32(3)], {}),
    "nn.layer_norm": ([f32(2, 3, 4), f32(3, 4), f32(4)], {"axis": 1}),
    "nn.lrn": ([f32(1, 5, 3, 3)], {"size": 3}),
    "nn.softmax": ([f32(2, 5)], {}), "nn.log_softmax": ([f32(2, 5)], {"axis": 0}),
    "nn.max_pool2d": ([f32(1, 2, 7, 7)], {"pool_size": (3, 3), "strides": (2, 2), "ceil_mode": True}),
    "nn.avg_pool2d": ([f32(1, 2, 6, 6)], {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1),
                                          "count_include_pad": True}),
    "nn.global_avg_pool2d": ([f32(1, 2, 4, 4)], {}), "nn.global_max_pool2d": ([f32(1, 2, 4, 4)], {}),
    "nn.prelu": ([f32(2, 3), f32(3)], {}),
    "reshape": ([f32(2, 3, 4)], {"newshape": (4, -1)}), "transpose": ([f32(2, 3, 4)], {"axes": (2, 0, 1)}),
    "squeeze": ([f32(2, 1, 4)], {"axis": (1,)}), "expand_dims": ([f32(2, 4)], {"axis": -1, "num_newaxis": 2}),
    "concatenate": ([f32(2, 3), f32(2, 1)], {"axis": 1}),
    "split": ([f32(2, 6)], {"indices_or_sections": (1, 4), "axis": 1}),
    "strided_slice": ([f32(5, 6)], {"begin": (4, 1), "end": (-100, 6), "strides": (-2, 2)}),
    "take": ([f32(4, 3), np.array([[0, -1], [2, 1]], "int64")], {"axis": 0}),
    "gather_elements": ([f32(3, 3), i64(2, 3)], {"axis": 0}),
    "gather_nd": ([f32(2, 3, 4), np.array([[0, 1], [1, 2]], "int64")], {}),
    "broadcast_to": ([f32(3, 1)], {"shape": (2, 3, 4)}), "tile": ([f32(2, 3)], {"reps": (2, 1)}),
    "nn.pad": ([f32(2, 3)], {"pad_width": ((1, 0), (2, -1)), "pad_mode": "constant", "pad_value": 7.0}),
    "reverse": ([f32(2, 3)], {"axis": (1,)}), "cumsum": ([f32(2, 3)], {"axis": 1, "exclusive": True}),
    "shape_of": ([f32(2, 3)], {}), "topk": ([f32(3, 5)], {"k": 2, "axis": 1}),
    "argmax": ([f32(3, 5)], {"axis": 1}), "argmin": ([f32(3, 5)], {"axis": 0, "keepdims": False}),
    "layout_transform": ([f32(1, 16, 2, 3)], {"src_layout": "NCHW", "dst_layout": "NCHW8c"}),
    "image.resize": ([f32(1, 1, 3, 4)], {"size": (1, 1, 6, 5), "scales": (1.0, 1.0, 2.0, 1.25), "method": "linear"}),
}


def _control_flow_samples() -> dict:
    """if, loop and scan with small closed bodies (graph/ops/control_flow.py)."""
    def var(name, shape, dtype="float32"):
        return graph.Var(name, TensorType(shape, dtype))

    p, q = var("p", (2, 3)), var("q", (2, 3))
    i, c, y = var("i", (), "int64"), var("c", (), "bool"), var("y", (2,))
    s, x = var("s", (2,)), var("x", (2,))
    one = graph.const(np.float32(1))
    return {
        "if": ([np.array(True), f32(2, 3)], {"then_branch": graph.Function((p,), graph.call("exp", p)),
                                             "else_branch": graph.Function((q,), graph.call("negative", q))}),
        "loop": ([np.array(3, "int64"), np.array(True), f32(2)],
                 {"body": graph.Function((i, c, y), graph.tuple_(c, y + one, y * y)), "num_carried": 1,
                  "max_trip_count": 3}),
        "scan": ([f32(2), f32(4, 2)], {"body": graph.Function((s, x), graph.tuple_(s + x, s * x)), "num_states": 1,
                                       "input_axes": (0,), "input_directions": (1,), "output_axes": (0,),
                                       "output_directions": (0,)}),
    }


SAMPLES.update(_control_flow_samples())
SAMPLES.update({   # ops added for ONNX coverage (issue 18)
    "cumprod": ([f32(2, 3)], {"axis": 1}),
    "image.grid_sample": ([f32(1, 2, 5, 4), f32(1, 3, 4, 2, low=-1, high=1)], {"mode": "linear"}),
    "scatter_elements": ([f32(4, 5), i64(3, 5, high=4), f32(3, 5)], {"axis": 0, "reduction": "add"}),
    "scatter_nd": ([f32(4, 3, 2), i64(5, 2, high=3), f32(5, 2)], {"reduction": "add"}),
    "col2im": ([f32(1, 6, 9)], {"image_shape": (4, 5), "block_shape": (2, 3), "strides": (1, 1),
                                "dilations": (1, 1), "pads": (0, 0, 0, 0)}),
    "ngram_counts": ([i64(3, 12, high=4), np.array([[1, 0, 0], [2, 3, 0]], "int64"), np.array([1, 2], "int64")],
                     {"max_skip": 1}),
})
SAMPLES.update({   # N-d windows and RoiAlign (issue 18)
    "nn.max_pool": ([f32(1, 2, 5, 4, 6)], {"pool_size": (2, 2, 3), "strides": (2, 1, 2), "padding": (1, 0, 0, 0, 1, 1),
                                          "dilation": (1, 2, 1), "ceil_mode": True}),
    "nn.avg_pool": ([f32(1, 2, 5, 4, 6)], {"pool_size": (2, 2, 3), "strides": (2, 1, 2), "padding": (1, 0, 0, 0, 1, 1),
                                          "dilation": (1, 1, 1), "count_include_pad": True}),
    "nn.max_pool_indices": ([f32(2, 2, 5, 6)], {"pool_size": (3, 2), "strides": (2, 2), "padding": (1, 0, 1, 1),
                                                "dilation": (1, 1), "storage_order": 1}),
    "nn.conv_transpose": ([f32(1, 4, 3, 2, 3), f32(4, 1, 2, 3, 2)], {"strides": (2, 1, 2), "padding": (1, 0, 0, 0, 1, 0),
                                                                     "dilation": (1, 1, 2), "groups": 2,
                                                                     "output_padding": (1, 0, 0)}),
    "nn.conv": ([f32(1, 4, 5, 4, 6), f32(6, 2, 3, 2, 2)], {"strides": (2, 1, 2), "padding": (1, 0, 1, 0, 1, 1),
                                                          "dilation": (1, 2, 1), "groups": 2}),
    "image.roi_align": ([f32(2, 2, 6, 5), np.array([[0, 0, 4, 5], [1.5, -1, 3, 2.5]], "float32"),
                         np.array([1, 0], "int64")], {"output_height": 2, "output_width": 3}),
})
_BOOL_BINARY = {"logical_and", "logical_or", "logical_xor"}
_INT_BINARY = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}


def _sample(op):
    if op.name in SAMPLES:
        return SAMPLES[op.name]
    if op.name in _BOOL_BINARY:
        return [f32(2, 3) > 0, f32(3) > 0], {}
    if op.name in _INT_BINARY:
        return [i64(2, 3), i64(3)], {}
    if op.pattern == OpPattern.BROADCAST and op.num_inputs == 2:
        return [f32(2, 3), f32(3)], {}
    if op.pattern == OpPattern.ELEMWISE and op.num_inputs == 1:
        return [f32(2, 3)], {}
    if op.pattern == OpPattern.COMM_REDUCE:
        return [f32(2, 3, 4)], {"axis": (0, 2), "keepdims": True}
    raise AssertionError(f"add a sample for op {op.name} to SAMPLES")


def _build(op, inputs, attrs):
    args = [graph.const(value) for value in inputs]
    return graph.call(op.name, *args, **attrs)


@pytest.mark.parametrize("op", list_ops(), ids=lambda op: op.name)
def test_type_rule_agrees_with_reference(op):
    inputs, attrs = _sample(op)
    call = _build(op, inputs, attrs)
    result = op.reference(*inputs, call.attrs)
    types = call.checked_type.fields if isinstance(result, tuple) else (call.checked_type,)
    values = result if isinstance(result, tuple) else (result,)
    for value, expected in zip(values, types):
        assert isinstance(expected, TensorType)
        assert np.asarray(value).shape == expected.shape, f"{op.name}: reference shape vs type rule"
        assert str(np.asarray(value).dtype).replace("bool", "bool") == expected.dtype, f"{op.name}: dtype"


@pytest.mark.parametrize("op", list_ops(), ids=lambda op: op.name)
def test_registry_record_is_complete(op):
    assert isinstance(op.pattern, OpPattern)
    assert op.compute is None or callable(op.compute)
    assert op.rtol("float32") >= 0
    assert "." not in op.name or op.name.split(".")[0] in ("nn", "image")


def test_get_op_unknown_name():
    with pytest.raises(UnsupportedOpError, match="no graph op named 'nn.conv3d'"):
        get_op("nn.conv3d")


def test_attrs_validate_types_and_values():
    assert Conv2DAttrs(strides=[2, 2]).strides == (2, 2)
    with pytest.raises(AttrsError, match=r"Conv2DAttrs.strides = 'x' has the wrong type"):
        Conv2DAttrs(strides="x")
    with pytest.raises(AttrsError, match="strides must be positive"):
        Conv2DAttrs(strides=(0, 1))
    with pytest.raises(AttrsError, match="data_layout = 'XYZW' is not one of"):
        Conv2DAttrs(data_layout="XYZW")
    with pytest.raises(AttrsError, match="groups = 1.5 has the wrong type"):
        Conv2DAttrs(groups=1.5)


def test_set_compute_fills_the_slot():
    op = get_op("nn.relu")
    old = op.compute
    try:
        graph.set_compute("nn.relu", lambda inputs, attrs, out_type: "te")
        assert op.compute([], None, None) == "te"
    finally:
        op.compute = old


# ---- references against hand-written numpy ------------------------------------------

def test_conv2d_grouped_dilated_matches_loops():
    data, weight = f32(1, 4, 7, 7), f32(6, 2, 3, 3)
    attrs = Conv2DAttrs(strides=(2, 1), padding=(1, 0, 1, 2), dilation=(1, 2), groups=2)
    out = get_op("nn.conv2d").reference(data, weight, attrs)
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (0, 2)))
    expected = np.zeros(out.shape, "float64")
    for o in range(6):
        group = o // 3
        for i in range(out.shape[2]):
            for j in range(out.shape[3]):
                window = padded[0, group * 2:group * 2 + 2, i * 2:i * 2 + 3, j:j + 5:2]
                expected[0, o, i, j] = (window * weight[o]).sum()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_conv2d_transpose_is_the_gradient_of_conv2d():
    data, weight = f32(1, 2, 4, 4), f32(2, 3, 3, 3)
    out = graph.evaluate(graph.nn.conv2d_transpose(graph.const(data), graph.const(weight), strides=2), {})
    expected = np.zeros((1, 3, 9, 9))
    for c in range(2):
        for i in range(4):
            for j in range(4):
                expected[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += data[0, c, i, j] * weight[c]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_avg_pool_count_include_pad():
    data = np.ones((1, 1, 2, 2), "float32")
    include = graph.evaluate(graph.nn.avg_pool2d(graph.const(data), (2, 2), (1, 1), 1, count_include_pad=True), {})
    exclude = graph.evaluate(graph.nn.avg_pool2d(graph.const(data), (2, 2), (1, 1), 1), {})
    np.testing.assert_allclose(include[0, 0], [[0.25, 0.5, 0.25], [0.5, 1, 0.5], [0.25, 0.5, 0.25]])
    np.testing.assert_allclose(exclude, np.ones((1, 1, 3, 3)))


def test_softmax_and_batch_norm_formulas():
    x = f32(3, 4)
    soft = graph.evaluate(graph.nn.softmax(graph.const(x)), {})
    np.testing.assert_allclose(soft, np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-6)
    data, gamma, beta, mean, var = f32(2, 3, 2), f32(3), f32(3), f32(3), f32(3, low=0.5)
    bn = graph.evaluate(graph.nn.batch_norm(*map(graph.const, (data, gamma, beta, mean, var))), {})
    c = (slice(None), None)
    expected = (data - mean[c]) / np.sqrt(var[c] + 1e-5) * gamma[c] + beta[c]
    np.testing.assert_allclose(bn, expected, rtol=1e-5, atol=1e-6)


def test_strided_slice_follows_onnx_clamping():
    x = np.arange(10)
    op = get_op("strided_slice")
    attrs = op.make_attrs(begin=(-1,), end=(-100,), strides=(-3,))
    np.testing.assert_array_equal(op.reference(x, attrs), x[::-3])


# ---- type rule errors -------------------------------------------------------------------

def test_conv2d_channel_mismatch_message():
    x = graph.var("x", shape=(1, 3, 8, 8))
    with pytest.raises(ShapeError, match=r"nn.conv2d: .*\(8, 4, 3, 3\) \(OIHW\) expects 4 x groups=1"):
        graph.nn.conv2d(x, graph.var("w", shape=(8, 4, 3, 3)))


def test_dense_and_matmul_mismatch_messages():
    with pytest.raises(ShapeError, match=r"nn.dense: data \(2, 5\) \(..., K\) and weight \(3, 4\)"):
        graph.nn.dense(graph.var("x", shape=(2, 5)), graph.var("w", shape=(3, 4)))
    with pytest.raises(ShapeError, match=r"nn.matmul: \(2, 5\) @ \(4, 3\): inner dimensions 5 and 4 differ"):
        graph.nn.matmul(graph.var("a", shape=(2, 5)), graph.var("b", shape=(4, 3)))


def test_reshape_and_concat_messages():
    with pytest.raises(ShapeError, match=r"reshape: cannot reshape \(2, 3\) \(6 elements\) to \(4, 2\)"):
        graph.reshape(graph.var("x", shape=(2, 3)), (4, 2))
    with pytest.raises(ShapeError, match=r"concatenate: shapes \(2, 3\) and \(3, 3\) differ outside axis 1"):
        graph.concatenate([graph.var("a", shape=(2, 3)), graph.var("b", shape=(3, 3))], axis=1)


def test_pool_window_larger_than_input_message():
    with pytest.raises(ShapeError, match="nn.max_pool2d: window 5 .* larger than the padded input 4"):
        graph.nn.max_pool2d(graph.var("x", shape=(1, 1, 4, 4)), (5, 5))


def test_float_only_ops_reject_ints():
    with pytest.raises(DTypeError, match="exp: needs a floating-point input, got int64"):
        graph.exp(graph.var("x", shape=(2,), dtype="int64"))


def test_axis_out_of_range_message():
    with pytest.raises(ShapeError, match="nn.softmax: axis 2 is out of range for a tensor of rank 2"):
        graph.nn.softmax(graph.var("x", shape=(2, 3)), axis=2)
