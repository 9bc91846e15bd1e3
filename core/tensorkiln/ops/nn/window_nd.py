"""ops/nn/window_nd.py: computes of the N-d windowed ops (graph/ops/window_nd.py): max and average
pooling, the max pool's argmax indices and the transposed convolution, for any spatial rank.

Their reductions are tagged "comm_reduce", so every target schedules them with its generic
reduction schedule: the 2-D models' pools and transposed convolutions keep their own ops, tags
and tuned schedules (ops/nn/pooling.py, conv2d.py).
"""
from __future__ import annotations

from ... import te
from ...tir import nodes as n
from .. import tags
from .._common import accumulate_dtype, const_like, select
from .pooling import _needed, _window_count

__all__ = ["max_pool", "avg_pool", "max_pool_indices", "conv_transpose"]


def _all(conditions):
    result = None
    for condition in conditions:
        result = condition if result is None else n.And(result, condition)
    return result


def _pad(data: te.Tensor, begins, ends, value) -> te.Tensor:
    """`data` padded with `value` by begins/ends on its spatial axes (2, 3, ...); itself when no padding."""
    if not any(begins) and not any(ends):
        return data
    sizes = data.shape[2:]
    fill = value if isinstance(value, n.PrimExpr) else const_like(value, data.dtype)

    def body(*index):
        checks, source = [], list(index[:2])
        for axis, (position, begin, end, size) in enumerate(zip(index[2:], begins, ends, sizes)):
            if begin:
                checks.append(position >= begin)
            if end:
                checks.append(position < begin + size)
            source.append(te.min(te.max(position - begin, 0), size - 1) if (begin or end) else position)
        inside = _all(checks)
        value_at = data[tuple(source)]
        return value_at if inside is None else select(inside, value_at, fill)
    shape = (*data.shape[:2], *(s + b + e for s, b, e in zip(sizes, begins, ends)))
    return te.compute(shape, body, name="T_pad_nd", tag="injective.pad")


def _windowed(data: te.Tensor, attrs, out_shape, value):
    """(padded data, reduce axes, tap(index) -> padded element of output `index`'s window tap)."""
    rank = len(attrs.pool_size)
    begins = attrs.padding[:rank]
    ends = tuple(attrs.padding[rank + a] + max(0, _needed(out_shape[2 + a], attrs.strides[a], attrs.pool_size[a],
                                                              attrs.dilation[a]) - (data.shape[2 + a] + begins[a]
                                                                                    + attrs.padding[rank + a]))
                 for a in range(rank))
    padded = _pad(data, begins, ends, value)
    axes = [te.reduce_axis((0, k), name=f"r{a}") for a, k in enumerate(attrs.pool_size)]

    def tap(index):
        return padded[(*index[:2], *(index[2 + a] * attrs.strides[a] + axes[a] * attrs.dilation[a]
                                     for a in range(rank)))]
    return axes, tap


def _max(data: te.Tensor, attrs, out_shape, name: str) -> te.Tensor:
    axes, tap = _windowed(data, attrs, out_shape, te.min_value(data.dtype))
    return te.compute(tuple(out_shape), lambda *i: te.max(tap(i), axis=axes), name=name, tag=tags.COMM_REDUCE)


def max_pool(inputs, attrs, out_type):
    """Registry compute of nn.max_pool."""
    (data,) = inputs
    return _max(data, attrs, out_type.shape, "T_max_pool")


def avg_pool(inputs, attrs, out_type):
    """Registry compute of nn.avg_pool: one reduction, each tap scaled by 1 / (the counted cells), so
    the output is the reduction itself (an elementwise division after it would make a target's reduce
    schedule parallelize only its inner loops); float16 / bfloat16 cast back after it."""
    (data,) = inputs
    out_shape = tuple(out_type.shape)
    rank = len(attrs.pool_size)
    accumulate = accumulate_dtype(data.dtype)
    axes, tap = _windowed(data, attrs, out_shape, 0)

    def inverse_count(i):
        count = None
        for a in range(rank):
            begin, end, size = attrs.padding[a], attrs.padding[rank + a], data.shape[2 + a]
            low, high = (0, size + begin + end) if attrs.count_include_pad else (begin, begin + size)
            factor = _window_count(i[2 + a] * attrs.strides[a], attrs.pool_size[a], attrs.dilation[a], low, high)
            count = factor if count is None else count * factor
        return const_like(1, accumulate) / te.cast(te.max(count, 1), accumulate)
    average = te.compute(out_shape, lambda *i: te.sum(te.cast(tap(i), accumulate) * inverse_count(i), axis=axes),
                         name="T_avg_pool", tag=tags.COMM_REDUCE)
    if accumulate == data.dtype:
        return average
    return te.compute(out_shape, lambda *i: te.cast(average[i], data.dtype), name="T_avg_pool_cast",
                      tag=tags.ELEMWISE)


