"""Shape and data-movement ops: reshape, transpose, squeeze, expand_dims, concatenate,
split, strided_slice, take, gather_elements, gather_nd, broadcast_to, tile, pad,
reverse, cumsum, shape_of and topk."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.dtypes import dtype_of, from_numpy
from ...ir.errors import DTypeError, ShapeError
from ...ir.index_range import describe_out_of_range, first_out_of_range
from ..attrs import Attrs
from ..registry import VARIADIC, IndexBounds, OpPattern, register_op
from ..types import TensorType, TupleType
from ._rules import broadcast_shape, normalize_axes, normalize_axis, same_dtype, shape_text, tensor_args

__all__ = ["ReshapeAttrs", "TransposeAttrs", "SqueezeAttrs", "ExpandDimsAttrs", "ConcatenateAttrs", "SplitAttrs",
           "StridedSliceAttrs", "TakeAttrs", "BroadcastToAttrs", "TileAttrs", "PadAttrs", "AxisAttrs",
           "CumsumAttrs", "GatherNDAttrs", "TopKAttrs", "ShapeOfAttrs"]


@dataclass(frozen=True, slots=True)
class ReshapeAttrs(Attrs):
    """Static new shape; one entry may be -1 (inferred)."""
    newshape: tuple[int, ...] = ()

    def _check(self) -> None:
        if sum(d == -1 for d in self.newshape) > 1 or any(d < -1 for d in self.newshape):
            self.fail(f"newshape {self.newshape} may hold at most one -1 and no other negative size")


def _reshape_type(arg_types, attrs: ReshapeAttrs) -> TensorType:
    (data,) = tensor_args("reshape", arg_types)
    shape = list(attrs.newshape)
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or data.size % known:
            raise ShapeError(f"reshape: cannot reshape {shape_text(data.shape)} ({data.size} elements) "
                             f"to {attrs.newshape}")
        shape[shape.index(-1)] = data.size // known
    elif known != data.size:
        raise ShapeError(f"reshape: cannot reshape {shape_text(data.shape)} ({data.size} elements) to "
                         f"{shape_text(tuple(shape))} ({known} elements)")
    return TensorType(tuple(shape), data.dtype)


register_op("reshape", attrs=ReshapeAttrs, type_rule=_reshape_type,
            reference=lambda x, a: x.reshape(a.newshape), pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class TransposeAttrs(Attrs):
    """A permutation of the axes; None reverses them."""
    axes: tuple[int, ...] | None = None


def _transpose_type(arg_types, attrs: TransposeAttrs) -> TensorType:
    (data,) = tensor_args("transpose", arg_types)
    axes = tuple(reversed(range(data.ndim))) if attrs.axes is None else attrs.axes
    if sorted(a % max(data.ndim, 1) for a in axes) != list(range(data.ndim)) or len(axes) != data.ndim:
        raise ShapeError(f"transpose: axes {axes} are not a permutation of the {data.ndim} axes of "
                         f"{shape_text(data.shape)}")
    return TensorType(tuple(data.shape[a] for a in axes), data.dtype)


register_op("transpose", attrs=TransposeAttrs, type_rule=_transpose_type,
            reference=lambda x, a: np.transpose(x, a.axes), pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class SqueezeAttrs(Attrs):
    """Axes of size 1 to drop; None drops every size-1 axis."""
    axis: tuple[int, ...] | None = None


def _squeeze_axes(op: str, data: TensorType, axis) -> tuple[int, ...]:
    if axis is None:
        return tuple(i for i, d in enumerate(data.shape) if d == 1)
    axes = normalize_axes(op, axis, data.ndim)
    for a in axes:
        if data.shape[a] != 1:
            raise ShapeError(f"{op}: axis {a} of {shape_text(data.shape)} has size {data.shape[a]}, not 1")
    return axes


def _squeeze_type(arg_types, attrs: SqueezeAttrs) -> TensorType:
    (data,) = tensor_args("squeeze", arg_types)
    axes = _squeeze_axes("squeeze", data, attrs.axis)
    return TensorType(tuple(d for i, d in enumerate(data.shape) if i not in axes), data.dtype)


register_op("squeeze", attrs=SqueezeAttrs, type_rule=_squeeze_type,
            reference=lambda x, a: np.squeeze(x, axis=a.axis if a.axis is None else tuple(i % x.ndim for i in a.axis)),
            pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class ExpandDimsAttrs(Attrs):
    """Insert `num_newaxis` size-1 axes at `axis` (which may be ndim, or negative)."""
    axis: int = 0
    num_newaxis: int = 1


def _expand_dims_type(arg_types, attrs: ExpandDimsAttrs) -> TensorType:
    (data,) = tensor_args("expand_dims", arg_types)
    axis = normalize_axis("expand_dims", attrs.axis, data.ndim, extra=1)
    return TensorType((*data.shape[:axis], *([1] * attrs.num_newaxis), *data.shape[axis:]), data.dtype)


def _expand_dims(x, attrs):
    axis = attrs.axis % (x.ndim + 1)
    return x.reshape((*x.shape[:axis], *([1] * attrs.num_newaxis), *x.shape[axis:]))


register_op("expand_dims", attrs=ExpandDimsAttrs, type_rule=_expand_dims_type, reference=_expand_dims,
            pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class ConcatenateAttrs(Attrs):
    axis: int = 0


def _concatenate_type(arg_types, attrs: ConcatenateAttrs) -> TensorType:
    inputs = tensor_args("concatenate", arg_types)
    if not inputs:
        raise ShapeError("concatenate: needs at least one input")
    dtype = same_dtype("concatenate", *inputs)
    first = inputs[0]
    axis = normalize_axis("concatenate", attrs.axis, first.ndim)
    for other in inputs[1:]:
        if other.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(first.shape, other.shape)) if i != axis):
            raise ShapeError(f"concatenate: shapes {shape_text(first.shape)} and {shape_text(other.shape)} differ "
                             f"outside axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in inputs)
    return TensorType(tuple(shape), dtype)


register_op("concatenate", attrs=ConcatenateAttrs, type_rule=_concatenate_type,
            reference=lambda *args: np.concatenate(args[:-1], axis=args[-1].axis),
            pattern=OpPattern.INJECTIVE, num_inputs=VARIADIC)


@dataclass(frozen=True, slots=True)
class SplitAttrs(Attrs):
    """Split into `indices_or_sections` equal parts (int) or at the given indices (tuple)."""
    indices_or_sections: int | tuple[int, ...] = 2
    axis: int = 0


def _split_points(op: str, size: int, attrs: SplitAttrs) -> list[int]:
    if isinstance(attrs.indices_or_sections, int):
        sections = attrs.indices_or_sections
        if sections < 1 or size % sections:
            raise ShapeError(f"{op}: axis of size {size} cannot be split into {sections} equal parts")
        return [size // sections * i for i in range(1, sections)]
    points = list(attrs.indices_or_sections)
    if points != sorted(points) or any(p < 0 or p > size for p in points):
        raise ShapeError(f"{op}: split indices {tuple(points)} must be increasing and within [0, {size}]")
    return points


def _split_type(arg_types, attrs: SplitAttrs) -> TupleType:
    (data,) = tensor_args("split", arg_types)
    axis = normalize_axis("split", attrs.axis, data.ndim)
    bounds = [0, *_split_points("split", data.shape[axis], attrs), data.shape[axis]]
    fields = []
    for begin, end in zip(bounds, bounds[1:]):
        shape = list(data.shape)
        shape[axis] = end - begin
        fields.append(TensorType(tuple(shape), data.dtype))
    return TupleType(tuple(fields))


def _split(x, attrs):
    axis = attrs.axis % x.ndim
    return tuple(np.split(x, _split_points("split", x.shape[axis], attrs), axis=axis))


register_op("split", attrs=SplitAttrs, type_rule=_split_type, reference=_split,
            pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class StridedSliceAttrs(Attrs):
    """ONNX Slice semantics: begin/end clamp to the axis, negative values count from the end."""
    begin: tuple[int, ...] = ()
    end: tuple[int, ...] = ()
    strides: tuple[int, ...] | None = None
    axes: tuple[int, ...] | None = None

    def _check(self) -> None:
        if len(self.begin) != len(self.end):
            self.fail(f"begin {self.begin} and end {self.end} must have the same length")
        if self.strides is not None and (len(self.strides) != len(self.begin) or 0 in self.strides):
            self.fail(f"strides {self.strides} must be non-zero, one per sliced axis")
        if self.axes is not None and len(self.axes) != len(self.begin):
            self.fail(f"axes {self.axes} must name one axis per begin entry {self.begin}")


def slice_bounds(size: int, begin: int, end: int, step: int) -> slice:
    """The Python slice that ONNX's clamping rules give for one axis."""
    begin = begin + size if begin < 0 else begin
    end = end + size if end < 0 else end
    if step > 0:
        begin, end = min(max(begin, 0), size), min(max(end, 0), size)
        return slice(begin, end, step)
    if size == 0:
        return slice(0, 0, 1)
    begin, end = min(max(begin, 0), size - 1), min(max(end, -1), size - 1)
    return slice(begin, end if end >= 0 else None, step)


