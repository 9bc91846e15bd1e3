"""ops/image.py: image.resize with ONNX Resize semantics (tag "injective").

Separable per axis, as the numpy reference: each resized axis maps an output index to
a source coordinate (the coordinate transformation mode), then to `taps` neighbours
(2 for nearest/linear, 4 for cubic) with weights. Coordinates and weights are float64,
like the reference; nearest mode without exclude_outside gathers one element directly.
"""
from __future__ import annotations

import math
from itertools import product

from .. import te
from ..ir.dtypes import dtype_of
from ..tir import nodes as n
from ..graph.ops.image import antialias_taps
from . import tags
from ._common import select

__all__ = ["resize", "source_coordinate"]

_F64 = "float64"


def _f(value) -> n.PrimExpr:
    return n.const(float(value), _F64)


def source_coordinate(mode: str, y, out_size: int, in_size: int, scale: float, roi):
    """(float64 coordinate of output index `y` in the input, extrapolated-mask or None)."""
    y = te.cast(y, _F64)
    length = scale * in_size
    if mode == "align_corners":
        return (_f(0) if length == 1 else y * _f((in_size - 1) / (length - 1))), None
    if mode == "asymmetric":
        return y / _f(scale), None
    if mode == "tf_crop_and_resize":
        start, end = roi
        if length == 1:
            x = _f((end - start) * (in_size - 1) / 2)
        else:
            x = y * _f((end - start) * (in_size - 1) / (length - 1))
        x = x + _f(start * (in_size - 1))
        return x, n.Or(x < 0.0, x > float(in_size - 1))
    if mode == "pytorch_half_pixel":
        return (_f(-0.5) if length == 1 else (y + 0.5) / _f(scale) - 0.5), None
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / length)
        return _f(offset) + (y + 0.5) / _f(scale) - 0.5, None
    return (y + 0.5) / _f(scale) - 0.5, None


def _nearest_upper(ratio, mode: str):
    if mode == "round_prefer_floor":
        upper = ratio > 0.5
    elif mode == "round_prefer_ceil":
        upper = ratio >= 0.5
    elif mode == "floor":
        upper = n.IntImm("bool", 0)
    else:
        upper = n.IntImm("bool", 1)
    return n.Or(upper, ratio.equal(_f(1.0)))


def _cubic(ratio, a: float) -> list:
    r, q = ratio, 1.0 - ratio
    return [
        ((a * (r + 1.0) - 5 * a) * (r + 1.0) + 8 * a) * (r + 1.0) - 4 * a,
        ((a + 2) * r - (a + 3)) * r * r + 1.0,
        ((a + 2) * q - (a + 3)) * q * q + 1.0,
        ((a * (q + 1.0) - 5 * a) * (q + 1.0) + 8 * a) * (q + 1.0) - 4 * a,
    ]


