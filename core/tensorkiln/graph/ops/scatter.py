"""scatter_elements and scatter_nd: ONNX ScatterElements / ScatterND (and Scatter), with the
none / add / mul / max / min reductions. With reduction none and repeated indices, the update
that comes last in row-major order wins (numpy's assignment; ONNX leaves it undefined)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.errors import DTypeError, ShapeError
from ..attrs import Attrs
from ..registry import IndexBounds, OpPattern, register_op
from ._rules import normalize_axis, shape_text, tensor_args
from .tensor import _check_indices

__all__ = ["ScatterElementsAttrs", "ScatterNDAttrs", "REDUCTIONS"]

REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@dataclass(frozen=True, slots=True)
class ScatterElementsAttrs(Attrs):
    axis: int = 0
    reduction: str = "none"
    _choices = {"reduction": REDUCTIONS}


@dataclass(frozen=True, slots=True)
class ScatterNDAttrs(Attrs):
    reduction: str = "none"
    _choices = {"reduction": REDUCTIONS}


def _check_common(op: str, data, indices, updates) -> None:
    if indices.dtype not in ("int32", "int64"):
        raise DTypeError(f"{op}: indices must be int32 or int64, got {indices.dtype}")
    if updates.dtype != data.dtype:
        raise DTypeError(f"{op}: updates ({updates.dtype}) must have the data's dtype ({data.dtype})")


def _scatter_elements_type(arg_types, attrs: ScatterElementsAttrs):
    data, indices, updates = tensor_args("scatter_elements", arg_types)
    _check_common("scatter_elements", data, indices, updates)
    axis = normalize_axis("scatter_elements", attrs.axis, data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim or any(
            i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise ShapeError(f"scatter_elements: indices {shape_text(indices.shape)} and updates "
                         f"{shape_text(updates.shape)} must have one shape, of data's rank, no larger than data "
                         f"{shape_text(data.shape)} outside axis {axis}")
    return data


def _scatter_elements_bounds(arg_types, attrs) -> IndexBounds:
    data = arg_types[0]
    return IndexBounds(1, (data.shape[attrs.axis % data.ndim],))


def _scatter_elements(data, indices, updates, attrs: ScatterElementsAttrs):
    _check_indices("scatter_elements", _scatter_elements_bounds, data, indices, attrs)
    axis = attrs.axis % data.ndim
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = np.where(indices < 0, indices + data.shape[axis], indices)
    return _apply(data, tuple(np.broadcast_arrays(*grid)), updates, attrs.reduction)


def _apply(data, target: tuple, updates, reduction: str):
    out = data.copy()
    if reduction == "none":
        # assignment through flat positions in row-major order: the last repeated index wins
        flat = np.ravel_multi_index(tuple(t.reshape(-1) for t in target), data.shape)
        out.reshape(-1)[flat] = updates.reshape(-1)
    else:
        with np.errstate(all="ignore"):
            _UFUNCS[reduction].at(out, target, updates)
    return out


def _scatter_nd_type(arg_types, attrs: ScatterNDAttrs):
    data, indices, updates = tensor_args("scatter_nd", arg_types)
    _check_common("scatter_nd", data, indices, updates)
    depth = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or depth > data.ndim or updates.shape != indices.shape[:-1] + data.shape[depth:]:
        raise ShapeError(f"scatter_nd: with data {shape_text(data.shape)} and indices {shape_text(indices.shape)}, "
                         "updates must have shape indices.shape[:-1] + data.shape[indices.shape[-1]:], got "
                         f"{shape_text(updates.shape)}")
    return data


def _scatter_nd_bounds(arg_types, attrs) -> IndexBounds:
    data, indices = arg_types[0], arg_types[1]
    return IndexBounds(1, tuple(data.shape[:indices.shape[-1]]), per_last_axis=True)


def _scatter_nd(data, indices, updates, attrs: ScatterNDAttrs):
    _check_indices("scatter_nd", _scatter_nd_bounds, data, indices, attrs)
    depth = indices.shape[-1]
    positions = indices.reshape(-1, depth)
    positions = np.where(positions < 0, positions + np.array(data.shape[:depth]), positions)
    rest = data.shape[depth:]
    # one row of (depth + len(rest)) coordinates per updated element
    lead = np.repeat(positions, int(np.prod(rest, dtype=np.int64)), axis=0)
    tail = np.indices(rest).reshape(len(rest), -1).T if rest else np.zeros((1, 0), dtype=np.int64)
    tail = np.tile(tail, (positions.shape[0], 1))
    target = tuple(np.concatenate([lead, tail], axis=1).T)
    return _apply(data, target, updates.reshape(-1), attrs.reduction)


register_op("scatter_elements", attrs=ScatterElementsAttrs, type_rule=_scatter_elements_type,
            reference=_scatter_elements, pattern=OpPattern.OPAQUE, num_inputs=3,
            index_bounds=_scatter_elements_bounds,
            doc="ONNX ScatterElements: data with updates written (or reduced) at indices along `axis`.")
register_op("scatter_nd", attrs=ScatterNDAttrs, type_rule=_scatter_nd_type, reference=_scatter_nd,
            pattern=OpPattern.OPAQUE, num_inputs=3, index_bounds=_scatter_nd_bounds,
            doc="ONNX ScatterND: data with slices written (or reduced) at index tuples.")
