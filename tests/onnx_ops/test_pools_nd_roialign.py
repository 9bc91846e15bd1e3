"""N-d pools (MaxPool with its Indices, AveragePool, LpPool), N-d ConvTranspose, RoiAlign and Resize with
antialias: ONNX models compiled for cpu_llvm through the standard backend protocol (prepare, then run:
nothing bound, RoiAlign's rois and batch indices are run-time inputs) match onnx's ReferenceEvaluator
and onnxruntime; the graph ops' numpy references match them too."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tensorkiln import onnx_backend

_TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def _model(node, inputs: dict[str, np.ndarray], outputs: list[tuple[str, int]], opset: int = 22,
           shapes: list[tuple] | None = None):
    """A one-node model; its outputs' declared shapes are `shapes`, else those onnx's reference computes."""
    def build(declared):
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for name, a in inputs.items()],
            [helper.make_tensor_value_info(name, elem, shape) for (name, elem), shape in zip(outputs, declared)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if shapes is None:
        shapes = [value.shape for value in ReferenceEvaluator(build([None] * len(outputs))).run(None, inputs)]
    return build(shapes)


def _onnxruntime(model, inputs):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def _check(model, inputs, spec: bool = True, runtime: bool = True, expected=None):
    """tensorkiln (standard protocol) vs onnx's reference (`spec`), onnxruntime (`runtime`) and `expected`
    arrays (an independent computation in this file), each where the other lacks the case."""
    got = onnx_backend.prepare(model).run([inputs[name] for name in inputs])
    references = {}
    if spec:
        references["onnx reference"] = ReferenceEvaluator(model).run(None, inputs)
    if runtime:
        references["onnxruntime"] = _onnxruntime(model, inputs)
    if expected is not None:
        references["brute force"] = expected
    assert references
    for who, wanted in references.items():
        for index, (mine, want) in enumerate(zip(got, wanted)):
            assert mine.shape == want.shape, f"output {index}: {mine.shape} vs {want.shape} ({who})"
            assert mine.dtype == want.dtype, f"output {index}: {mine.dtype} vs {want.dtype} ({who})"
            np.testing.assert_allclose(mine, want, **_TOLERANCE, err_msg=f"output {index} vs {who}")
    return got


def _data(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# ---- pools ------------------------------------------------------------------------------

POOLS_3D = [
    dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2]),
    dict(kernel_shape=[3, 2, 2], pads=[1, 0, 1, 1, 1, 0], dilations=[1, 2, 1]),
    dict(kernel_shape=[2, 2, 3], strides=[2, 2, 2], ceil_mode=1, pads=[0, 1, 1, 0, 0, 1]),
    dict(kernel_shape=[3, 3, 2], auto_pad="SAME_UPPER", strides=[2, 1, 2]),
    dict(kernel_shape=[2, 3, 3], auto_pad="SAME_LOWER", strides=[1, 2, 2]),   # onnxruntime only (see below)
]


@pytest.mark.parametrize("attrs", POOLS_3D)
def test_max_pool_3d_values_and_indices(attrs):
    x = _data((2, 3, 6, 7, 5), 1)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    spec = attrs.get("auto_pad") != "SAME_LOWER"   # onnx's reference computes a wrong 3-D SAME_LOWER shape
    outputs = [("y", TensorProto.FLOAT), ("i", TensorProto.INT64)]
    shapes = None if spec else [_same_shape(x.shape, attrs)] * 2
    _check(_model(node, {"x": x}, outputs, shapes=shapes), {"x": x}, spec=spec)


@pytest.mark.parametrize("attrs", POOLS_3D + [dict(kernel_shape=[3, 2, 2], pads=[1, 1, 0, 1, 1, 1],
                                                   count_include_pad=1, ceil_mode=1, strides=[2, 2, 1])])
def test_average_pool_3d(attrs):
    x = _data((1, 2, 7, 6, 5), 2)
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    spec = attrs.get("auto_pad") != "SAME_LOWER"
    shapes = None if spec else [_same_shape(x.shape, attrs)]
    _check(_model(node, {"x": x}, [("y", TensorProto.FLOAT)], shapes=shapes), {"x": x}, spec=spec)


def _same_shape(shape, attrs):
    return (*shape[:2], *(-(-size // stride) for size, stride in zip(shape[2:], attrs["strides"])))


def _brute_force_pool(x, kernel, strides, pads, kind: str, count_include_pad: bool):
    """Loops over every output and window tap (no ceil_mode, no dilation)."""
    rank = len(kernel)
    out = [(x.shape[2 + a] + pads[a] + pads[rank + a] - kernel[a]) // strides[a] + 1 for a in range(rank)]
    result = np.zeros((*x.shape[:2], *out), dtype=np.float64)
    for position in itertools.product(*(range(o) for o in out)):
        values, cells = [], 0
        for tap in itertools.product(*(range(k) for k in kernel)):
            at = [position[a] * strides[a] + tap[a] - pads[a] for a in range(rank)]
            cells += 1
            if all(0 <= i < s for i, s in zip(at, x.shape[2:])):
                values.append(x[(slice(None), slice(None), *at)])
            elif not count_include_pad:
                cells -= 1
        stacked = np.stack(values)
        result[(slice(None), slice(None), *position)] = stacked.max(0) if kind == "max" else stacked.sum(0) / cells
    return result.astype(x.dtype)


@pytest.mark.parametrize("op, count_include_pad", [("MaxPool", 0), ("AveragePool", 1), ("AveragePool", 0)])
def test_pools_of_spatial_rank_4(op, count_include_pad):
    """Any spatial rank: a 4-D window, checked by brute force (onnx's reference and onnxruntime stop at 3-D)."""
    x = _data((1, 2, 4, 5, 3, 4), 3)
    kernel, strides, pads = [2, 2, 2, 3], [1, 2, 1, 1], [1, 0, 0, 1, 0, 1, 1, 0]
    extra = {"count_include_pad": count_include_pad} if op == "AveragePool" else {}
    expected = _brute_force_pool(x, kernel, strides, pads, "max" if op == "MaxPool" else "avg", count_include_pad)
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=kernel, pads=pads, strides=strides, **extra)
    model = _model(node, {"x": x}, [("y", TensorProto.FLOAT)], shapes=[expected.shape])
    _check(model, {"x": x}, spec=False, runtime=False, expected=[expected])