def _axis_taps(attrs, y, out_size: int, in_size: int, scale: float, roi):
    """([(clamped int32 index, float64 weight or None)], extrapolated mask or None) for one axis."""
    x, extrapolated = source_coordinate(attrs.coordinate_transformation_mode, y, out_size, in_size, scale, roi)
    floor = te.floor(x)
    ratio = select(x.equal(floor), _f(1.0), x - floor)
    taps = 4 if attrs.method == "cubic" else 2
    pad = math.ceil(taps / 2)
    padded = x + float(pad)
    base = te.floor(padded)
    offset = select((padded - base).equal(_f(0.0)), n.const(-(taps // 2), "int32"),
                    n.const(-(taps // 2) + 1, "int32"))
    start = te.cast(base, "int32") + offset - pad

    def clamp(index):
        return te.min(te.max(index, 0), in_size - 1)
    if attrs.method == "nearest" and not attrs.exclude_outside:
        upper = _nearest_upper(ratio, attrs.nearest_mode)
        chosen = start + select(upper, n.const(1, "int32"), n.const(0, "int32"))
        return [(clamp(chosen), None)], extrapolated
    if attrs.method == "nearest":
        upper = _nearest_upper(ratio, attrs.nearest_mode)
        weights = [select(upper, _f(0.0), _f(1.0)), select(upper, _f(1.0), _f(0.0))]
    elif attrs.method == "linear":
        weights = [1.0 - ratio, ratio]
    else:
        weights = _cubic(ratio, attrs.cubic_coeff_a)
    neighbours = [start + t for t in range(taps)]
    if attrs.exclude_outside:
        weights = [select(n.And(k >= 0, k < in_size), w, _f(0.0)) for k, w in zip(neighbours, weights)]
        total = weights[0]
        for w in weights[1:]:
            total = total + w
        total = select(total.equal(_f(0.0)), _f(1.0), total)
        weights = [w / total for w in weights]
    return [(clamp(k), w) for k, w in zip(neighbours, weights)], extrapolated


def _antialias_weight(method: str, distance, a: float):
    """te form of graph.ops.image.antialias_weight (unnormalized)."""
    x = te.fabs(distance)
    if method == "linear":
        return te.max(1.0 - x, _f(0.0))
    near = ((a + 2) * x - (a + 3)) * x * x + 1.0
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return select(x <= 1.0, near, select(x < 2.0, far, _f(0.0)))


def _resize_axis_antialias(data: te.Tensor, axis: int, out_size: int, scale: float, roi, attrs,
                           accumulate: str = _F64) -> te.Tensor:
    """`data` (float64) resized along `axis` by the antialiased kernel: a sum over its taps (a
    reduction, so each axis is one stage and the taps never multiply across axes), each weight
    divided by the taps' total, computed per output index in a 1-D stage."""
    in_size = int(data.shape[axis])
    start, taps = antialias_taps(attrs.method, scale)
    shrink = min(scale, 1.0)

    def weight(y, t):
        x, _ = source_coordinate(attrs.coordinate_transformation_mode, y, out_size, in_size, scale, roi)
        floor = te.floor(x)
        whole = x.equal(floor)
        ratio = select(whole, _f(1.0), x - floor)
        neighbour = te.cast(select(whole, floor - 1.0, floor), "int32") + (t + start)
        w = _antialias_weight(attrs.method, (te.cast(t, _F64) + float(start) - ratio) * shrink, attrs.cubic_coeff_a)
        if attrs.exclude_outside:
            w = select(n.And(neighbour >= 0, neighbour < in_size), w, _f(0.0))
        return w, te.min(te.max(neighbour, 0), in_size - 1)

    k = te.reduce_axis((0, taps), name=f"k{axis}")
    total = te.compute((out_size,), lambda y: te.sum(weight(y, k)[0], axis=k), name=f"T_resize_weights{axis}",
                       tag=tags.COMM_REDUCE)
    t = te.reduce_axis((0, taps), name=f"t{axis}")

    def body(*i):
        w, source = weight(i[axis], t)
        index = list(i)
        index[axis] = source
        norm = total[i[axis]]
        term = data[tuple(index)] * (w / select(norm.equal(_f(0.0)), _f(1.0), norm))
        return te.sum(term if accumulate == _F64 else te.cast(term, accumulate), axis=t)
    shape = list(data.shape)
    shape[axis] = out_size
    out = te.compute(tuple(shape), body, name=f"T_resize_axis{axis}", tag=tags.COMM_REDUCE)
    if attrs.coordinate_transformation_mode != "tf_crop_and_resize":
        return out

    def masked(*i):
        _, outside = source_coordinate(attrs.coordinate_transformation_mode, i[axis], out_size, in_size, scale, roi)
        return select(outside, _f(attrs.extrapolation_value), out[i])
    return te.compute(tuple(shape), masked, name=f"T_resize_extrapolate{axis}", tag=tags.ELEMWISE)


def _resize_antialias(x: te.Tensor, resized, attrs, out_shape) -> te.Tensor:
    """Float32 / float64 data: the last axis accumulates in the data's type, so its reduction is the
    output (an elementwise cast after it would make the reduce schedule parallelize inner loops only)."""
    current = te.compute(x.shape, lambda *i: te.cast(x[i], _F64), name="T_resize_f64", tag=tags.ELEMWISE)
    direct = x.dtype in ("float32", "float64") and attrs.coordinate_transformation_mode != "tf_crop_and_resize"
    for position, (axis, roi) in enumerate(resized):
        last = position == len(resized) - 1
        current = _resize_axis_antialias(current, axis, out_shape[axis], attrs.scales[axis], roi, attrs,
                                         x.dtype if last and direct else _F64)
    if direct:
        return current
    is_int = not dtype_of(x.dtype).is_float
    final = current
    return te.compute(out_shape, lambda *i: te.cast(te.round(final[i]) if is_int else final[i], x.dtype),
                      name="T_resize", tag=tags.ELEMWISE)


def resize(inputs, attrs, out_type):
    """Registry compute of image.resize."""
    (x,) = inputs
    rank = x.ndim
    out_shape = tuple(out_type.shape)
    resized = []
    for axis in range(rank):
        roi = None if attrs.roi is None else (attrs.roi[axis], attrs.roi[axis + rank])
        unchanged = math.isclose(attrs.scales[axis], 1.0) and attrs.size[axis] == x.shape[axis] and (
            roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0)))
        if not unchanged and attrs.size[axis] != 0:
            resized.append((axis, roi))
    if attrs.antialias and resized:
        return _resize_antialias(x, resized, attrs, out_shape)
    is_int = not dtype_of(x.dtype).is_float

    def body(*i):
        per_axis, masks = {}, []
        for axis, roi in resized:
            taps, mask = _axis_taps(attrs, i[axis], out_shape[axis], x.shape[axis], attrs.scales[axis], roi)
            per_axis[axis] = taps
            if mask is not None:
                masks.append(mask)
        total = None
        for choice in product(*(per_axis[axis] for axis, _ in resized)):
            index = list(i)
            weight = None
            for (axis, _), (position, w) in zip(resized, choice):
                index[axis] = position
                if w is not None:
                    weight = w if weight is None else weight * w
            value = x[tuple(index)]
            if weight is None:  # a direct gather (nearest)
                total = value
                continue
            term = te.cast(value, _F64) * weight
            total = term if total is None else total + term
        if total is None:
            total = x[i]
        if total.dtype == _F64 and x.dtype != _F64:
            total = te.cast(te.round(total) if is_int else total, x.dtype)
        if masks:
            outside = masks[0]
            for mask in masks[1:]:
                outside = n.Or(outside, mask)
            total = select(outside, n.const(attrs.extrapolation_value, _F64) if total.dtype == _F64
                           else te.cast(n.const(attrs.extrapolation_value, _F64), x.dtype), total)
        return total
    return te.compute(out_shape, body, name="T_resize", tag=tags.INJECTIVE)