def max_pool_indices(inputs, attrs, out_type):
    """Registry compute of nn.max_pool_indices: the window max, then the smallest row-major position
    holding it (the first tap in ONNX's scan order), then the storage order and the (N, C) offset."""
    (data,) = inputs
    out_shape = tuple(out_type.shape)
    rank = len(attrs.pool_size)
    spatial = tuple(int(s) for s in data.shape[2:])
    size = 1
    for s in spatial:
        size *= s
    best = _max(data, attrs, out_shape, "T_max_pool_value")
    axes = [te.reduce_axis((0, k), name=f"q{a}") for a, k in enumerate(attrs.pool_size)]

    def first(*i):
        positions = [i[2 + a] * attrs.strides[a] + axes[a] * attrs.dilation[a] - attrs.padding[a] for a in range(rank)]
        inside = _all(n.And(p >= 0, p < s) for p, s in zip(positions, spatial))
        clamped = [te.min(te.max(p, 0), s - 1) for p, s in zip(positions, spatial)]
        flat = None
        for p, s in zip(clamped, spatial):
            p = te.cast(p, "int64")
            flat = p if flat is None else flat * s + p
        hit = n.And(inside, data[(*i[:2], *clamped)].equal(best[i]))
        return te.min(select(hit, flat, const_like(size, "int64")), axis=axes)
    chosen = te.compute(out_shape, first, name="T_max_pool_position", tag=tags.COMM_REDUCE)

    def place(*i):
        position = chosen[i]
        if attrs.storage_order:
            column_major, stride, rest = None, 1, position
            coordinates = []
            for s in reversed(spatial):
                coordinates.append(rest % s)
                rest = rest // s
            for coordinate, s in zip(reversed(coordinates), spatial):
                term = coordinate * stride if stride != 1 else coordinate
                column_major = term if column_major is None else column_major + term
                stride *= s
            position = column_major
        plane = te.cast(i[0], "int64") * int(data.shape[1]) + te.cast(i[1], "int64")
        return plane * size + position
    return te.compute(out_shape, place, name="T_max_pool_indices", tag=tags.ELEMWISE)


def conv_transpose(inputs, attrs, out_type):
    """Registry compute of nn.conv_transpose, as a gather: each output sums the inputs that scatter onto
    it (ops/nn/conv2d.py's conv2d_transpose_nchw, for any spatial rank)."""
    data, weight = inputs
    out_shape = tuple(out_type.shape)
    rank = len(attrs.strides)
    channels, spatial = int(data.shape[1]), tuple(int(s) for s in data.shape[2:])
    per_group_out, kernel = int(weight.shape[1]), tuple(int(k) for k in weight.shape[2:])
    per_group_in = channels // attrs.groups
    accumulate = accumulate_dtype(data.dtype)
    rc = te.reduce_axis((0, per_group_in), name="rc")
    taps = [te.reduce_axis((0, k), name=f"r{a}") for a, k in enumerate(kernel)]

    def source(position, tap, begin, dilation, stride, size):
        offset = position + begin - tap * dilation
        index = offset // stride if stride != 1 else offset
        valid = n.And(offset >= 0, index < size)
        if stride != 1:
            valid = n.And(valid, (offset % stride).equal(0))
        return te.min(te.max(index, 0), size - 1), valid

    def body(b, o, *position):
        channel = (o // per_group_out) * per_group_in + rc if attrs.groups != 1 else rc
        located = [source(position[a], taps[a], attrs.padding[a], attrs.dilation[a], attrs.strides[a], spatial[a])
                   for a in range(rank)]
        value = (te.cast(data[(b, channel, *(index for index, _ in located))], accumulate)
                 * te.cast(weight[(channel, o % per_group_out if attrs.groups != 1 else o, *taps)], accumulate))
        return te.sum(select(_all(valid for _, valid in located), value, const_like(0, accumulate)),
                      axis=[rc, *taps])
    conv = te.compute(out_shape, lambda *i: body(*i), name="T_conv_transpose", tag=tags.COMM_REDUCE)
    if accumulate != data.dtype:
        return te.compute(out_shape, lambda *i: te.cast(conv[i], data.dtype), name="T_conv_transpose_cast",
                          tag=tags.ELEMWISE)
    return conv
