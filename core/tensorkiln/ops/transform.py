"""ops/transform.py: shape and data-movement ops (tag "injective"); cumsum is in scan.py, topk in sort.py.

Every output element reads input elements at computed indices. Reads that are only
used on one side of a select clamp their index into range: tir.Select may evaluate
both sides, and a load must never leave its buffer.
"""
from __future__ import annotations

from typing import Sequence

from .. import te
from ..ir.dtypes import dtype_of
from ..tir import nodes as n
from . import tags
from ._common import as_index, const_like, normalize_axis, ravel, select, unravel

__all__ = ["reshape", "transpose", "squeeze", "expand_dims", "concatenate", "split", "strided_slice", "take",
           "gather_elements", "gather_nd", "tile", "pad", "reverse", "shape_of",
           "layout_transform"]


def _injective(shape, body, name: str, tag: str = tags.INJECTIVE) -> te.Tensor:
    return te.compute(tuple(shape), body, name=name, tag=tag)


def _clamp(index, size: int):
    return te.min(te.max(index, n.const(0, "int32")), n.const(size - 1, "int32"))


def _wrap_negative(index, size: int):
    """An int32 index where negative values count from the end, clamped into [0, size)."""
    index = as_index(index)
    return _clamp(select(index < 0, index + size, index), size)


def reshape(inputs, attrs, out_type):
    """Row-major reshape: flatten the output index and unflatten it in the input's shape."""
    (x,) = inputs
    out_shape = out_type.shape
    if tuple(out_shape) == tuple(x.shape):
        return _injective(out_shape, lambda *i: x[i], "T_reshape")
    return _injective(out_shape, lambda *i: x[unravel(ravel(i, out_shape), x.shape)], "T_reshape")


def transpose(inputs, attrs, out_type):
    (x,) = inputs
    axes = tuple(reversed(range(x.ndim))) if attrs.axes is None else tuple(a % x.ndim for a in attrs.axes)

    def body(*i):
        source = [None] * x.ndim
        for out_axis, in_axis in enumerate(axes):
            source[in_axis] = i[out_axis]
        return x[tuple(source)]
    return _injective(out_type.shape, body, "T_transpose")


def squeeze(inputs, attrs, out_type):
    (x,) = inputs
    if attrs.axis is None:
        dropped = {a for a, d in enumerate(x.shape) if d == 1}
    else:
        dropped = {normalize_axis(a, x.ndim) for a in attrs.axis}

    def body(*i):
        it = iter(i)
        return x[tuple(0 if a in dropped else next(it) for a in range(x.ndim))]
    return _injective(out_type.shape, body, "T_squeeze")


def expand_dims(inputs, attrs, out_type):
    (x,) = inputs
    axis = attrs.axis % (x.ndim + 1)
    return _injective(out_type.shape, lambda *i: x[i[:axis] + i[axis + attrs.num_newaxis:]], "T_expand_dims")


def concatenate(inputs, attrs, out_type):
    """A balanced tree of selects over the inputs along `axis` (depth log2 of their number: a chain
    of 300 selects nests past what C compilers parse, clang's bracket depth is 256)."""
    axis = normalize_axis(attrs.axis, len(out_type.shape))
    parts = [t for t in inputs if t.shape[axis] > 0]
    offsets = [0]
    for t in parts:
        offsets.append(offsets[-1] + t.shape[axis])

    def body(*i):
        def read(k):
            t = parts[k]
            index = list(i)
            index[axis] = _clamp(i[axis] - offsets[k], t.shape[axis]) if len(parts) > 1 else i[axis]
            return t[tuple(index)]
        def pick(first, stop):   # the input among parts[first:stop] that holds index i
            if stop - first == 1:
                return read(first)
            middle = (first + stop) // 2
            return select(i[axis] < offsets[middle], pick(first, middle), pick(middle, stop))
        return pick(0, len(parts)) if parts else const_like(0, out_type.dtype)   # an empty output
    return _injective(out_type.shape, body, "T_concatenate")


def split(inputs, attrs, out_type) -> list[te.Tensor]:
    """One strided copy per output field of the TupleType."""
    (x,) = inputs
    axis = normalize_axis(attrs.axis, x.ndim)
    outputs, begin = [], 0
    for k, field in enumerate(out_type.fields):
        def body(*i, begin=begin):
            index = list(i)
            index[axis] = i[axis] + begin
            return x[tuple(index)]
        outputs.append(_injective(field.shape, body, f"T_split_{k}"))
        begin += field.shape[axis]
    return outputs


def _slice_plan(shape: Sequence[int], attrs) -> list[tuple[int, int]]:
    """(start, step) per axis under ONNX Slice clamping (as graph.ops.tensor.slice_bounds)."""
    from ..graph.ops.tensor import slice_bounds
    plan = [(0, 1)] * len(shape)
    axes = attrs.axes if attrs.axes is not None else tuple(range(len(attrs.begin)))
    strides = attrs.strides or (1,) * len(attrs.begin)
    for axis, begin, end, step in zip(axes, attrs.begin, attrs.end, strides):
        axis = normalize_axis(axis, len(shape))
        start, _, step = slice_bounds(shape[axis], begin, end, step).indices(shape[axis])
        plan[axis] = (start, step)
    return plan