def _slices(shape, attrs: StridedSliceAttrs) -> tuple[slice, ...]:
    slices = [slice(None)] * len(shape)
    axes = attrs.axes if attrs.axes is not None else tuple(range(len(attrs.begin)))
    strides = attrs.strides or (1,) * len(attrs.begin)
    for axis, begin, end, step in zip(axes, attrs.begin, attrs.end, strides):
        axis = normalize_axis("strided_slice", axis, len(shape))
        slices[axis] = slice_bounds(shape[axis], begin, end, step)
    return tuple(slices)


def _strided_slice_type(arg_types, attrs: StridedSliceAttrs) -> TensorType:
    (data,) = tensor_args("strided_slice", arg_types)
    if attrs.axes is None and len(attrs.begin) > data.ndim:
        raise ShapeError(f"strided_slice: {len(attrs.begin)} begin values for a tensor of rank {data.ndim}")
    shape = tuple(len(range(*s.indices(d))) for s, d in zip(_slices(data.shape, attrs), data.shape))
    return TensorType(shape, data.dtype)


register_op("strided_slice", attrs=StridedSliceAttrs, type_rule=_strided_slice_type,
            reference=lambda x, a: x[_slices(x.shape, a)], pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class TakeAttrs(Attrs):
    """take(data, indices, axis): negative indices count from the end of the axis."""
    axis: int = 0


def _take_type(arg_types, attrs: TakeAttrs) -> TensorType:
    data, indices = tensor_args("take", arg_types)
    if not dtype_of(indices.dtype).is_int:
        raise DTypeError(f"take: indices must be integers, got {indices.dtype}")
    axis = normalize_axis("take", attrs.axis, data.ndim)
    return TensorType((*data.shape[:axis], *indices.shape, *data.shape[axis + 1:]), data.dtype)


def _check_indices(op: str, bounds_rule, x: np.ndarray, indices: np.ndarray, attrs) -> None:
    """ShapeError naming the first index outside [-n, n) (what onnxruntime refuses too)."""
    arg_types = tuple(TensorType(a.shape, from_numpy(a.dtype)) for a in (x, indices))
    bounds = bounds_rule(arg_types, attrs)
    bad = first_out_of_range(indices, bounds.extents, bounds.per_last_axis)
    if bad is not None:
        raise ShapeError(describe_out_of_range(op, "", bad, bounds.per_last_axis))


def _take_bounds(arg_types, attrs: TakeAttrs) -> IndexBounds:
    data = arg_types[0]
    return IndexBounds(1, (data.shape[attrs.axis % data.ndim],))


def _take(x, indices, attrs):
    _check_indices("take", _take_bounds, x, indices, attrs)
    axis = attrs.axis % x.ndim
    size = x.shape[axis]
    indices = np.where(indices < 0, indices + size, indices)
    return np.take(x, indices, axis=axis)


register_op("take", attrs=TakeAttrs, type_rule=_take_type, reference=_take,
            pattern=OpPattern.INJECTIVE, num_inputs=2, index_bounds=_take_bounds)


@dataclass(frozen=True, slots=True)
class AxisAttrs(Attrs):
    axis: int = 0


def _gather_elements_type(arg_types, attrs: AxisAttrs) -> TensorType:
    data, indices = tensor_args("gather_elements", arg_types)
    normalize_axis("gather_elements", attrs.axis, data.ndim)
    if indices.ndim != data.ndim:
        raise ShapeError(f"gather_elements: indices {shape_text(indices.shape)} and data "
                         f"{shape_text(data.shape)} must have the same rank")
    return TensorType(indices.shape, data.dtype)


def _gather_elements_bounds(arg_types, attrs: AxisAttrs) -> IndexBounds:
    data = arg_types[0]
    return IndexBounds(1, (data.shape[attrs.axis % data.ndim],))


def _gather_elements(x, indices, attrs):
    _check_indices("gather_elements", _gather_elements_bounds, x, indices, attrs)
    axis = attrs.axis % x.ndim
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    return np.take_along_axis(x, indices, axis=axis)


register_op("gather_elements", attrs=AxisAttrs, type_rule=_gather_elements_type, reference=_gather_elements,
            pattern=OpPattern.INJECTIVE, num_inputs=2, index_bounds=_gather_elements_bounds)


@dataclass(frozen=True, slots=True)
class GatherNDAttrs(Attrs):
    batch_dims: int = 0


def _gather_nd_type(arg_types, attrs: GatherNDAttrs) -> TensorType:
    data, indices = tensor_args("gather_nd", arg_types)
    depth = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or depth > data.ndim - attrs.batch_dims:
        raise ShapeError(f"gather_nd: indices {shape_text(indices.shape)} do not fit data {shape_text(data.shape)}")
    return TensorType((*indices.shape[:-1], *data.shape[attrs.batch_dims + depth:]), data.dtype)


def _gather_nd_bounds(arg_types, attrs: GatherNDAttrs) -> IndexBounds:
    data, indices = arg_types[0], arg_types[1]
    depth = indices.shape[-1]
    return IndexBounds(1, tuple(data.shape[attrs.batch_dims:attrs.batch_dims + depth]), per_last_axis=True)


def _gather_nd(x, indices, attrs):
    _check_indices("gather_nd", _gather_nd_bounds, x, indices, attrs)
    batch = attrs.batch_dims
    batch_shape = x.shape[:batch]
    flat_x = x.reshape((-1, *x.shape[batch:]))
    flat_i = indices.reshape((-1, *indices.shape[batch:]))
    depth = indices.shape[-1]
    outputs = []
    for b in range(flat_x.shape[0]):
        idx = flat_i[b].reshape(-1, depth)
        idx = np.where(idx < 0, idx + np.array(flat_x.shape[1:1 + depth]), idx)
        outputs.append(flat_x[b][tuple(idx.T)])
    out = np.stack(outputs)
    return out.reshape((*batch_shape, *indices.shape[batch:-1], *x.shape[batch + depth:]))


register_op("gather_nd", attrs=GatherNDAttrs, type_rule=_gather_nd_type, reference=_gather_nd,
            pattern=OpPattern.INJECTIVE, num_inputs=2, index_bounds=_gather_nd_bounds)


@dataclass(frozen=True, slots=True)
class BroadcastToAttrs(Attrs):
    shape: tuple[int, ...] = ()


def _broadcast_to_type(arg_types, attrs: BroadcastToAttrs) -> TensorType:
    (data,) = tensor_args("broadcast_to", arg_types)
    shape = broadcast_shape("broadcast_to", data.shape, attrs.shape)
    if shape != tuple(attrs.shape):
        raise ShapeError(f"broadcast_to: {shape_text(data.shape)} cannot broadcast to {shape_text(attrs.shape)}")
    return TensorType(shape, data.dtype)


register_op("broadcast_to", attrs=BroadcastToAttrs, type_rule=_broadcast_to_type,
            reference=lambda x, a: np.broadcast_to(x, a.shape).copy(), pattern=OpPattern.BROADCAST, num_inputs=1)


@dataclass(frozen=True, slots=True)
class TileAttrs(Attrs):
    reps: tuple[int, ...] = ()


def _tile_type(arg_types, attrs: TileAttrs) -> TensorType:
    (data,) = tensor_args("tile", arg_types)
    if len(attrs.reps) != data.ndim:
        raise ShapeError(f"tile: reps {attrs.reps} must have one entry per axis of {shape_text(data.shape)}")
    return TensorType(tuple(d * r for d, r in zip(data.shape, attrs.reps)), data.dtype)


register_op("tile", attrs=TileAttrs, type_rule=_tile_type, reference=lambda x, a: np.tile(x, a.reps),
            pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class PadAttrs(Attrs):
    """pad_width: (before, after) per axis, negative values crop; mode constant, reflect or edge."""
    pad_width: tuple[tuple[int, int], ...] = ()
    pad_mode: str = "constant"
    pad_value: float = 0.0
    _choices = {"pad_mode": ("constant", "reflect", "edge", "wrap")}


def _pad_type(arg_types, attrs: PadAttrs) -> TensorType:
    (data,) = tensor_args("nn.pad", arg_types)
    if len(attrs.pad_width) != data.ndim:
        raise ShapeError(f"nn.pad: pad_width {attrs.pad_width} needs one (before, after) pair per axis of "
                         f"{shape_text(data.shape)}")
    shape = tuple(d + b + a for d, (b, a) in zip(data.shape, attrs.pad_width))
    if any(d < 0 for d in shape):
        raise ShapeError(f"nn.pad: pad_width {attrs.pad_width} crops {shape_text(data.shape)} below zero")
    return TensorType(shape, data.dtype)


def _pad(x, attrs: PadAttrs):
    positive = [(max(b, 0), max(a, 0)) for b, a in attrs.pad_width]
    if attrs.pad_mode == "constant":
        out = np.pad(x, positive, mode="constant", constant_values=np.array(attrs.pad_value).astype(x.dtype))
    else:
        out = np.pad(x, positive, mode=attrs.pad_mode)
    crop = tuple(slice(-min(b, 0), out.shape[i] + min(a, 0)) for i, (b, a) in enumerate(attrs.pad_width))
    return out[crop]


register_op("nn.pad", attrs=PadAttrs, type_rule=_pad_type, reference=_pad, pattern=OpPattern.INJECTIVE,
            num_inputs=1)


@dataclass(frozen=True, slots=True)
class ReverseAttrs(Attrs):
    axis: tuple[int, ...] = (0,)


def _same_shape(op: str):
    def rule(arg_types, attrs):
        data = tensor_args(op, arg_types)[0]
        for axis in (attrs.axis if isinstance(attrs.axis, tuple) else (attrs.axis,)):
            normalize_axis(op, axis, data.ndim)
        return data
    return rule


register_op("reverse", attrs=ReverseAttrs, type_rule=_same_shape("reverse"),
            reference=lambda x, a: np.flip(x, a.axis).copy(), pattern=OpPattern.INJECTIVE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class CumsumAttrs(Attrs):
    axis: int = 0
    exclusive: bool = False
    reverse: bool = False


def _cumsum(x, attrs: CumsumAttrs):
    axis = attrs.axis % x.ndim
    data = np.flip(x, axis) if attrs.reverse else x
    out = np.cumsum(data, axis=axis, dtype=x.dtype)
    if attrs.exclusive:
        out = out - data
    return np.flip(out, axis).copy() if attrs.reverse else out


register_op("cumsum", attrs=CumsumAttrs, type_rule=_same_shape("cumsum"), reference=_cumsum,
            pattern=OpPattern.OPAQUE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class ShapeOfAttrs(Attrs):
    dtype: str = "int64"


register_op("shape_of", attrs=ShapeOfAttrs,
            type_rule=lambda arg_types, a: TensorType((tensor_args("shape_of", arg_types)[0].ndim,), a.dtype),
            reference=lambda x, a: np.array(x.shape, dtype=a.dtype), pattern=OpPattern.OPAQUE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class TopKAttrs(Attrs):
    """Values and int64 indices of the k largest (or smallest) entries along `axis`."""
    k: int = 1
    axis: int = -1
    largest: bool = True
    sorted: bool = True


def _topk_type(arg_types, attrs: TopKAttrs) -> TupleType:
    (data,) = tensor_args("topk", arg_types)
    axis = normalize_axis("topk", attrs.axis, data.ndim)
    if not 0 <= attrs.k <= data.shape[axis]:
        raise ShapeError(f"topk: k={attrs.k} is larger than axis {axis} of {shape_text(data.shape)}")
    shape = data.shape[:axis] + (attrs.k,) + data.shape[axis + 1:]
    return TupleType((TensorType(shape, data.dtype), TensorType(shape, "int64")))


def _topk(x, attrs: TopKAttrs):
    axis = attrs.axis % x.ndim
    # A stable sort on the negated keys keeps the lower index first among equal values.
    keys = -x if attrs.largest else x
    if x.dtype.kind == "u" and attrs.largest:
        keys = np.iinfo(x.dtype).max - x
    if x.dtype.kind == "f" and attrs.largest:
        # NaN ranks above every number (onnxruntime): first when largest; numpy's sort already
        # puts NaN last for smallest. lexsort is stable and sorts by its last key first.
        order = np.lexsort((keys, ~np.isnan(x)), axis=axis)
    else:
        order = np.argsort(keys, axis=axis, kind="stable")
    indices = np.take(order, np.arange(attrs.k), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices.astype(np.int64)


register_op("topk", attrs=TopKAttrs, type_rule=_topk_type, reference=_topk, pattern=OpPattern.OPAQUE,
            num_inputs=1)
