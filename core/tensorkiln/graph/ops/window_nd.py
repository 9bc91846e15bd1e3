"""N-d windowed ops on (N, C, spatial...) data of any spatial rank: max and average pooling, the
max pool's argmax indices (ONNX MaxPool's second output) and the transposed convolution.

The 2-D models' ops (nn.max_pool2d, nn.avg_pool2d, nn.conv2d_transpose) keep their own records,
layouts and tuned schedules; these cover the other ranks (3-D volumes) and the Indices output.
Padding is ONNX's (begins..., ends...), one pair per spatial axis.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...ir.errors import ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import require_float, same_dtype, shape_text, tensor_args
from .nn import _accumulate, _window_out

__all__ = ["MaxPoolAttrs", "AvgPoolAttrs", "MaxPoolIndicesAttrs", "ConvTransposeAttrs", "pool_output_shape",
           "conv_transpose_full_shape"]

_TOLERANCE = {"float16": 2e-3, "float32": 1e-4}


def _check_window(attrs: Attrs, rank: int) -> None:
    for name in ("pool_size", "strides", "dilation"):
        values = getattr(attrs, name)
        if len(values) != rank:
            attrs.fail(f"{name} {values} must have one entry per spatial axis ({rank}, from pool_size)")
        if any(v < 1 for v in values):
            attrs.fail(f"{name} must be positive, got {values}")
    if len(attrs.padding) != 2 * rank or any(p < 0 for p in attrs.padding):
        attrs.fail(f"padding {attrs.padding} must be {2 * rank} non-negative values (begins..., ends...)")


@dataclass(frozen=True, slots=True)
class MaxPoolAttrs(Attrs):
    """Max pooling over every axis after (N, C); padding is (begins..., ends...)."""
    pool_size: tuple[int, ...] = (1,)
    strides: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1,)
    ceil_mode: bool = False

    def _check(self) -> None:
        _check_window(self, len(self.pool_size))


@dataclass(frozen=True, slots=True)
class AvgPoolAttrs(Attrs):
    """Average pooling; `count_include_pad` counts the explicit padding (never ceil_mode's) in the divisor."""
    pool_size: tuple[int, ...] = (1,)
    strides: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1,)
    ceil_mode: bool = False
    count_include_pad: bool = False

    def _check(self) -> None:
        _check_window(self, len(self.pool_size))


@dataclass(frozen=True, slots=True)
class MaxPoolIndicesAttrs(Attrs):
    """Where each max of a max pool comes from: the flat index into the whole (N, C, spatial...) input,
    the spatial part row-major (storage_order 0) or column-major (1); ties pick the first window tap."""
    pool_size: tuple[int, ...] = (1,)
    strides: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1,)
    ceil_mode: bool = False
    storage_order: int = 0
    _choices = {"storage_order": (0, 1)}

    def _check(self) -> None:
        _check_window(self, len(self.pool_size))


def pool_output_shape(op: str, shape: tuple[int, ...], attrs) -> tuple[int, ...]:
    """(N, C, out...) of a pool of data `shape` (ShapeError when the ranks or windows do not fit)."""
    rank = len(attrs.pool_size)
    if len(shape) != rank + 2:
        raise ShapeError(f"{op}: data {shape_text(shape)} must have 2 + {rank} axes (N, C, spatial...) for "
                         f"pool_size {attrs.pool_size}")
    sizes = []
    for axis in range(rank):
        begin, end = attrs.padding[axis], attrs.padding[rank + axis]
        sizes.append(_window_out(op, shape[2 + axis], attrs.pool_size[axis], attrs.strides[axis],
                                 attrs.dilation[axis], begin + end, attrs.ceil_mode, begin))
    return (*shape[:2], *sizes)


def _pool_type(op: str, out_dtype: str | None = None):
    def rule(arg_types, attrs) -> TensorType:
        (data,) = tensor_args(op, arg_types)
        return TensorType(pool_output_shape(op, data.shape, attrs), out_dtype or data.dtype)
    return rule


def _padded_windows(x: np.ndarray, attrs, out_shape, fill) -> np.ndarray:
    """View (N, C, out..., k...) of the strided, dilated windows of `x` padded with `fill` (ceil_mode's
    extra end padding included)."""
    rank = len(attrs.pool_size)
    widths = [(0, 0), (0, 0)]
    for axis in range(rank):
        begin, end = attrs.padding[axis], attrs.padding[rank + axis]
        need = (out_shape[2 + axis] - 1) * attrs.strides[axis] + (attrs.pool_size[axis] - 1) * attrs.dilation[axis] + 1
        widths.append((begin, end + max(0, need - (x.shape[2 + axis] + begin + end))))
    padded = np.pad(x, widths, constant_values=fill)
    effective = [(k - 1) * d + 1 for k, d in zip(attrs.pool_size, attrs.dilation)]
    view = sliding_window_view(padded, effective, axis=tuple(range(2, 2 + rank)))
    index = ((slice(None),) * 2 + tuple(slice(None, None, s) for s in attrs.strides)
             + tuple(slice(None, None, d) for d in attrs.dilation))
    view = view[index]
    return view[(slice(None),) * 2 + tuple(slice(0, o) for o in out_shape[2:])]