def test_lp_pool_3d():
    volume = _data((1, 2, 5, 4, 6), 4)
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2, 3], p=3, strides=[1, 2, 1],
                            pads=[0, 1, 1, 1, 0, 0])
    _check(_model(node, {"x": volume}, [("y", TensorProto.FLOAT)]), {"x": volume}, runtime=False)


@pytest.mark.parametrize("storage_order, shape, attrs", [
    (0, (2, 3, 7, 6), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    (1, (2, 3, 7, 6), dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[2, 1])),
    (0, (1, 2, 9), dict(kernel_shape=[3], strides=[2], ceil_mode=1)),
    (1, (1, 2, 5, 4, 6), dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2], pads=[1, 0, 0, 0, 1, 1])),
])
def test_max_pool_indices_with_storage_order(storage_order, shape, attrs):
    x = _data(shape, 5)
    x.reshape(-1)[::7] = 1.5   # ties inside windows: the first tap wins
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=storage_order, **attrs)
    _check(_model(node, {"x": x}, [("y", TensorProto.FLOAT), ("i", TensorProto.INT64)]), {"x": x},
           runtime=len(shape) < 5)


# ---- ConvTranspose ----------------------------------------------------------------------

@pytest.mark.parametrize("attrs, weight_shape", [
    (dict(strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1], output_padding=[1, 0, 1]), (4, 3, 2, 3, 2)),
    (dict(group=2, dilations=[1, 2, 1], strides=[1, 1, 2]), (4, 2, 3, 2, 2)),
    (dict(strides=[2, 2, 1], output_shape=[7, 6, 5]), (4, 2, 3, 2, 2)),
    (dict(strides=[2, 2, 1], output_shape=[8, 7, 5]), (4, 2, 3, 2, 2)),   # odd crops: more at the start
    (dict(strides=[2, 1, 2], auto_pad="SAME_UPPER"), (4, 1, 3, 2, 3)),
])
def test_conv_transpose_3d(attrs, weight_shape):
    x, w = _data((1, 4, 4, 3, 4), 6), _data(weight_shape, 7)
    bias = _data((weight_shape[1] * attrs.get("group", 1),), 8)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    spec = "group" not in attrs and "output_shape" not in attrs   # onnx's reference fails on them in 3-D
    inputs = {"x": x, "w": w, "b": bias}
    shapes = None if spec else [_onnxruntime(_model(node, inputs, [("y", TensorProto.FLOAT)], shapes=[None]),
                                             inputs)[0].shape]
    _check(_model(node, inputs, [("y", TensorProto.FLOAT)], shapes=shapes), inputs, spec=spec)


# ---- RoiAlign ---------------------------------------------------------------------------

_ROIS = np.array([[0.0, 0.0, 9.0, 9.0], [1.2, 0.4, 4.9, 7.7], [-3.0, 2.0, 6.5, 12.0],
                  [5.0, 5.0, 5.3, 5.1], [-30.0, -25.0, 40.0, 33.0]], dtype="float32")


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align(mode, transform, sampling_ratio):
    """Regions inside, across and far past the borders (more samples per bin than the kernel visits
    for an adaptive grid), and a tiny one; batch indices are run-time values."""
    x = _data((2, 3, 10, 8), 9)
    batch = np.array([0, 1, 1, 0, 1], dtype=np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=3, output_width=2,
                            sampling_ratio=sampling_ratio, spatial_scale=0.75,
                            coordinate_transformation_mode=transform)
    inputs = {"x": x, "rois": _ROIS, "batch": batch}
    # onnxruntime's max mode takes the max of bilinear values, the spec the max of weighted corners
    _check(_model(node, inputs, [("y", TensorProto.FLOAT)], opset=16), inputs, runtime=mode == "avg")