def strided_slice(inputs, attrs, out_type):
    (x,) = inputs
    plan = _slice_plan(x.shape, attrs)
    return _injective(out_type.shape, lambda *i: x[tuple(start + index * step if step != 1 or start else index
                                                        for index, (start, step) in zip(i, plan))],
                      "T_strided_slice")


def take(inputs, attrs, out_type):
    """data[..., indices[j...], ...] along `axis`; negative indices count from the end."""
    data, indices = inputs
    axis = normalize_axis(attrs.axis, data.ndim)
    rank = indices.ndim

    def body(*i):
        position = _wrap_negative(indices[i[axis:axis + rank]], data.shape[axis])
        return data[i[:axis] + (position,) + i[axis + rank:]]
    return _injective(out_type.shape, body, "T_take")


def gather_elements(inputs, attrs, out_type):
    data, indices = inputs
    axis = normalize_axis(attrs.axis, data.ndim)

    def body(*i):
        index = list(i)
        index[axis] = _wrap_negative(indices[i], data.shape[axis])
        return data[tuple(index)]
    return _injective(out_type.shape, body, "T_gather_elements")


def gather_nd(inputs, attrs, out_type):
    data, indices = inputs
    batch, depth = attrs.batch_dims, indices.shape[-1]
    middle = indices.ndim - 1 - batch

    def body(*i):
        batch_index, rest = i[:batch], i[batch + middle:]
        gathered = tuple(_wrap_negative(indices[i[:batch + middle] + (d,)], data.shape[batch + d])
                         for d in range(depth))
        return data[batch_index + gathered + rest]
    return _injective(out_type.shape, body, "T_gather_nd")


def tile(inputs, attrs, out_type):
    (x,) = inputs
    return _injective(out_type.shape, lambda *i: x[tuple(index % size if rep != 1 else index
                                                       for index, size, rep in zip(i, x.shape, attrs.reps))],
                      "T_tile")


def _pad_source(index, before: int, size: int, mode: str):
    """Input index for output `index` under `mode` (constant mode clamps; the caller masks)."""
    j = index - before if before else index
    if mode == "edge" or mode == "constant":
        return _clamp(j, size)
    if mode == "wrap":
        return j % size
    if size == 1:  # reflect
        return n.const(0, "int32")
    period = 2 * (size - 1)
    m = j % period
    return select(m < size, m, period - m)


def pad(inputs, attrs, out_type):
    """nn.pad in constant, reflect, edge or wrap mode; negative widths crop."""
    (x,) = inputs
    widths = attrs.pad_width
    value = const_like(attrs.pad_value, x.dtype)

    def body(*i):
        source = tuple(i[a] if before == 0 and after <= 0 else _pad_source(i[a], before, x.shape[a], attrs.pad_mode)
                       for a, (before, after) in enumerate(widths))
        read = x[source]
        if attrs.pad_mode != "constant":
            return read
        inside = None
        for a, (before, after) in enumerate(widths):
            checks = []
            if before > 0:
                checks.append(i[a] >= before)
            if after > 0:
                checks.append(i[a] < before + x.shape[a])
            for check in checks:
                inside = check if inside is None else n.And(inside, check)
        return read if inside is None else select(inside, read, value)
    return _injective(out_type.shape, body, "T_pad")


def reverse(inputs, attrs, out_type):
    (x,) = inputs
    axes = {normalize_axis(a, x.ndim) for a in attrs.axis}
    return _injective(x.shape, lambda *i: x[tuple(x.shape[a] - 1 - i[a] if a in axes else i[a]
                                                  for a in range(x.ndim))], "T_reverse")


def shape_of(inputs, attrs, out_type):
    """The input's static shape as a 1-D tensor."""
    (x,) = inputs

    def body(i):
        value = const_like(x.shape[-1] if x.shape else 0, attrs.dtype)
        for axis in reversed(range(x.ndim - 1)):
            value = select(i.equal(axis), const_like(x.shape[axis], attrs.dtype), value)
        return value
    return _injective((x.ndim,), body, "T_shape_of")


def layout_transform(inputs, attrs, out_type):
    """Move data between layouts (NCHW, NHWC, NCHW8c, ...): dst index -> primal index -> src index."""
    from ..graph.ops.layout import layout_index, parse_layout
    (x,) = inputs
    dst = parse_layout(attrs.dst_layout)
    dst_factor = {a.upper(): f for a, f in dst if f}
    letters = [a for a, _ in dst]

    def body(*i):
        primal = {}
        for (axis, factor), index in zip(dst, i):
            if factor:
                continue
            primal[axis] = index * dst_factor[axis] + i[letters.index(axis.lower())] if axis in dst_factor else index
        return x[layout_index(attrs.src_layout, primal)]
    return _injective(out_type.shape, body, "T_layout_transform")