def _lowest(dtype: np.dtype):
    """The pad value of a max: integers' minimum, -inf for every float (ml_dtypes' bfloat16 too)."""
    return np.iinfo(dtype).min if dtype.kind in "iu" else False if dtype.kind == "b" else -np.inf


def _max_pool_reference(x: np.ndarray, attrs: MaxPoolAttrs) -> np.ndarray:
    out_shape = pool_output_shape("nn.max_pool", x.shape, attrs)
    windows = _padded_windows(x, attrs, out_shape, _lowest(x.dtype))
    return np.ascontiguousarray(windows.max(axis=tuple(range(-len(attrs.pool_size), 0))))


def _avg_pool_reference(x: np.ndarray, attrs: AvgPoolAttrs) -> np.ndarray:
    out_shape = pool_output_shape("nn.avg_pool", x.shape, attrs)
    rank = len(attrs.pool_size)
    taps = tuple(range(-rank, 0))
    total = _padded_windows(_accumulate(x), attrs, out_shape, 0).sum(axis=taps)
    # The divisor counts input cells, plus the explicit padding when count_include_pad;
    # the extra end padding that ceil_mode adds is never counted.
    if attrs.count_include_pad:
        cells = np.ones((1, 1, *(s + attrs.padding[a] + attrs.padding[rank + a] for a, s in enumerate(x.shape[2:]))))
        shifted = AvgPoolAttrs(attrs.pool_size, attrs.strides, (0,) * (2 * rank), attrs.dilation, attrs.ceil_mode)
        counts = _padded_windows(cells, shifted, out_shape, 0).sum(axis=taps)
    else:
        counts = _padded_windows(np.ones((1, 1, *x.shape[2:])), attrs, out_shape, 0).sum(axis=taps)
    return (total / np.maximum(counts, 1)).astype(x.dtype)


def _max_pool_indices_reference(x: np.ndarray, attrs: MaxPoolIndicesAttrs) -> np.ndarray:
    out_shape = pool_output_shape("nn.max_pool_indices", x.shape, attrs)
    spatial = x.shape[2:]
    size = int(np.prod(spatial, dtype=np.int64))
    values = _padded_windows(x, attrs, out_shape, _lowest(x.dtype))
    # Row-major positions grow with the window's tap order, so the smallest position holding the
    # maximum is the first tap that does (ONNX's strict ">" scan); padding holds no position.
    positions = _padded_windows(np.arange(size, dtype=np.int64).reshape((1, 1, *spatial)), attrs, out_shape, size)
    taps = tuple(range(-len(spatial), 0))
    best = values.max(axis=taps, keepdims=True)
    chosen = np.where((values == best) & (positions < size), positions, size).min(axis=taps)
    if attrs.storage_order:
        coordinates = np.unravel_index(chosen, spatial)
        chosen = np.ravel_multi_index(coordinates, spatial, order="F")
    planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape((*x.shape[:2], *(1,) * len(spatial)))
    return (planes * size + chosen).astype(np.int64)


def _avg_pool_type(arg_types, attrs) -> TensorType:
    (data,) = tensor_args("nn.avg_pool", arg_types)
    require_float("nn.avg_pool", data)
    return TensorType(pool_output_shape("nn.avg_pool", data.shape, attrs), data.dtype)


register_op("nn.max_pool", attrs=MaxPoolAttrs, type_rule=_pool_type("nn.max_pool"), reference=_max_pool_reference,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1,
            doc="N-d max pooling of (N, C, spatial...) data, any spatial rank.")
register_op("nn.avg_pool", attrs=AvgPoolAttrs, type_rule=_avg_pool_type, reference=_avg_pool_reference,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1, tolerance=_TOLERANCE,
            doc="N-d average pooling of (N, C, spatial...) data, any spatial rank.")
register_op("nn.max_pool_indices", attrs=MaxPoolIndicesAttrs, type_rule=_pool_type("nn.max_pool_indices", "int64"),
            reference=_max_pool_indices_reference, pattern=OpPattern.OPAQUE, num_inputs=1,
            doc="int64 flat input index of each max of an N-d max pool (ONNX MaxPool's Indices output).")