def test_roi_align_runs_new_regions_without_recompiling():
    x = _data((2, 3, 10, 8), 10)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2, output_width=2)
    model = _model(node, {"x": x, "rois": _ROIS[:2], "batch": np.zeros(2, np.int64)}, [("y", TensorProto.FLOAT)],
                   opset=16)
    rep = onnx_backend.prepare(model)
    reference = ReferenceEvaluator(model)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        corners = np.sort(rng.uniform(-2, 12, (2, 2, 2)), axis=1)
        rois = np.concatenate([corners[:, 0], corners[:, 1]], axis=1).astype("float32")
        batch = rng.integers(0, 2, 2).astype(np.int64)
        (got,) = rep.run([x, rois, batch])
        (want,) = reference.run(None, {"x": x, "rois": rois, "batch": batch})
        np.testing.assert_allclose(got, want, **_TOLERANCE)


# ---- Resize antialias -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("shape, scales, sizes, extra", [
    ((1, 2, 12, 10), [1.0, 1.0, 0.6, 0.45], None, {}),
    ((1, 2, 12, 10), None, [1, 2, 5, 7], {"coordinate_transformation_mode": "align_corners"}),
    ((1, 2, 9, 11), [1.0, 1.0, 0.5, 1.5], None, {"exclude_outside": 1, "cubic_coeff_a": -0.5}),
    ((2, 6, 8, 7), None, [2, 3, 4, 7], {"coordinate_transformation_mode": "asymmetric"}),
    ((1, 1, 6, 8, 7), [1.0, 1.0, 0.5, 0.7, 0.4], None, {}),
])
def test_resize_antialias(mode, shape, scales, sizes, extra):
    x = _data(shape, 11)
    inputs = {"x": x}
    names = ["x", ""]
    if scales is not None:
        inputs["scales"] = np.array(scales, dtype="float32")
        names.append("scales")
    else:
        inputs["sizes"] = np.array(sizes, dtype=np.int64)
        names += ["", "sizes"]
    node = helper.make_node("Resize", names, ["y"], mode=mode, antialias=1, **extra)
    model = _model(node, inputs, [("y", TensorProto.FLOAT)], opset=19)
    _check(model, inputs, runtime=len(shape) == 4 and mode == "linear")


def test_resize_antialias_nearest_is_refused():
    from tensorkiln.ir.errors import UnsupportedOpError
    x = _data((1, 1, 4, 4), 12)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", antialias=1)
    inputs = {"x": x, "scales": np.array([1, 1, 0.5, 0.5], dtype="float32")}
    with pytest.raises(UnsupportedOpError, match="antialias=1 applies to the linear and cubic modes"):
        model = _model(node, inputs, [("y", TensorProto.FLOAT)], opset=19, shapes=[(1, 1, 2, 2)])
        onnx_backend.prepare(model).run([x, inputs["scales"]])


def test_bad_shapes_are_refused_with_the_op_and_shapes():
    from tensorkiln.graph.ops.roi_align import RoiAlignAttrs
    from tensorkiln.graph.ops.window_nd import ConvTransposeAttrs, MaxPoolAttrs
    from tensorkiln.graph.registry import get_op
    from tensorkiln.graph.types import TensorType
    from tensorkiln.ir.errors import ShapeError
    with pytest.raises(ShapeError, match=r"nn.max_pool: data \(1, 2, 4, 4\) must have 2 \+ 3 axes"):
        get_op("nn.max_pool").type_rule((TensorType((1, 2, 4, 4), "float32"),), MaxPoolAttrs(
            pool_size=(2, 2, 2), strides=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1)))
    with pytest.raises(ShapeError, match=r"nn.conv_transpose: data \(1, 3, 2, 2, 2\) has 3 channels"):
        get_op("nn.conv_transpose").type_rule(
            (TensorType((1, 3, 2, 2, 2), "float32"), TensorType((4, 1, 2, 2, 2), "float32")),
            ConvTransposeAttrs(strides=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1), output_padding=(0, 0, 0)))
    with pytest.raises(ShapeError, match=r"image.roi_align: batch_indices \(3,\) must be \(2,\)"):
        get_op("image.roi_align").type_rule(
            (TensorType((1, 2, 5, 5), "float32"), TensorType((2, 4), "float32"), TensorType((3,), "int64")),
            RoiAlignAttrs())


def test_roi_align_batch_index_out_of_range_is_refused_at_run_time():
    x = _data((2, 1, 4, 4), 13)
    inputs = {"x": x, "rois": np.array([[0, 0, 2, 2]], "float32"), "batch": np.array([1], np.int64)}
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2, output_width=2)
    rep = onnx_backend.prepare(_model(node, inputs, [("y", TensorProto.FLOAT)], opset=16))
    assert rep.run(list(inputs.values()))[0].shape == (1, 1, 2, 2)
    with pytest.raises(Exception, match=r"image.roi_align: index 5 .* out of range for an axis of size 2"):
        rep.run([x, inputs["rois"], np.array([5], np.int64)])
