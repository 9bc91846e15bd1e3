"""Input generators for the registry-driven op tests: op name -> cases (arrays, attrs).

Each generator takes a numpy Generator and a size ("tiny" for the tir interpreter,
"moderate" for compiled kernels) and returns a list of `Case`s. Values avoid the
points where an op is undefined (log of negatives, division by zero, ...).
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tensorkiln.graph.ops import elementwise as ew
from tensorkiln.graph.ops import image, layout, nn, reduce, tensor
from tensorkiln.graph.ops import winograd as nn_winograd
from tensorkiln.graph.attrs import NO_ATTRS

__all__ = ["Case", "CASES", "cases_for"]


@dataclass
class Case:
    inputs: list[np.ndarray]
    attrs: Any = NO_ATTRS
    label: str = ""
    atol: float = field(default=1e-5)


def _uniform(rng, shape, low=-2.0, high=2.0, dtype="float32"):
    return np.asarray(rng.uniform(low, high, size=shape)).astype(dtype)


def _ints(rng, shape, low=-20, high=20, dtype="int32"):
    return np.asarray(rng.integers(low, high, size=shape)).astype(dtype)


def _bools(rng, shape):
    return rng.integers(0, 2, size=shape).astype(bool)


_POSITIVE = {"sqrt", "rsqrt", "log", "reciprocal"}
_UNIT = {"asin", "acos", "atanh"}


def _unary(name: str) -> Callable:
    def make(rng, size):
        shape = (2, 3, 5) if size == "tiny" else (4, 33, 17)
        if name in _POSITIVE:
            x = _uniform(rng, shape, 0.1, 3.0)
        elif name in _UNIT:
            x = _uniform(rng, shape, -0.9, 0.9)
        elif name == "acosh":
            x = _uniform(rng, shape, 1.1, 3.0)
        elif name in ("abs", "negative", "sign", "nn.relu", "copy"):
            return [Case([_uniform(rng, shape)]), Case([_ints(rng, shape)], label="int32")]
        elif name == "logical_not":
            x = _bools(rng, shape)
        elif name == "bitwise_not":
            return [Case([_ints(rng, shape)]), Case([_ints(rng, shape, 0, 250, "uint8")], label="uint8")]
        elif name in ("round",):
            x = _uniform(rng, shape, -5, 5) + np.float32(0.01)
        else:
            x = _uniform(rng, shape, -3.0, 3.0)
        if name in ("isnan", "isinf"):
            x = x.copy()
            flat = x.reshape(-1)
            flat[::4] = np.nan
            flat[1::5] = np.inf
            flat[2::7] = -np.inf
        return [Case([x])]
    return make


def _with_attrs(shape_name, attrs_list, low=-3.0, high=3.0, ints=False):
    def make(rng, size):
        shape = (2, 3, 5) if size == "tiny" else (4, 33, 17)
        out = [Case([_uniform(rng, shape, low, high)], a, label=str(a)) for a in attrs_list]
        if ints:
            out.append(Case([_ints(rng, shape)], attrs_list[0], label="int32"))
        return out
    return make


_BROADCAST_SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 1, 4), (3, 1)), ((4,), (2, 3, 4)), ((), (3, 2))]
_BROADCAST_MODERATE = [((8, 33, 17), (8, 33, 17)), ((8, 1, 17), (33, 1))]


def _binary(name: str) -> Callable:
    def make(rng, size):
        pairs = _BROADCAST_SHAPES if size == "tiny" else _BROADCAST_MODERATE
        cases = []
        for a_shape, b_shape in pairs:
            if name in ("logical_and", "logical_or", "logical_xor"):
                a, b = _bools(rng, a_shape), _bools(rng, b_shape)
            elif name.startswith("bitwise") or name.endswith("_shift"):
                # int8 keeps the bit-by-bit expressions short for the interpreter
                a = _ints(rng, a_shape, -100, 100, "int8")
                b = _ints(rng, b_shape, 0, 8, "int8") if name.endswith("_shift") else _ints(rng, b_shape, -100, 100, "int8")
            elif name in ("divide", "mod", "fmod"):
                a = _uniform(rng, a_shape)
                b = _uniform(rng, b_shape, 0.5, 2.0) * rng.choice([-1, 1], size=b_shape).astype("float32")
                cases.append(Case([_ints(rng, a_shape), _ints(rng, b_shape, 1, 7) * rng.choice([-1, 1], size=b_shape)
                                   .astype("int32")], label=f"int {a_shape} {b_shape}"))
            elif name == "power":
                a, b = _uniform(rng, a_shape, 0.5, 2.0), _uniform(rng, b_shape, -2, 2)
            else:
                a, b = _uniform(rng, a_shape), _uniform(rng, b_shape)
                if name in ("equal", "not_equal", "less_equal", "greater_equal", "maximum", "minimum"):
                    a, b = np.asarray(np.round(a)), np.asarray(np.round(b))
            cases.append(Case([a, b], label=f"{a_shape} {b_shape}"))
        return cases
    return make


def _where(rng, size):
    shapes = [((2, 3, 4), (3, 1), (2, 1, 4)), ((4,), (2, 4), ())] if size == "tiny" \
        else [((8, 33, 17), (33, 17), (8, 1, 17))]
    return [Case([_bools(rng, c), _uniform(rng, x), _uniform(rng, y)], label=str((c, x, y))) for c, x, y in shapes]


def _reduce(rng, size):
    shape = (2, 3, 4) if size == "tiny" else (8, 33, 20)
    x = _uniform(rng, shape, 0.5, 1.5)
    attrs = [reduce.ReduceAttrs(axis=None), reduce.ReduceAttrs(axis=(1,), keepdims=True),
             reduce.ReduceAttrs(axis=(0, -1)), reduce.ReduceAttrs(axis=(2,))]
    return [Case([x], a, label=str(a)) for a in attrs]


def _argreduce(rng, size):
    shape = (2, 3, 4) if size == "tiny" else (8, 33, 20)
    x = np.round(_uniform(rng, shape, -3, 3))  # ties exercise first/last index
    attrs = [reduce.ArgReduceAttrs(axis=1), reduce.ArgReduceAttrs(axis=-1, keepdims=False),
             reduce.ArgReduceAttrs(axis=0, select_last_index=True)]
    return [Case([x], a, label=str(a)) for a in attrs]


def _conv2d_winograd(rng, size):
    """NHWC data and a transformed weight (a, a, K / nb, C, nb): F(2x2) and F(4x4), partial tiles, padding."""
    specs = [((1, 5, 6, 3), (4, 4, 2, 3, 2), 2, (1, 1, 1, 1)), ((1, 6, 5, 2), (6, 6, 1, 2, 4), 4, (0, 1, 1, 0))] \
        if size == "tiny" else [((1, 14, 14, 16), (6, 6, 2, 16, 16), 4, (1, 1, 1, 1)),
                                ((2, 9, 7, 8), (4, 4, 1, 8, 16), 2, (1, 1, 1, 1))]
    return [Case([_uniform(rng, d, -1, 1), _uniform(rng, w, -1, 1)],
                 nn_winograd.Conv2DWinogradAttrs(tile_size=m, padding=p), label=f"F({m}) {d}", atol=1e-4)
            for d, w, m, p in specs]


def _conv2d(rng, size):
    if size == "tiny":
        specs = [((1, 2, 5, 5), (3, 2, 3, 3), nn.Conv2DAttrs(padding=(1, 1, 1, 1))),
                 ((1, 4, 6, 5), (4, 2, 2, 3), nn.Conv2DAttrs(strides=(2, 1), padding=(0, 1, 1, 0), groups=2)),
                 ((1, 3, 7, 7), (3, 1, 3, 3), nn.Conv2DAttrs(padding=(2, 2, 2, 2), dilation=(2, 2), groups=3))]
    else:
        specs = [((1, 16, 14, 14), (32, 16, 3, 3), nn.Conv2DAttrs(padding=(1, 1, 1, 1))),
                 ((1, 16, 14, 14), (16, 1, 3, 3), nn.Conv2DAttrs(strides=(2, 2), padding=(1, 1, 1, 1), groups=16)),
                 ((2, 8, 9, 9), (16, 4, 1, 1), nn.Conv2DAttrs(groups=2))]
    return [Case([_uniform(rng, d, -1, 1), _uniform(rng, w, -1, 1)], a, label=str(a), atol=1e-4)
            for d, w, a in specs]


def _conv2d_transpose(rng, size):
    specs = [((1, 2, 3, 3), (2, 3, 3, 3), nn.Conv2DTransposeAttrs(strides=(2, 2), padding=(1, 1, 1, 1),
                                                                   output_padding=(1, 1))),
             ((1, 4, 3, 4), (4, 1, 2, 2), nn.Conv2DTransposeAttrs(groups=2, dilation=(2, 1)))]
    if size != "tiny":
        specs = [((1, 16, 7, 7), (16, 8, 4, 4), nn.Conv2DTransposeAttrs(strides=(2, 2), padding=(1, 1, 1, 1)))]
    return [Case([_uniform(rng, d, -1, 1), _uniform(rng, w, -1, 1)], a, label=str(a), atol=1e-4)
            for d, w, a in specs]


def _dense(rng, size):
    specs = [((3, 5), (4, 5)), ((2, 3, 5), (4, 5))] if size == "tiny" else [((64, 128), (96, 128))]
    return [Case([_uniform(rng, x, -1, 1), _uniform(rng, w, -1, 1)], label=str((x, w)), atol=1e-4)
            for x, w in specs]


def _dense_pack(rng, size):
    """A weight packed by graph.pack_dense_weight: whole blocks, and a last block padded past N."""
    from tensorkiln.graph import pack_dense_weight
    specs = [((3, 5), 8, 4), ((2, 3, 5), 7, 4)] if size == "tiny" else [((64, 128), 100, 16)]
    return [Case([_uniform(rng, x, -1, 1), pack_dense_weight(_uniform(rng, (n, x[-1]), -1, 1), block)],
                 nn.DensePackAttrs(units=n), label=str((x, n, block)), atol=1e-4)
            for x, n, block in specs]


def _matmul(rng, size):
    specs = [((3, 5), (5, 4)), ((2, 3, 5), (5, 2)), ((5,), (2, 5, 3)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4,))] \
        if size == "tiny" else [((64, 128), (128, 96)), ((4, 32, 48), (4, 48, 40))]
    return [Case([_uniform(rng, a, -1, 1), _uniform(rng, b, -1, 1)], label=str((a, b)), atol=1e-4) for a, b in specs]


def _batch_norm(rng, size):
    shape = (2, 3, 4, 2) if size == "tiny" else (2, 16, 14, 14)
    c = shape[1]
    return [Case([_uniform(rng, shape), _uniform(rng, c), _uniform(rng, c), _uniform(rng, c),
                  _uniform(rng, c, 0.5, 2.0)], nn.BatchNormAttrs(), atol=1e-4)]


def _bias_add(rng, size):
    shape = (2, 3, 4) if size == "tiny" else (4, 32, 33)
    return [Case([_uniform(rng, shape), _uniform(rng, shape[1])], nn.BiasAddAttrs()),
            Case([_uniform(rng, shape), _uniform(rng, shape[-1])], nn.BiasAddAttrs(axis=-1), label="axis -1")]


def _layer_norm(rng, size):
    shape = (2, 3, 4) if size == "tiny" else (8, 32, 64)
    return [Case([_uniform(rng, shape), _uniform(rng, shape[-1:]), _uniform(rng, shape[-1:])], nn.LayerNormAttrs(),
                 atol=1e-4),
            Case([_uniform(rng, shape), _uniform(rng, shape[1:]), _uniform(rng, (1,))], nn.LayerNormAttrs(axis=1),
                 label="axis 1", atol=1e-4)]


def _lrn(rng, size):
    shape = (1, 6, 3, 2) if size == "tiny" else (2, 16, 14, 14)
    return [Case([_uniform(rng, shape)], nn.LRNAttrs(size=3), atol=1e-4),
            Case([_uniform(rng, shape)], nn.LRNAttrs(size=4, alpha=0.1), atol=1e-4, label="even"),
            Case([_uniform(rng, shape)], nn.LRNAttrs(size=5, alpha=0.1, beta=0.6), atol=1e-4, label="beta 0.6"),
            Case([_uniform(rng, shape[:1] + shape[2:] + shape[1:2])], nn.LRNAttrs(size=5, axis=3, alpha=0.1),
                 atol=1e-4, label="NHWC")]


def _softmax(rng, size):
    shape = (2, 3, 5) if size == "tiny" else (16, 1000)
    return [Case([_uniform(rng, shape, -5, 5)], nn.SoftmaxAttrs(), atol=1e-5),
            Case([_uniform(rng, shape, -5, 5)], nn.SoftmaxAttrs(axis=0), label="axis 0", atol=1e-5)]


def _max_pool(rng, size):
    shape = (1, 2, 6, 7) if size == "tiny" else (2, 16, 28, 28)
    attrs = [nn.MaxPool2DAttrs(pool_size=(2, 2), strides=(2, 2)),
             nn.MaxPool2DAttrs(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True),
             nn.MaxPool2DAttrs(pool_size=(2, 3), strides=(1, 2), dilation=(2, 1), padding=(0, 1, 0, 1))]
    return [Case([_uniform(rng, shape)], a, label=str(a)) for a in attrs] + _nhwc_pools(rng, shape, attrs, 0.0)


def _nhwc_pools(rng, nchw_shape, attrs, atol):
    """The same pools on NHWC data (what alter_layout gives a converted region)."""
    batch, channels, height, width = nchw_shape
    return [Case([_uniform(rng, (batch, height, width, channels))], dataclasses.replace(a, layout="NHWC"),
                 label=f"NHWC {a}", atol=atol) for a in attrs]


def _avg_pool(rng, size):
    shape = (1, 2, 6, 7) if size == "tiny" else (2, 16, 28, 28)
    attrs = [nn.AvgPool2DAttrs(pool_size=(2, 2), strides=(2, 2)),
             nn.AvgPool2DAttrs(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True),
             nn.AvgPool2DAttrs(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True,
                               count_include_pad=True),
             nn.AvgPool2DAttrs(pool_size=(2, 3), strides=(1, 2), dilation=(2, 1), padding=(0, 1, 0, 1),
                               count_include_pad=True)]
    return [Case([_uniform(rng, shape)], a, label=str(a), atol=1e-5) for a in attrs] + _nhwc_pools(rng, shape, attrs, 1e-5)


def _global_pool(rng, size):
    shape = (1, 2, 3, 4) if size == "tiny" else (2, 64, 7, 7)
    return [Case([_uniform(rng, shape)], atol=1e-5)]


def _simple(make_inputs, *attrs_list):
    def make(rng, size):
        return [Case(make_inputs(rng, size), a, label=str(a)) for a in attrs_list]
    return make


def _x(shape_tiny, shape_moderate=None):
    return lambda rng, size: [_uniform(rng, shape_tiny if size == "tiny" or shape_moderate is None
                                       else shape_moderate)]


def _concat(rng, size):
    return [Case([_uniform(rng, (2, 3)), _uniform(rng, (2, 1)), _uniform(rng, (2, 4))], tensor.ConcatenateAttrs(axis=1)),
            Case([_uniform(rng, (1, 3)), _uniform(rng, (2, 3))], tensor.ConcatenateAttrs(axis=-2), label="axis -2")]


def _take(rng, size):
    return [Case([_uniform(rng, (4, 3)), np.array([[0, -1], [3, 2]], dtype="int64")], tensor.TakeAttrs(axis=0)),
            Case([_uniform(rng, (2, 5, 3)), np.array([4, 0, -2], dtype="int32")], tensor.TakeAttrs(axis=1),
                 label="axis 1")]


def _gather_elements(rng, size):
    return [Case([_uniform(rng, (3, 4)), rng.integers(-4, 4, size=(3, 2)).astype("int64")], tensor.AxisAttrs(axis=1))]


def _gather_nd(rng, size):
    return [Case([_uniform(rng, (3, 4, 2)), np.array([[0, 1], [2, -1]], dtype="int64")], tensor.GatherNDAttrs()),
            Case([_uniform(rng, (2, 3, 4)), np.array([[1], [2]], dtype="int64")], tensor.GatherNDAttrs(batch_dims=1),
                 label="batch_dims 1")]


def _resize(rng, size):
    x = _uniform(rng, (1, 1, 3, 4))
    out = []
    for method in ("nearest", "linear", "cubic"):
        for mode in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel_symmetric"):
            out.append(Case([x], image.ResizeAttrs(size=(1, 1, 5, 7), scales=(1, 1, 5 / 3, 7 / 4), method=method,
                                                   coordinate_transformation_mode=mode), label=f"{method} {mode}",
                            atol=1e-5))
    out.append(Case([x], image.ResizeAttrs(size=(1, 1, 2, 2), scales=(1, 1, 2 / 3, 0.5), method="nearest",
                                           nearest_mode="ceil"), label="down nearest ceil"))
    out.append(Case([x], image.ResizeAttrs(size=(1, 1, 4, 5), scales=(1, 1, 4 / 3, 5 / 4), method="cubic",
                                           exclude_outside=True), label="cubic exclude_outside", atol=1e-5))
    out.append(Case([x], image.ResizeAttrs(size=(1, 1, 4, 5), scales=(1, 1, 4 / 3, 5 / 4), method="linear",
                                           coordinate_transformation_mode="tf_crop_and_resize",
                                           roi=(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.2), extrapolation_value=7.0),
                    label="tf_crop_and_resize", atol=1e-5))
    out.append(Case([_ints(rng, (1, 1, 3, 4))], image.ResizeAttrs(size=(1, 1, 6, 8), scales=(1, 1, 2, 2)),
                    label="int nearest"))
    from ..onnx_ops.op_cases_windows import RESIZE_ANTIALIAS
    return out + RESIZE_ANTIALIAS(rng, "tiny")


def _topk(rng, size):
    x = np.round(_uniform(rng, (3, 6), -3, 3))
    return [Case([x], tensor.TopKAttrs(k=3)), Case([x], tensor.TopKAttrs(k=2, axis=0, largest=False), label="smallest")]


from ..onnx_ops.op_cases import CASES as _ONNX_OPS_CASES  # noqa: E402  (ops added for ONNX coverage)

CASES: dict[str, Callable] = {
    **{name: _unary(name) for name in (*ew._UNARY_FLOAT, *ew._UNARY_ANY, "logical_not", "bitwise_not", "isnan")},
    "isinf": _simple(lambda rng, size: _unary("isinf")(rng, size)[0].inputs, ew.IsInfAttrs(),
                     ew.IsInfAttrs(detect_negative=False)),
    "nn.leaky_relu": _with_attrs("x", [ew.LeakyReluAttrs(alpha=0.1)]),
    "clip": _with_attrs("x", [ew.ClipAttrs(a_min=-1.0, a_max=0.5), ew.ClipAttrs(a_max=0.3)], ints=True),
    "nn.elu": _with_attrs("x", [ew.EluAttrs(alpha=0.7)]),
    "nn.celu": _with_attrs("x", [ew.AlphaAttrs(alpha=1.5)]),
    "nn.selu": _with_attrs("x", [ew.SeluAttrs()]),
    "nn.hard_sigmoid": _with_attrs("x", [ew.HardSigmoidAttrs()]),
    "nn.thresholded_relu": _with_attrs("x", [ew.AlphaAttrs(alpha=0.5)]),
    "nn.gelu": _with_attrs("x", [ew.GeluAttrs(), ew.GeluAttrs(approximate="tanh")]),
    "cast": lambda rng, size: [Case([_uniform(rng, (3, 4), -5, 5)], ew.CastAttrs(dtype="int32")),
                               Case([_uniform(rng, (3, 4))], ew.CastAttrs(dtype="bool"), label="to bool"),
                               Case([_ints(rng, (3, 4))], ew.CastAttrs(dtype="float16"), label="to float16")],
    **{name: _binary(name) for name in (*ew._BINARY, "power", *ew._COMPARE, *ew._LOGIC)},
    "where": _where,
    **{name: _reduce for name in ("sum", "mean", "max", "min", "prod")},
    "argmax": _argreduce, "argmin": _argreduce,
    "nn.conv2d": _conv2d, "nn.conv2d_transpose": _conv2d_transpose, "nn.conv2d_winograd": _conv2d_winograd,
    "nn.dense": _dense, "nn.matmul": _matmul, "nn.dense_pack": _dense_pack,
    "nn.batch_norm": _batch_norm, "nn.bias_add": _bias_add, "nn.layer_norm": _layer_norm, "nn.lrn": _lrn,
    "nn.softmax": _softmax, "nn.log_softmax": _softmax,
    "nn.max_pool2d": _max_pool, "nn.avg_pool2d": _avg_pool,
    "nn.global_avg_pool2d": _global_pool, "nn.global_max_pool2d": _global_pool,
    "reshape": _simple(_x((2, 3, 4)), tensor.ReshapeAttrs(newshape=(4, -1)), tensor.ReshapeAttrs(newshape=(24,))),
    "transpose": _simple(_x((2, 3, 4)), tensor.TransposeAttrs(axes=(1, 2, 0)), tensor.TransposeAttrs()),
    "squeeze": _simple(_x((2, 1, 3, 1)), tensor.SqueezeAttrs(), tensor.SqueezeAttrs(axis=(-1,))),
    "expand_dims": _simple(_x((2, 3)), tensor.ExpandDimsAttrs(axis=1, num_newaxis=2), tensor.ExpandDimsAttrs(axis=-1)),
    "concatenate": _concat,
    "split": _simple(_x((4, 6)), tensor.SplitAttrs(indices_or_sections=2), tensor.SplitAttrs(indices_or_sections=(1, 4), axis=1)),
    "strided_slice": _simple(_x((5, 6)), tensor.StridedSliceAttrs(begin=(1, -1), end=(4, 0), strides=(2, -2)),
                             tensor.StridedSliceAttrs(begin=(-4,), end=(100,), axes=(1,))),
    "take": _take, "gather_elements": _gather_elements, "gather_nd": _gather_nd,
    "broadcast_to": _simple(_x((3, 1)), tensor.BroadcastToAttrs(shape=(2, 3, 4))),
    "tile": _simple(_x((2, 3)), tensor.TileAttrs(reps=(2, 3))),
    "nn.pad": _simple(_x((3, 4)), tensor.PadAttrs(pad_width=((1, 2), (0, 3)), pad_value=1.5),
                      tensor.PadAttrs(pad_width=((2, 1), (5, -1)), pad_mode="reflect"),
                      tensor.PadAttrs(pad_width=((2, 1), (1, 3)), pad_mode="edge"),
                      tensor.PadAttrs(pad_width=((-1, 2), (3, 1)), pad_mode="wrap")),
    "reverse": _simple(_x((2, 3, 4)), tensor.ReverseAttrs(axis=(0, 2))),
    "cumsum": _simple(_x((3, 5)), tensor.CumsumAttrs(axis=1), tensor.CumsumAttrs(axis=0, exclusive=True, reverse=True)),
    "shape_of": _simple(_x((2, 3, 4)), tensor.ShapeOfAttrs()),
    "topk": _topk,
    "layout_transform": _simple(_x((1, 16, 3, 2)), layout.LayoutTransformAttrs(src_layout="NCHW", dst_layout="NHWC"),
                                layout.LayoutTransformAttrs(src_layout="NCHW", dst_layout="NCHW8c"),
                                layout.LayoutTransformAttrs(src_layout="NCHW", dst_layout="NHWC4c")),
    "image.resize": _resize,
    **_ONNX_OPS_CASES,
}


def cases_for(name: str, size: str = "tiny", seed: int = 0) -> list[Case]:
    """The test cases of op `name`; KeyError names an op without a generator."""
    rng = np.random.default_rng(seed)
    return CASES[name](rng, size)