# ---- transposed convolution -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConvTransposeAttrs(Attrs):
    """(N, C, spatial...) data, (C, O / groups, k...) weight; padding crops (begins..., ends...) of the
    full output; output_padding grows its ends."""
    strides: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1,)
    groups: int = 1
    output_padding: tuple[int, ...] = (0,)

    def _check(self) -> None:
        rank = len(self.strides)
        if len(self.dilation) != rank or len(self.output_padding) != rank or len(self.padding) != 2 * rank:
            self.fail(f"strides {self.strides}, dilation {self.dilation}, output_padding {self.output_padding} "
                      f"and padding {self.padding} must have 1, 1, 1 and 2 entries per spatial axis")
        if any(v < 1 for v in self.strides + self.dilation):
            self.fail(f"strides {self.strides} and dilation {self.dilation} must be positive")
        if self.groups < 1:
            self.fail(f"groups must be positive, got {self.groups}")
        if any(v < 0 for v in self.output_padding):
            self.fail(f"output_padding {self.output_padding} must be non-negative")


def conv_transpose_full_shape(data_shape, kernel, attrs: ConvTransposeAttrs) -> tuple[int, ...]:
    """Spatial sizes before the crop: (in - 1) * stride + (k - 1) * dilation + 1 + output_padding."""
    return tuple((size - 1) * s + (k - 1) * d + 1 + p for size, k, s, d, p in
                 zip(data_shape, kernel, attrs.strides, attrs.dilation, attrs.output_padding))


def _conv_transpose_type(arg_types, attrs: ConvTransposeAttrs) -> TensorType:
    data, weight = tensor_args("nn.conv_transpose", arg_types)
    rank = len(attrs.strides)
    if data.ndim != rank + 2 or weight.ndim != rank + 2:
        raise ShapeError(f"nn.conv_transpose: data {shape_text(data.shape)} and weight {shape_text(weight.shape)} "
                         f"must both have 2 + {rank} axes (from strides {attrs.strides})")
    dtype = same_dtype("nn.conv_transpose", data, weight)
    if data.shape[1] != weight.shape[0] or data.shape[1] % attrs.groups:
        raise ShapeError(f"nn.conv_transpose: data {shape_text(data.shape)} has {data.shape[1]} channels but weight "
                         f"{shape_text(weight.shape)} (C, O/groups, k...) expects {weight.shape[0]} "
                         f"(groups={attrs.groups})")
    full = conv_transpose_full_shape(data.shape[2:], weight.shape[2:], attrs)
    sizes = tuple(f - attrs.padding[a] - attrs.padding[rank + a] for a, f in enumerate(full))
    if any(s < 1 for s in sizes):
        raise ShapeError(f"nn.conv_transpose: padding {attrs.padding} crops the whole output {full}")
    return TensorType((data.shape[0], weight.shape[1] * attrs.groups, *sizes), dtype)


def _conv_transpose_reference(data, weight, attrs: ConvTransposeAttrs):
    x, w = _accumulate(data), _accumulate(weight)
    rank = len(attrs.strides)
    groups, in_channels = attrs.groups, x.shape[1]
    per_group_in, per_group_out = in_channels // groups, w.shape[1]
    full = conv_transpose_full_shape(x.shape[2:], w.shape[2:], attrs)
    out = np.zeros((x.shape[0], per_group_out * groups, *full), dtype=x.dtype)
    for g in range(groups):
        xg = x[:, g * per_group_in:(g + 1) * per_group_in]
        wg = w[g * per_group_in:(g + 1) * per_group_in]
        for tap in itertools.product(*(range(k) for k in w.shape[2:])):
            contribution = np.moveaxis(np.tensordot(xg, wg[(slice(None), slice(None), *tap)], axes=([1], [0])), -1, 1)
            region = tuple(slice(t * d, t * d + (size - 1) * s + 1, s) for t, d, s, size in
                           zip(tap, attrs.dilation, attrs.strides, x.shape[2:]))
            out[(slice(None), slice(g * per_group_out, (g + 1) * per_group_out), *region)] += contribution
    crop = tuple(slice(attrs.padding[a], full[a] - attrs.padding[rank + a]) for a in range(rank))
    return np.ascontiguousarray(out[(slice(None), slice(None), *crop)]).astype(data.dtype)


register_op("nn.conv_transpose", attrs=ConvTransposeAttrs, type_rule=_conv_transpose_type,
            reference=_conv_transpose_reference, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            tolerance=_TOLERANCE, doc="Transposed convolution of any spatial rank, (N, C, spatial...) data.")
